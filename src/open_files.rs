//! The open files limit (`RLIMIT_NOFILE`): raised for the daemon, given
//! back to its jobs.
//!
//! Every run costs the daemon a few descriptors (the job's pipes, a pidfd,
//! an HTTP connection), and a fleet of every-second jobs needs hundreds at
//! once. A soft limit left low by a shell or an init system (`ulimit -Sn
//! 64`, while the hard limit is far higher) made every run fail with "Too
//! many open files", recorded `failed` and paged, though the process was
//! allowed more all along. So the daemon and `trigger` raise their soft
//! limit to the hard one at start, as Go's runtime does, and each job
//! starts with the soft limit the daemon was given (applied between fork
//! and exec by `exec::launch`): a job sees the limits its operator set.
//!
//! Failure model: a refused `setrlimit` leaves the limit as it was (runs
//! may fail with `EMFILE`, each recorded with its error, as before);
//! nothing here can stop the daemon.

/// Raises the soft open files limit to the hard one. Call it first thing
/// in `main`, before any thread starts.
#[allow(unsafe_code)]
pub fn raise() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write and read the struct we pass; no
    // other precondition.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 || limit.rlim_cur >= limit.rlim_max
        {
            return;
        }
        let given = limit;
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
            crate::exec::give_jobs_open_files(given);
        }
    }
}
