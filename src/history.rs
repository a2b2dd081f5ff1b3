//! Which node ran which occurrence: one entry per decision in a per-job
//! Redis stream (`{PREFIX:JOB}:history`), capped near `history_max`.
//!
//! Entries are written inside the release script (run finished) and the
//! claim script (skipped for overlap), so a decision and its record are one
//! atomic step. Times are stored as UTC epoch milliseconds; readers format them.

use chrono::{DateTime, Utc};

use crate::exec::Report;

/// One decision about one occurrence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `SOLOCRON_OCCURRENCE` as the run saw it.
    pub occurrence: String,
    pub node: String,
    pub fence: u64,
    /// `succeeded`, `failed`, `timed_out`, `lock_lost`, `interrupted`, `skipped`.
    pub outcome: String,
    pub exit_code: Option<i32>,
    pub http_status: Option<u16>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub duration_ms: u64,
    /// Why it failed to start, etc. Never holds secrets.
    pub error: Option<String>,
}

impl Entry {
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
            duration_ms: u64::try_from(report.duration.as_millis()).unwrap_or(u64::MAX),
            error: report.error.clone(),
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
            ("duration_ms", self.duration_ms.to_string()),
        ];
        if let Some(code) = self.exit_code {
            fields.push(("exit_code", code.to_string()));
        }
        if let Some(status) = self.http_status {
            fields.push(("http_status", status.to_string()));
        }
        if let Some(error) = &self.error {
            fields.push(("error", error.clone()));
        }
        fields
    }
}
