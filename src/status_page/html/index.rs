//! `/`: the whole fleet on one page, in the order a person on call asks:
//! what is wrong (alerts), how many (a summary line), every job (schedule,
//! next occurrence, who runs it now or how it last ended, its pause), the
//! groups, the live nodes (tags, drains, clock offset), config drift, the
//! newest history entries and audit records.
//!
//! Failure model: pure rendering of what `inspect` read; cannot fail.

use maud::{Markup, html};

use super::{Shown, badge, instant, layout, meta, relative, short};
use crate::control::audit::Read as AuditRead;
use crate::history::Recorded;
use crate::inspect::format;
use crate::inspect::status::controls::{describe_pause, every_live_node_drained};
use crate::inspect::status::render::{current_collision, describe_collision};
use crate::inspect::status::{Fleet, JobStatus};
use crate::status_page::params::path_segment;
use crate::tags::Tags;

/// The page of `fleet`, with the newest `history` entries and `audit`
/// records.
pub fn page(shown: &Shown<'_>, fleet: &Fleet, history: &[Recorded], audit: &[AuditRead]) -> Markup {
    let extra = html! {
        "Key prefix " code { (fleet.prefix) } ". Reloads every "
        (super::REFRESH_SECS) " s."
    };
    let body = html! {
        (alerts(fleet))
        (summary(fleet))
        h2 id="jobs" { "Jobs" }
        (jobs(shown, fleet))
        (booked(fleet))
        (groups(fleet))
        h2 id="nodes" { "Nodes" }
        (nodes(fleet))
        (drains(fleet))
        (drift(fleet))
        h2 id="history" { "Newest history" }
        (recent(shown, history))
        h2 id="audit" { "Audit" }
        (audit_table(audit))
    };
    layout(
        "solocron: the fleet",
        shown.home,
        meta(shown, extra),
        body,
        true,
    )
}

fn alerts(fleet: &Fleet) -> Markup {
    html! {
        @if fleet.nodes.is_empty() {
            div.alert { strong { "No live node." } " No daemon published itself under this key \
                prefix in the last 30 s: no job runs." }
        }
        @if every_live_node_drained(&fleet.nodes, &fleet.drains) {
            div.alert { strong { "No job runs:" } " every live node is drained; nothing is \
                claimed until " code { "solocron undrain --node ID" } "." }
        }
        @for node in &fleet.nodes {
            @if let Some(warning) = &node.redis_warning {
                div.alert { "Node " span.mono { (node.node) } ": " (warning) }
            }
            @if let Some(collision) = current_collision(node, fleet.now_ms) {
                div.alert { "Node " span.mono { (node.node) } ": " (describe_collision(collision)) }
            }
        }
        @if !fleet.drift.is_empty() {
            div.alert { strong { "Config drift:" } " live nodes disagree on "
                (fleet.drift.len()) " job(s); see " a href="#drift" { "below" } "." }
        }
    }
}

fn summary(fleet: &Fleet) -> Markup {
    let running = fleet.jobs.iter().filter(|job| job.held.is_some()).count();
    let failed = fleet
        .jobs
        .iter()
        .filter(|job| last_word(job).is_some_and(|word| super::tone(word) == "bad"))
        .count();
    let paused = fleet.jobs.iter().filter(|job| job.paused.is_some()).count();
    html! {
        div.summary {
            span { strong { (fleet.jobs.len()) } " jobs" }
            span.run { strong { (running) } " running" }
            span class=(if failed > 0 { "bad" } else { "mute" }) { strong { (failed) } " failed last" }
            span class=(if paused > 0 { "warn" } else { "mute" }) { strong { (paused) } " paused" }
            span { strong { (fleet.nodes.len()) } " live nodes" }
            @if !fleet.drains.is_empty() {
                span.warn { strong { (fleet.drains.len()) } " drained" }
            }
        }
    }
}

/// How the last decided occurrence ended (`running`, else its decision).
fn last_word(job: &JobStatus) -> Option<&str> {
    job.last
        .as_ref()
        .map(|last| last.outcome.as_deref().unwrap_or(&last.decision))
}

