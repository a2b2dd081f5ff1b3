//! `command` and `argv` jobs: one child process in its own process group.
//!
//! The child gets the daemon's environment plus `[daemon] env_file`, the
//! job's `env` and the `SOLOCRON_*` variables (a notifier runs as a job
//! without `env` or `working_dir`: `daemon/notifiers.rs`), stdin from
//! `/dev/null`, and its stdout / stderr piped to `output.rs`. It is the
//! leader of a new process group, so stopping it (timeout, lost lock,
//! shutdown) reaches everything it started: SIGTERM to the group, then
//! SIGKILL after the kill grace if any member is left (at once after a
//! second stop signal; within what is left of the lease after a lost one).
//! A dropped run also SIGKILLs the group, so a job never runs on
//! unsupervised.
//!
//! The run is over when the group is empty, not when its leader exits: a
//! process the job left behind (`cmd &`) keeps the run, and so its lease,
//! alive until it ends or the timeout stops it, so it can never overlap the
//! next run on another node. Only a process that left the group on purpose
//! (`setsid`) escapes; under systemd the unit's control group still ends it
//! at stop.
//!
//! If the daemon dies (kill -9, crash) the child gets SIGKILL from the kernel
//! (`PR_SET_PDEATHSIG`, set by `launch.rs`). That signal is tied to the
//! *thread* that started the child, not the process: spawning happens on
//! the executor's spawning threads (`spawner.rs`), which live as long as the
//! executor. Never spawn from `spawn_blocking` or inside `block_in_place`,
//! whose threads exit when idle and would take the job with them.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::future::{Future, pending};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::net::unix::pipe;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until, timeout};
use tokio_util::sync::CancellationToken;
use tracing::instrument::WithSubscriber;

use super::child::Child;
use super::launch::{self, Launch};
use super::output::{LineFields, RunOutput, Stream, log_lines};
use super::{Executor, Finish, Outcome, RunContext, StopReason};
use crate::config::{Action, Job};

/// How often the group is checked for members left after its leader exited,
/// while they get their SIGTERM grace.
const GROUP_POLL: Duration = Duration::from_millis(50);
/// How often the group is checked while processes the job left behind run
/// on (no signal sent yet: a slower look at `/proc` is enough).
const LEFTOVER_POLL: Duration = Duration::from_millis(200);

/// Starts the job's process and supervises it to the end; never panics.
pub(super) async fn run(
    exec: &Executor,
    ctx: &RunContext,
    stop: impl Future<Output = StopReason>,
) -> Finish {
    let job = &ctx.job;
    let (program, launch) = match prepare(ctx) {
        Ok(prepared) => prepared,
        Err(error) => return Finish::failed(error),
    };
    let launched = match exec.spawner.spawn(launch).await {
        Ok(launched) => launched,
        Err(err) => return Finish::failed(spawn_error(job, &program, &err)),
    };
    let group = GroupGuard(Pid::from_raw(launched.pid));
    let mut child = match Child::watch(launched.pid) {
        Ok(child) => child,
        Err(err) => {
            drop(group);
            launch::reap(launched.pid);
            return Finish::failed(format!("cannot watch job `{}`: {err}", job.name));
        }
    };
    // From here a dropped `child` reaps itself and `group` kills the rest.
    let output = RunOutput::new(job.output_log_max);
    let readers = match start_readers(
        launched.stdout,
        launched.stderr,
        ctx,
        exec.echo_output,
        &output,
    ) {
        Ok(readers) => readers,
        Err(err) => {
            return Finish::failed(format!(
                "cannot read the output of job `{}`: {err}",
                job.name
            ));
        }
    };
    let mut finish = supervise(&mut child, group.0, ctx, exec, stop).await;
    std::mem::forget(group); // reaped and empty: nothing left to kill on drop
    drain_output(readers, exec.output_grace, job).await;
    let summary = output.finish();
    if summary.unlogged_lines > 0 && ctx.notice.is_some() {
        tracing::warn!(job = %job.name, occurrence = %ctx.occurrence, node = %ctx.node, fence = ctx.fence,
            lines = summary.unlogged_lines, bytes = summary.unlogged_bytes,
            output_log_max = job.output_log_max,
            "notifier output over output_log_max: the rest was not logged");
    } else if summary.unlogged_lines > 0 {
        tracing::warn!(job = %job.name, occurrence = %ctx.occurrence, node = %ctx.node, fence = ctx.fence,
            lines = summary.unlogged_lines, bytes = summary.unlogged_bytes,
            output_log_max = job.output_log_max,
            "job output over output_log_max: the rest was not logged (its last 4 KiB are in the history entry)");
    }
    finish.output_tail = summary.tail;
    finish
}

