//! `solocron history`: recent decisions, newest occurrence first.
//!
//! Reads the streams of one job, or of every job (the config's and every
//! job a live node runs), in pipelined rounds ([`read`]). Redis keeps no
//! list of the jobs that ever ran, so a job removed or renamed since (and
//! run by no live node) is left out of the table; a note on stderr says
//! so, and naming the job shows its history. `--outcome bad` keeps every
//! bad outcome ([`Entry::is_bad`](crate::history::Entry::is_bad)). When
//! `--limit` cuts the list, a note on stderr says so (the `--json` output
//! stays the array alone).
//! `--since` and `--until` bound the occurrence's instant (an RFC 3339
//! instant, or a duration back from Redis `TIME`, so "the last hour" means
//! the same from every server), so a `missed` entry written late is found
//! under its occurrence, not under the time it was written.
//!
//! A JOB is accepted if the config has it, a live node runs it, or its
//! stream exists (a job removed from the config keeps its history); any
//! other name is a typo, refused with the closest known name.

mod job;
mod render;

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::Source;
use super::format;
use super::source::{closest, note};
use crate::history::{merge, read};
use crate::outcome::Outcome;

pub use crate::history::BAD;
pub use crate::history::read::Filter;
pub use job::UnknownJob;
pub use render::{render, render_json};

/// Parses one `--outcome` value: an outcome name or [`BAD`]; `Err` names
/// the closest one and lists them all (the command then exits 2).
pub fn parse_outcome(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text == BAD || Outcome::parse(text).is_some() {
        return Ok(text.to_string());
    }
    let outcomes = Outcome::ALL.map(Outcome::as_str);
    let hint = closest(text, outcomes.into_iter().chain([BAD]))
        .map(|near| format!("did you mean `{near}`? "))
        .unwrap_or_default();
    let good: Vec<&str> = Outcome::ALL
        .into_iter()
        .filter(|outcome| !outcome.is_bad())
        .map(Outcome::as_str)
        .collect();
    Err(format!(
        "unknown outcome `{text}`; {hint}the outcomes are {}, and `{BAD}` for every one but {}",
        outcomes.join(", "),
        good.join(", ")
    ))
}

/// One end of a `--since`/`--until` window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeBound {
    /// An instant (RFC 3339).
    At(DateTime<Utc>),
    /// This long before Redis `TIME`.
    Ago(Duration),
}

impl TimeBound {
    /// Parses an RFC 3339 instant (`2026-11-30T21:00:00Z`) or a duration
    /// (`90s`, `2h`, `1d`); `Err` is a message for the user.
    pub fn parse(text: &str) -> Result<TimeBound, String> {
        let text = text.trim();
        if let Ok(at) = DateTime::parse_from_rfc3339(text) {
            return Ok(TimeBound::At(at.with_timezone(&Utc)));
        }
        humantime::parse_duration(text)
            .map(TimeBound::Ago)
            .map_err(|_| {
                format!(
                    "`{text}` is neither an RFC 3339 instant (2026-11-30T21:00:00Z, \
                     2026-12-01T02:00:00+05:00) nor a duration back from now (90s, 2h, 1d)"
                )
            })
    }

    /// The instant as UTC epoch ms, `now_ms` being Redis `TIME`.
    pub fn resolve(self, now_ms: i64) -> i64 {
        match self {
            TimeBound::At(at) => at.timestamp_millis(),
            TimeBound::Ago(ago) => {
                now_ms.saturating_sub(i64::try_from(ago.as_millis()).unwrap_or(i64::MAX))
            }
        }
    }
}

/// What `solocron history` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryQuery {
    /// Only this job.
    pub job: Option<String>,
    /// At most this many entries in all.
    pub limit: usize,
    /// Only occurrences at or after this.
    pub since: Option<TimeBound>,
    /// Only occurrences at or before this.
    pub until: Option<TimeBound>,
    /// Only entries of these nodes (empty: all).
    pub nodes: Vec<String>,
    /// Only entries with these outcomes (empty: all).
    pub outcomes: Vec<String>,
    /// One JSON array instead of a table.
    pub json: bool,
}

/// A request that is wrong as asked (`--since` after `--until`): the
/// command exits 2, as for the usage errors the argument parser finds.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// `Err` if `--since` lies after `--until` once both are resolved against
/// `now_ms` (Redis `TIME`).
fn check_window(query: &HistoryQuery, now_ms: i64) -> Result<(), UsageError> {
    let (Some(since), Some(until)) = (query.since, query.until) else {
        return Ok(());
    };
    let (since_ms, until_ms) = (since.resolve(now_ms), until.resolve(now_ms));
    if since_ms <= until_ms {
        return Ok(());
    }
    let hint = match (since, until) {
        (TimeBound::Ago(_), TimeBound::Ago(_)) => {
            "; durations count back from now, so the older end is the longer one \
             (`--since 2h --until 1h`)"
        }
        _ => "; swap them",
    };
    Err(UsageError(format!(
        "`--since` ({}) is after `--until` ({}): no occurrence can match{hint}",
        instant(since_ms),
        instant(until_ms)
    )))
}

