//! Service-manager notifications: `READY=1`, `RELOADING=1`, `STOPPING=1`,
//! `STATUS=…` and `WATCHDOG=1` over systemd's `NOTIFY_SOCKET` datagram
//! protocol (`sd_notify(3)`).
//!
//! The daemon never fails because of systemd: every free function here is a
//! no-op when `NOTIFY_SOCKET` is unset (not under systemd, or `Type=simple`)
//! and only logs when sending fails. The message text comes from the
//! `sd-notify` crate's [`NotifyState`]; the sending is done here, because
//! the crate only sends to the socket named in the environment and does not
//! understand abstract socket names (`@name`), while tests need to point a
//! [`Notifier`] at a socket of their own without touching the process-wide
//! environment.
//!
//! The environment is left as it is (`sd_notify`'s `unset_environment` is
//! unsafe once threads run): processes the daemon starts must not inherit
//! it, so the code that spawns jobs removes every name in [`ENV_VARS`].

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::io;
use std::os::linux::net::SocketAddrExt as _;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::PathBuf;
use std::time::Duration;

use sd_notify::NotifyState;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// Environment variables systemd passes to the daemon for this protocol.
/// Job processes must not inherit them (a job sending `READY=1` or
/// `STOPPING=1` would be taken as the daemon's), so remove each one with
/// `Command::env_remove` when spawning a job.
pub const ENV_VARS: &[&str] = &["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"];

/// Why a notification could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// The socket name is an abstract name that is too long, or empty.
    #[error("`{socket}` is not a usable notify socket address")]
    Address {
        /// The socket as given (`NOTIFY_SOCKET`).
        socket: String,
        /// Why the address was refused.
        #[source]
        source: io::Error,
    },
    /// Creating, connecting or writing the datagram socket failed.
    #[error("cannot send `{message}` to notify socket `{socket}`")]
    Send {
        /// The socket as given (`NOTIFY_SOCKET`).
        socket: String,
        /// The message, one `KEY=VALUE` per line joined with spaces.
        message: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// Sends notifications to one service-manager socket, or nowhere.
///
/// [`Notifier::from_env`] is what the daemon uses; [`Notifier::to_socket`]
/// lets tests name the socket explicitly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notifier {
    socket: Option<OsString>,
}

impl Notifier {
    /// The socket named by `NOTIFY_SOCKET`, or a disabled notifier when it is
    /// unset or empty.
    pub fn from_env() -> Notifier {
        match std::env::var_os("NOTIFY_SOCKET") {
            Some(socket) if !socket.is_empty() => Notifier {
                socket: Some(socket),
            },
            _ => Notifier::disabled(),
        }
    }

    /// A notifier for `socket`: a file-system path, or an abstract socket
    /// name written with a leading `@` (as systemd does).
    pub fn to_socket(socket: impl AsRef<OsStr>) -> Notifier {
        Notifier {
            socket: Some(socket.as_ref().to_os_string()),
        }
    }

    /// A notifier whose every call does nothing and succeeds.
    pub fn disabled() -> Notifier {
        Notifier { socket: None }
    }

    /// Whether notifications go anywhere.
    pub fn is_enabled(&self) -> bool {
        self.socket.is_some()
    }

    /// `READY=1`: start-up is finished.
    pub fn ready(&self) -> Result<(), NotifyError> {
        self.send(&[NotifyState::Ready])
    }

    /// `RELOADING=1` plus `MONOTONIC_USEC=` (CLOCK_MONOTONIC in µs), which
    /// systemd 253 and newer require for `Type=notify-reload`. Follow it with
    /// [`Notifier::ready`] once the reload is done (or has failed).
    pub fn reloading(&self) -> Result<(), NotifyError> {
        match NotifyState::monotonic_usec_now() {
            Ok(now) => self.send(&[NotifyState::Reloading, now]),
            Err(err) => {
                // Only notify-reload services need the timestamp; send the rest.
                debug!(error = %err, "cannot read CLOCK_MONOTONIC for MONOTONIC_USEC");
                self.send(&[NotifyState::Reloading])
            }
        }
    }

    /// `STOPPING=1`: shutdown has begun.
    pub fn stopping(&self) -> Result<(), NotifyError> {
        self.send(&[NotifyState::Stopping])
    }

    /// `WATCHDOG=1`: the service is alive.
    pub fn watchdog(&self) -> Result<(), NotifyError> {
        self.send(&[NotifyState::Watchdog])
    }

    /// `STATUS=text`, shown by `systemctl status`. Line breaks become spaces,
    /// since each line of a message is a separate assignment.
    pub fn status(&self, text: &str) -> Result<(), NotifyError> {
        let text = text.replace(['\n', '\r'], " ");
        self.send(&[NotifyState::Status(&text)])
    }

    /// Sends `WATCHDOG=1` every `period` (the first at once) until `cancel`
    /// fires. A failed ping is logged and the loop goes on.
    pub async fn watchdog_loop(&self, period: Duration, cancel: CancellationToken) {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = ticks.tick() => log_failure(self.watchdog()),
            }
        }
    }

    /// Sends `states` as one datagram, one `KEY=VALUE` per line.
    fn send(&self, states: &[NotifyState<'_>]) -> Result<(), NotifyError> {
        let Some(socket) = &self.socket else {
            return Ok(());
        };
        let mut message = String::new();
        for state in states {
            // Writing to a String cannot fail.
            let _ = writeln!(message, "{state}");
        }
        let shown = || socket.to_string_lossy().into_owned();
        let addr = socket_addr(socket).map_err(|source| NotifyError::Address {
            socket: shown(),
            source,
        })?;
        send_datagram(&addr, message.as_bytes()).map_err(|source| NotifyError::Send {
            socket: shown(),
            message: message.trim_end().replace('\n', " "),
            source,
        })
    }
}

