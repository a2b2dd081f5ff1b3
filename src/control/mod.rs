//! Fleet-wide operator controls kept in Redis: pauses (of one job, or of
//! every job), drains (of one node) and the manual-run requests of
//! `trigger --fleet` ([`requests`]).
//!
//! Keys (all share the hash tag `{PREFIX}`, like the node registry, so each
//! script below runs on one Cluster slot):
//! - `{PREFIX}:pauses`: hash, job name (or [`ALL`] for `pause --all`) ->
//!   a [`Mark`] as JSON, plus `~version` (bumped by every write, so a node
//!   re-reads the pauses only when they changed);
//! - `{PREFIX}:drains`: hash, node id -> a [`Mark`] as JSON;
//! - `{PREFIX}:requests`, `{PREFIX}:request:ID`: see [`requests`].
//!
//! A resume or undrain does not delete the field: it writes an inactive
//! mark (a tombstone) with a newer stamp. With Redlock every write goes to
//! every master and readers keep, per field, the mark with the newest
//! stamp ([`merge`]), so a master that missed the resume (it was down)
//! cannot bring an old pause back. Tombstones and expired pauses older
//! than [`PRUNE_AFTER`] are dropped by the next write.
//!
//! A pause with `--for` stores its end (`until_ms`, Redis time): it covers
//! the occurrences before that instant, so it ends by itself on every node
//! at the same occurrence, whatever each node's clock or cache says.
//!
//! Failure model: every function here is one round trip that may fail
//! (Redis away, refused); callers retry or report. Nothing panics on what
//! Redis holds: a field that does not parse is ignored (and shows in no
//! listing), never an error that stops a node.

pub mod aborts;
pub mod audit;
pub mod overflow;
pub mod requests;
mod scripts;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::coordinator::Conn;
use crate::keys::{drains_key, overflow_key, pauses_key, requests_key};
use crate::registry::alive::{Beat, Beaten};

/// The field of `pause --all`: no job is called that (names are `A-Z a-z 0-9 _ . -`).
pub const ALL: &str = "*";
/// How often a daemon reads the controls (pauses, its drain, requests).
pub const REFRESH: Duration = Duration::from_secs(1);
/// Inactive or expired marks older than this are dropped by the next write.
pub const PRUNE_AFTER: Duration = Duration::from_secs(24 * 3600);

/// A pause or a drain as stored, or its end (a tombstone).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// Write stamp (Redis time, ms): across Redlock masters the newest wins.
    pub at_ms: i64,
    /// `false`: resumed / undrained (a tombstone).
    pub active: bool,
    /// Who wrote it: `user@host`.
    pub by: String,
    /// Since when (Redis time, ms).
    pub since_ms: i64,
    /// A pause with `--for` or `--until`: the first instant (ms) it no
    /// longer covers.
    #[serde(default)]
    pub until_ms: Option<i64>,
    /// A pause booked ahead (`--from`): the first instant (ms) it covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_ms: Option<i64>,
    /// `--reason`.
    #[serde(default)]
    pub reason: Option<String>,
}

impl Mark {
    /// Whether it holds for something at `at_ms` (an occurrence, or now).
    pub fn covers(&self, at_ms: i64) -> bool {
        self.active
            && self.from_ms.is_none_or(|from| at_ms >= from)
            && self.until_ms.is_none_or(|until| at_ms < until)
    }

    /// Whether it is a pause booked ahead that has not begun at `now_ms`.
    pub fn booked_after(&self, now_ms: i64) -> bool {
        self.active && self.from_ms.is_some_and(|from| from > now_ms)
    }

