//! Occurrences the nodes in line declined at their `[daemon] max_running`
//! (guarantee 11), for any node with room to take: the node that declines
//! one `LPUSH`es an [`Overflowed`] (JSON) onto `{PREFIX}:overflow`; every
//! node reads the oldest [`LOOKED_AT`] entries in its control snapshot
//! (every second, one `LRANGE` in the pipeline it already sends: nothing
//! when the list is empty) and one with room [`take`]s an entry (`LREM`:
//! of all nodes exactly one removes it), oldest first, and claims the
//! occurrence as usual: the claim script decides.
//!
//! Failure model: an entry nobody takes is dropped by the next reader
//! once its deadline passed (the oldest are read, so the list drains from
//! its old end). A taker that dies after taking leaves the occurrence
//! undecided: the node that declined it records it `throttled` at its
//! deadline. Only commands the daemon's ACL already allows are used.

use serde::{Deserialize, Serialize};

use crate::coordinator::Conn;
use crate::keys::overflow_key;

/// How many entries (the oldest) a node looks at per snapshot.
pub const LOOKED_AT: isize = 32;

/// One declined occurrence, as queued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overflowed {
    pub job: String,
    /// The occurrence, UTC epoch ms.
    pub at_ms: i64,
    /// Its claim deadline, UTC epoch ms.
    pub deadline_ms: i64,
    /// The node that declined it.
    pub by: String,
}

impl Overflowed {
    /// The entry as stored (and matched by `LREM`).
    pub fn raw(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// An entry read back; `None` for one this version cannot read.
    pub fn from_raw(raw: &str) -> Option<Overflowed> {
        serde_json::from_str(raw).ok()
    }
}

/// Queues `entry` for the nodes with room.
pub async fn push(conn: &Conn, prefix: &str, entry: &Overflowed) -> redis::RedisResult<()> {
    let _: i64 = redis::cmd("LPUSH")
        .arg(overflow_key(prefix))
        .arg(entry.raw())
        .query_async(&mut conn.clone())
        .await?;
    Ok(())
}

/// Removes `raw` from the list; `true` if this call removed it (the
/// caller took it), `false` if another node did or it is gone.
pub async fn take(conn: &Conn, prefix: &str, raw: &str) -> redis::RedisResult<bool> {
    let removed: i64 = redis::cmd("LREM")
        .arg(overflow_key(prefix))
        .arg(1)
        .arg(raw)
        .query_async(&mut conn.clone())
        .await?;
    Ok(removed > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_back_and_garbage_does_not() {
        let entry = Overflowed {
            job: "report".to_string(),
            at_ms: 1_700_000_000_000,
            deadline_ms: 1_700_000_060_000,
            by: "n1".to_string(),
        };
        assert_eq!(Overflowed::from_raw(&entry.raw()), Some(entry));
        assert_eq!(Overflowed::from_raw("{\"job\":1}"), None);
    }
}