/// The address for a `NOTIFY_SOCKET` value: `@name` is Linux's abstract
/// namespace, anything else a path.
fn socket_addr(socket: &OsStr) -> io::Result<SocketAddr> {
    match socket.as_bytes().strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name),
        None => SocketAddr::from_pathname(PathBuf::from(socket)),
    }
}

fn send_datagram(addr: &SocketAddr, message: &[u8]) -> io::Result<()> {
    let socket = UnixDatagram::unbound()?;
    socket.connect_addr(addr)?;
    let sent = socket.send(message)?;
    if sent == message.len() {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "notification sent only in part",
        ))
    }
}

fn log_failure(result: Result<(), NotifyError>) {
    if let Err(err) = result {
        // `{err}: {cause}`, the same shape as anyhow's `{:#}` elsewhere.
        let mut text = err.to_string();
        let mut source = std::error::Error::source(&err);
        while let Some(cause) = source {
            let _ = write!(text, ": {cause}");
            source = cause.source();
        }
        warn!(error = %text, "systemd notification failed");
    }
}

/// Tells systemd that start-up is finished (`READY=1`); also after a reload.
/// No-op without `NOTIFY_SOCKET`; a failure is logged, never returned.
pub fn ready() {
    log_failure(Notifier::from_env().ready());
}

/// Tells systemd a reload has begun (`RELOADING=1`, `MONOTONIC_USEC=`); call
/// [`ready`] when it is over. No-op without `NOTIFY_SOCKET`.
pub fn reloading() {
    log_failure(Notifier::from_env().reloading());
}

/// Tells systemd that shutdown has begun (`STOPPING=1`). No-op without
/// `NOTIFY_SOCKET`.
pub fn stopping() {
    log_failure(Notifier::from_env().stopping());
}

/// Sets the status line `systemctl status` shows (`STATUS=text`). No-op
/// without `NOTIFY_SOCKET`.
pub fn status(text: &str) {
    log_failure(Notifier::from_env().status(text));
}

/// How often to send `WATCHDOG=1`: half of `WATCHDOG_USEC`, or `None` when
/// the unit sets no `WatchdogSec`, or `WATCHDOG_PID` names another process.
pub fn watchdog_interval() -> Option<Duration> {
    let usec = std::env::var("WATCHDOG_USEC").ok();
    let pid = std::env::var("WATCHDOG_PID").ok();
    ping_period(usec.as_deref(), pid.as_deref(), std::process::id())
}

/// [`watchdog_interval`] on explicit values, for `our_pid`.
fn ping_period(usec: Option<&str>, pid: Option<&str>, our_pid: u32) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|&usec| usec > 0)?;
    if let Some(pid) = pid
        && pid.trim().parse::<u32>().ok() != Some(our_pid)
    {
        return None;
    }
    Some(Duration::from_micros(usec) / 2)
}

/// Sends `WATCHDOG=1` every [`watchdog_interval`] until `cancel` fires.
/// Returns at once when no watchdog is configured or `NOTIFY_SOCKET` is
/// unset. Run it on the daemon's runtime for the daemon's whole life: if the
/// runtime stalls, the pings stop and systemd restarts the service.
pub async fn watchdog_loop(cancel: CancellationToken) {
    let notifier = Notifier::from_env();
    let Some(period) = watchdog_interval().filter(|_| notifier.is_enabled()) else {
        return;
    };
    debug!(?period, "sending systemd watchdog pings");
    notifier.watchdog_loop(period, cancel).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_period_is_half_the_watchdog_timeout() {
        assert_eq!(
            ping_period(Some("30000000"), None, 7),
            Some(Duration::from_secs(15))
        );
        assert_eq!(
            ping_period(Some("30000000"), Some("7"), 7),
            Some(Duration::from_secs(15))
        );
    }

    #[test]
    fn no_ping_without_a_timeout_or_for_another_pid() {
        assert_eq!(ping_period(None, None, 7), None);
        assert_eq!(ping_period(Some("0"), None, 7), None);
        assert_eq!(ping_period(Some("soon"), None, 7), None);
        assert_eq!(ping_period(Some("30000000"), Some("8"), 7), None);
        assert_eq!(ping_period(Some("30000000"), Some("x"), 7), None);
    }

    #[test]
    fn disabled_notifier_sends_nothing_and_succeeds() {
        let notifier = Notifier::disabled();
        assert!(!notifier.is_enabled());
        assert!(notifier.ready().is_ok());
        assert!(notifier.reloading().is_ok());
    }

    #[test]
    fn missing_socket_is_an_error_naming_it() {
        let err = Notifier::to_socket("/nonexistent/solocron-notify")
            .ready()
            .expect_err("no such socket");
        assert_eq!(
            err.to_string(),
            "cannot send `READY=1` to notify socket `/nonexistent/solocron-notify`"
        );
    }
}
