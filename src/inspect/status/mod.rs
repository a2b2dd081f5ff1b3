//! `solocron status`: per job, who holds the lock, the last decided
//! occurrence and the next one; then the live nodes (with their tags and
//! runs in progress), config drift and node-id collisions; paused jobs
//! and drained nodes ([`controls`]); the config's groups ([`groups`]).
//!
//! The jobs are the config's; without a config, every job some live node
//! runs, with the schedule most of them published (so NEXT is known
//! without the file; a job whose nodes published none shows it unknown).
//! The per-job reads (`GET` and `PTTL` of the lock, `HGETALL` of the state)
//! go out as one pipeline, so a thousand jobs cost one round trip, not three
//! thousand. "Held" means the lock key exists: the state hash keeps the
//! `holder_*` fields after a release, so they only describe a held lock when
//! the lock names the same node.

pub(crate) mod controls;
pub(crate) mod groups;
pub(crate) mod render;

use std::collections::{BTreeMap, HashMap};

use crate::coordinator::{Conn, Coordinator};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::Source;
use super::format;
use super::source::node_jobs;
use crate::keys::JobKeys;
use crate::registry::{self, JobSchedule, NodeInfo};
use crate::schedule::Schedule;

pub use render::Fleet;

/// The lock of a job while someone holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub node: String,
    /// `None` if the state hash does not describe this holder.
    pub fence: Option<u64>,
    /// The occurrence (or `manual-…`) the holder runs.
    pub occurrence: Option<String>,
    /// Redis time the lock was taken, UTC epoch ms.
    pub since_ms: Option<i64>,
    /// `PTTL`: ms until the lock expires unless extended (`None`: no TTL).
    pub ttl_ms: Option<i64>,
}

/// The last decided scheduled occurrence of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Last {
    /// RFC 3339 UTC, as the run saw it.
    pub occurrence: String,
    pub node: String,
    pub fence: Option<u64>,
    /// `claimed`, `skipped` or `missed`.
    pub decision: String,
    /// `running`, then how it ended.
    pub outcome: Option<String>,
}

/// A job to show: from the config, or as the live nodes published it.
#[derive(Debug, Clone)]
pub struct Listed {
    pub name: String,
    /// `None`: unknown (no live node published a schedule for it that
    /// this version can read).
    pub schedule: Option<Schedule>,
    /// The job's splay offset: from the config, or as the live nodes
    /// published it with the schedule (zero from a node too old to).
    pub splay_offset: std::time::Duration,
}

/// What `status` knows about one job.
#[derive(Debug, Clone)]
pub struct JobStatus {
    pub job: Listed,
    /// `None`: the lock is free.
    pub held: Option<Held>,
    /// `None`: no scheduled occurrence decided yet (or the state was lost).
    pub last: Option<Last>,
    /// The first occurrence not yet started, computed locally from the
    /// schedule (with a splay it can be one whose instant has passed and
    /// whose start is still to come); `None` if it never fires again or
    /// the schedule is unknown.
    pub next: Option<DateTime<Utc>>,
    /// The pause in effect now (`true`: `pause --all`), if any.
    pub paused: Option<(crate::control::Mark, bool)>,
}

impl JobStatus {
    /// When the next occurrence starts: its instant plus the splay offset.
    pub fn next_start(&self) -> Option<DateTime<Utc>> {
        self.next
            .map(|at| crate::config::splayed(at, self.job.splay_offset))
    }
}

/// Where the job list came from, for the text form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// The config's jobs, in file order.
    Config,
    /// No config: every job a live node runs, by name.
    LiveNodes,
}

/// Prints the status of every job (the config's, or without a config the
/// live nodes') and the live nodes. With no config and no live node there
/// is nothing to list: that is said plainly, and it is not an error (exit
/// 0: Redis answered). `Err`: Redis is unreachable or failed, or stdout is
/// gone.
pub async fn status(source: &Source, json: bool) -> anyhow::Result<()> {
    let (coordinator, now_ms) = super::open(&source.redis).await?;
    let fleet = read(&coordinator, now_ms, source).await?;
    if json {
        let value = render::to_json(&fleet);
        return super::print(&format!("{value:#}\n"));
    }
    super::print(&render::text(&fleet))
}