fn jobs(shown: &Shown<'_>, fleet: &Fleet) -> Markup {
    if fleet.jobs.is_empty() {
        return html! { p.mute { "No jobs: the config has none." } };
    }
    html! {
        div.scroll { table.stack {
            thead { tr { th { "Job" } th { "Schedule" } th { "Next" } th { "Now / last" } th { "Paused" } } }
            tbody {
                @for job in &fleet.jobs {
                    tr.job {
                        td data-label="Job" {
                            a href={ (shown.home) "jobs/" (path_segment(&job.job.name)) } { (job.job.name) }
                        }
                        td data-label="Schedule" { (schedule(job)) }
                        td.nowrap data-label="Next" { (next(job, fleet.now_ms)) }
                        td data-label="Now / last" { (state(job, fleet.now_ms)) }
                        td data-label="Paused" {
                            @if let Some((mark, all)) = &job.paused {
                                span.warn { (describe_pause(mark, *all)) }
                            }
                        }
                    }
                }
            }
        } }
    }
}

/// The cron expression and its zone.
pub fn schedule(job: &JobStatus) -> Markup {
    match &job.job.schedule {
        Some(schedule) => html! {
            code { (schedule.expression().trim()) } " " span.mute { (schedule.timezone().name()) }
        },
        None => html! { span.mute { "unknown" } },
    }
}

/// The next occurrence in the job's zone, and how far off its start is.
pub fn next(job: &JobStatus, now_ms: i64) -> Markup {
    let zone = job.job.schedule.as_ref().map(|s| s.timezone());
    match (job.next, zone, job.next_start()) {
        (Some(at), Some(zone), Some(start)) => html! {
            (at.with_timezone(&zone).format("%Y-%m-%d %H:%M:%S %Z"))
            br; span.mute { (relative(start.timestamp_millis(), now_ms)) }
        },
        (_, None, _) => html! { span.mute { "unknown" } },
        _ => html! { span.mute { "never" } },
    }
}

/// Who holds the lock now, or how the last decided occurrence ended.
pub fn state(job: &JobStatus, now_ms: i64) -> Markup {
    if let Some(held) = &job.held {
        return html! {
            (badge("running")) " on " span.mono { (held.node) }
            @if let Some(since) = held.since_ms { " for " (format::duration_ms(now_ms - since)) }
        };
    }
    match &job.last {
        Some(last) => html! {
            (badge(last.outcome.as_deref().unwrap_or(&last.decision)))
            " " span.mute { (last.occurrence) } " on " span.mono { (last.node) }
        },
        None => html! { span.mute { "not decided yet" } },
    }
}

fn booked(fleet: &Fleet) -> Markup {
    if fleet.booked.is_empty() {
        return html! {};
    }
    html! {
        h2 { "Booked pauses" }
        div.scroll { table {
            thead { tr { th { "Job" } th { "Pause" } } }
            @for (job, mark) in &fleet.booked {
                tr {
                    td { @if job == crate::control::ALL { "(every job)" } @else { (job) } }
                    td { "booked " (mark.describe()) }
                }
            }
        } }
    }
}

fn groups(fleet: &Fleet) -> Markup {
    if fleet.groups.is_empty() {
        return html! {};
    }
    html! {
        h2 id="groups" { "Groups" }
        div.scroll { table.stack {
            thead { tr { th { "Group" } th { "Slots in use" } th { "Held by" } th { "Starts" } th { "Waiting" } th { "When full" } } }
            @for status in &fleet.groups {
                tr.group {
                    td data-label="Group" { (status.group.name) }
                    td data-label="Slots in use" {
                        (status.holders.len())
                        @if let Some(max) = status.group.max_running { " of " (max) }
                    }
                    td data-label="Held by" {
                        @for (job, occurrence, node) in &status.holders {
                            div { (job) " " span.mute { (occurrence) } " on " span.mono { (node) } }
                        }
                    }
                    td data-label="Starts" {
                        @if let Some(rate) = status.group.max_starts {
                            (status.starts) " of " (rate.count) " in " (humantime::format_duration(rate.window))
                        }
                    }
                    td data-label="Waiting" { (status.waiting) }
                    td data-label="When full" { (status.group.when_full.as_str()) }
                }
            }
        } }
    }
}

