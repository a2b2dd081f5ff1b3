//! Which node ran which occurrence: one entry per decision in a per-job
//! Redis stream (`{PREFIX:JOB}:history`), capped near `history_max`.
//!
//! Entries are written inside the release script (run finished) and the
//! claim script (skipped for overlap), so a decision and its record are one
//! atomic step. Times are stored as UTC epoch milliseconds; readers format them.
//!
//! [`read`] reads them back, newest occurrence first, and [`merge`] makes
//! the histories of several Redlock masters one; `solocron history` and
//! the daemon's per-job gauges both use them. The job name is not stored
//! in the entry: it is the stream's job, carried by [`Recorded`].

pub mod merge;
pub mod read;

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use crate::exec::Report;
use crate::outcome::Outcome;

/// The word `--outcome` takes for every bad outcome ([`Entry::is_bad`]).
pub const BAD: &str = "bad";

/// Outcomes a newer daemon may write that are not bad: an occurrence a
/// calendar excludes is meant not to run.
const NEWER_NOT_BAD: [&str; 1] = ["excluded"];

/// One decision about one occurrence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `SOLOCRON_OCCURRENCE` as the run saw it.
    pub occurrence: String,
    pub node: String,
    pub fence: u64,
    /// How it ended, as written: the word of an [`Outcome`] (any of
    /// [`Outcome::ALL`]), or of an outcome a newer version wrote, kept and shown as it
    /// is ([`Entry::known_outcome`] is `None` for it).
    pub outcome: String,
    pub exit_code: Option<i32>,
    pub http_status: Option<u16>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// How long the run took; `None` for decisions that ran nothing
    /// (`skipped`, `paused`, `missed`) and for `abandoned` (nobody saw the
    /// run end).
    pub duration_ms: Option<u64>,
    /// Why it failed to start, etc. Never holds secrets.
    pub error: Option<String>,
    /// The last bytes (at most 4 KiB) the run printed on stdout and stderr.
    pub output_tail: Option<String>,
    /// 1, 2, … for a run and its retries; `None` where not applicable.
    pub attempt: Option<u32>,
    /// When the next attempt of this occurrence may start (this one failed
    /// and the job has retries left); `None` for a last attempt.
    pub retry_at: Option<DateTime<Utc>>,
    /// Who ran it by hand (`user@host`): a `trigger` or `trigger --fleet`
    /// run; `None` for a scheduled one.
    pub by: Option<String>,
}

impl Entry {
    /// The [`Outcome`] its word names; `None` for a word this version
    /// does not know.
    pub fn known_outcome(&self) -> Option<Outcome> {
        Outcome::parse(&self.outcome)
    }

    /// Whether it needs a look (`--outcome bad`): its outcome
    /// [`Outcome::is_bad`], or is a word this version does not know (a
    /// newer daemon's) other than `excluded`.
    pub fn is_bad(&self) -> bool {
        match self.known_outcome() {
            Some(outcome) => outcome.is_bad(),
            None => !NEWER_NOT_BAD.contains(&self.outcome.as_str()),
        }
    }

    /// The entry for a finished run.
    pub fn from_report(occurrence: &str, node: &str, fence: u64, report: &Report) -> Entry {
        Entry {
            occurrence: occurrence.to_string(),
            node: node.to_string(),
            fence,
            outcome: report.outcome.as_str().to_string(),
            exit_code: report.exit_code,
            http_status: report.http_status,
            started_at: report.started_at,
            finished_at: report.finished_at,
            duration_ms: Some(u64::try_from(report.duration.as_millis()).unwrap_or(u64::MAX)),
            error: report.error.clone(),
            output_tail: None,
            attempt: None,
            retry_at: None,
            by: None,
        }
    }

    /// Stream fields, `occurrence` first; absent values are left out.
    pub fn to_fields(&self) -> Vec<(&'static str, String)> {
        let mut fields = vec![
            ("occurrence", self.occurrence.clone()),
            ("node", self.node.clone()),
            ("fence", self.fence.to_string()),
            ("outcome", self.outcome.clone()),
            ("started_at", self.started_at.timestamp_millis().to_string()),
            (
                "finished_at",
                self.finished_at.timestamp_millis().to_string(),
            ),
        ];
        if let Some(duration) = self.duration_ms {
            fields.push(("duration_ms", duration.to_string()));
        }
        if let Some(code) = self.exit_code {
            fields.push(("exit_code", code.to_string()));
        }
        if let Some(status) = self.http_status {
            fields.push(("http_status", status.to_string()));
        }
        if let Some(error) = &self.error {
            fields.push(("error", error.clone()));
        }
        if let Some(tail) = &self.output_tail {
            fields.push(("output_tail", tail.clone()));
        }
        if let Some(attempt) = self.attempt {
            fields.push(("attempt", attempt.to_string()));
        }
        if let Some(at) = self.retry_at {
            fields.push(("retry_at", at.timestamp_millis().to_string()));
        }
        if let Some(by) = &self.by {
            fields.push(("by", by.clone()));
        }
        fields
    }