    /// `by alice@web-1 since 2026-…Z until 2026-…Z: reason`, for messages
    /// and the history entry of a paused occurrence: one line, whatever
    /// the reason holds (control characters become spaces, so a newline
    /// or a terminal's escape code in `--reason` cannot break a table or
    /// colour a terminal).
    pub fn describe(&self) -> String {
        let time = instant;
        let mut text = format!("by {} since {}", self.by, time(self.since_ms));
        if let Some(from) = self.from_ms {
            text.push_str(&format!(" from {}", time(from)));
        }
        if let Some(until) = self.until_ms {
            text.push_str(&format!(" until {}", time(until)));
        }
        if let Some(reason) = self.reason.as_deref().filter(|r| !r.is_empty()) {
            text.push_str(&format!(": {reason}"));
        }
        text.chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect()
    }
}

/// UTC epoch ms as RFC 3339 UTC, whole seconds (`2026-11-30T21:00:00Z`).
pub fn instant(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| ms.to_string())
}

/// The pauses in effect, as a daemon or `status` sees them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pauses {
    /// `pause --all`.
    pub all: Option<Mark>,
    /// Per job.
    pub jobs: BTreeMap<String, Mark>,
}

impl Pauses {
    /// From the fields of the pauses hash (tombstones kept out).
    pub fn from_marks(marks: BTreeMap<String, Mark>) -> Pauses {
        let mut pauses = Pauses::default();
        for (field, mark) in marks.into_iter().filter(|(_, mark)| mark.active) {
            if field == ALL {
                pauses.all = Some(mark);
            } else {
                pauses.jobs.insert(field, mark);
            }
        }
        pauses
    }

    /// The pause covering `job` at `at_ms`: its own, else `pause --all`'s;
    /// with `true` when it is `--all`'s.
    pub fn covering(&self, job: &str, at_ms: i64) -> Option<(&Mark, bool)> {
        if let Some(own) = self.jobs.get(job).filter(|mark| mark.covers(at_ms)) {
            return Some((own, false));
        }
        self.all
            .as_ref()
            .filter(|mark| mark.covers(at_ms))
            .map(|mark| (mark, true))
    }
}

/// Parses one stored mark; `None` for anything this version cannot read.
pub fn parse_mark(text: &str) -> Option<Mark> {
    serde_json::from_str(text).ok()
}

/// Hash fields -> marks, leaving out `~version` and what does not parse.
pub fn parse_marks(fields: BTreeMap<String, String>) -> BTreeMap<String, Mark> {
    fields
        .into_iter()
        .filter(|(field, _)| !field.starts_with('~'))
        .filter_map(|(field, text)| Some((field, parse_mark(&text)?)))
        .collect()
}

/// Every mark of `key` (`{PREFIX}:pauses` or `{PREFIX}:drains`), tombstones included.
pub async fn read_marks(conn: &Conn, key: &str) -> redis::RedisResult<BTreeMap<String, Mark>> {
    let fields: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg(key)
        .query_async(&mut conn.clone())
        .await?;
    Ok(parse_marks(fields))
}

/// The pause covering `job` now (Redis `TIME`), read from every member
/// and merged; with `true` when it is `pause --all`'s. For `trigger`'s
/// note on a paused job.
pub async fn current_pause(
    coordinator: &crate::coordinator::Coordinator,
    prefix: &str,
    job: &str,
) -> redis::RedisResult<Option<(Mark, bool)>> {
    let now_ms = crate::coordinator::coordinator_time_ms(coordinator).await?;
    let key = pauses_key(prefix);
    let key = key.as_str();
    let lists = coordinator
        .on_members(|conn| async move { read_marks(&conn, key).await })
        .await?;
    let pauses = Pauses::from_marks(merge(lists));
    Ok(pauses
        .covering(job, now_ms)
        .map(|(mark, all)| (mark.clone(), all)))
}

/// What `trigger JOB` (and `trigger JOB --fleet`) says when a pause covers
/// JOB: the run goes ahead (the operator asked for it), the scheduled
/// occurrences stay paused. One line ([`Mark::describe`]).
pub fn paused_trigger_note(job: &str, mark: &Mark, all: bool) -> String {
    let (scope, resume) = if all {
        (" (pause --all)", "solocron resume --all".to_string())
    } else {
        ("", format!("solocron resume {job}"))
    };
    let until = if mark.until_ms.is_some() {
        format!("until the pause ends or `{resume}`")
    } else {
        format!("until `{resume}`")
    };
    format!(
        "note: job `{job}` is paused{scope} {}; this manual run goes ahead, but its \
         scheduled occurrences stay paused (each recorded `paused`) {until}\n",
        mark.describe()
    )
}

