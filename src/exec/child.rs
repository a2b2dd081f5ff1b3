//! A started job process, from its pid: waits for its exit through a
//! pidfd (readable once the process has exited, no SIGCHLD handling), and
//! reaps it exactly once, also when the run is dropped before.

use std::io;
use std::os::fd::{FromRawFd as _, OwnedFd};
use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// A child of this process that has not been reaped yet.
pub struct Child {
    pid: libc::pid_t,
    exited: AsyncFd<OwnedFd>,
    status: Option<ExitStatus>,
}

impl Child {
    /// Watches `pid`, a child of this process. Must run inside a tokio
    /// runtime.
    #[allow(unsafe_code)]
    pub fn watch(pid: libc::pid_t) -> io::Result<Child> {
        // SAFETY: pidfd_open returns a new descriptor that we then own; a
        // child that already exited is a zombie until we reap it, so the pid
        // cannot name another process meanwhile.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = i32::try_from(fd).map_err(io::Error::other)?;
        // SAFETY: `fd` was just returned by the kernel and is not owned yet.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Child {
            pid,
            exited: register(fd)?,
            status: None,
        })
    }

    /// Waits for the exit and reaps; cancel-safe, and returns the same
    /// status again once reaped.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.status {
                return Ok(status);
            }
            let mut ready = self.exited.readable().await?;
            match reap(self.pid)? {
                Some(status) => {
                    drop(ready);
                    self.status = Some(status);
                    return Ok(status);
                }
                None => ready.clear_ready(),
            }
        }
    }
}

/// Registers a pidfd with the runtime, to wake when the process exits.
#[allow(unsafe_code)]
fn register(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an `OwnedFd` keeps its descriptor open, and the same, until
    // the `AsyncFd` that owns it drops it.
    unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
        .map_err(|err| err.into_parts().1)
}

/// Reaps `pid` if it has exited.
#[allow(unsafe_code)]
fn reap(pid: libc::pid_t) -> io::Result<Option<ExitStatus>> {
    let mut raw = 0;
    // SAFETY: waitpid on our own unreaped child.
    let reaped = unsafe { libc::waitpid(pid, &mut raw, libc::WNOHANG) };
    match reaped {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(None),
        _ => Ok(Some(ExitStatus::from_raw(raw))),
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.status.is_some() || matches!(reap(self.pid), Ok(Some(_)) | Err(_)) {
            return;
        }
        // Dropped while running (its group is SIGKILLed by the caller's
        // guard): reap it in the background so it leaves no zombie.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Ok(exited) = self.exited.get_ref().try_clone() else {
            return;
        };
        let pid = self.pid;
        runtime.spawn(async move {
            if let Ok(exited) = register(exited) {
                let mut child = Child {
                    pid,
                    exited,
                    status: None,
                };
                let _ = child.wait().await;
            }
        });
    }
}