/// What one history read found ([`read_history`]).
pub struct Found {
    /// The newest entries that match, at most the query's limit.
    pub entries: Vec<crate::history::Recorded>,
    /// Whether the limit cut the list (older entries match too).
    pub cut: bool,
    /// The jobs read.
    pub jobs: Vec<String>,
    /// The filters that applied, resolved against Redis `TIME`.
    pub filter: Filter,
    /// The one job asked for is not in the config (it is read anyway: a
    /// live node runs it or it has a history).
    pub not_in_config: bool,
}

/// Prints the history `query` asks for. `Err`: an unknown JOB (with the
/// closest known name), `--since` after `--until` ([`UsageError`]), Redis
/// unreachable or failed, or stdout gone.
pub async fn history(source: &Source, query: &HistoryQuery) -> anyhow::Result<()> {
    // Two instants, or two durations, compare the same at any "now": that
    // usage error needs no Redis.
    if matches!(
        (query.since, query.until),
        (Some(TimeBound::At(_)), Some(TimeBound::At(_)))
            | (Some(TimeBound::Ago(_)), Some(TimeBound::Ago(_)))
    ) {
        check_window(query, chrono::Utc::now().timestamp_millis())?;
    }
    let (coordinator, now_ms) = super::open(&source.redis).await?;
    let found = read_history(&coordinator, now_ms, source, query).await?;
    if found.not_in_config
        && let (Some(config), Some(job)) = (&source.config, &query.job)
    {
        note(&format!(
            "job `{job}` is not in `{}`; showing its history anyway",
            config.path.display()
        ));
    }
    if query.json {
        return super::print(&render_json(&found.entries));
    }
    if found.entries.is_empty() {
        super::print(&nothing_found(
            source,
            query,
            &found.filter,
            found.jobs.is_empty(),
        ))?;
    } else {
        super::print(&render(&found.entries))?;
    }
    if found.cut {
        note(&format!(
            "showing the newest {} entries; older ones match too: `--limit N` shows more",
            query.limit
        ));
    }
    if query.job.is_none() && !found.jobs.is_empty() {
        note(&format!(
            "{}; a job removed or renamed since keeps its history under its old name: \
             `solocron history OLD-NAME` shows it",
            left_out(source)
        ));
    }
    Ok(())
}

/// Reads the history `query` asks for from `coordinator` at Redis time
/// `now_ms`: what `history` prints and the status page shows. `Err`: an
/// unknown JOB ([`UnknownJob`]), `--since` after `--until`
/// ([`UsageError`]), Redis failed (naming the redacted URL).
pub async fn read_history(
    coordinator: &crate::coordinator::Coordinator,
    now_ms: i64,
    source: &Source,
    query: &HistoryQuery,
) -> anyhow::Result<Found> {
    let redis = &source.redis;
    check_window(query, now_ms)?;
    let filter = Filter {
        since_ms: query.since.map(|bound| bound.resolve(now_ms)),
        until_ms: query.until.map(|bound| bound.resolve(now_ms)),
        nodes: query.nodes.clone(),
        outcomes: query.outcomes.clone(),
    };
    let (jobs, not_in_config) = match &query.job {
        Some(job) => {
            let in_config = job::check(&coordinator.first(), source, job).await?;
            (vec![job.clone()], !in_config)
        }
        // The config's jobs and every live node's: a job renamed or removed
        // in this file but still run by a node is shown too.
        None => (super::known_jobs(coordinator, source).await?, false),
    };
    let names: Vec<&str> = jobs.iter().map(String::as_str).collect();
    // One more than shown: whether `--limit` cut the list.
    let mut entries = read_merged(
        coordinator,
        &redis.key_prefix,
        &names,
        &filter,
        query.limit.saturating_add(1),
    )
    .await
    .map_err(|err| super::redis_failed("cannot read the history from", redis, &err))?;
    let cut = entries.len() > query.limit;
    entries.truncate(query.limit);
    Ok(Found {
        entries,
        cut,
        jobs,
        filter,
        not_in_config,
    })
}

/// Which jobs a `history` without JOB leaves out, for its note.
fn left_out(source: &Source) -> String {
    match &source.config {
        Some(config) => format!(
            "jobs neither in `{}` nor run by a live node are not shown",
            config.path.display()
        ),
        None => "jobs no live node runs are not shown".to_string(),
    }
}