/// Per field, the mark with the newest stamp among several masters' lists.
pub fn merge(lists: Vec<BTreeMap<String, Mark>>) -> BTreeMap<String, Mark> {
    let mut merged: BTreeMap<String, Mark> = BTreeMap::new();
    for (field, mark) in lists.into_iter().flatten() {
        match merged.get(&field) {
            Some(known) if known.at_ms >= mark.at_ms => {}
            _ => {
                merged.insert(field, mark);
            }
        }
    }
    merged
}

/// Writes `marks` (field -> mark) into `key` in one script: each stamp is
/// raised above the field's current one if needed (so the write wins the
/// merge), `~version` is bumped, and marks that ended before `now -
/// PRUNE_AFTER` are dropped. Returns each field's previous mark, if any.
pub async fn write_marks(
    conn: &Conn,
    key: &str,
    marks: &[(String, Mark)],
    audit: Option<(&str, &audit::Record)>,
) -> redis::RedisResult<Vec<Option<Mark>>> {
    let mut invocation = scripts::WRITE.prepare_invoke();
    let (audit_key, record) = match audit {
        Some((prefix, record)) => (crate::keys::audit_key(prefix), record.to_json()),
        // Without a record the key is never written; it only has to be
        // in the marks' slot.
        None => (format!("{key}:no-audit"), String::new()),
    };
    invocation
        .key(key)
        .key(audit_key)
        .arg(u64::try_from(PRUNE_AFTER.as_millis()).unwrap_or(u64::MAX))
        .arg(record)
        .arg(audit::MAX);
    for (field, mark) in marks {
        let json = serde_json::to_string(mark).map_err(|err| {
            redis::RedisError::from((
                redis::ErrorKind::Client,
                "cannot encode a control mark",
                err.to_string(),
            ))
        })?;
        invocation.arg(field).arg(json);
    }
    let previous: Vec<String> = invocation.invoke_async(&mut conn.clone()).await?;
    Ok(previous.iter().map(|text| parse_mark(text)).collect())
}

/// What one daemon reads every [`REFRESH`] from one member, in one round trip.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// `~version` of the pauses hash.
    pub version: String,
    /// The pauses hash, when its version differs from the one passed in.
    pub pauses: Option<BTreeMap<String, Mark>>,
    /// This node's drain mark, if any (tombstones too).
    pub drain: Option<Mark>,
    /// Requests waiting to be taken, oldest first, raw (see [`requests`]).
    pub pending: Vec<String>,
    /// What the node's liveness beat answered, if one was sent.
    pub beaten: Option<Beaten>,
    /// The oldest occurrences declined at `max_running`, newest first, raw
    /// (see [`overflow`]); read with the requests.
    pub overflowed: Vec<String>,
    /// The operators' aborts, by job ([`aborts`]).
    pub aborts: BTreeMap<String, aborts::AbortMark>,
}

