//! A stand-in for systemd's notify socket: a real unix datagram socket that
//! records what a daemon (or a `Notifier`) sends to `NOTIFY_SOCKET`.

use std::ffi::{OsStr, OsString};
use std::os::linux::net::SocketAddrExt as _;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// A bound datagram socket; pass [`NotifySocket::path`] as `NOTIFY_SOCKET`.
pub struct NotifySocket {
    socket: UnixDatagram,
    name: OsString,
    _dir: Option<TempDir>,
}

impl NotifySocket {
    /// Binds `notify.sock` in a fresh temp dir (removed on drop).
    pub fn bind() -> NotifySocket {
        let dir = tempfile::tempdir().expect("create temp dir");
        let path = dir.path().join("notify.sock");
        let socket = UnixDatagram::bind(&path).expect("bind the notify socket");
        NotifySocket {
            socket,
            name: path.into_os_string(),
            _dir: Some(dir),
        }
    }

    /// Binds a socket in Linux's abstract namespace; [`NotifySocket::path`]
    /// is then `@name`, as systemd writes it.
    pub fn bind_abstract() -> NotifySocket {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "solocron-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract name");
        let socket = UnixDatagram::bind_addr(&addr).expect("bind the abstract notify socket");
        NotifySocket {
            socket,
            name: OsString::from(format!("@{name}")),
            _dir: None,
        }
    }

    /// The value for `NOTIFY_SOCKET`.
    pub fn path(&self) -> &Path {
        Path::new(&self.name)
    }

    /// The same as an `OsStr`, for `Command::env`.
    pub fn env_value(&self) -> &OsStr {
        &self.name
    }

    /// The next message, or `None` if nothing arrives within `limit`.
    pub fn recv(&self, limit: Duration) -> Option<String> {
        self.socket
            .set_read_timeout(Some(limit.max(Duration::from_millis(1))))
            .expect("set read timeout");
        let mut buf = vec![0u8; 64 * 1024];
        match self.socket.recv(&mut buf) {
            Ok(len) => Some(String::from_utf8_lossy(&buf[..len]).into_owned()),
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                None
            }
            Err(err) => panic!("receive on the notify socket: {err}"),
        }
    }

    /// Messages in arrival order, up to and including the first whose text
    /// contains `needle` (e.g. `"READY=1"`); panics with what did arrive if
    /// none does within `limit`.
    pub fn recv_until(&self, needle: &str, limit: Duration) -> Vec<String> {
        let deadline = Instant::now() + limit;
        let mut messages = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no notification containing `{needle}` within {limit:?}; got {messages:?}"
            );
            if let Some(message) = self.recv(left) {
                let found = message.contains(needle);
                messages.push(message);
                if found {
                    return messages;
                }
            }
        }
    }

    /// Every message that arrives within `limit` (e.g. to assert that no
    /// more come).
    pub fn drain(&self, limit: Duration) -> Vec<String> {
        let deadline = Instant::now() + limit;
        let mut messages = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return messages;
            }
            if let Some(message) = self.recv(left) {
                messages.push(message);
            }
        }
    }
}
