//! Prometheus metrics, served as text at `http://METRICS_LISTEN/metrics`
//! when `[daemon] metrics_listen` is set.
//!
//! The daemon records through plain functions ([`claim`], [`run_finished`],
//! …) that go to the `metrics` crate's global recorder. Until [`install`]
//! has run there is no recorder and each call does nothing (a label string
//! is built and dropped), so call sites need no `if metrics_enabled`.
//!
//! Every series is per process: Prometheus scrapes each node, and its
//! `instance` label tells the nodes apart, so no `node` label is added here.
//! The listener is bound once per process: a changed `metrics_listen` takes
//! effect at the next restart, not on reload.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder};

use crate::outcome::Outcome;

const RUNS: &str = "solocron_runs_total";
const RUN_DURATION: &str = "solocron_run_duration_seconds";
const LAST_SUCCESS: &str = "solocron_last_success_timestamp_seconds";
const FIRE_TO_START: &str = "solocron_fire_to_start_seconds";
const CLAIMS: &str = "solocron_claims_total";
const LOCK_RENEWALS: &str = "solocron_lock_renewals_total";
const LOCK_LOSSES: &str = "solocron_lock_losses_total";
const MISSED: &str = "solocron_missed_total";
const REDIS_ERRORS: &str = "solocron_redis_errors_total";
const CLOCK_OFFSET: &str = "solocron_clock_offset_seconds";
const CONFIG_DIVERGENCE: &str = "solocron_config_divergent_jobs";
const JOBS: &str = "solocron_jobs";
const LOG_LINES_LOST: &str = "solocron_log_lines_lost_total";
const ABANDONED: &str = "solocron_abandoned_total";
const NO_ELIGIBLE_NODE: &str = "solocron_no_eligible_node_total";
const GROUP_FULL: &str = "solocron_group_full_total";
const LAST_EXCLUDED: &str = "solocron_last_excluded_timestamp_seconds";
const REDIS_UP: &str = "solocron_redis_up";
const NOTIFICATIONS: &str = "solocron_notifications_total";
const RETRIES: &str = "solocron_retries_total";
const JOB_PERIOD: &str = "solocron_job_period_seconds";
const JOB_MAX_SILENCE: &str = "solocron_job_max_silence_seconds";
const JOB_SCHEDULED: &str = "solocron_job_scheduled_timestamp_seconds";
const LIVE_NODES: &str = "solocron_live_nodes";
const OCCURRENCES: &str = "solocron_occurrences_total";
const LAST_FAILURE: &str = "solocron_last_failure_timestamp_seconds";
const REDIS_DATA_LOST: &str = "solocron_redis_data_lost_total";

/// The final outcomes `solocron_occurrences_total` is served with from a
/// job's start: every one but `skipped` and `paused`, which are not
/// counted as an occurrence's outcome.
const OCCURRENCE_OUTCOMES: [Outcome; 9] = [
    Outcome::Succeeded,
    Outcome::Failed,
    Outcome::TimedOut,
    Outcome::LockLost,
    Outcome::Interrupted,
    Outcome::Missed,
    Outcome::Abandoned,
    Outcome::Throttled,
    Outcome::Aborted,
];

/// Every metric name this module serves, histograms by their base name
/// (Prometheus adds `_bucket`, `_sum` and `_count`). The tests check the
/// rules and the dashboard under `contrib/` against the names a real
/// daemon serves; this list is what they are served under.
pub const NAMES: &[&str] = &[
    RUNS,
    RUN_DURATION,
    LAST_SUCCESS,
    FIRE_TO_START,
    CLAIMS,
    LOCK_RENEWALS,
    LOCK_LOSSES,
    MISSED,
    REDIS_ERRORS,
    CLOCK_OFFSET,
    CONFIG_DIVERGENCE,
    JOBS,
    LOG_LINES_LOST,
    ABANDONED,
    NO_ELIGIBLE_NODE,
    GROUP_FULL,
    LAST_EXCLUDED,
    REDIS_UP,
    JOB_PERIOD,
    JOB_MAX_SILENCE,
    JOB_SCHEDULED,
    LIVE_NODES,
    OCCURRENCES,
    LAST_FAILURE,
    REDIS_DATA_LOST,
];

