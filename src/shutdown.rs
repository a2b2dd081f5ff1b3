//! Stop requests (SIGTERM, SIGINT), reload requests (SIGHUP), the
//! suspend signals a process holding locks must not obey (SIGTSTP,
//! SIGTTIN, SIGTTOU), and the signals whose default action would kill it
//! without any cleanup (SIGUSR1, SIGUSR2, SIGQUIT, SIGALRM, ...).
//!
//! `systemctl stop` sends SIGTERM, a terminal sends SIGINT; `ctrl_c()` alone
//! would miss the first. Once a signal is handled its default action is
//! gone, so what a second one means is ours to say (guarantee 10,
//! docs/guarantees.md): the first asks for a graceful stop, the second for
//! killing every job at once and stopping as soon as their locks are released
//! and their outcome recorded, never for an exit that leaves a job running
//! without its lease. Each signal is one message on the stream; the daemon and
//! `trigger` decide.

use std::io;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

/// A message per SIGTERM or SIGINT, naming it. Installs the handlers at
/// once (`Err` if they cannot be); the forwarding task ends when the
/// receiver is dropped.
pub fn stop_requests() -> io::Result<mpsc::UnboundedReceiver<&'static str>> {
    stop_requests_from(None)
}

/// [`stop_requests`] with SIGHUP a stop request too, named `SIGHUP`: for
/// `trigger`, whose terminal hanging up (an SSH session gone) must stop
/// its run like Ctrl-C, with the lock released and the outcome recorded,
/// not end the process by the default action while its job runs on
/// without a lease. The daemon reloads on SIGHUP instead ([`reloads`]).
pub fn stop_requests_and_hangups() -> io::Result<mpsc::UnboundedReceiver<&'static str>> {
    stop_requests_from(Some(signal(SignalKind::hangup())?))
}

fn stop_requests_from(
    mut hup: Option<tokio::signal::unix::Signal>,
) -> io::Result<mpsc::UnboundedReceiver<&'static str>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let hangup = async {
                match hup.as_mut() {
                    Some(hup) => hup.recv().await,
                    None => std::future::pending().await,
                }
            };
            let name = tokio::select! {
                Some(()) = term.recv() => "SIGTERM",
                Some(()) = int.recv() => "SIGINT",
                Some(()) = hangup => "SIGHUP",
                else => return,
            };
            if tx.send(name).is_err() {
                return;
            }
        }
    });
    Ok(rx)
}

/// Keeps job control from suspending this process, which renews the locks
/// of the runs it watches: a suspended `trigger` (Ctrl-Z) or daemon would
/// let a lock expire while its job, in a process group of its own, goes on,
/// and another node's run of the same job would overlap it.
///
/// SIGTSTP (Ctrl-Z) and SIGTTIN are caught: `said` is called with the
/// signal's name for each (to log or print one line) and nothing stops.
/// SIGTTOU is ignored instead: a background process writing to a terminal
/// with `stty tostop` gets it at each write, and a caught one makes the
/// write fail and restart for ever, while an ignored one lets the write
/// through. Jobs get every disposition back to its default
/// ([`crate::exec`]). SIGSTOP cannot be caught (see docs/operations.md, Limits).
pub fn refuse_suspend(said: impl Fn(&'static str) + Send + 'static) -> io::Result<()> {
    ignore_ttou()?;
    let mut tstp = signal(SignalKind::from_raw(libc::SIGTSTP))?;
    let mut ttin = signal(SignalKind::from_raw(libc::SIGTTIN))?;
    tokio::spawn(async move {
        loop {
            let name = tokio::select! {
                Some(()) = tstp.recv() => "SIGTSTP",
                Some(()) = ttin.recv() => "SIGTTIN",
                else => return,
            };
            said(name);
        }
    });
    Ok(())
}

/// The signals that mean nothing to solocron but whose default action
/// ends the process at once: an operator's `kill -USR1` ("reopen the
/// logs" elsewhere) or Ctrl-\\ would kill the daemon without releasing a
/// lock or recording an outcome, while its jobs, in process groups of
/// their own, ran on without a lease. (SIGPIPE is ignored by the Rust
/// runtime already.)
pub const FATAL_BY_DEFAULT: [(libc::c_int, &str); 8] = [
    (libc::SIGUSR1, "SIGUSR1"),
    (libc::SIGUSR2, "SIGUSR2"),
    (libc::SIGQUIT, "SIGQUIT"),
    (libc::SIGALRM, "SIGALRM"),
    (libc::SIGVTALRM, "SIGVTALRM"),
    (libc::SIGPROF, "SIGPROF"),
    (libc::SIGIO, "SIGIO"),
    (libc::SIGPWR, "SIGPWR"),
];

/// Catches every signal of [`FATAL_BY_DEFAULT`]: `said` is called with the
/// signal's name for each (to log or print one line) and nothing else
/// happens. Jobs get the default dispositions back ([`crate::exec`]).
///
/// SIGXFSZ (a log file past `ulimit -f`) is ignored instead, without a
/// word: it comes with every write past the limit, log lines included, and
/// an ignored one lets the write fail (EFBIG), a lost log line like any
/// other (guarantee 10, docs/guarantees.md), where its default action ended the
/// process.
pub fn refuse_fatal(said: impl Fn(&'static str) + Send + Sync + 'static) -> io::Result<()> {
    ignore(nix::sys::signal::Signal::SIGXFSZ)?;
    let said = std::sync::Arc::new(said);
    for (raw, name) in FATAL_BY_DEFAULT {
        let mut stream = signal(SignalKind::from_raw(raw))?;
        let said = std::sync::Arc::clone(&said);
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                said(name);
            }
        });
    }
    Ok(())
}

/// SIGTTOU's disposition set to "ignore" (see [`refuse_suspend`]).
fn ignore_ttou() -> io::Result<()> {
    ignore(nix::sys::signal::Signal::SIGTTOU)
}

/// `signal`'s disposition set to "ignore".
#[allow(unsafe_code)]
fn ignore(signal: nix::sys::signal::Signal) -> io::Result<()> {
    use nix::sys::signal::SigHandler;
    // SAFETY: SIG_IGN runs no code of ours in a signal context; this
    // replaces no handler another part of the process relies on (nothing
    // else handles SIGTTOU or SIGXFSZ).
    unsafe { nix::sys::signal::signal(signal, SigHandler::SigIgn) }
        .map(drop)
        .map_err(io::Error::from)
}

/// A message per SIGHUP (reload `jobs.toml`). Installs the handler at once;
/// the forwarding task ends when the receiver is dropped.
pub fn reloads() -> io::Result<mpsc::UnboundedReceiver<()>> {
    let mut hup = signal(SignalKind::hangup())?;
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            if tx.send(()).is_err() {
                return;
            }
        }
    });
    Ok(rx)
}
