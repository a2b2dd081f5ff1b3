//! `solocron abort`: an operator's request to stop a job's run in
//! progress, or to cancel its pending retry, kept in `{PREFIX}:aborts`
//! (hash, job -> an [`AbortMark`] as JSON) until the run is over.
//!
//! A mark names the run by its fence: the daemon running that fence stops
//! the run's group like a timeout (SIGTERM, SIGKILL 10 s later) and
//! records `aborted` with who and why; a later run of the job has another
//! fence and is never touched by a mark left behind. Every daemon reads
//! the hash with its controls each second (`HGETALL`, in the same
//! pipeline), so an abort takes effect within about a second. A pending
//! retry (no run in progress) is cancelled at once by [`CANCEL_RETRY`], in
//! the job's own keys: its state stops naming a pending attempt, so no
//! node's claim of it can win, and the attempt is recorded `aborted`.
//!
//! Failure model: each call is one round trip that may fail; a mark that
//! is never withdrawn names a fence no later run has, and the next
//! `abort` of the job replaces it.

use std::collections::BTreeMap;

use redis::Script;
use serde::{Deserialize, Serialize};

use crate::coordinator::Conn;
use crate::keys::{JobKeys, aborts_key};

/// One abort, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortMark {
    /// 64 random bits, hex: which `abort` wrote it (its withdrawal
    /// removes only its own).
    pub id: String,
    /// The fence of the run to stop.
    pub fence: u64,
    /// Who asked (`user@host`).
    pub by: String,
    /// `--reason`.
    #[serde(default)]
    pub reason: Option<String>,
    /// When (Redis time, ms).
    pub at_ms: i64,
}

impl AbortMark {
    /// `aborted by alice@laptop: reason`, one line, for the run's history
    /// entry and the logs.
    pub fn describe(&self) -> String {
        let mut text = format!("aborted by {}", self.by);
        if let Some(reason) = self.reason.as_deref().filter(|r| !r.is_empty()) {
            text.push_str(&format!(": {reason}"));
        }
        text.chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect()
    }
}

/// Writes `mark` for `job` (replacing an older abort of it), with its
/// audit `record` in one transaction; with `wait` replicas asked
/// (`wait_replicas`), followed by `WAIT` on the same connection, so that
/// a master that fails over right after does not take the abort with it.
/// Answers how many replicas acknowledged it (`None`: none asked).
pub async fn post(
    conn: &Conn,
    prefix: &str,
    job: &str,
    mark: &AbortMark,
    record: &super::audit::Record,
    wait: crate::coordinator::Wait,
) -> redis::RedisResult<Option<u32>> {
    let raw = serde_json::to_string(mark).unwrap_or_default();
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("HSET")
        .arg(aborts_key(prefix))
        .arg(job)
        .arg(raw)
        .ignore();
    record.add_to(&mut pipe, prefix);
    if wait.replicas == 0 {
        let () = pipe.query_async(&mut conn.clone()).await?;
        return Ok(None);
    }
    pipe.cmd("WAIT")
        .arg(wait.replicas)
        .arg(u64::try_from(wait.timeout.as_millis()).unwrap_or(u64::MAX));
    let (acked,): (u32,) = pipe.query_async(&mut conn.clone()).await?;
    Ok(Some(acked))
}

/// KEYS: the aborts hash. ARGV: job, id. Deletes the job's mark only if
/// it is still the one with this id.
const WITHDRAW: &str = r#"
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if raw and string.find(raw, '"id":"' .. ARGV[2] .. '"', 1, true) then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 1
end
return 0
"#;

/// Removes `job`'s mark if it is still the one with `id`.
pub async fn withdraw(conn: &Conn, prefix: &str, job: &str, id: &str) -> redis::RedisResult<()> {
    Script::new(WITHDRAW)
        .key(aborts_key(prefix))
        .arg(job)
        .arg(id)
        .invoke_async::<i64>(&mut conn.clone())
        .await
        .map(|_| ())
}

/// The marks of an `HGETALL` of the hash; a field that does not parse is
/// left out.
pub fn parse(fields: BTreeMap<String, String>) -> BTreeMap<String, AbortMark> {
    fields
        .into_iter()
        .filter_map(|(job, raw)| Some((job, serde_json::from_str(&raw).ok()?)))
        .collect()
}

/// KEYS: the job's lock, state, history. ARGV: the entry's error, history
/// max, who. If an attempt of the job is pending (`retry_state`), marks it
/// `aborted` (a retry's claim then never wins it) and records it so;
/// answers `{occurrence, attempt}`, or `{}` if none was pending.
pub const CANCEL_RETRY: &str = r#"
local r = redis.call('HMGET', KEYS[2], 'retry_occ', 'retry_attempt', 'retry_state')
if r[3] ~= 'pending' or not r[1] then return {} end
local t = redis.call('TIME')
local now = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('HSET', KEYS[2], 'retry_state', 'aborted', 'retry_node', ARGV[3], 'retry_fence', '0')
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[2], '*', 'occurrence', r[1], 'node', ARGV[3],
  'fence', '0', 'outcome', 'aborted', 'started_at', now, 'finished_at', now, 'error', ARGV[1],
  'attempt', r[2] or '')
return {r[1], r[2] or ''}
"#;

/// Cancels `keys`' pending retry, recording it `aborted` with `why`;
/// answers the occurrence and attempt cancelled, if one was pending.
pub async fn cancel_retry(
    conn: &Conn,
    keys: &JobKeys,
    why: &str,
    history_max: u64,
    by: &str,
) -> redis::RedisResult<Option<(String, String)>> {
    let reply: Vec<String> = Script::new(CANCEL_RETRY)
        .key(&keys.lock)
        .key(&keys.state)
        .key(&keys.history)
        .arg(why)
        .arg(history_max)
        .arg(by)
        .invoke_async(&mut conn.clone())
        .await?;
    let mut reply = reply.into_iter();
    Ok(reply.next().zip(reply.next()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_reads_back_and_says_who_and_why_on_one_line() {
        let mark = AbortMark {
            id: "00ff".into(),
            fence: 42,
            by: "ops@laptop".into(),
            reason: Some("hammering\nthe db".into()),
            at_ms: 1,
        };
        let raw = serde_json::to_string(&mark).unwrap_or_default();
        let read = parse(BTreeMap::from([
            ("nightly".to_string(), raw),
            ("bad".into(), "{".into()),
        ]));
        assert_eq!(read.get("nightly"), Some(&mark));
        assert_eq!(read.len(), 1);
        assert_eq!(mark.describe(), "aborted by ops@laptop: hammering the db");
    }
}
