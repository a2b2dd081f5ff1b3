//! The future that completes when the process is asked to stop, and the
//! stream of reload requests (SIGHUP).
//!
//! `systemctl stop` sends SIGTERM, a terminal sends SIGINT; `ctrl_c()` alone
//! would miss the first. Once a signal is handled its default action is
//! gone, so a second SIGTERM/SIGINT during the drain exits at once (exit 130)
//! on purpose: an operator pressing Ctrl-C twice means it.

use std::io;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tracing::warn;

/// Completes on the first SIGTERM or SIGINT, then arms the "second signal
/// exits at once" handler. `Err` if the handlers cannot be installed.
pub async fn requested() -> io::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        warn!("second stop signal, exiting at once");
        std::process::exit(130);
    });
    Ok(())
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