/// Buckets (seconds) for occurrence-to-process-start lag: 1 ms to 10 s.
const LAG_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Buckets (seconds) for run durations: 10 ms to 1 h.
const DURATION_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// Set once the exporter is installed; a second [`install`] is refused
/// before it could bind a second listener.
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The newest timestamp set per gauge and job (last success, last
/// failure), so that an older one (a success read from the history at
/// start, a gap of misses recorded late) never replaces a newer one.
static NEWEST_KNOWN: LazyLock<Mutex<HashMap<(&'static str, String), f64>>> =
    LazyLock::new(Mutex::default);

/// Why the metrics endpoint could not be started.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// `metrics_listen` is not `IP:PORT`.
    #[error("metrics_listen `{listen}` is not a socket address (expected e.g. `127.0.0.1:9464`)")]
    Address {
        /// The value as configured.
        listen: String,
        /// The parse error.
        #[source]
        source: std::net::AddrParseError,
    },
    /// Binding the HTTP listener failed (port in use, address not local, …).
    #[error(
        "cannot serve metrics on `{addr}`; if another process holds the port, \
         choose a free one in `[daemon] metrics_listen`"
    )]
    Listen {
        /// The address that could not be bound.
        addr: SocketAddr,
        /// The exporter's error, with the OS error text.
        #[source]
        source: BuildError,
    },
    /// A recorder is already installed in this process.
    #[error("metrics are already being served by this process")]
    AlreadyInstalled,
    /// Any other failure of the exporter's set-up.
    #[error("cannot set up the metrics exporter")]
    Exporter(#[source] BuildError),
}

/// The daemon's start of the endpoint of `metrics_listen` = `listen` in
/// the config at `config_path`: [`install`], with an address it cannot
/// bind (a port in use, an address not on this host) refused as a
/// mistake of the config ([`crate::config::StartRefused`], exit 78: a
/// restart does not free the port) in one error naming the address, the
/// key, the file and what to do.
pub fn start(config_path: &std::path::Path, listen: &str) -> anyhow::Result<()> {
    match install(listen) {
        Err(MetricsError::Listen { addr, source }) => {
            let cause = match std::error::Error::source(&source) {
                Some(os) => os.to_string(),
                None => source.to_string(),
            };
            Err(crate::config::StartRefused(format!(
                "cannot serve metrics on `{addr}` (`metrics_listen` in `[daemon]` of `{}`): \
                 {cause}; stop the process that holds the port (`ss -ltnp` names it) or \
                 choose a free port or an address of this host in `metrics_listen`, then start \
                 again",
                config_path.display()
            ))
            .into())
        }
        other => Ok(other?),
    }
}

/// Starts serving Prometheus text at `http://LISTEN/metrics` and installs
/// the global recorder the other functions here report to.
///
/// Call it once, inside the daemon's tokio runtime: the HTTP server runs as
/// a task on that runtime (outside the daemon's task tracker; it ends with
/// the runtime). The address is bound before this returns, so a port in use
/// is an `Err` here, not a log line later.
pub fn install(listen: &str) -> Result<(), MetricsError> {
    let addr: SocketAddr = listen.parse().map_err(|source| MetricsError::Address {
        listen: listen.to_string(),
        source,
    })?;
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return Err(MetricsError::AlreadyInstalled);
    }
    let result = builder(addr).and_then(|builder| {
        builder.install().map_err(|err| match err {
            BuildError::FailedToCreateHTTPListener(_) => MetricsError::Listen { addr, source: err },
            BuildError::FailedToSetGlobalRecorder(_) => MetricsError::AlreadyInstalled,
            other => MetricsError::Exporter(other),
        })
    });
    match result {
        Ok(()) => {
            describe();
            // Served from the start (at 0 unless lines were lost before),
            // so that the first lost line is an increase.
            crate::logging::on_line_lost(log_lines_lost);
            counter!(LOG_LINES_LOST).absolute(crate::logging::lines_lost());
            counter!(REDIS_DATA_LOST).increment(0);
            Ok(())
        }
        Err(err) => {
            if !matches!(err, MetricsError::AlreadyInstalled) {
                INSTALLED.store(false, Ordering::SeqCst);
            }
            Err(err)
        }
    }
}

