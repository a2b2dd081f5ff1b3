//! `solocron history`: recent decisions, newest first.
//!
//! Reads the streams of one job, or of every job in the config, in one
//! pipelined round trip ([`crate::history::read`]). `--since` becomes a
//! lower bound on the stream ids, so only the recent end of a capped stream
//! is read; the bound is [`SINCE_SLACK`] wider than asked, because ids are
//! Redis time of the append while the cut-off applies to `finished_at`
//! (written by the node, whose clock may differ a little).

use std::time::Duration;

use serde::Serialize;

use super::format::{self, NONE, Table};
use crate::config::Config;
use crate::history::{self as stream, Recorded};

/// How much further back than `--since` the streams are read.
const SINCE_SLACK: Duration = Duration::from_secs(60);
/// Longest error text in the table.
const ERROR_WIDTH: usize = 60;

/// The options of `solocron history`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryArgs {
    /// Only this job (which may be missing from the config: its stream is
    /// read anyway, with a note on stderr).
    pub job: Option<String>,
    /// At most this many entries in all.
    pub limit: usize,
    /// Only entries that finished at most this long ago (Redis time).
    pub since: Option<Duration>,
    /// One JSON array instead of a table.
    pub json: bool,
}

/// Prints the history `args` asks for. `Err`: Redis is unreachable or
/// failed, or stdout is gone.
pub async fn history(config: &Config, args: &HistoryArgs) -> anyhow::Result<()> {
    let jobs: Vec<&str> = match &args.job {
        Some(job) => {
            if !config.jobs.iter().any(|known| &known.name == job) {
                eprintln!(
                    "note: job `{job}` is not in `{}`; showing its history anyway",
                    config.path.display()
                );
            }
            vec![job.as_str()]
        }
        None => config.jobs.iter().map(|job| job.name.as_str()).collect(),
    };
    let (conn, now_ms) = super::open(&config.redis).await?;
    let cutoff_ms = args.since.map(|since| now_ms.saturating_sub(millis(since)));
    let bound = cutoff_ms.map(|cutoff| cutoff.saturating_sub(millis(SINCE_SLACK)));
    let mut entries = stream::read(&conn, &config.redis.key_prefix, &jobs, bound, args.limit)
        .await
        .map_err(|err| super::redis_failed("cannot read the history from", &config.redis, &err))?;
    if let Some(cutoff) = cutoff_ms {
        entries.retain(|recorded| recorded.entry.finished_at.timestamp_millis() >= cutoff);
    }
    if args.json {
        return super::print(&render_json(&entries));
    }
    if entries.is_empty() {
        let what = match &args.job {
            Some(job) => format!("job `{job}`"),
            None if jobs.is_empty() => "any job: the config has no jobs".to_string(),
            None => "any job".to_string(),
        };
        let within = args
            .since
            .map(|since| format!(" within the last {}", humantime::format_duration(since)))
            .unwrap_or_default();
        return super::print(&format!("no history for {what}{within}\n"));
    }
    super::print(&render(&entries))
}

/// Fences start far above 0 (Redis time in µs); 0 means "no fence".
fn fence(fence: u64) -> Option<u64> {
    (fence > 0).then_some(fence)
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// One entry in `history --json`: exactly the keys of SPEC §3, in its order.
#[derive(Serialize)]
struct JsonEntry<'a> {
    job: &'a str,
    occurrence: &'a str,
    node: &'a str,
    /// `None` for a decision without a fence (`missed` records fence 0).
    fence: Option<u64>,
    outcome: &'a str,
    exit_code: Option<i32>,
    http_status: Option<u16>,
    started_at: String,
    finished_at: String,
    duration_ms: Option<u64>,
}

/// `history --json`: one array of objects with exactly the keys of SPEC §3,
/// in its order, times RFC 3339 UTC, `null` where not applicable.
pub fn render_json(entries: &[Recorded]) -> String {
    let array: Vec<JsonEntry<'_>> = entries.iter().map(json_entry).collect();
    // Serializing plain structs of strings and numbers cannot fail.
    let mut text = serde_json::to_string_pretty(&array).unwrap_or_else(|_| "[]".to_string());
    text.push('\n');
    text
}