/// Reads the controls for `node` from one member: the pauses if their
/// version is not `known_version`, the node's drain, and with `pending_max
/// > 0` up to that many waiting requests (stale ones are dropped there).
///
/// Every daemon makes this read every second, so it is the fleet's most
/// frequent call after the claims: one pipeline of plain reads (`HGET` of
/// the pauses' `~version`, `HGET` of the node's drain, with requests wanted
/// `LRANGE` and `TIME`) and, with `beat`, the node's liveness beat (one
/// small script and the drains' `~version`, [`crate::registry::alive`]).
/// Only a changed version costs a second round trip (`HGETALL`, whose own
/// `~version` field is the version taken, so the two always match), and
/// only stale requests a write (`LREM`, rare: their CLI gave up a minute
/// ago).
pub async fn snapshot(
    conn: &Conn,
    prefix: &str,
    node: &str,
    known_version: &str,
    pending_max: usize,
    beat: Option<&Beat<'_>>,
) -> redis::RedisResult<Snapshot> {
    let mut conn = conn.clone();
    let requests_key = requests_key(prefix);
    let mut pipe = redis::pipe();
    pipe.hget(pauses_key(prefix), "~version")
        .hget(drains_key(prefix), node)
        .hgetall(crate::keys::aborts_key(prefix));
    if pending_max > 0 {
        let from = -i64::try_from(pending_max).unwrap_or(i64::MAX);
        pipe.lrange(&requests_key, from as isize, -1)
            .cmd("TIME")
            .lrange(overflow_key(prefix), -overflow::LOOKED_AT, -1);
    }
    if let Some(beat) = beat {
        beat.add_to(&mut pipe);
    }
    let mut sent = pipe.query_async::<Vec<redis::Value>>(&mut conn).await;
    if beat.is_some()
        && let Err(err) = &sent
        && err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
    {
        Beat::load(&conn).await?;
        sent = pipe.query_async::<Vec<redis::Value>>(&mut conn).await;
    }
    let mut values = sent?.into_iter();
    let mut next = || values.next().unwrap_or(redis::Value::Nil);
    let version: Option<String> = redis::from_redis_value(next())?;
    let drain: Option<String> = redis::from_redis_value(next())?;
    let aborts: BTreeMap<String, String> = redis::from_redis_value(next())?;
    let (listed, now_ms, overflowed): (Vec<String>, i64, Vec<String>) = if pending_max > 0 {
        let listed: Vec<String> = redis::from_redis_value(next())?;
        let (secs, micros): (i64, i64) = redis::from_redis_value(next())?;
        let overflowed: Vec<String> = redis::from_redis_value(next())?;
        (
            listed,
            secs.saturating_mul(1000).saturating_add(micros / 1000),
            overflowed,
        )
    } else {
        (Vec::new(), 0, Vec::new())
    };
    let beaten = match beat {
        Some(_) => Some(Beat::read(&mut next)?),
        None => None,
    };
    let mut version = version.unwrap_or_else(|| "0".to_string());
    let pauses = if version == known_version {
        None
    } else {
        let fields: BTreeMap<String, String> = redis::cmd("HGETALL")
            .arg(pauses_key(prefix))
            .query_async(&mut conn)
            .await?;
        version = fields
            .get("~version")
            .cloned()
            .unwrap_or_else(|| "0".to_string());
        Some(parse_marks(fields))
    };
    let stale_after = i64::try_from(requests::STALE_AFTER_MS).unwrap_or(i64::MAX);
    let (stale, pending): (Vec<String>, Vec<String>) = listed.into_iter().partition(|raw| {
        serde_json::from_str::<serde_json::Value>(raw)
            .ok()
            .and_then(|request| request.get("deadline_ms")?.as_f64())
            .is_none_or(|deadline| deadline + (stale_after as f64) < (now_ms as f64))
    });
    // A declined occurrence past its deadline is nobody's to take.
    let (late, overflowed): (Vec<String>, Vec<String>) = overflowed.into_iter().partition(|raw| {
        overflow::Overflowed::from_raw(raw).is_none_or(|entry| entry.deadline_ms < now_ms)
    });
    // Both kinds of leftovers dropped in one round trip.
    if !stale.is_empty() || !late.is_empty() {
        let overflow_key = overflow_key(prefix);
        let mut drop = redis::pipe();
        for raw in &stale {
            drop.lrem(&requests_key, 1, raw).ignore();
        }
        for raw in &late {
            drop.lrem(&overflow_key, 1, raw).ignore();
        }
        let () = drop.query_async(&mut conn).await?;
    }
    Ok(Snapshot {
        version,
        pauses,
        drain: drain.as_deref().and_then(parse_mark),
        pending: pending.into_iter().rev().collect(),
        beaten,
        overflowed,
        aborts: aborts::parse(aborts),
    })
}