/// The process for the job's action, and the program name for messages.
fn prepare(ctx: &RunContext) -> Result<(String, Launch), String> {
    let job = &ctx.job;
    let (program, args): (&str, Vec<String>) = match &job.action {
        Action::Command(line) => ("/bin/sh", vec!["-c".to_string(), line.clone()]),
        Action::Argv(argv) => match argv.split_first() {
            Some((program, args)) => (program, args.to_vec()),
            None => return Err(format!("job `{}` has an empty `argv`", job.name)),
        },
        Action::Http(_) => return Err(format!("job `{}` is not a process", job.name)),
    };
    let launch = Launch::new(
        program,
        &args,
        &environment(ctx),
        job.extras.working_dir.as_deref(),
    )
    .map_err(|err| spawn_error(job, program, &err))?;
    Ok((program.to_string(), launch))
}

/// The daemon's environment plus the job's `env` and the `SOLOCRON_*`
/// variables, without what belongs to the daemon alone.
fn environment(ctx: &RunContext) -> Vec<(OsString, OsString)> {
    let job = &ctx.job;
    let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    for (name, value) in ctx.env_file.iter().chain(&job.extras.env) {
        env.insert(name.into(), value.into());
    }
    for (name, value) in [
        ("SOLOCRON_JOB", job.name.clone()),
        ("SOLOCRON_OCCURRENCE", ctx.occurrence.clone()),
        ("SOLOCRON_FENCE", ctx.fence.to_string()),
        ("SOLOCRON_NODE", ctx.node.clone()),
        ("SOLOCRON_ATTEMPT", ctx.attempt.to_string()),
    ] {
        env.insert(name.into(), value.into());
    }
    if let Some(notice) = &ctx.notice {
        for (name, value) in notice.variables() {
            env.insert(name.into(), value.into());
        }
    }
    // The daemon's own settings may hold a Redis password: not for jobs.
    env.remove(OsStr::new("SOLOCRON_REDIS_URL"));
    // systemd's notify socket and watchdog belong to the daemon, not to jobs.
    for name in crate::systemd::ENV_VARS {
        env.remove(OsStr::new(name));
    }
    env.into_iter().collect()
}

fn spawn_error(job: &Job, program: &str, err: &io::Error) -> String {
    match &job.extras.working_dir {
        // The child reports a failed chdir with the same errno as a failed exec.
        Some(dir) if !dir.is_dir() => format!(
            "cannot enter working directory `{}` for job `{}`: {err}",
            dir.display(),
            job.name
        ),
        _ => format!("cannot start `{program}` for job `{}`: {err}", job.name),
    }
}

/// Waits for the child and then for its whole group, stopping the group
/// on timeout or on `stop`.
async fn supervise(
    child: &mut Child,
    group: Pid,
    ctx: &RunContext,
    exec: &Executor,
    stop: impl Future<Output = StopReason>,
) -> Finish {
    let job = &ctx.job;
    let job_timeout = async {
        match job.timeout {
            Some(limit) => sleep(limit).await,
            None => pending().await,
        }
    };
    tokio::pin!(job_timeout, stop);
    let status = tokio::select! {
        status = child.wait() => status,
        () = &mut job_timeout => return stopped(child, group, ctx, exec, Outcome::TimedOut).await,
        reason = &mut stop => return stopped(child, group, ctx, exec, Outcome::from(reason)).await,
    };
    if is_group_alive(group) {
        tracing::warn!(job = %job.name, occurrence = %ctx.occurrence, node = %ctx.node, fence = ctx.fence,
            pgid = group.as_raw(),
            "job exited but left processes running in its process group: the run (and its lock) lasts until they end or its timeout");
        loop {
            tokio::select! {
                () = sleep(LEFTOVER_POLL) => if !is_group_alive(group) { break },
                () = &mut job_timeout => return stopped(child, group, ctx, exec, Outcome::TimedOut).await,
                reason = &mut stop => return stopped(child, group, ctx, exec, Outcome::from(reason)).await,
            }
        }
    }
    exited(status, group, job)
}