fn builder(addr: SocketAddr) -> Result<PrometheusBuilder, MetricsError> {
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(Matcher::Full(FIRE_TO_START.to_string()), LAG_BUCKETS)
        .and_then(|builder| {
            builder
                .set_buckets_for_metric(Matcher::Full(RUN_DURATION.to_string()), DURATION_BUCKETS)
        })
        .map_err(MetricsError::Exporter)
}

/// HELP lines for `/metrics`.
fn describe() {
    describe_counter!(RUNS, "Finished runs by job and outcome.");
    describe_histogram!(RUN_DURATION, "Run duration, start to finish.");
    describe_gauge!(
        LAST_SUCCESS,
        "Unix time of the job's last succeeded run on this node, or in the history read at start."
    );
    describe_histogram!(
        FIRE_TO_START,
        "Lag from the scheduled occurrence to the job's start on this node."
    );
    describe_counter!(
        CLAIMS,
        "Claim attempts by job and result (won, lost, busy)."
    );
    describe_counter!(LOCK_RENEWALS, "Successful lock renewals by the watchdog.");
    describe_counter!(LOCK_LOSSES, "Leases lost while a run held them.");
    describe_counter!(
        MISSED,
        "Occurrences not claimed before their starting_deadline."
    );
    describe_counter!(
        NO_ELIGIBLE_NODE,
        "Occurrences recorded missed because no alive node had the tags of the job's run_on."
    );
    describe_gauge!(
        LAST_EXCLUDED,
        "When this node last recorded an occurrence of the job excluded by its calendars (UNIX seconds): the silence alert counts from it too."
    );
    describe_counter!(
        GROUP_FULL,
        "Occurrences that found their group without room, by group and limit (max_running or max_starts)."
    );
    describe_counter!(REDIS_ERRORS, "Failed Redis operations by operation.");
    describe_gauge!(
        CLOCK_OFFSET,
        "This node's clock minus Redis TIME at the last check."
    );
    describe_gauge!(
        CONFIG_DIVERGENCE,
        "Jobs whose definition differs from another live node's."
    );
    describe_gauge!(JOBS, "Jobs in the loaded jobs.toml.");
    describe_counter!(
        ABANDONED,
        "Runs this node recorded abandoned (their lock expired without a release)."
    );
    describe_gauge!(
        REDIS_UP,
        "1 while this node's last Redis operation succeeded, 0 during an outage."
    );
    describe_gauge!(
        JOB_PERIOD,
        "Longest interval between consecutive occurrences of the job over the coming 62 days; 0 once a reload removed the job."
    );
    describe_gauge!(
        JOB_MAX_SILENCE,
        "The job's max_silence (longest time without a success before alerting); 0 if not set."
    );
    describe_gauge!(
        JOB_SCHEDULED,
        "Unix time this process started scheduling the job's current definition."
    );
    describe_gauge!(
        LIVE_NODES,
        "Nodes alive in the node registry as this node last read it, itself included."
    );
    describe_counter!(
        LOG_LINES_LOST,
        "Log lines dropped (the log writer fell behind) or not written (stderr failed)."
    );
    describe_counter!(
        NOTIFICATIONS,
        "Notifiers run by job, notifier (on_failure, on_success) and result (succeeded, failed, timed_out, ...)."
    );
    describe_counter!(
        OCCURRENCES,
        "Occurrences this node recorded the final outcome of (after their last attempt), by job and outcome."
    );
    describe_gauge!(
        LAST_FAILURE,
        "Unix time this node recorded the job's last occurrence that ended failed, timed_out, lock_lost, missed or abandoned after its last attempt; 0 if none."
    );
    describe_counter!(
        REDIS_DATA_LOST,
        "Times this node found Redis without the fleet's data it had seen before (restarted empty, flushed)."
    );
    describe_counter!(
        RETRIES,
        "Retry attempts of failed occurrences this node claimed and ran."
    );
}