/// `$USER@host` (or the name of this process's uid, or `uid N`): who a
/// pause or drain is by.
pub fn who() -> String {
    let user = ["USER", "LOGNAME"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
        .map(|user| user.trim().to_string())
        .unwrap_or_else(user_of_process);
    let host = hostname::get()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown-host".to_string());
    format!("{user}@{host}")
}

/// The user name of this process's uid (from `/etc/passwd`), or `uid N`.
fn user_of_process() -> String {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(uid) = std::fs::metadata("/proc/self").map(|meta| meta.uid()) else {
        return "unknown".to_string();
    };
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|passwd| {
            passwd.lines().find_map(|line| {
                let mut fields = line.split(':');
                let name = fields.next()?;
                (fields.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
            })
        })
        .unwrap_or_else(|| format!("uid {uid}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(at_ms: i64, active: bool) -> Mark {
        Mark {
            at_ms,
            active,
            by: "ops@laptop".into(),
            since_ms: at_ms,
            until_ms: None,
            from_ms: None,
            reason: None,
        }
    }

    #[test]
    fn a_booked_pause_covers_its_window_only() {
        let booked = Mark {
            from_ms: Some(1_000),
            until_ms: Some(2_000),
            ..mark(10, true)
        };
        assert!(!booked.covers(999) && booked.covers(1_000) && booked.covers(1_999));
        assert!(!booked.covers(2_000));
        assert!(booked.booked_after(999) && !booked.booked_after(1_000));
    }

    #[test]
    fn the_newest_stamp_wins_the_merge_so_a_stale_master_cannot_bring_a_pause_back() {
        let stale = BTreeMap::from([("report".to_string(), mark(100, true))]);
        let fresh = BTreeMap::from([("report".to_string(), mark(200, false))]);
        let merged = merge(vec![stale.clone(), fresh.clone()]);
        assert!(!merged["report"].active);
        let merged = merge(vec![fresh, stale]);
        assert!(!merged["report"].active);
        assert!(Pauses::from_marks(merged).jobs.is_empty());
    }

    #[test]
    fn a_pause_covers_occurrences_before_its_end_and_its_own_beats_all() {
        let mut timed = mark(100, true);
        timed.until_ms = Some(5_000);
        timed.reason = Some("migration".into());
        let pauses = Pauses::from_marks(BTreeMap::from([
            ("report".to_string(), timed),
            (ALL.to_string(), mark(50, true)),
        ]));
        assert_eq!(
            pauses.covering("report", 4_999).map(|(_, all)| all),
            Some(false)
        );
        // Past its own end, `--all` still covers it.
        assert_eq!(
            pauses.covering("report", 5_000).map(|(_, all)| all),
            Some(true)
        );
        assert_eq!(pauses.covering("other", 1).map(|(_, all)| all), Some(true));
        let text = pauses.jobs["report"].describe();
        assert!(
            text.starts_with(
                "by ops@laptop since 1970-01-01T00:00:00Z until 1970-01-01T00:00:05Z: migration"
            ),
            "{text}"
        );
    }

    #[test]
    fn stored_marks_read_back_and_junk_is_ignored() {
        let text = serde_json::to_string(&mark(7, true)).expect("encodes");
        let fields = BTreeMap::from([
            ("a".to_string(), text),
            ("b".to_string(), "not json".to_string()),
            ("~version".to_string(), "3".to_string()),
        ]);
        let marks = parse_marks(fields);
        assert_eq!(marks.len(), 1);
        assert_eq!(marks["a"], mark(7, true));
        // What the Lua side writes back (cjson, null for a missing end).
        let lua =
            r#"{"at_ms":8,"active":true,"by":"x@y","since_ms":8,"until_ms":null,"reason":null}"#;
        assert_eq!(parse_mark(lua).map(|m| m.at_ms), Some(8));
    }
}
