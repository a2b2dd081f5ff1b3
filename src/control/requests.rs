//! The manual-run requests of `trigger --fleet`: how the CLI asks the
//! running daemons to run a job now, how exactly one of them takes it, and
//! how the outcome comes back.
//!
//! - The CLI `LPUSH`es a [`Request`] (JSON) onto `{PREFIX}:requests`, with a
//!   deadline [`TAKE_WITHIN`] after Redis `TIME`.
//! - Every daemon that is not drained reads the oldest waiting requests in
//!   its control snapshot (every [`super::REFRESH`]) and [`take`]s the first
//!   one it has the job for: one script removes the entry from the list and
//!   creates `{PREFIX}:request:ID` (`state taken`, `node`) with a TTL of
//!   [`LIVE_TTL`]. The removal is the decision: of all daemons and the
//!   CLI's own [`withdraw`] at the deadline, exactly one removes it.
//! - The taking daemon reports through [`update`]: `running` (occurrence,
//!   fence), then `done` (outcome, exit code, output tail...), renewing the
//!   TTL every [`KEEPALIVE`] while the run goes on. `done` keeps the hash
//!   for [`DONE_TTL`].
//!
//! Failure model: a daemon that dies mid-run stops renewing, so the hash
//! expires within [`LIVE_TTL`] and the CLI says the node stopped reporting
//! instead of waiting for ever; a CLI that dies leaves an entry nobody takes
//! after its deadline (the next snapshot past [`STALE_AFTER_MS`] drops it).
//! Requests live on the coordinator's first member only (with Redlock: the
//! first master), so `trigger --fleet` needs that one up.

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::scripts;
use crate::coordinator::Conn;
use crate::keys::{drains_key, request_key, requests_key};

/// How long a request waits to be taken; then the CLI withdraws it (exit 4).
pub const TAKE_WITHIN: Duration = Duration::from_secs(10);
/// A request hash lives this long unless its daemon renews it.
pub const LIVE_TTL: Duration = Duration::from_secs(20);
/// How often the running daemon renews it.
pub const KEEPALIVE: Duration = Duration::from_secs(5);
/// How long a finished request's result is kept for its CLI.
pub const DONE_TTL: Duration = Duration::from_secs(600);
/// A waiting request whose deadline passed this long ago is dropped.
pub const STALE_AFTER_MS: u64 = 60_000;
/// How many waiting requests a daemon looks at per snapshot.
pub const PENDING_LOOKED_AT: usize = 16;

/// One request, as queued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// 64 random bits, hex.
    pub id: String,
    pub job: String,
    /// Who asked (`user@host`).
    pub by: String,
    /// Redis time (ms) after which no daemon takes it.
    pub deadline_ms: i64,
    /// `trigger --fleet --ignore-limits`: the run takes no room in its
    /// group.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_limits: bool,
    /// `trigger --occurrence T --fleet`: make up the occurrence at this
    /// instant (UTC epoch ms) as attempt `attempt`, instead of a manual run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occurrence_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
}

impl Request {
    /// The entry as stored in the list (and matched by `LREM`).
    pub fn to_raw(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// An entry of the list; `None` for anything this version cannot read.
    pub fn from_raw(raw: &str) -> Option<Request> {
        serde_json::from_str(raw).ok()
    }
}

/// A new request id.
pub fn new_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// Queues `request`; returns the raw entry (for [`withdraw`]).
pub async fn submit(
    conn: &Conn,
    prefix: &str,
    request: &Request,
    record: &super::audit::Record,
) -> redis::RedisResult<String> {
    let raw = request.to_raw();
    // With its audit record, in one transaction (the same slot).
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("LPUSH")
        .arg(requests_key(prefix))
        .arg(&raw)
        .ignore();
    record.add_to(&mut pipe, prefix);
    let () = pipe.query_async(&mut conn.clone()).await?;
    Ok(raw)
}

/// Removes the waiting entry `raw`: `true` if it was still waiting (no
/// daemon took it, and none ever will), `false` if a daemon took it.
pub async fn withdraw(conn: &Conn, prefix: &str, raw: &str) -> redis::RedisResult<bool> {
    let removed: i64 = redis::cmd("LREM")
        .arg(requests_key(prefix))
        .arg(1)
        .arg(raw)
        .query_async(&mut conn.clone())
        .await?;
    Ok(removed > 0)
}

/// What [`take`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// This node has it now.
    Taken,
    /// This node is drained: it takes nothing.
    Draining,
    /// Its deadline passed: nobody takes it any more.
    Late,
    /// Someone else took it, or its CLI withdrew it.
    Gone,
}

/// Takes the waiting entry `raw` (of `request`) for `node`; see the module doc.
pub async fn take(
    conn: &Conn,
    prefix: &str,
    raw: &str,
    request: &Request,
    node: &str,
) -> redis::RedisResult<Take> {
    let reply: String = scripts::TAKE
        .key(requests_key(prefix))
        .key(request_key(prefix, &request.id))
        .key(drains_key(prefix))
        .arg(raw)
        .arg(node)
        .arg(request.deadline_ms)
        .arg(ttl_ms(LIVE_TTL))
        .invoke_async(&mut conn.clone())
        .await?;
    Ok(match reply.as_str() {
        "taken" => Take::Taken,
        "draining" => Take::Draining,
        "late" => Take::Late,
        _ => Take::Gone,
    })
}

/// Sets `fields` of request `id` and renews its TTL to `ttl`, only while
/// it exists; `false` if it is gone (its CLI stopped waiting long ago).
pub async fn update(
    conn: &Conn,
    prefix: &str,
    id: &str,
    ttl: Duration,
    fields: &[(&str, String)],
) -> redis::RedisResult<bool> {
    let mut invocation = scripts::UPDATE.prepare_invoke();
    invocation.key(request_key(prefix, id)).arg(ttl_ms(ttl));
    for (field, value) in fields {
        invocation.arg(*field).arg(value);
    }
    let updated: i64 = invocation.invoke_async(&mut conn.clone()).await?;
    Ok(updated == 1)
}

/// The fields of request `id` (`state`, `node`, `fence`, `occurrence`,
/// `outcome`, ...); empty when it does not exist (not taken yet, or expired).
pub async fn read(conn: &Conn, prefix: &str, id: &str) -> redis::RedisResult<Report> {
    let fields: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(request_key(prefix, id))
        .query_async(&mut conn.clone())
        .await?;
    Ok(Report(fields))
}

/// A request's hash as read back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report(pub HashMap<String, String>);

impl Report {
    /// A field, if set and not empty.
    pub fn get(&self, field: &str) -> Option<&str> {
        self.0
            .get(field)
            .map(String::as_str)
            .filter(|value| !value.is_empty())
    }

    /// `taken`, `running`, `done`; `None` if the hash does not exist.
    pub fn state(&self) -> Option<&str> {
        self.get("state")
    }
}

fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_reads_back_from_its_list_entry() {
        let request = Request {
            id: new_id(),
            job: "report".into(),
            by: "ops@laptop".into(),
            deadline_ms: 1_796_072_400_000,
            ignore_limits: false,
            occurrence_ms: None,
            attempt: None,
        };
        assert_eq!(request.id.len(), 16);
        assert_eq!(Request::from_raw(&request.to_raw()), Some(request));
        assert_eq!(Request::from_raw("{}"), None);
    }
}
