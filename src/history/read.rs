//! Reading the history streams for `solocron history`: newest occurrence
//! first, filtered, at most `limit` entries in all.
//!
//! A stream is in append order, but the history is shown in occurrence
//! order, and the two differ: a `missed` entry may be appended long after
//! its occurrence, a long run is appended when it ends, after the skips of
//! the occurrences that came later. What bounds the difference is that an
//! entry is never appended before its occurrence (less [`SKEW`]: the node
//! that fired it may run a little ahead of Redis): an entry appended at
//! time A names an occurrence at most A + [`SKEW`]. So each stream is read
//! backwards from its end in pages (`XREVRANGE ... COUNT`, pipelined over
//! all streams; the first page is the stream's share of the limit, doubled
//! each round), and a stream is done once
//! everything still unread in it is appended too early to beat the
//! `limit`-th best entry found so far (or the stream is exhausted, or
//! `--since` is passed). Most streams are done after their first page; a
//! capped stream is never read past its end.

use std::collections::HashMap;

use crate::coordinator::Conn;
use redis::streams::StreamRangeReply;

use super::{BAD, Entry, Recorded};
use crate::keys::JobKeys;

/// How far ahead of Redis `TIME` a node may fire an occurrence.
pub const SKEW: i64 = 60_000;
/// The largest page read from one stream in one round.
const MAX_PAGE: usize = 10_000;

/// Which entries to keep. Times are UTC epoch ms, both ends inclusive, and
/// apply to the occurrence's instant ([`occurrence_ms`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    /// Any of these nodes (empty: any node).
    pub nodes: Vec<String>,
    /// Any of these outcome words (empty: any outcome); [`BAD`] stands
    /// for every bad one ([`Entry::is_bad`]).
    pub outcomes: Vec<String>,
}

impl Filter {
    /// Whether `recorded` passes every filter.
    pub fn keeps(&self, recorded: &Recorded) -> bool {
        let entry = &recorded.entry;
        let at = occurrence_ms(entry);
        self.since_ms.is_none_or(|since| at >= since)
            && self.until_ms.is_none_or(|until| at <= until)
            && (self.nodes.is_empty() || self.nodes.contains(&entry.node))
            && (self.outcomes.is_empty()
                || self
                    .outcomes
                    .iter()
                    .any(|wanted| *wanted == entry.outcome || (wanted == BAD && entry.is_bad())))
    }
}

/// The instant an entry's occurrence names (UTC epoch ms): its RFC 3339
/// name, or the start instant of a manual run (`manual-<RFC 3339>`). An
/// occurrence that is neither (not written by this program) counts as
/// its `started_at`.
pub fn occurrence_ms(entry: &Entry) -> i64 {
    let name = entry.occurrence.as_str();
    let instant = name.strip_prefix("manual-").unwrap_or(name);
    chrono::DateTime::parse_from_rfc3339(instant)
        .map(|at| at.timestamp_millis())
        .unwrap_or_else(|_| entry.started_at.timestamp_millis())
}

/// The order of `history`: occurrence, then end time, then stream id (so
/// the retries of one occurrence show the last attempt first), then job.
fn order_key(recorded: &Recorded) -> (i64, i64, i64, u64, &str) {
    let (ms, seq) = stream_id(&recorded.id).unwrap_or((0, 0));
    (
        occurrence_ms(&recorded.entry),
        recorded.entry.finished_at.timestamp_millis(),
        ms,
        seq,
        recorded.job.as_str(),
    )
}

/// Sorts newest occurrence first.
pub fn sort(entries: &mut [Recorded]) {
    entries.sort_by(|a, b| order_key(b).cmp(&order_key(a)));
}

/// `MS-SEQ` as numbers.
fn stream_id(id: &str) -> Option<(i64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// The id just below `id`, as an inclusive `XREVRANGE` end (Redis 5 has no
/// exclusive ranges); `None` below `0-0`.
fn before(id: &str) -> Option<String> {
    let (ms, seq) = stream_id(id)?;
    match (ms, seq) {
        (_, 1..) => Some(format!("{ms}-{}", seq - 1)),
        (1.., 0) => Some(format!("{}-{}", ms - 1, u64::MAX)),
        _ => None,
    }
}

/// One stream being read backwards.
struct Cursor<'a> {
    job: &'a str,
    key: String,
    /// The inclusive end of the next page (`+`: the newest entry).
    end: String,
    done: bool,
}

