//! The per-job series that the alerting rules (`contrib/prometheus/`)
//! need besides the counters, kept up to date with the timetable:
//!
//! - A job that starts being scheduled (daemon start, or a reload that
//!   adds or changes it) gets its counters served at 0, its `max_silence`
//!   and the time ([`metrics::job_scheduled`], at once), and its period
//!   ([`metrics::job_period`]): the longest interval between consecutive
//!   occurrences over [`PERIOD_HORIZON`]. That takes a few hundred
//!   occurrence searches per job, so one worker computes it off the
//!   runtime's threads, in the order the jobs were scheduled: a value from
//!   an earlier reload never overwrites a later one.
//! - A job that a reload removed gets period 0: the exporter cannot drop a
//!   series, and the rules ignore jobs whose period is 0.
//! - A job added to this node's schedule gets the newest `succeeded` entry
//!   of its history as its `solocron_last_success_timestamp_seconds`
//!   ([`read_last_successes`]). Without it, the node that ran a job last
//!   takes the job's only last-success series with it when it restarts
//!   (each node knows only its own runs), and the "no success for too
//!   long" alert goes blind. Read in the background, at most
//!   [`READS_AT_ONCE`] jobs at a time, retried while Redis is away; a
//!   success older than the capped history (`history_max` entries) is not
//!   found.
//!
//! None of it runs without `metrics_listen`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::Utc;
use futures_util::StreamExt as _;
use tokio::sync::mpsc;
use tracing::{debug, info};

use super::Shared;
use crate::config::Job;
use crate::history::read::{self, Filter};
use crate::metrics;
use crate::schedule::PERIOD_HORIZON;

/// Jobs whose history is read at once at start.
const READS_AT_ONCE: usize = 8;
/// Jobs whose period is computed in one blocking task (the worker checks
/// for shutdown in between).
const PERIODS_AT_ONCE: usize = 256;
/// Pauses between history reads while Redis fails.
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// A change of the schedule, for the period worker.
pub enum Change {
    Scheduled(Arc<Job>),
    Removed(String),
}

/// Where the timetable sends its changes; see [`periods_loop`].
pub struct JobGauges {
    changes: mpsc::UnboundedSender<Change>,
}

impl JobGauges {
    /// The sender for [`Shared`] and the receiver for [`periods_loop`].
    pub fn new() -> (JobGauges, mpsc::UnboundedReceiver<Change>) {
        let (changes, received) = mpsc::unbounded_channel();
        (JobGauges { changes }, received)
    }

    /// `job` starts being scheduled with this definition.
    pub fn scheduled(&self, job: &Arc<Job>) {
        if !metrics::enabled() {
            return;
        }
        metrics::job_scheduled(&job.name, job.extras.max_silence);
        if let Some(group) = &job.extras.group {
            metrics::group_defined(group);
        }
        // Fails only once the worker has stopped (shutdown).
        let _ = self.changes.send(Change::Scheduled(Arc::clone(job)));
    }

    /// A reload removed `job`.
    pub fn removed(&self, job: &str) {
        if metrics::enabled() {
            let _ = self.changes.send(Change::Removed(job.to_string()));
        }
    }
}

/// Computes the periods of the jobs [`JobGauges`] is told of, in order,
/// until shutdown.
pub async fn periods_loop(shared: Arc<Shared>, mut changes: mpsc::UnboundedReceiver<Change>) {
    loop {
        let first = tokio::select! {
            _ = shared.cancel.cancelled() => return,
            change = changes.recv() => match change {
                Some(change) => change,
                None => return,
            },
        };
        let mut batch = vec![first];
        while batch.len() < PERIODS_AT_ONCE {
            match changes.try_recv() {
                Ok(change) => batch.push(change),
                Err(_) => break,
            }
        }
        let computed = tokio::task::spawn_blocking(move || periods(batch)).await;
        match computed {
            Ok(periods) => {
                for (job, period) in periods {
                    metrics::job_period(&job, period);
                }
            }
            Err(err) => {
                debug!(node = %shared.locker.node(), error = %err, "period computation failed")
            }
        }
        // A load's worth of jobs parsed their patterns again here (most
        // are no longer cached): give the freed pages back once it is done.
        if changes.is_empty() {
            crate::memory::release_freed();
        }
    }
}

/// Each change's job and its period (`None`: removed, or no interval left);
/// computed once per expression and zone (jobs share a handful of them).
fn periods(batch: Vec<Change>) -> Vec<(String, Option<Duration>)> {
    let now = Utc::now();
    let mut known: HashMap<(String, &'static str), Option<Duration>> = HashMap::new();
    batch
        .into_iter()
        .map(|change| match change {
            Change::Scheduled(job) => {
                let schedule = &job.schedule;
                let key = (
                    schedule.expression().trim().to_string(),
                    schedule.timezone().name(),
                );
                let period = *known
                    .entry(key)
                    .or_insert_with(|| schedule.longest_interval(now, PERIOD_HORIZON));
                (job.name.clone(), period)
            }
            Change::Removed(name) => (name, None),
        })
        .collect()
}

/// Reads the newest success of each of `jobs` from its history into
/// `solocron_last_success_timestamp_seconds`, in the background; see the
/// module doc.
pub fn read_last_successes(shared: &Arc<Shared>, jobs: Vec<String>) {
    if !metrics::enabled() || jobs.is_empty() {
        return;
    }
    let task = Arc::clone(shared);
    shared.tracker.spawn(async move {
        let shared = &task;
        let count = jobs.len();
        let found = AtomicUsize::new(0);
        let found = &found;
        futures_util::stream::iter(jobs)
            .for_each_concurrent(READS_AT_ONCE, |job| async move {
                tokio::select! {
                    _ = shared.cancel.cancelled() => {}
                    success = read_until_answered(shared, &job) => {
                        if success {
                            found.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
            .await;
        if !shared.cancel.is_cancelled() {
            info!(node = %shared.locker.node(), jobs = count, found = found.load(Ordering::Relaxed),
                "last successes read from the job histories for the metrics");
        }
    });
}

/// Whether a success was found (and set).
async fn read_until_answered(shared: &Shared, job: &str) -> bool {
    let mut pause = RETRY_FIRST;
    loop {
        match newest_success_ms(shared, job).await {
            Ok(Some(at_ms)) => {
                // i64 ms -> f64 is exact up to 2^53 ms.
                metrics::last_success(job, at_ms as f64 / 1000.0);
                return true;
            }
            Ok(None) => return false,
            Err(err) => {
                debug!(job = %job, node = %shared.locker.node(), error = %err,
                    "cannot read the job's last success from its history yet; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_MAX);
            }
        }
    }
}

/// When the newest `succeeded` entry of `job`'s history finished (UTC
/// epoch ms); the newest over every member with Redlock.
async fn newest_success_ms(shared: &Shared, job: &str) -> redis::RedisResult<Option<i64>> {
    let filter = Filter {
        outcomes: vec![crate::outcome::Outcome::Succeeded.as_str().to_string()],
        ..Filter::default()
    };
    let (prefix, jobs, filter) = (shared.locker.prefix(), &[job], &filter);
    let lists = shared
        .locker
        .coordinator()
        .on_members(|conn| async move { read::read(&conn, prefix, jobs, filter, 1).await })
        .await?;
    Ok(lists
        .into_iter()
        .flatten()
        .map(|recorded| recorded.entry.finished_at.timestamp_millis())
        .max())
}
