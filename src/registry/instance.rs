//! Who wrote a node's registry entry: each daemon process's instance id,
//! and the collision two of them record when they share a node id.
//!
//! The id is `HOST:PID:RANDOM`, so the person reading a warning or `status`
//! can find both processes; the random part tells apart two processes that
//! got the same pid (in two containers on one host, or after a reboot).

use serde::Serialize;

use super::TTL;

/// Two daemon processes publishing under one node id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Collision {
    /// Redis time (UTC epoch ms) it was last seen.
    pub at_ms: i64,
    /// The instance whose write noticed it.
    pub by: String,
    /// The instance that had written the entry (empty: one without an id).
    pub with: String,
}

impl Collision {
    /// Whether it was seen within the [`TTL`] before `now_ms` (Redis
    /// time). While both daemons run, each of them sees it every
    /// [`super::REFRESH`] or so; after one is killed it ages out (a clean
    /// stop clears it at once).
    pub fn is_recent(&self, now_ms: i64) -> bool {
        now_ms.saturating_sub(self.at_ms) <= i64::try_from(TTL.as_millis()).unwrap_or(i64::MAX)
    }

    /// Both instances, as people read them.
    pub fn instances(&self) -> [String; 2] {
        [describe_instance(&self.by), describe_instance(&self.with)]
    }
}

/// A new instance id for this daemon process: `HOST:PID:RANDOM` (8 hex
/// digits), so two daemons under one node id can be told apart and found.
pub fn new_instance() -> String {
    let host = hostname::get()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let host: String = host
        .chars()
        .map(|c| {
            if c.is_whitespace() || c == ':' {
                '_'
            } else {
                c
            }
        })
        .collect();
    let host = if host.is_empty() {
        "unknown-host".to_string()
    } else {
        host
    };
    format!(
        "{host}:{}:{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// An instance id for messages: `host web-1, pid 4242 (web-1:4242:3f2a9c01)`,
/// or what an empty one means.
pub fn describe_instance(instance: &str) -> String {
    let mut parts = instance.rsplitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        _ if instance.is_empty() => "a daemon of an older version (no instance id)".to_string(),
        (Some(_), Some(pid), Some(host)) => format!("host {host}, pid {pid} ({instance})"),
        _ => instance.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_names_its_host_and_pid() {
        let instance = new_instance();
        let pid = std::process::id().to_string();
        let parts: Vec<&str> = instance.rsplitn(3, ':').collect();
        assert_eq!(parts.len(), 3, "{instance}");
        assert_eq!(parts[0].len(), 8, "{instance}");
        assert_eq!(parts[1], pid, "{instance}");
        assert_ne!(new_instance(), instance, "random part");
        assert_eq!(
            describe_instance("web-1:4242:3f2a9c01"),
            "host web-1, pid 4242 (web-1:4242:3f2a9c01)"
        );
        assert!(describe_instance("").contains("older version"));
    }

    #[test]
    fn a_collision_is_current_for_one_ttl() {
        let collision = Collision {
            at_ms: 100_000,
            by: "a:1:00000001".into(),
            with: "b:2:00000002".into(),
        };
        assert!(collision.is_recent(100_000 + 30_000));
        assert!(!collision.is_recent(100_000 + 30_001));
    }
}