/// The newest entries of `jobs` (keys under `prefix`) that `filter` keeps,
/// newest occurrence first, at most `limit` in all; unparsable entries are
/// skipped. One pipelined round trip per round; see the module doc.
pub async fn read(
    conn: &Conn,
    prefix: &str,
    jobs: &[&str],
    filter: &Filter,
    limit: usize,
) -> redis::RedisResult<Vec<Recorded>> {
    if jobs.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    // Entries for occurrences at or after `since` are appended after `since - SKEW`.
    let start = filter.since_ms.map_or_else(
        || "-".to_string(),
        |since| format!("{}-0", since.saturating_sub(SKEW).max(0)),
    );
    let mut cursors: Vec<Cursor<'_>> = jobs
        .iter()
        .map(|job| Cursor {
            job,
            key: JobKeys::new(prefix, job).history,
            end: "+".to_string(),
            done: false,
        })
        .collect();
    let mut kept: Vec<Recorded> = Vec::new();
    // One stream: the whole limit in one round. Many: each stream's share
    // of it first, doubled each round while a stream may still hold a
    // newer entry, so every job's history reads a few entries of each
    // stream, not `limit` of each (an entry holds up to 4 KiB of output).
    let mut page = limit.div_ceil(jobs.len()).clamp(1, MAX_PAGE);
    loop {
        let active: Vec<usize> = (0..cursors.len()).filter(|&i| !cursors[i].done).collect();
        if active.is_empty() {
            break;
        }
        let groups = active
            .iter()
            .map(|&i| {
                let mut pipe = redis::pipe();
                pipe.cmd("XREVRANGE")
                    .arg(&cursors[i].key)
                    .arg(&cursors[i].end)
                    .arg(&start)
                    .arg("COUNT")
                    .arg(page);
                pipe
            })
            .collect();
        let replies = crate::coordinator::query_groups(conn, groups)
            .await?
            .into_iter()
            .map(|mut group| {
                let reply = group.pop().unwrap_or(redis::Value::Nil);
                redis::from_redis_value::<StreamRangeReply>(reply)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut horizons = Vec::with_capacity(active.len());
        for (&i, reply) in active.iter().zip(replies) {
            let cursor = &mut cursors[i];
            let exhausted = reply.ids.len() < page;
            let oldest = reply.ids.last().map(|id| id.id.clone());
            kept.extend(
                reply
                    .ids
                    .into_iter()
                    .filter_map(|raw| recorded(cursor.job, raw))
                    .filter(|recorded| filter.keeps(recorded)),
            );
            match oldest.as_deref().and_then(before) {
                Some(end) if !exhausted => {
                    let appended = oldest
                        .as_deref()
                        .and_then(stream_id)
                        .map_or(0, |(ms, _)| ms);
                    cursor.end = end;
                    horizons.push((i, appended.saturating_add(SKEW)));
                }
                _ => cursor.done = true,
            }
        }
        sort(&mut kept);
        kept.truncate(limit);
        // Everything unread in a stream names an occurrence at most its
        // horizon: done once that cannot beat the `limit`-th entry kept.
        if kept.len() >= limit {
            let threshold = kept.last().map_or(i64::MIN, |r| occurrence_ms(&r.entry));
            for (i, horizon) in horizons {
                if horizon < threshold {
                    cursors[i].done = true;
                }
            }
        }
        page = page.saturating_mul(2).min(MAX_PAGE);
    }
    Ok(kept)
}

fn recorded(job: &str, raw: redis::streams::StreamId) -> Option<Recorded> {
    let appended_ms = stream_id(&raw.id).map_or(0, |(ms, _)| ms);
    let fields: HashMap<String, String> = raw
        .map
        .into_iter()
        .filter_map(|(key, value)| Some((key, redis::from_redis_value(value).ok()?)))
        .collect();
    let entry = Entry::from_fields(&fields, appended_ms)?;
    Some(Recorded {
        job: job.to_string(),
        id: raw.id,
        entry,
    })
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;

    use super::*;

    fn entry(job: &str, occurrence: &str, id: &str, node: &str, outcome: &str) -> Recorded {
        let at = DateTime::from_timestamp_millis(1_796_072_400_000).expect("valid");
        Recorded {
            job: job.into(),
            id: id.into(),
            entry: Entry {
                occurrence: occurrence.into(),
                node: node.into(),
                fence: 1,
                outcome: outcome.into(),
                exit_code: None,
                http_status: None,
                started_at: at,
                finished_at: at,
                duration_ms: None,
                error: None,
                output_tail: None,
                attempt: None,
                retry_at: None,
                by: None,
            },
        }
    }

    #[test]
    fn newest_occurrence_first_whatever_the_append_order() {
        let mut entries = vec![
            entry(
                "a",
                "2026-11-30T21:00:02Z",
                "1796072402000-0",
                "n1",
                "succeeded",
            ),
            entry(
                "a",
                "2026-11-30T21:00:01Z",
                "1796072409000-0",
                "n1",
                "missed",
            ),
            entry(
                "b",
                "manual-2026-11-30T21:00:03.500Z",
                "1796072405000-0",
                "n2",
                "failed",
            ),
            entry(
                "a",
                "2026-11-30T21:00:03Z",
                "1796072403000-0",
                "n1",
                "skipped",
            ),
        ];
        sort(&mut entries);
        let order: Vec<&str> = entries
            .iter()
            .map(|r| r.entry.occurrence.as_str())
            .collect();
        assert_eq!(
            order,
            [
                "manual-2026-11-30T21:00:03.500Z",
                "2026-11-30T21:00:03Z",
                "2026-11-30T21:00:02Z",
                "2026-11-30T21:00:01Z"
            ]
        );
    }

    #[test]
    fn filters_apply_to_the_occurrence_node_and_outcome() {
        let late = entry(
            "a",
            "2026-11-30T21:00:01Z",
            "1796072409000-0",
            "n1",
            "missed",
        );
        let at = occurrence_ms(&late.entry);
        let window = |since, until| Filter {
            since_ms: Some(since),
            until_ms: Some(until),
            ..Filter::default()
        };
        assert!(window(at, at).keeps(&late));
        assert!(!window(at + 1, at + 10).keeps(&late));
        assert!(!window(at - 10, at - 1).keeps(&late));
        let on = |node: &str, outcome: &str| Filter {
            nodes: vec![node.into()],
            outcomes: vec![outcome.into(), "failed".into()],
            ..Filter::default()
        };
        assert!(on("n1", "missed").keeps(&late));
        assert!(!on("n2", "missed").keeps(&late));
        assert!(!on("n1", "succeeded").keeps(&late));
        let bad = Filter {
            outcomes: vec![BAD.into()],
            ..Filter::default()
        };
        for outcome in [
            "failed",
            "timed_out",
            "lock_lost",
            "missed",
            "abandoned",
            "throttled",
        ] {
            let entry = entry("a", "2026-11-30T21:00:01Z", "1-0", "n1", outcome);
            assert!(bad.keeps(&entry), "{outcome} is bad");
        }
        for outcome in ["succeeded", "skipped", "paused", "excluded"] {
            let entry = entry("a", "2026-11-30T21:00:01Z", "1-0", "n1", outcome);
            assert!(!bad.keeps(&entry), "{outcome} is not bad");
        }
    }

    #[test]
    fn the_id_before_steps_back_one_sequence_or_one_millisecond() {
        assert_eq!(
            before("1796072409000-3").as_deref(),
            Some("1796072409000-2")
        );
        assert_eq!(
            before("1796072409000-0").as_deref(),
            Some("1796072408999-18446744073709551615")
        );
        assert_eq!(before("0-0"), None);
        assert_eq!(before("junk"), None);
    }
}