fn nodes(fleet: &Fleet) -> Markup {
    if fleet.nodes.is_empty() {
        return html! { p.mute { "No node published itself in the last 30 s." } };
    }
    let now_ms = fleet.now_ms;
    html! {
        div.scroll { table.stack {
            thead { tr { th { "Node" } th { "Tags" } th { "Running" } th { "Drain" } th { "Version" }
                th { "Config hash" } th { "Clock offset" } th { "Last seen" } th { "Started" } } }
            @for node in &fleet.nodes {
                @let published = fleet.tags.get(&node.node).map_or("", String::as_str);
                @let drain = fleet.drains.iter().find(|drain| drain.node == node.node);
                tr.node {
                    td.mono data-label="Node" { (node.node) }
                    td data-label="Tags" {
                        @for (key, value) in tag_pairs(published, &node.node) {
                            span.chip { (key) "=" (value) }
                        }
                    }
                    td data-label="Running" { @if let Some(running) = node.running { (running) } @else { "-" } }
                    td data-label="Drain" {
                        @if let Some(drain) = drain { span.warn { (drain.state()) } } @else { "-" }
                    }
                    td data-label="Version" { (node.version) }
                    td.mono data-label="Config hash" { (node.config_hash) }
                    td data-label="Clock offset" {
                        @if let Some(ms) = node.clock_offset_ms { (format!("{ms:+}ms")) } @else { "-" }
                    }
                    td.nowrap data-label="Last seen" { (relative(node.updated_at, now_ms)) }
                    td.nowrap data-label="Started" { (relative(node.started_at, now_ms)) }
                }
            }
        } }
    }
}

/// A node's tags as (key, value), `node=<id>` included.
fn tag_pairs(published: &str, node: &str) -> Vec<(String, String)> {
    Tags::from_published(published, node)
        .to_string()
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

fn drains(fleet: &Fleet) -> Markup {
    if fleet.drains.is_empty() {
        return html! {};
    }
    html! {
        h2 id="drains" { "Drained nodes" }
        p.mute { "They claim no new occurrences and take no trigger requests." }
        div.scroll { table.stack {
            thead { tr { th { "Node" } th { "State" } th { "Running" } th { "Since" } th { "By" } th { "Live" } th { "Reason" } } }
            @for drain in &fleet.drains {
                tr.drain {
                    td.mono data-label="Node" { (drain.node) }
                    td data-label="State" { span.warn { (drain.state()) } }
                    td data-label="Running" { (drain.running.len())
                        @if !drain.running.is_empty() { " (" (drain.running.join(", ")) ")" } }
                    td.nowrap data-label="Since" { (instant(drain.mark.since_ms)) }
                    td data-label="By" { (drain.mark.by) }
                    td data-label="Live" { @if drain.live { "yes" } @else { "no" } }
                    td data-label="Reason" { (drain.mark.reason.as_deref().unwrap_or("-")) }
                }
            }
        } }
    }
}

fn drift(fleet: &Fleet) -> Markup {
    if fleet.drift.is_empty() {
        return html! {};
    }
    html! {
        h2 id="drift" { "Config drift" }
        p.mute { "Live nodes disagree on these jobs (fingerprint: nodes)." }
        div.scroll { table {
            thead { tr { th { "Job" } th { "Definitions" } } }
            @for divergence in &fleet.drift {
                tr { td { (divergence.job) } td.mono { (divergence.describe()) } }
            }
        } }
    }
}

fn recent(shown: &Shown<'_>, history: &[Recorded]) -> Markup {
    if history.is_empty() {
        return html! { p.mute { "No history yet." } };
    }
    html! {
        div.scroll { table.stack {
            thead { tr { th { "Occurrence" } th { "Job" } th { "Node" } th { "Outcome" } th { "Exit/HTTP" } th { "Duration" } th { "Error" } } }
            @for recorded in history {
                @let entry = &recorded.entry;
                tr.history {
                    td.nowrap data-label="Occurrence" { (entry.occurrence) }
                    td data-label="Job" { a href={ (shown.home) "jobs/" (path_segment(&recorded.job)) } { (recorded.job) } }
                    td.mono data-label="Node" { (entry.node) }
                    td data-label="Outcome" { (badge(&entry.outcome)) }
                    td data-label="Exit/HTTP" { (super::job::exit_or_http(entry)) }
                    td data-label="Duration" { (super::job::duration(entry)) }
                    td data-label="Error" { (entry.error.as_deref().map(|error| short(error, 160)).unwrap_or_default()) }
                }
            }
        } }
    }
}

fn audit_table(audit: &[AuditRead]) -> Markup {
    if audit.is_empty() {
        return html! { p.mute { "No audit record." } };
    }
    html! {
        div.scroll { table.stack {
            thead { tr { th { "Time (UTC)" } th { "Who" } th { "Action" } th { "Target" } th { "Result" } th { "Reason" } } }
            @for read in audit {
                tr.audit {
                    td.nowrap data-label="Time" { (instant(read.at_ms)) }
                    td data-label="Who" { (read.record.who) }
                    td data-label="Action" { (read.record.action) }
                    td data-label="Target" { (read.record.target) }
                    td data-label="Result" { (read.record.result) }
                    td data-label="Reason" { (short(&read.record.reason, 200)) }
                }
            }
        } }
    }
}