/// The result of one claim attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimResult {
    /// This node took the occurrence.
    Won,
    /// Another node had already claimed the occurrence.
    Lost,
    /// The job's lock was held (overlap): the occurrence was skipped.
    Busy,
}

impl ClaimResult {
    /// The `result` label value: `won`, `lost`, `busy`.
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimResult::Won => "won",
            ClaimResult::Lost => "lost",
            ClaimResult::Busy => "busy",
        }
    }
}

/// Counts a claim attempt: `solocron_claims_total{job,result}`.
pub fn claim(job: &str, result: ClaimResult) {
    counter!(CLAIMS, "job" => job.to_string(), "result" => result.as_str()).increment(1);
}

/// Records a finished run: `solocron_runs_total{job,outcome}` and
/// `solocron_run_duration_seconds{job}`; a `succeeded` run also sets
/// `solocron_last_success_timestamp_seconds{job}` to `finished_at` (Unix
/// seconds, on the clock occurrences fire by: a node whose wall clock was
/// stepped a day ahead would set a success a day in the future, and the
/// silence alert would stay blind for that day).
pub fn run_finished(job: &str, outcome: Outcome, duration: Duration, finished_at: f64) {
    counter!(RUNS, "job" => job.to_string(), "outcome" => outcome.as_str()).increment(1);
    histogram!(RUN_DURATION, "job" => job.to_string()).record(duration.as_secs_f64());
    if outcome == Outcome::Succeeded {
        last_success(job, finished_at);
    }
}

/// A success of `job` at `at` (Unix seconds) that this node learnt of
/// (its own run, or the history read at start): sets
/// `solocron_last_success_timestamp_seconds{job}` unless a later one is
/// already set.
pub fn last_success(job: &str, at: f64) {
    set_newest(LAST_SUCCESS, job, at);
}

/// Sets gauge `name{job}` to `at` unless a later value is already set.
fn set_newest(name: &'static str, job: &str, at: f64) {
    if !enabled() {
        return;
    }
    let mut known = NEWEST_KNOWN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let newest = known.entry((name, job.to_string())).or_insert(f64::MIN);
    if at > *newest {
        *newest = at;
        gauge!(name, "job" => job.to_string()).set(at);
    }
}

/// This node recorded the final outcome of `count` occurrences of `job` at
/// `at` (Unix seconds, on the clock occurrences fire by): the outcome of
/// their last attempt, or `missed`, `abandoned`. Counts
/// `solocron_occurrences_total{job,outcome}` once per occurrence (a failed
/// attempt that a retry follows is not an occurrence's outcome), and for an
/// outcome that is a failure ([`Outcome::is_failure`]) sets
/// `solocron_last_failure_timestamp_seconds{job}` to `at`.
pub fn occurrences_decided(job: &str, outcome: Outcome, count: u64, at: f64) {
    counter!(OCCURRENCES, "job" => job.to_string(), "outcome" => outcome.as_str()).increment(count);
    if count > 0 && outcome.is_failure() {
        set_newest(LAST_FAILURE, job, at);
    }
}

/// [`occurrences_decided`] for one occurrence.
pub fn occurrence_decided(job: &str, outcome: Outcome, at: f64) {
    occurrences_decided(job, outcome, 1, at);
}