fn json_entry(recorded: &Recorded) -> JsonEntry<'_> {
    let entry = &recorded.entry;
    JsonEntry {
        job: &recorded.job,
        occurrence: &entry.occurrence,
        node: &entry.node,
        fence: fence(entry.fence),
        outcome: &entry.outcome,
        exit_code: entry.exit_code,
        http_status: entry.http_status,
        started_at: format::millis(entry.started_at),
        finished_at: format::millis(entry.finished_at),
        duration_ms: entry.duration_ms,
    }
}

/// The text table, newest first as given.
pub fn render(entries: &[Recorded]) -> String {
    let mut table = Table::new(&[
        "OCCURRENCE",
        "JOB",
        "NODE",
        "FENCE",
        "OUTCOME",
        "EXIT/HTTP",
        "DURATION",
        "ERROR",
    ]);
    for recorded in entries {
        let entry = &recorded.entry;
        let status = match (entry.exit_code, entry.http_status) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(status)) => format!("http {status}"),
            (None, None) => NONE.to_string(),
        };
        let duration = entry
            .duration_ms
            .map(|ms| format::duration_ms(i64::try_from(ms).unwrap_or(i64::MAX)))
            .unwrap_or_else(|| NONE.to_string());
        table.row(vec![
            entry.occurrence.clone(),
            recorded.job.clone(),
            entry.node.clone(),
            fence(entry.fence).map_or_else(|| NONE.to_string(), |f| f.to_string()),
            entry.outcome.clone(),
            status,
            duration,
            entry
                .error
                .as_deref()
                .map(|error| format::cut(error, ERROR_WIDTH))
                .unwrap_or_default(),
        ]);
    }
    table.render()
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;

    use serde_json::Value;

    use super::*;
    use crate::history::Entry;

    fn skipped() -> Recorded {
        let at = DateTime::from_timestamp_millis(1_796_072_400_250).expect("valid");
        Recorded {
            job: "tick".into(),
            id: "1796072400250-0".into(),
            entry: Entry {
                occurrence: "2026-11-30T21:00:00Z".into(),
                node: "web-2".into(),
                fence: 1_796_072_399_000_123,
                outcome: "skipped".into(),
                exit_code: None,
                http_status: None,
                started_at: at,
                finished_at: at,
                duration_ms: None,
                error: Some("lock held by web-1".into()),
                output_tail: None,
                attempt: None,
            },
        }
    }

    #[test]
    fn json_has_exactly_the_spec_keys_in_order_with_nulls() {
        let text = render_json(&[skipped()]);
        let value: Value = serde_json::from_str(&text).expect("valid JSON");
        let value = &value[0];
        let keys: Vec<&String> = value.as_object().expect("an object").keys().collect();
        let expected = [
            "job",
            "occurrence",
            "node",
            "fence",
            "outcome",
            "exit_code",
            "http_status",
            "started_at",
            "finished_at",
            "duration_ms",
        ];
        let mut sorted = expected;
        sorted.sort();
        assert_eq!(keys, sorted);
        let positions: Vec<usize> = expected
            .iter()
            .map(|key| text.find(&format!("\"{key}\"")).expect("every key"))
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{text}");
        assert_eq!(value["duration_ms"], Value::Null);
        assert_eq!(value["exit_code"], Value::Null);
        assert_eq!(value["finished_at"], "2026-11-30T21:00:00.250Z");
        assert_eq!(value["fence"], 1_796_072_399_000_123_u64);
    }

    #[test]
    fn text_rows_show_dashes_for_what_does_not_apply() {
        let text = render(&[skipped()]);
        let row = text.lines().nth(1).expect("a row");
        assert!(
            row.starts_with("2026-11-30T21:00:00Z  tick  web-2  1796072399000123  skipped"),
            "{row}"
        );
        assert!(row.ends_with("lock held by web-1"), "{row}");
    }
}