/// The newest entries of `jobs` that `filter` keeps, at most `limit`: one
/// server's as they are; with Redlock every master's, merged to one entry
/// per occurrence ([`merge`]). The node and outcome filters then apply to
/// the merged entries (a skip one master holds for an occurrence that ran
/// is not "a skip"), so each master is read without them, and read again
/// further back while too few entries pass and a master may hold more.
async fn read_merged(
    coordinator: &crate::coordinator::Coordinator,
    prefix: &str,
    jobs: &[&str],
    filter: &Filter,
    limit: usize,
) -> redis::RedisResult<Vec<crate::history::Recorded>> {
    if !coordinator.is_quorum() {
        let conn = coordinator.first();
        return read::read(&conn, prefix, jobs, filter, limit).await;
    }
    let window = Filter {
        nodes: Vec::new(),
        outcomes: Vec::new(),
        ..filter.clone()
    };
    // Twice as many: the entries shown are then judged on every master's.
    let mut reading = limit.saturating_mul(2);
    loop {
        let (window, jobs) = (&window, jobs);
        let lists = coordinator
            .on_members(
                |conn| async move { read::read(&conn, prefix, jobs, window, reading).await },
            )
            .await?;
        let more = lists.iter().any(|list| list.len() >= reading);
        let mut entries: Vec<_> = merge::merge(lists, usize::MAX)
            .into_iter()
            .filter(|recorded| filter.keeps(recorded))
            .collect();
        if entries.len() >= limit || !more || reading >= MAX_READ {
            entries.truncate(limit);
            return Ok(entries);
        }
        reading = reading.saturating_mul(4).min(MAX_READ);
    }
}

/// The most entries read from one master for one `history` (Redlock).
const MAX_READ: usize = 1_000_000;

/// "no history for job `x`" and the filters that applied.
fn nothing_found(source: &Source, query: &HistoryQuery, filter: &Filter, no_jobs: bool) -> String {
    let what = match &query.job {
        Some(job) => format!("job `{job}`"),
        None if no_jobs && source.config.is_some() => "any job: the config has no jobs".to_string(),
        None if no_jobs => format!(
            "any job: no config was read and no live node publishes its jobs under key prefix \
             `{}`; name a JOB, or pass `--config PATH`",
            source.redis.key_prefix
        ),
        None => "any job".to_string(),
    };
    let mut only = Vec::new();
    if let Some(since) = filter.since_ms {
        only.push(format!("occurrences since {}", instant(since)));
    }
    if let Some(until) = filter.until_ms {
        only.push(format!("occurrences until {}", instant(until)));
    }
    if !filter.nodes.is_empty() {
        only.push(format!("node {}", filter.nodes.join(" or ")));
    }
    if !filter.outcomes.is_empty() {
        only.push(format!("outcome {}", filter.outcomes.join(" or ")));
    }
    if only.is_empty() {
        format!("no history for {what}\n")
    } else {
        format!("no history for {what} ({})\n", only.join(", "))
    }
}

fn instant(ms: i64) -> String {
    format::from_ms(ms).map_or_else(|| ms.to_string(), format::secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_is_an_instant_or_a_duration_back_from_redis_time() {
        let now_ms = 1_796_072_400_000;
        let at = TimeBound::parse("2026-12-01T02:00:00+05:00").expect("RFC 3339");
        assert_eq!(at.resolve(now_ms), 1_796_072_400_000);
        let ago = TimeBound::parse("90s").expect("a duration");
        assert_eq!(ago.resolve(now_ms), now_ms - 90_000);
        assert_eq!(
            TimeBound::parse("1d").map(|b| b.resolve(now_ms)),
            Ok(now_ms - 86_400_000)
        );
        let err = TimeBound::parse("yesterday").expect_err("neither");
        assert!(
            err.contains("RFC 3339") && err.contains("duration"),
            "{err}"
        );
    }

    #[test]
    fn the_empty_message_names_the_filters() {
        let source = Source::without_config("redis://127.0.0.1:1/", "solocron");
        let query = HistoryQuery {
            job: Some("tick".into()),
            limit: 20,
            since: None,
            until: None,
            nodes: vec![],
            outcomes: vec![],
            json: false,
        };
        let filter = Filter::default();
        assert_eq!(
            nothing_found(&source, &query, &filter, false),
            "no history for job `tick`\n"
        );
        let filter = Filter {
            since_ms: Some(1_796_072_400_000),
            outcomes: vec!["failed".into(), "timed_out".into()],
            ..Filter::default()
        };
        assert_eq!(
            nothing_found(&source, &query, &filter, false),
            "no history for job `tick` (occurrences since 2026-11-30T21:00:00Z, outcome failed or timed_out)\n"
        );
    }
}