/// Counts Redis found without the fleet's data this node had seen:
/// `solocron_redis_data_lost_total`.
pub fn redis_data_lost() {
    counter!(REDIS_DATA_LOST).increment(1);
}

/// Whether the exporter is installed ([`install`]): work done only for
/// metrics (the per-job gauges, the history read at start) is skipped
/// without it.
pub fn enabled() -> bool {
    INSTALLED.load(Ordering::SeqCst)
}

/// A job starts being scheduled (daemon start, or a reload that added or
/// changed it): its counters are served at 0 from now on, so that the
/// first failure, miss or lost lock is an increase Prometheus can see
/// (a series born at 1 has none), and
/// `solocron_last_failure_timestamp_seconds{job}` at 0 unless set;
/// `solocron_job_max_silence_seconds{job}`
/// is set (0 without `max_silence`) and
/// `solocron_job_scheduled_timestamp_seconds{job}` to now.
pub fn job_scheduled(job: &str, max_silence: Option<Duration>) {
    for outcome in Outcome::ALL.into_iter().filter(|outcome| outcome.is_run()) {
        counter!(RUNS, "job" => job.to_string(), "outcome" => outcome.as_str()).increment(0);
    }
    for outcome in OCCURRENCE_OUTCOMES {
        counter!(OCCURRENCES, "job" => job.to_string(), "outcome" => outcome.as_str()).increment(0);
    }
    for name in [
        MISSED,
        ABANDONED,
        LOCK_LOSSES,
        LOCK_RENEWALS,
        NO_ELIGIBLE_NODE,
    ] {
        counter!(name, "job" => job.to_string()).increment(0);
    }
    gauge!(LAST_FAILURE, "job" => job.to_string()).increment(0.0);
    gauge!(JOB_MAX_SILENCE, "job" => job.to_string())
        .set(max_silence.map_or(0.0, |silence| silence.as_secs_f64()));
    gauge!(JOB_SCHEDULED, "job" => job.to_string()).set(unix_now());
}

/// Sets `solocron_job_period_seconds{job}`: the longest interval between
/// the job's consecutive occurrences ([`crate::schedule::Schedule::longest_interval`]),
/// 0 when it is no longer scheduled (removed by a reload) or never fires again.
pub fn job_period(job: &str, period: Option<Duration>) {
    gauge!(JOB_PERIOD, "job" => job.to_string())
        .set(period.map_or(0.0, |period| period.as_secs_f64()));
}

