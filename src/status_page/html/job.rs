//! `/jobs/NAME`: one job: its schedule, next occurrence, lock or last
//! outcome and pause (when this node's config has it), then its recent
//! history, newest first, one block per entry with the node, fence,
//! outcome, exit code or HTTP status, duration, who ran it by hand, and the
//! error and output tail in `<pre>` (escaped, masked when recorded).
//!
//! Failure model: pure rendering of what `inspect` read; cannot fail.

use maud::{Markup, html};

use super::index::{next, schedule, state};
use super::{Shown, badge, layout, meta};
use crate::history::{Entry, Recorded};
use crate::inspect::format;
use crate::inspect::status::JobStatus;
use crate::inspect::status::controls::describe_pause;
use crate::status_page::params::query_value;

/// What the job page shows.
pub struct JobPage<'a> {
    pub name: &'a str,
    /// `None`: not in this node's config (a removed job with a history,
    /// or one only other nodes run).
    pub status: Option<&'a JobStatus>,
    pub history: &'a [Recorded],
    /// The limit asked for, and whether older entries match too.
    pub limit: usize,
    pub cut: bool,
}

/// The page of one job.
pub fn page(shown: &Shown<'_>, job: &JobPage<'_>) -> Markup {
    let name = job.name;
    let json = format!("{}history.json?job={}", shown.home, query_value(name));
    let body = html! {
        @match job.status {
            Some(status) => (facts(status, shown.now_ms)),
            None => p.mute { "Not in this node's config; its history is shown." },
        }
        h2 { "Recent history" }
        @if job.history.is_empty() {
            p.mute { "No history yet." }
        }
        @for recorded in job.history {
            (entry(&recorded.entry))
        }
        @if job.cut {
            p { "Older entries match too: "
                a href={ "?limit=" (job.limit.saturating_mul(4).min(super::super::handlers::JOB_MAX_LIMIT)) } { "show more" }
                ", or " a href=(json) { "history.json" } "." }
        }
    };
    let extra = html! { a href=(shown.home) { "All jobs" } "." };
    layout(
        &format!("Job {name}"),
        shown.home,
        meta(shown, extra),
        body,
        false,
    )
}

fn facts(status: &JobStatus, now_ms: i64) -> Markup {
    html! {
        dl.facts {
            dt { "Schedule" } dd { (schedule(status)) }
            dt { "Next" } dd { (next(status, now_ms)) }
            dt { "Now / last" } dd { (state(status, now_ms)) }
            @if let Some(held) = &status.held {
                dt { "Lock" } dd {
                    "held by " span.mono { (held.node) }
                    @if let Some(fence) = held.fence { ", fence " span.mono { (fence) } }
                    @if let Some(occurrence) = &held.occurrence { ", occurrence " (occurrence) }
                    @if let Some(ttl) = held.ttl_ms { ", " (format::duration_ms(ttl)) " left" }
                }
            }
            @if let Some((mark, all)) = &status.paused {
                dt { "Paused" } dd.warn { (describe_pause(mark, *all)) }
            }
        }
    }
}

fn entry(entry: &Entry) -> Markup {
    html! {
        article.entry {
            h3 { (badge(&entry.outcome)) " " (entry.occurrence) }
            dl.facts {
                dt { "Node" } dd.mono { (entry.node) }
                @if entry.fence > 0 { dt { "Fence" } dd.mono { (entry.fence) } }
                @if let Some(attempt) = entry.attempt { dt { "Attempt" } dd { (attempt) } }
                dt { "Exit/HTTP" } dd { (exit_or_http(entry)) }
                dt { "Duration" } dd { (duration(entry)) }
                dt { "Started" } dd { (format::millis(entry.started_at)) }
                dt { "Finished" } dd { (format::millis(entry.finished_at)) }
                @if let Some(by) = &entry.by { dt { "Run by hand by" } dd { (by) } }
            }
            @if let Some(error) = &entry.error {
                div.mute { "Error" }
                pre.error { (error) }
            }
            @if let Some(tail) = &entry.output_tail {
                div.mute { "Output (its last bytes)" }
                pre.tail { (tail) }
            }
        }
    }
}

/// `exit 3`, `http 502`, or `-`.
pub fn exit_or_http(entry: &Entry) -> String {
    match (entry.exit_code, entry.http_status) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(status)) => format!("http {status}"),
        (None, None) => format::NONE.to_string(),
    }
}

/// How long the run took, or `-`.
pub fn duration(entry: &Entry) -> String {
    entry.duration_ms.map_or_else(
        || format::NONE.to_string(),
        |ms| format::duration_ms(i64::try_from(ms).unwrap_or(i64::MAX)),
    )
}