/// Stops the group for `outcome` and waits until it is empty.
async fn stopped(
    child: &mut Child,
    group: Pid,
    ctx: &RunContext,
    exec: &Executor,
    outcome: Outcome,
) -> Finish {
    let grace = match outcome {
        Outcome::LockLost => exec.kill_grace.min(ctx.lost_lease_grace),
        _ => exec.kill_grace,
    };
    let status = terminate(child, group, ctx, outcome, grace, &exec.hurry).await;
    Finish {
        exit_code: status.ok().and_then(|status| status.code()),
        ..Finish::new(outcome)
    }
}

/// Classifies an exit nobody asked for (the group is empty by now).
fn exited(status: io::Result<ExitStatus>, group: Pid, job: &Job) -> Finish {
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

/// SIGTERM to the group; SIGKILL to whatever is left after `grace` (at
/// once if `hurry` is or becomes cancelled); reaps the leader and returns
/// only once the group is empty. Both signals are logged.
async fn terminate(
    child: &mut Child,
    group: Pid,
    ctx: &RunContext,
    why: Outcome,
    grace: Duration,
    hurry: &CancellationToken,
) -> io::Result<ExitStatus> {
    let mut deadline = Instant::now() + grace;
    let mut lease_lost = ctx.lease_lost.is_cancelled();
    if lease_lost {
        deadline = deadline.min(Instant::now() + ctx.lost_lease_grace);
    }
    if !hurry.is_cancelled() {
        log_signal(
            ctx,
            group,
            why,
            "SIGTERM",
            deadline.saturating_duration_since(Instant::now()),
        );
        let _ = killpg(group, Signal::SIGTERM);
        // Until the group is empty or the deadline: the leader first, then
        // the members that ignore SIGTERM. A lease lost meanwhile brings the
        // deadline forward (the lock may expire soon); a hurry ends it.
        let mut leader_gone = false;
        while Instant::now() < deadline && !hurry.is_cancelled() {
            if leader_gone && !is_group_alive(group) {
                break;
            }
            tokio::select! {
                _ = child.wait(), if !leader_gone => leader_gone = true,
                () = sleep(GROUP_POLL), if leader_gone => {}
                () = sleep_until(deadline) => {}
                () = hurry.cancelled() => {}
                () = ctx.lease_lost.cancelled(), if !lease_lost => {
                    lease_lost = true;
                    deadline = deadline.min(Instant::now() + ctx.lost_lease_grace);
                }
            }
        }
    }
    if is_group_alive(group) {
        log_signal(ctx, group, why, "SIGKILL", grace);
        let _ = killpg(group, Signal::SIGKILL);
    }
    let status = child.wait().await;
    // SIGKILL cannot be refused; members may take a moment to be reaped.
    while is_group_alive(group) {
        let _ = killpg(group, Signal::SIGKILL);
        sleep(GROUP_POLL).await;
    }
    status
}

fn log_signal(ctx: &RunContext, group: Pid, why: Outcome, signal: &str, grace: Duration) {
    let reason = why.as_str();
    let grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
    tracing::warn!(job = %ctx.job.name, occurrence = %ctx.occurrence, node = %ctx.node, fence = ctx.fence,
        pgid = group.as_raw(), signal, reason, grace_ms,
        "sending {signal} to the job's process group");
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

fn start_readers(
    stdout: OwnedFd,
    stderr: OwnedFd,
    ctx: &RunContext,
    echo: bool,
    output: &Arc<RunOutput>,
) -> io::Result<Vec<JoinHandle<()>>> {
    let fields = LineFields {
        job: ctx.job.name.clone(),
        occurrence: ctx.occurrence.clone(),
        node: ctx.node.clone(),
        fence: ctx.fence,
        notifier: ctx.notice.is_some(),
        echo,
        output: Arc::clone(output),
        mask: Arc::clone(&ctx.mask),
    };
    let stdout = pipe::Receiver::from_owned_fd(stdout)?;
    let stderr = pipe::Receiver::from_owned_fd(stderr)?;
    // Readers log through the caller's subscriber, whatever thread polls them.
    Ok(vec![
        tokio::spawn(log_lines(stdout, Stream::Stdout, fields.clone()).with_current_subscriber()),
        tokio::spawn(log_lines(stderr, Stream::Stderr, fields).with_current_subscriber()),
    ])
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