/// Sets `solocron_live_nodes`: the nodes in the registry, this one included.
pub fn live_nodes(count: usize) {
    gauge!(LIVE_NODES).set(count as f64);
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// Records the lag from an occurrence to its process start (or hook
/// request): `solocron_fire_to_start_seconds{job}`.
pub fn fire_to_start(job: &str, lag: Duration) {
    histogram!(FIRE_TO_START, "job" => job.to_string()).record(lag.as_secs_f64());
}

/// Counts a confirmed lease renewal: `solocron_lock_renewals_total{job}`.
pub fn lock_renewed(job: &str) {
    counter!(LOCK_RENEWALS, "job" => job.to_string()).increment(1);
}

/// Counts a lost lease: `solocron_lock_losses_total{job}`.
pub fn lock_lost(job: &str) {
    counter!(LOCK_LOSSES, "job" => job.to_string()).increment(1);
}

/// Counts an occurrence given up at its starting deadline:
/// `solocron_missed_total{job}`.
pub fn missed(job: &str) {
    missed_by(job, 1);
}

/// Counts `count` missed occurrences of `job` (a gap nobody claimed).
pub fn missed_by(job: &str, count: u64) {
    counter!(MISSED, "job" => job.to_string()).increment(count);
}

/// Counts an occurrence recorded `missed` because no alive node may run
/// it (`run_on`): `solocron_no_eligible_node_total{job}`.
pub fn no_eligible_node(job: &str) {
    counter!(NO_ELIGIBLE_NODE, "job" => job.to_string()).increment(1);
}

/// Sets `solocron_last_excluded_timestamp_seconds{job}` to now: this
/// node recorded an occurrence of `job` `excluded` (a calendar).
pub fn excluded(job: &str) {
    gauge!(LAST_EXCLUDED, "job" => job.to_string()).set(unix_now());
}

/// Counts an occurrence that found `group` without room under `limit`
/// (`max_running` or `max_starts`): `solocron_group_full_total`.
pub fn group_full(group: &str, limit: &str) {
    counter!(GROUP_FULL, "group" => group.to_string(), "limit" => limit.to_string()).increment(1);
}

/// Serves `solocron_group_full_total` of `group` at 0 for each limit it
/// has, so that a rule sees the series before the group is ever full.
pub fn group_defined(group: &crate::config::Group) {
    if group.max_running.is_some() {
        counter!(GROUP_FULL, "group" => group.name.clone(), "limit" => "max_running").increment(0);
    }
    if group.max_starts.is_some() {
        counter!(GROUP_FULL, "group" => group.name.clone(), "limit" => "max_starts").increment(0);
    }
}

/// Counts a run recorded abandoned: `solocron_abandoned_total{job}`.
pub fn abandoned(job: &str) {
    counter!(ABANDONED, "job" => job.to_string()).increment(1);
}

/// Sets `solocron_redis_up` (1 up, 0 during an outage).
pub fn redis_up(up: bool) {
    gauge!(REDIS_UP).set(if up { 1.0 } else { 0.0 });
}

/// Counts a failed Redis operation (`claim`, `extend`, `release`, `time`,
/// …): `solocron_redis_errors_total{operation}`.
pub fn redis_error(operation: &str) {
    counter!(REDIS_ERRORS, "operation" => operation.to_string()).increment(1);
}

/// Sets this node's clock minus Redis `TIME`, given in milliseconds:
/// `solocron_clock_offset_seconds`.
pub fn clock_offset(ms: i64) {
    // i64 ms -> f64 is exact up to 2^53 ms, far beyond any real offset.
    gauge!(CLOCK_OFFSET).set(ms as f64 / 1000.0);
}

/// Sets how many jobs differ from another live node's definition:
/// `solocron_config_divergent_jobs`.
pub fn config_divergence(jobs: usize) {
    gauge!(CONFIG_DIVERGENCE).set(jobs as f64);
}

/// Sets the number of jobs loaded from `jobs.toml`: `solocron_jobs`.
pub fn jobs_loaded(count: usize) {
    gauge!(JOBS).set(count as f64);
}

/// Sets the count of lost log lines: `solocron_log_lines_lost_total`.
pub fn log_lines_lost(total: u64) {
    counter!(LOG_LINES_LOST).absolute(total);
}

/// Counts a notifier run: `solocron_notifications_total{job,notifier,result}`.
pub fn notification(job: &str, notifier: &'static str, result: &str) {
    counter!(NOTIFICATIONS, "job" => job.to_string(), "notifier" => notifier, "result" => result.to_string())
        .increment(1);
}

/// Counts a retry attempt this node ran: `solocron_retries_total{job}`.
pub fn retried(job: &str) {
    counter!(RETRIES, "job" => job.to_string()).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_without_a_recorder_do_nothing() {
        claim("a", ClaimResult::Won);
        run_finished("a", Outcome::Succeeded, Duration::from_millis(5), 1.0);
        clock_offset(-12);
    }

    #[test]
    fn bad_address_is_named() {
        let err = install("localhost").expect_err("not an address");
        assert_eq!(
            err.to_string(),
            "metrics_listen `localhost` is not a socket address (expected e.g. `127.0.0.1:9464`)"
        );
        assert!(!INSTALLED.load(Ordering::SeqCst));
    }
}