    /// The entry stored as stream `fields`; `appended_ms` (the stream id's
    /// time) stands in for missing times. `None` if `occurrence` or
    /// `outcome` is missing: not an entry this program wrote.
    pub fn from_fields(fields: &HashMap<String, String>, appended_ms: i64) -> Option<Entry> {
        let text = |key: &str| fields.get(key).filter(|value| !value.is_empty()).cloned();
        let time = |key: &str| {
            fields
                .get(key)
                .and_then(|value| value.parse::<i64>().ok())
                .and_then(DateTime::from_timestamp_millis)
                .or_else(|| DateTime::from_timestamp_millis(appended_ms))
                .unwrap_or_default()
        };
        Some(Entry {
            occurrence: text("occurrence")?,
            node: text("node").unwrap_or_default(),
            fence: fields
                .get("fence")
                .and_then(|f| f.parse().ok())
                .unwrap_or(0),
            outcome: text("outcome")?,
            exit_code: fields.get("exit_code").and_then(|c| c.parse().ok()),
            http_status: fields.get("http_status").and_then(|s| s.parse().ok()),
            started_at: time("started_at"),
            finished_at: time("finished_at"),
            duration_ms: fields.get("duration_ms").and_then(|d| d.parse().ok()),
            error: text("error"),
            output_tail: text("output_tail"),
            attempt: fields.get("attempt").and_then(|a| a.parse().ok()),
            retry_at: fields
                .get("retry_at")
                .and_then(|ms| ms.parse::<i64>().ok())
                .and_then(DateTime::from_timestamp_millis),
            by: text("by"),
        })
    }
}

/// An entry read back from the stream of `job`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The job whose stream holds it.
    pub job: String,
    /// The stream id (`MS-SEQ`, Redis time of the append).
    pub id: String,
    pub entry: Entry,
}

impl Recorded {
    /// Redis time of the append, UTC epoch ms (the stream id's first part).
    pub fn appended_ms(&self) -> i64 {
        stream_id_ms(&self.id)
    }
}

fn stream_id_ms(id: &str) -> i64 {
    id.split('-')
        .next()
        .and_then(|ms| ms.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_fields_read_back_as_the_same_entry() {
        let at = DateTime::from_timestamp_millis(1_796_072_400_250).expect("valid");
        let entry = Entry {
            occurrence: "2026-11-30T21:00:00Z".into(),
            node: "web-2".into(),
            fence: 1_796_072_400_000_123,
            outcome: "failed".into(),
            exit_code: Some(3),
            http_status: None,
            started_at: at,
            finished_at: at + chrono::TimeDelta::milliseconds(41),
            duration_ms: Some(41),
            error: None,
            output_tail: Some("done\n".into()),
            attempt: Some(1),
            retry_at: Some(at + chrono::TimeDelta::seconds(30)),
            by: None,
        };
        let fields: HashMap<String, String> = entry
            .to_fields()
            .into_iter()
            .map(|(key, value)| (key.to_string(), value))
            .collect();
        assert_eq!(Entry::from_fields(&fields, 0), Some(entry));
    }

    #[test]
    fn a_skip_has_no_duration_and_missing_times_come_from_the_stream_id() {
        let fields: HashMap<String, String> = [
            ("occurrence", "2026-11-30T21:00:00Z"),
            ("node", "web-1"),
            ("fence", "17"),
            ("outcome", "skipped"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let entry = Entry::from_fields(&fields, 1_796_072_400_250).expect("an entry");
        assert_eq!(entry.duration_ms, None);
        assert_eq!(entry.finished_at.timestamp_millis(), 1_796_072_400_250);
        assert_eq!(Entry::from_fields(&HashMap::new(), 0), None);
    }

    #[test]
    fn an_outcome_this_version_does_not_know_is_kept_as_written() {
        let read = |outcome: &str| {
            let fields: HashMap<String, String> =
                [("occurrence", "2026-11-30T21:00:00Z"), ("outcome", outcome)]
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
            Entry::from_fields(&fields, 0).expect("an entry")
        };
        let newer = read("cancelled");
        assert_eq!(newer.outcome, "cancelled");
        assert_eq!(newer.known_outcome(), None);
        assert!(newer.is_bad());
        assert!(!read("excluded").is_bad());
        let missed = read("missed");
        assert_eq!(missed.known_outcome(), Some(Outcome::Missed));
        assert!(missed.is_bad());
        assert!(!read("paused").is_bad());
    }
}
