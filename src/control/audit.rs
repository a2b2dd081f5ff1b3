//! The audit trail: who did what to the fleet, in `{PREFIX}:audit` (a
//! stream capped near [`MAX`] entries), newest last.
//!
//! Each record has `who` (`user@host` for a command, the node id for a
//! daemon), `action`, `target` (a job, a node, `*` for every job),
//! `reason` and `result`. Pauses, resumes, drains and undrains are
//! recorded by the script that writes them, `trigger --fleet` requests
//! and aborts in the same transaction as the request: a write Redis
//! refused leaves no record. What only ends later (how an aborted or
//! requested run ended, a manual `trigger`, a cancelled retry, whose keys
//! are the job's, on another Cluster slot) is recorded once the result is
//! known, by the command that saw it. The daemons add their start, clean
//! stop, reloads (jobs added, removed, changed) and config drift starting
//! and ending.
//!
//! Failure model: a daemon's record is best effort (an outage loses it;
//! the journal still has the line); a command's is part of its write or
//! follows its result, so a record never says what did not happen.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::coordinator::Conn;
use crate::keys::audit_key;

/// The stream's approximate cap (`XADD MAXLEN ~`).
pub const MAX: u64 = 10_000;

/// One record, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Record {
    pub who: String,
    pub action: String,
    pub target: String,
    pub reason: String,
    pub result: String,
}

impl Record {
    /// A record of `action` on `target` by `who`, done (`result` `ok`).
    pub fn new(who: &str, action: &str, target: &str) -> Record {
        Record {
            who: who.to_string(),
            action: action.to_string(),
            target: target.to_string(),
            reason: String::new(),
            result: "ok".to_string(),
        }
    }

    pub fn reason(mut self, reason: Option<&str>) -> Record {
        self.reason = one_line(reason.unwrap_or_default());
        self
    }

    pub fn result(mut self, result: &str) -> Record {
        self.result = one_line(result);
        self
    }

    /// The stream entry's field / value pairs.
    pub fn fields(&self) -> [(&'static str, &str); 5] {
        [
            ("who", &self.who),
            ("action", &self.action),
            ("target", &self.target),
            ("reason", &self.reason),
            ("result", &self.result),
        ]
    }

    /// The record as the JSON the control scripts decode (`cjson`).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Adds `XADD {PREFIX}:audit MAXLEN ~ MAX * …` to `pipe`.
    pub fn add_to(&self, pipe: &mut redis::Pipeline, prefix: &str) {
        let cmd = pipe
            .cmd("XADD")
            .arg(audit_key(prefix))
            .arg("MAXLEN")
            .arg("~")
            .arg(MAX)
            .arg("*");
        for (field, value) in self.fields() {
            cmd.arg(field).arg(value);
        }
        cmd.ignore();
    }
}

fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Appends `record` on its own (a daemon's, or a result known only now).
pub async fn append(conn: &Conn, prefix: &str, record: &Record) -> redis::RedisResult<()> {
    let mut pipe = redis::pipe();
    record.add_to(&mut pipe, prefix);
    pipe.query_async(&mut conn.clone()).await
}

/// One record as read back, with its time (Redis's, ms).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Read {
    pub at_ms: i64,
    #[serde(flatten)]
    pub record: Record,
}

/// The newest `limit` records at or after `since_ms`, newest first.
pub async fn read(
    conn: &Conn,
    prefix: &str,
    since_ms: Option<i64>,
    limit: usize,
) -> redis::RedisResult<Vec<Read>> {
    let entries: Vec<(String, BTreeMap<String, String>)> = redis::cmd("XREVRANGE")
        .arg(audit_key(prefix))
        .arg("+")
        .arg(since_ms.map_or_else(|| "-".to_string(), |ms| ms.max(0).to_string()))
        .arg("COUNT")
        .arg(limit)
        .query_async(&mut conn.clone())
        .await?;
    Ok(entries
        .into_iter()
        .map(|(id, fields)| {
            let at_ms = id
                .split_once('-')
                .and_then(|(ms, _)| ms.parse().ok())
                .unwrap_or(0);
            let field = |name: &str| fields.get(name).cloned().unwrap_or_default();
            Read {
                at_ms,
                record: Record {
                    who: field("who"),
                    action: field("action"),
                    target: field("target"),
                    reason: field("reason"),
                    result: field("result"),
                },
            }
        })
        .collect())
}