/// Reads everything `status` shows from `coordinator` at Redis time
/// `now_ms`: what the CLI prints and the status page renders. `Err`: Redis
/// failed (naming the redacted URL).
pub async fn read(
    coordinator: &Coordinator,
    now_ms: i64,
    source: &Source,
) -> anyhow::Result<Fleet> {
    let redis = &source.redis;
    let failed = |err| super::redis_failed("cannot read the status from", redis, &err);
    let prefix = &redis.key_prefix;
    let nodes = super::live_nodes(coordinator, prefix)
        .await
        .map_err(failed)?;
    let conn = coordinator.first();
    let (listed, listing) = match &source.config {
        Some(config) => {
            let jobs = config
                .jobs
                .iter()
                .map(|job| Listed {
                    name: job.name.clone(),
                    schedule: Some(job.schedule.clone()),
                    splay_offset: job.splay_offset,
                })
                .collect();
            (jobs, Listing::Config)
        }
        None => (
            jobs_of_nodes(&conn, prefix, &nodes).await.map_err(failed)?,
            Listing::LiveNodes,
        ),
    };
    let now = Utc::now();
    let views = coordinator
        .on_members(|conn| {
            let listed = listed.clone();
            async move { read_jobs(&conn, prefix, listed, now).await }
        })
        .await
        .map_err(failed)?;
    let mut jobs = merge_views(views);
    let (pauses, drain_marks) = controls::read(coordinator, prefix).await.map_err(failed)?;
    controls::apply_pauses(&mut jobs, &pauses, now_ms);
    let booked = controls::booked(&pauses, now_ms);
    let drains = controls::drains(&drain_marks, &jobs, &nodes);
    let drift = registry::divergences(&nodes);
    // Tags are shown, never needed: a server that cannot read them (an
    // old ACL, Redlock, where nobody beats) shows none.
    let tags = crate::registry::alive::read_tags(&conn, prefix)
        .await
        .unwrap_or_default();
    let groups = match &source.config {
        Some(config) => groups::read(&conn, prefix, &config.groups, now_ms)
            .await
            .map_err(failed)?,
        None => Vec::new(),
    };
    Ok(Fleet {
        booked,
        groups,
        drains,
        jobs,
        listing,
        prefix: prefix.clone(),
        nodes,
        tags,
        drift,
        now_ms,
    })
}

/// The jobs as several masters (Redlock) see them, one list each in the
/// same order: per job the lock as most masters hold it, and the newest
/// decided occurrence any of them knows.
fn merge_views(mut views: Vec<Vec<JobStatus>>) -> Vec<JobStatus> {
    if views.len() <= 1 {
        return views.pop().unwrap_or_default();
    }
    let mut merged = views.remove(0);
    for (i, status) in merged.iter_mut().enumerate() {
        let others: Vec<&JobStatus> = views.iter().filter_map(|view| view.get(i)).collect();
        let holders = |node: &str| {
            others
                .iter()
                .filter(|other| other.held.as_ref().is_some_and(|held| held.node == node))
                .count()
        };
        let members = others.len() + 1;
        let majority = members / 2 + 1;
        let held_by_most = std::iter::once(status.held.clone())
            .chain(others.iter().map(|other| other.held.clone()))
            .flatten()
            .find(|held| {
                holders(&held.node)
                    + usize::from(
                        status
                            .held
                            .as_ref()
                            .is_some_and(|own| own.node == held.node),
                    )
                    >= majority
            });
        status.held = held_by_most;
        let lasts: Vec<&Last> = std::iter::once(status.last.as_ref())
            .chain(others.iter().map(|other| other.last.as_ref()))
            .flatten()
            .collect();
        status.last = newest_decision(&lasts).cloned();
    }
    merged
}

/// Of the masters' last decisions, the newest occurrence's as most of the
/// masters that know it hold it (same node and decision; ties: the first
/// master's): a claim whose answer timed out may leave one master with a
/// decision the others never made.
fn newest_decision<'a>(lasts: &[&'a Last]) -> Option<&'a Last> {
    let newest = lasts.iter().map(|last| &last.occurrence).max()?;
    let of_newest: Vec<&Last> = lasts
        .iter()
        .copied()
        .filter(|last| &last.occurrence == newest)
        .collect();
    let held_by = |last: &Last| {
        of_newest
            .iter()
            .filter(|other| other.node == last.node && other.decision == last.decision)
            .count()
    };
    of_newest
        .iter()
        .copied()
        .fold(None, |best: Option<&Last>, last| match best {
            Some(best) if held_by(best) >= held_by(last) => Some(best),
            _ => Some(last),
        })
}

