//! Starts a job's process without copying the daemon: `clone(CLONE_VM |
//! CLONE_VFORK)`, the way glibc's `posix_spawn` does, plus the parent-death
//! signal that `posix_spawn` cannot set.
//!
//! Why not `std::process::Command`: with a `pre_exec` hook (which the
//! parent-death signal needs) it falls back to `fork`, which copies the
//! daemon's page tables and write-protects its memory while its other
//! threads run, which costs start lag when many jobs start at once. A
//! `CLONE_VM` child shares the
//! daemon's memory until `execve`, so between clone and exec it only makes
//! raw system calls on data prepared beforehand: no allocation, no locks.
//!
//! What the child gets is what `Command` gave it: the given argv and
//! environment, `/dev/null` on stdin, pipes on stdout and stderr, a process
//! group of its own, the working directory, default signal dispositions and
//! an empty signal mask, and SIGKILL when the thread that started it dies.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

/// A process to start, fully prepared (paths resolved, strings converted).
pub struct Launch {
    path: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: Option<CString>,
}

/// A started process: its pid and the read ends of its stdout and stderr.
pub struct Launched {
    pub pid: libc::pid_t,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

impl Launch {
    /// Prepares `program` (looked up in the `PATH` of `env` when it has no
    /// `/`, like `execvp`) with `args` and exactly the environment `env`.
    pub fn new(
        program: &str,
        args: &[String],
        env: &[(OsString, OsString)],
        cwd: Option<&Path>,
    ) -> io::Result<Launch> {
        let path = resolve(program, env)?;
        let argv = std::iter::once(program)
            .chain(args.iter().map(String::as_str))
            .map(|arg| c_string(arg.as_bytes()))
            .collect::<io::Result<Vec<_>>>()?;
        let envp = env
            .iter()
            .map(|(name, value)| {
                let mut pair = name.as_bytes().to_vec();
                pair.push(b'=');
                pair.extend_from_slice(value.as_bytes());
                c_string(&pair)
            })
            .collect::<io::Result<Vec<_>>>()?;
        let cwd = cwd
            .map(|dir| c_string(dir.as_os_str().as_bytes()))
            .transpose()?;
        Ok(Launch {
            path: c_string(path.as_os_str().as_bytes())?,
            argv,
            envp,
            cwd,
        })
    }

    /// Starts the process. Blocks the calling thread until the child has
    /// called `execve` (or failed to): the parent-death signal is tied to
    /// this thread, which must outlive the job.
    pub fn start(&self) -> io::Result<Launched> {
        standard_fds_open()?;
        let stdin = open_dev_null()?;
        let (stdout_read, stdout_write) = pipe()?;
        let (stderr_read, stderr_write) = pipe()?;
        let argv = null_terminated(&self.argv);
        let envp = null_terminated(&self.envp);
        let args = ChildArgs {
            path: self.path.as_ptr(),
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            cwd: self
                .cwd
                .as_ref()
                .map_or(std::ptr::null(), |cwd| cwd.as_ptr()),
            stdin: stdin.as_raw_fd(),
            stdout: stdout_write.as_raw_fd(),
            stderr: stderr_write.as_raw_fd(),
            parent: std::process::id() as libc::pid_t,
            open_files: job_open_files(),
            errno: AtomicI32::new(0),
        };
        let pid = clone_vfork(&args)?;
        match args.errno.load(Ordering::SeqCst) {
            0 => Ok(Launched {
                pid,
                stdout: stdout_read,
                stderr: stderr_read,
            }),
            errno => {
                reap(pid);
                Err(io::Error::from_raw_os_error(errno))
            }
        }
    }
}

/// What the child reads: pointers into the parent's prepared data, valid
/// until `clone` returns (the parent is suspended until the child execs or
/// exits). The child reports a failure in `errno`.
struct ChildArgs {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    stdin: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    parent: libc::pid_t,
    /// The open files limit to give the job, if the daemon raised its own.
    open_files: Option<libc::rlimit>,
    errno: AtomicI32,
}

/// The open files limit a job starts with (soft, hard), when the process
/// raised its own ([`give_jobs_open_files`]); `u64::MAX`: unset.
static JOB_OPEN_FILES: [AtomicU64; 2] = [AtomicU64::new(u64::MAX), AtomicU64::new(u64::MAX)];

/// Jobs start with `limit` as their open files limit from now on: the one
/// this process was given before it raised its own (`crate::open_files`).
pub fn give_jobs_open_files(limit: libc::rlimit) {
    JOB_OPEN_FILES[0].store(limit.rlim_cur, Ordering::Relaxed);
    JOB_OPEN_FILES[1].store(limit.rlim_max, Ordering::Relaxed);
}

/// The limit of [`give_jobs_open_files`], if one was given.
fn job_open_files() -> Option<libc::rlimit> {
    let soft = JOB_OPEN_FILES[0].load(Ordering::Relaxed);
    let hard = JOB_OPEN_FILES[1].load(Ordering::Relaxed);
    (soft != u64::MAX && hard != u64::MAX).then_some(libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    })
}

/// Stack for the child until it execs: it only makes system calls.
const CHILD_STACK: usize = 64 * 1024;

