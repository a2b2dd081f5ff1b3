//! `command` and `argv` jobs: one child process in its own process group.
//!
//! The child gets the daemon's environment plus the job's `env` and the
//! `SOLOCRON_*` variables, stdin from `/dev/null`, and its stdout / stderr
//! piped to `output.rs`. It is the leader of a new process group, so
//! stopping it (timeout, lost lock, shutdown) reaches everything it started:
//! SIGTERM to the group, then SIGKILL after the kill grace if any member is
//! left. A dropped run also SIGKILLs the group, so a job never runs on
//! unsupervised.
//!
//! If the daemon dies (kill -9, crash) the child gets SIGKILL from the kernel
//! (`PR_SET_PDEATHSIG`). That signal is tied to the *thread* that forked, not
//! the process: spawning happens in async code on a runtime worker thread,
//! which lives as long as the runtime. Never spawn from `spawn_blocking` or
//! inside `block_in_place`, whose threads exit when idle and would take the
//! job with them.

use std::future::{Future, pending};
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use futures_util::future::join_all;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until, timeout};
use tracing::instrument::WithSubscriber;

use super::output::{LineFields, Stream, log_lines};
use super::{Executor, Finish, Outcome, RunContext, StopReason};
use crate::config::{Action, Job};

/// How often the group is checked for members left after its leader exited.
const GROUP_POLL: Duration = Duration::from_millis(50);

/// Starts the job's process and supervises it to the end; never panics.
pub(super) async fn run(
    exec: &Executor,
    ctx: &RunContext,
    stop: impl Future<Output = StopReason>,
) -> Finish {
    let job = &ctx.job;
    let (program, mut command) = match build_command(ctx) {
        Ok(built) => built,
        Err(error) => return Finish::failed(error),
    };
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => return Finish::failed(spawn_error(job, &program, &err)),
    };
    // `id()` is `None` only once the child has been reaped, which nobody did yet.
    let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) else {
        return Finish::failed(format!("lost the process id of job `{}`", job.name));
    };
    let group = GroupGuard(Pid::from_raw(pid));
    let readers = start_readers(&mut child, ctx, exec.echo_output);
    let finish = supervise(&mut child, group.0, job, exec.kill_grace, stop).await;
    std::mem::forget(group); // reaped: nothing left to kill on drop
    drain_output(readers, exec.output_grace, job).await;
    finish
}

/// The command for the job's action, and the program name for messages.
fn build_command(ctx: &RunContext) -> Result<(String, Command), String> {
    let job = &ctx.job;
    let (program, args): (&str, &[String]) = match &job.action {
        Action::Command(line) => ("/bin/sh", std::slice::from_ref(line)),
        Action::Argv(argv) => match argv.split_first() {
            Some((program, args)) => (program, args),
            None => return Err(format!("job `{}` has an empty `argv`", job.name)),
        },
        Action::Http(_) => return Err(format!("job `{}` is not a process", job.name)),
    };
    let mut command = Command::new(program);
    if matches!(job.action, Action::Command(_)) {
        command.arg("-c");
    }
    command
        .args(args)
        .envs(&job.env)
        .env("SOLOCRON_JOB", &job.name)
        .env("SOLOCRON_OCCURRENCE", &ctx.occurrence)
        .env("SOLOCRON_FENCE", ctx.fence.to_string())
        .env("SOLOCRON_NODE", &ctx.node)
        // The daemon's own settings may hold a Redis password: not for jobs.
        .env_remove("SOLOCRON_REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        // We kill the whole group ourselves; `GroupGuard` covers a dropped run.
        .kill_on_drop(false);
    // systemd's notify socket and watchdog belong to the daemon, not to jobs.
    for name in crate::notify::ENV_VARS {
        command.env_remove(name);
    }
    if let Some(dir) = &job.working_dir {
        command.current_dir(dir);
    }
    die_with_daemon(&mut command);
    Ok((program.to_string(), command))
}

/// Makes the kernel SIGKILL the child when the spawning thread dies.
#[allow(unsafe_code)]
fn die_with_daemon(command: &mut Command) {
    let daemon = nix::unistd::getpid();
    // SAFETY: the hook runs in the forked child before exec, where only
    // async-signal-safe calls are allowed. It makes two system calls
    // (prctl, getppid) and builds errors from raw OS codes, which does not
    // allocate; it touches no locks and no shared state.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
                .map_err(|errno| io::Error::from_raw_os_error(errno as i32))?;
            // The daemon may have died between fork and prctl: then the
            // signal will never come, so do not start the job at all.
            if nix::unistd::getppid() != daemon {
                return Err(io::Error::from_raw_os_error(nix::libc::ESRCH));
            }
            Ok(())
        });
    }
}

fn spawn_error(job: &Job, program: &str, err: &io::Error) -> String {
    match &job.working_dir {
        // The child reports a failed chdir with the same errno as a failed exec.
        Some(dir) if !dir.is_dir() => format!(
            "cannot enter working directory `{}` for job `{}`: {err}",
            dir.display(),
            job.name
        ),
        _ => format!("cannot start `{program}` for job `{}`: {err}", job.name),
    }
}

