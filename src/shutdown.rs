//! Stop requests (SIGTERM, SIGINT) and reload requests (SIGHUP).
//!
//! `systemctl stop` sends SIGTERM, a terminal sends SIGINT; `ctrl_c()` alone
//! would miss the first. Once a signal is handled its default action is
//! gone, so what a second one means is ours to say (SPEC §2.10): the first
//! asks for a graceful stop, the second for killing every job at once and
//! stopping as soon as their locks are released and their outcome recorded,
//! never for an exit that leaves a job running without its lease. Each
//! signal is one message on the stream; the daemon and `trigger` decide.

use std::io;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

/// A message per SIGTERM or SIGINT, naming it. Installs the handlers at
/// once (`Err` if they cannot be); the forwarding task ends when the
/// receiver is dropped.
pub fn stop_requests() -> io::Result<mpsc::UnboundedReceiver<&'static str>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let name = tokio::select! {
                Some(()) = term.recv() => "SIGTERM",
                Some(()) = int.recv() => "SIGINT",
                else => return,
            };
            if tx.send(name).is_err() {
                return;
            }
        }
    });
    Ok(rx)
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