/// Every job the live `nodes` run, with the schedule most of them
/// published for it (ties: the first node's by id).
async fn jobs_of_nodes(
    conn: &Conn,
    prefix: &str,
    nodes: &[NodeInfo],
) -> redis::RedisResult<Vec<Listed>> {
    let ids: Vec<&str> = nodes.iter().map(|node| node.node.as_str()).collect();
    let published = registry::schedules(conn, prefix, &ids).await?;
    let mut parsed: HashMap<JobSchedule, Option<Schedule>> = HashMap::new();
    Ok(node_jobs(nodes)
        .into_iter()
        .map(|name| {
            let chosen = most_published(&published, &name);
            let schedule = chosen.and_then(|chosen| {
                parsed
                    .entry(chosen.clone())
                    .or_insert_with(|| parse_schedule(chosen))
                    .clone()
            });
            Listed {
                name,
                schedule,
                splay_offset: std::time::Duration::from_millis(
                    chosen.map_or(0, |chosen| chosen.splay_ms),
                ),
            }
        })
        .collect())
}

/// The schedule of `job` that most nodes published (ties: the first).
fn most_published<'a>(
    published: &'a [BTreeMap<String, JobSchedule>],
    job: &str,
) -> Option<&'a JobSchedule> {
    let mut counts: Vec<(&JobSchedule, usize)> = Vec::new();
    for schedule in published.iter().filter_map(|schedules| schedules.get(job)) {
        match counts.iter_mut().find(|(seen, _)| *seen == schedule) {
            Some((_, count)) => *count += 1,
            None => counts.push((schedule, 1)),
        }
    }
    // `max_by_key` keeps the last of equal maxima; the first is wanted.
    counts
        .iter()
        .rev()
        .max_by_key(|(_, count)| *count)
        .map(|(schedule, _)| *schedule)
}

/// A published schedule, parsed; `None` if this version cannot read it.
fn parse_schedule(published: &JobSchedule) -> Option<Schedule> {
    let zone: Tz = published.timezone.parse().ok()?;
    Schedule::parse(&published.expression, zone).ok()
}

/// Reads the lock and state of every job under `prefix` in one pipeline;
/// `next` is computed from `now` (this machine's clock, like the daemons do):
/// the first occurrence that starts after `now`, splay included.
pub async fn read_jobs(
    conn: &Conn,
    prefix: &str,
    jobs: Vec<Listed>,
    now: DateTime<Utc>,
) -> redis::RedisResult<Vec<JobStatus>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let groups = jobs
        .iter()
        .map(|job| {
            let keys = JobKeys::new(prefix, &job.name);
            let mut pipe = redis::pipe();
            pipe.get(&keys.lock).pttl(&keys.lock).hgetall(&keys.state);
            pipe
        })
        .collect();
    let replies = crate::coordinator::query_groups(conn, groups).await?;
    let mut statuses = Vec::with_capacity(jobs.len());
    for (job, replies) in jobs.into_iter().zip(replies) {
        let mut replies = replies.into_iter();
        let (Some(lock), Some(pttl), Some(state)) =
            (replies.next(), replies.next(), replies.next())
        else {
            break;
        };
        let lock: Option<String> = redis::from_redis_value(lock)?;
        let pttl: i64 = redis::from_redis_value(pttl)?;
        let state: HashMap<String, String> = redis::from_redis_value(state)?;
        let next = job.schedule.as_ref().and_then(|schedule| {
            schedule.next_after(crate::config::unsplayed(now, job.splay_offset))
        });
        statuses.push(JobStatus {
            job,
            held: lock.map(|value| held(&value, pttl, &state)),
            last: last(&state),
            next,
            paused: None,
        });
    }
    Ok(statuses)
}

fn held(lock_value: &str, pttl: i64, state: &HashMap<String, String>) -> Held {
    // The value is `TOKEN NODE`; node ids may not contain spaces, tokens never do.
    let node = lock_value
        .split_once(' ')
        .map_or(lock_value, |(_, node)| node)
        .to_string();
    let ours = state.get("holder_node") == Some(&node);
    let field = |key: &str| state.get(key).filter(|_| ours);
    Held {
        fence: field("holder_fence").and_then(|f| fence(f)),
        occurrence: field("holder_occ").cloned(),
        since_ms: field("holder_since").and_then(|s| s.parse().ok()),
        ttl_ms: (pttl >= 0).then_some(pttl),
        node,
    }
}