/// Waits for the child, stopping its group on timeout or on `stop`.
async fn supervise(
    child: &mut Child,
    group: Pid,
    job: &Job,
    kill_grace: Duration,
    stop: impl Future<Output = StopReason>,
) -> Finish {
    let job_timeout = async {
        match job.timeout {
            Some(limit) => sleep(limit).await,
            None => pending().await,
        }
    };
    let stopped_by = tokio::select! {
        status = child.wait() => return exited(status, group, job),
        () = job_timeout => Outcome::TimedOut,
        reason = stop => Outcome::from(reason),
    };
    let status = terminate(child, group, kill_grace).await;
    Finish {
        exit_code: status.ok().and_then(|status| status.code()),
        ..Finish::new(stopped_by)
    }
}

/// Classifies an exit nobody asked for.
fn exited(status: io::Result<ExitStatus>, group: Pid, job: &Job) -> Finish {
    if is_group_alive(group) {
        tracing::warn!(job = %job.name, pgid = group.as_raw(),
            "job exited but left processes running in its process group");
    }
    match status {
        Ok(status) if status.success() => Finish {
            exit_code: Some(0),
            ..Finish::new(Outcome::Succeeded)
        },
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => Finish {
                exit_code: Some(code),
                ..Finish::new(Outcome::Failed)
            },
            (None, Some(signal)) => {
                Finish::failed(format!("killed by signal {}", signal_name(signal)))
            }
            (None, None) => Finish::failed(format!("ended with {status}")),
        },
        Err(err) => {
            // Cannot happen short of a kernel or runtime bug; do not leave it running.
            let _ = killpg(group, Signal::SIGKILL);
            Finish::failed(format!("cannot wait for job `{}`: {err}", job.name))
        }
    }
}

fn signal_name(signal: i32) -> String {
    match Signal::try_from(signal) {
        Ok(signal) => signal.as_str().to_string(),
        Err(_) => format!("signal {signal}"),
    }
}

/// SIGTERM to the group; SIGKILL to whatever is left after `grace`; reaps the leader.
async fn terminate(child: &mut Child, group: Pid, grace: Duration) -> io::Result<ExitStatus> {
    let _ = killpg(group, Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    let status = tokio::select! {
        status = child.wait() => Some(status),
        () = sleep_until(deadline) => None,
    };
    if status.is_some() {
        // The leader is gone, but members that ignore SIGTERM still get the grace.
        while is_group_alive(group) && Instant::now() < deadline {
            sleep(GROUP_POLL).await;
        }
    }
    if is_group_alive(group) {
        let _ = killpg(group, Signal::SIGKILL);
    }
    match status {
        Some(status) => status,
        None => child.wait().await,
    }
}

/// Whether a process that is not a zombie is still in the group.
///
/// `killpg(group, 0)` alone also counts zombies, which an init that reaps
/// lazily may keep around for a second or more; they need no SIGKILL and
/// must not hold up the report for the whole grace.
fn is_group_alive(group: Pid) -> bool {
    if killpg(group, None).is_err() {
        return false;
    }
    match std::fs::read_dir("/proc") {
        Ok(entries) => entries
            .flatten()
            .any(|entry| is_live_member(&entry.path(), group)),
        // Cannot tell zombies apart: assume someone is alive.
        Err(_) => true,
    }
}

/// Whether `/proc/PID` is a process in `group` that has not exited.
fn is_live_member(proc_dir: &std::path::Path, group: Pid) -> bool {
    let Ok(stat) = std::fs::read_to_string(proc_dir.join("stat")) else {
        return false;
    };
    // `pid (comm) state ppid pgrp ...`; `comm` may contain spaces and `)`.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let mut fields = rest.split_whitespace();
    let state = fields.next();
    let pgrp = fields.nth(1).and_then(|pgrp| pgrp.parse::<i32>().ok());
    !matches!(state, Some("Z" | "X") | None) && pgrp == Some(group.as_raw())
}

/// SIGKILLs the group if a run is dropped before its leader was reaped.
struct GroupGuard(Pid);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        let _ = killpg(self.0, Signal::SIGKILL);
    }
}

fn start_readers(child: &mut Child, ctx: &RunContext, echo: bool) -> Vec<JoinHandle<()>> {
    let fields = LineFields {
        job: ctx.job.name.clone(),
        occurrence: ctx.occurrence.clone(),
        node: ctx.node.clone(),
        fence: ctx.fence,
        echo,
    };
    let mut readers = Vec::with_capacity(2);
    // Readers log through the caller's subscriber, whatever thread polls them.
    if let Some(stdout) = child.stdout.take() {
        let reader = log_lines(stdout, Stream::Stdout, fields.clone());
        readers.push(tokio::spawn(reader.with_current_subscriber()));
    }
    if let Some(stderr) = child.stderr.take() {
        let reader = log_lines(stderr, Stream::Stderr, fields);
        readers.push(tokio::spawn(reader.with_current_subscriber()));
    }
    readers
}

/// Lets the readers reach EOF; abandons them after `grace` (a background
/// process of the job may keep the pipes open).
async fn drain_output(mut readers: Vec<JoinHandle<()>>, grace: Duration, job: &Job) {
    if timeout(grace, join_all(readers.iter_mut())).await.is_err() {
        for reader in &readers {
            reader.abort();
        }
        tracing::warn!(job = %job.name, "job output still open after the job exited; no longer read");
    }
}