#[allow(unsafe_code)]
fn clone_vfork(args: &ChildArgs) -> io::Result<libc::pid_t> {
    let mut stack = vec![0u8; CHILD_STACK];
    // SAFETY: the stack grows down from its end, aligned to 16 bytes; the
    // buffer outlives the child's use of it (CLONE_VFORK suspends us until
    // the child execs or exits). All signals are blocked around the clone so
    // that no handler of the daemon runs on the child's stack; the child
    // restores default dispositions and an empty mask before exec. `args`
    // is only read by the child (and `errno` written atomically).
    unsafe {
        let top = stack.as_mut_ptr().add(CHILD_STACK);
        let top = top.sub(top as usize % 16);
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(
            child_main,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::from_ref(args).cast_mut().cast(),
        );
        let clone_errno = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid == -1 {
            return Err(clone_errno);
        }
        Ok(pid)
    }
}

/// The child between clone and exec: raw system calls only.
#[allow(unsafe_code)]
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` the parent keeps alive until we exec
    // or exit; everything below is async-signal-safe system calls on
    // prepared data.
    unsafe {
        let args = &*(arg as *const ChildArgs);
        // Default dispositions: the daemon's handlers must not run here,
        // and what it ignores itself (Rust's SIGPIPE, the SIGTTOU of
        // `shutdown::refuse_suspend`, the SIGXFSZ of
        // `shutdown::refuse_fatal`) must not reach the job.
        for signal in 1..=libc::SIGRTMAX() {
            if signal == libc::SIGKILL || signal == libc::SIGSTOP {
                continue;
            }
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut current) == 0
                && (current.sa_sigaction != libc::SIG_DFL
                    && (current.sa_sigaction != libc::SIG_IGN
                        || signal == libc::SIGPIPE
                        || signal == libc::SIGTTOU
                        || signal == libc::SIGXFSZ))
            {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) == -1 {
            fail(args);
        }
        // The daemon may have died before prctl: then the signal will never
        // come, so do not start the job at all.
        if libc::getppid() != args.parent {
            *libc::__errno_location() = libc::ESRCH;
            fail(args);
        }
        if libc::setpgid(0, 0) == -1
            || libc::dup2(args.stdin, 0) == -1
            || libc::dup2(args.stdout, 1) == -1
            || libc::dup2(args.stderr, 2) == -1
        {
            fail(args);
        }
        if !args.cwd.is_null() && libc::chdir(args.cwd) == -1 {
            fail(args);
        }
        // The open files limit the daemon was started with, not the one it
        // raised for itself (`open_files`). A refusal leaves the higher one.
        if let Some(limit) = args.open_files {
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
        libc::execve(args.path, args.argv, args.envp);
        fail(args)
    }
}

/// Reports the child's errno to the parent and exits.
#[allow(unsafe_code)]
unsafe fn fail(args: &ChildArgs) -> ! {
    // SAFETY: errno of this (vfork) child, then _exit, which runs no
    // destructors and no atexit handlers of the shared memory.
    unsafe {
        args.errno
            .store(*libc::__errno_location(), Ordering::SeqCst);
        libc::_exit(127)
    }
}

/// Reaps a child that is exiting at once (it failed before exec, or was
/// just SIGKILLed); blocks until it has.
pub fn reap(pid: libc::pid_t) {
    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|string| string.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "an argument or environment value contains a NUL byte",
        )
    })
}

/// `execvp`'s look-up: a name without `/` is searched in `PATH` (of the
/// job's environment; `/usr/local/bin:/usr/bin:/bin` if unset).
fn resolve(program: &str, env: &[(OsString, OsString)]) -> io::Result<PathBuf> {
    if program.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    if program.contains('/') {
        return Ok(PathBuf::from(program));
    }
    let path = env
        .iter()
        .rev()
        .find(|(name, _)| name == OsStr::new("PATH"))
        .map_or_else(
            || OsString::from("/usr/local/bin:/usr/bin:/bin"),
            |(_, value)| value.clone(),
        );
    let mut denied = false;
    for dir in std::env::split_paths(&path) {
        let candidate = if dir.as_os_str().is_empty() {
            PathBuf::from(program)
        } else {
            dir.join(program)
        };
        match is_executable(&candidate) {
            Ok(true) => return Ok(candidate),
            Ok(false) => denied = true,
            Err(_) => {}
        }
    }
    Err(io::Error::from_raw_os_error(if denied {
        libc::EACCES
    } else {
        libc::ENOENT
    }))
}

/// `Ok(true)`: a file we may execute; `Ok(false)`: a file we may not;
/// `Err`: nothing usable there.
fn is_executable(path: &Path) -> io::Result<bool> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    let c_path = c_string(path.as_os_str().as_bytes())?;
    #[allow(unsafe_code)]
    // SAFETY: access(2) on a NUL-terminated path.
    let ok = unsafe { libc::access(c_path.as_ptr(), libc::X_OK) } == 0;
    Ok(ok)
}

/// Makes sure descriptors 0, 1 and 2 are open (on `/dev/null` if the daemon
/// was started without them), so that no pipe end gets one of those numbers
/// and is overwritten by the child's own redirections.
#[allow(unsafe_code)]
fn standard_fds_open() -> io::Result<()> {
    static CHECKED: std::sync::Once = std::sync::Once::new();
    let mut result = Ok(());
    CHECKED.call_once(|| {
        for fd in 0..3 {
            // SAFETY: F_GETFD only reads the descriptor's flags.
            if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
                // The lowest free number is `fd`: keep it open for good.
                match std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open("/dev/null")
                {
                    Ok(file) => std::mem::forget(file),
                    Err(err) => result = Err(err),
                }
            }
        }
    });
    result
}

fn open_dev_null() -> io::Result<OwnedFd> {
    Ok(std::fs::File::open("/dev/null")?.into())
}

/// A pipe whose both ends are close-on-exec (the child's copies on 1 and 2
/// come from dup2, which clears the flag).
#[allow(unsafe_code)]
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two new descriptors that we then own.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}