fn last(state: &HashMap<String, String>) -> Option<Last> {
    let at_ms: i64 = state.get("last_occ")?.parse().ok()?;
    let occurrence = format::from_ms(at_ms).map(format::secs)?;
    // `last_outcome` belongs to `last_outcome_occ`; older state has no such field.
    let outcome = match state.get("last_outcome_occ") {
        Some(name) if name != &occurrence => None,
        _ => state.get("last_outcome").cloned(),
    };
    Some(Last {
        occurrence,
        node: state.get("last_node").cloned().unwrap_or_default(),
        fence: state.get("last_fence").and_then(|f| fence(f)),
        decision: state
            .get("last_decision")
            .cloned()
            .unwrap_or_else(|| "claimed".to_string()),
        outcome,
    })
}

/// A fence field; `0` (a `missed` decision) means none.
fn fence(text: &str) -> Option<u64> {
    text.parse().ok().filter(|fence| *fence > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_last_decision_is_the_newest_occurrence_as_most_masters_hold_it() {
        let last = |occurrence: &str, node: &str, decision: &str| Last {
            occurrence: occurrence.into(),
            node: node.into(),
            fence: None,
            decision: decision.into(),
            outcome: None,
        };
        let stray = last("2026-11-30T21:00:01Z", "n1", "skipped");
        let run = last("2026-11-30T21:00:01Z", "n2", "claimed");
        let older = last("2026-11-30T21:00:00Z", "n3", "claimed");
        let picked = newest_decision(&[&stray, &older, &run, &run]);
        assert_eq!(picked, Some(&run));
        assert_eq!(newest_decision(&[&older, &stray]), Some(&stray));
        assert_eq!(newest_decision(&[]), None);
    }

    #[test]
    fn a_held_lock_takes_the_holder_fields_only_if_they_name_its_node() {
        let fields = state(&[
            ("holder_node", "web-2"),
            ("holder_fence", "1796072400000123"),
            ("holder_since", "1796072400001"),
            ("holder_occ", "2026-11-30T21:00:00Z"),
        ]);
        let held = held("0123abcd web-2", 1500, &fields);
        assert_eq!(held.node, "web-2");
        assert_eq!(held.fence, Some(1_796_072_400_000_123));
        assert_eq!(held.since_ms, Some(1_796_072_400_001));
        assert_eq!(held.ttl_ms, Some(1500));
        let other = super::held("0123abcd web-3", -1, &fields);
        assert_eq!(
            (other.node.as_str(), other.fence, other.ttl_ms),
            ("web-3", None, None)
        );
    }

    #[test]
    fn the_schedule_most_nodes_published_wins() {
        let schedule = |expression: &str| JobSchedule {
            expression: expression.into(),
            timezone: "UTC".into(),
            splay_ms: 0,
        };
        let node = |expression: &str| BTreeMap::from([("x".to_string(), schedule(expression))]);
        let published = [
            node("@daily"),
            node("@hourly"),
            node("@hourly"),
            BTreeMap::new(),
        ];
        assert_eq!(most_published(&published, "x"), Some(&schedule("@hourly")));
        let tie = [node("@daily"), node("@hourly")];
        assert_eq!(most_published(&tie, "x"), Some(&schedule("@daily")));
        assert_eq!(most_published(&tie, "y"), None);
        let parsed = parse_schedule(&schedule("0 2 * * *")).expect("parses");
        assert_eq!(parsed.expression(), "0 2 * * *");
        let bad_zone = JobSchedule {
            expression: "@daily".into(),
            timezone: "Mars/Olympus".into(),
            splay_ms: 0,
        };
        assert!(parse_schedule(&bad_zone).is_none());
    }

    #[test]
    fn the_last_decision_is_named_like_the_run_saw_it() {
        let fields = state(&[
            ("last_occ", "1796072400000"),
            ("last_node", "web-1"),
            ("last_fence", "0"),
            ("last_decision", "missed"),
            ("last_outcome", "missed"),
            ("last_outcome_occ", "2026-11-30T21:00:00Z"),
        ]);
        let last = last(&fields).expect("a decision");
        assert_eq!(last.occurrence, "2026-11-30T21:00:00Z");
        assert_eq!(last.fence, None);
        assert_eq!(last.outcome.as_deref(), Some("missed"));
        assert_eq!(super::last(&state(&[("fence", "7")])), None);
    }
}
