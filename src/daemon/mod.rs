//! The daemon: one timer over every job's next occurrence (the timetable),
//! one task per occurrence joining lock, exec and history; plus the clock
//! check, the node registry (config drift guard), the fleet controls
//! (`pause`, `drain`, `trigger --fleet`: [`controls`], [`occurrence`],
//! [`fleet_run`]) and SIGHUP reloads.
//!
//! Three tokens drive the stop: `cancel` (the first SIGTERM/SIGINT: stop
//! claiming), `interrupt` (the shutdown grace is over, or a second signal:
//! stop running jobs, which are then recorded as `interrupted` and release
//! their locks) and `hurry` (a second signal: SIGKILL instead of SIGTERM
//! and its grace). Every task goes through one `TaskTracker`, so the drain
//! sees them all, and every record waiting for Redis gives up a bounded
//! time after the stop: the daemon never exits leaving a job running
//! without its lease, and never hangs on a Redis that is gone.

mod clock;
mod controls;
mod drift;
mod eviction;
mod fleet_clock;
mod fleet_run;
mod job_gauges;
mod notifiers;
mod occurrence;
mod paused;
mod preference;
mod recording;
pub(crate) mod redis_health;
mod redis_instant;
mod registry_loop;
mod reload;
mod rename;
mod retry;
mod running;
mod slots;
mod sweep;
mod timetable;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use anyhow::Context as _;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use chrono::{DateTime, Utc};

use crate::config::{Config, Job, StartRefused};
use crate::exec::{Executor, OutputMask};
use crate::lock::Locker;
use crate::{metrics, registry, systemd};

pub use crate::coordinator::connect;
pub use occurrence::claim_deadline;
pub use recording::{GAP_LISTED, gap_entries};

/// How this node was started.
#[derive(Debug, Clone)]
pub struct Options {
    /// This node's id.
    pub node: String,
    /// This node's tags (`--tags`), `node=<id>` included.
    pub tags: crate::tags::Tags,
    /// `--redis`: replaces `[redis] url` of every loaded file, reloads too.
    pub redis_override: Option<String>,
}

/// What every task of one daemon shares.
pub(crate) struct Shared {
    pub locker: Locker,
    pub executor: Executor,
    pub tracker: TaskTracker,
    /// Stop claiming (shutdown requested).
    pub cancel: CancellationToken,
    /// Stop running jobs (shutdown grace over, or a second stop signal).
    pub interrupt: CancellationToken,
    /// Redis as this node sees it (outage lines).
    pub redis_health: redis_health::RedisHealth,
    /// The Redis URL with its password masked, for messages.
    pub redis_shown: String,
    /// Records waiting for Redis.
    pub pending: recording::Pending,
    /// Jobs watched for an abandoned run.
    pub watches: recording::Watches,
    /// Per job: the turn to claim (one occurrence of a job at a time).
    claim_turns: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Scheduled claims waiting for Redis's reply at once (see
    /// `occurrence::CLAIMS_IN_FLIGHT`).
    pub claims_in_flight: tokio::sync::Semaphore,
    /// `[daemon] env_file` of the loaded config, for the jobs' environment.
    env_file: RwLock<Arc<BTreeMap<String, String>>>,
    /// What the output of the jobs started now must not show (the values
    /// of the loaded config's env file and `${VAR}`s).
    mask: RwLock<Arc<OutputMask>>,
    /// The loaded config's jobs that have retries, by name: a retry runs
    /// under the job's definition of the moment, or not at all once a
    /// reload removed the job or took its retries ([`retry`]).
    retry_jobs: RwLock<Arc<HashMap<String, Arc<Job>>>>,
    /// Per job added, or whose schedule or zone changed, at a reload: the
    /// instant (ms) of the reload, unsplayed. Occurrences of the new
    /// definition before it were not due under the config then in force
    /// here, so this node's gap records leave them out ([`recording`]).
    gap_floors: Mutex<HashMap<String, i64>>,
    /// The instant occurrences fire by ([`fleet_clock`]).
    pub clock: fleet_clock::FleetClock,
    /// When this daemon started, by this node's clock: an occurrence
    /// before it that this node decided was decided by its previous run.
    pub began: DateTime<Utc>,
    /// `true` once the start-up check passed (Redis answered, took the
    /// scripts, and its user may run every command: [`clock`]). No
    /// occurrence is claimed before: a user missing a command stops the
    /// daemon (exit 78) before any claim could run a job half-recorded.
    started: watch::Sender<bool>,
    /// Cancelled when the daemon cannot go on (Redis refused it at start),
    /// with the reason in `fatal_reason`.
    pub fatal: CancellationToken,
    fatal_reason: Mutex<Option<String>>,
    /// Redis evicts keys when full ([`eviction`]): the warning, if so.
    eviction_warning: Mutex<Option<String>>,
    /// This daemon process's id in the node registry ([`registry::new_instance`]).
    pub instance: String,
    /// The per-job gauges of the alerting rules.
    pub job_gauges: job_gauges::JobGauges,
    /// The fleet controls as last read: pauses, this node's drain.
    pub controls: controls::Controls,
    /// Which nodes look at each occurrence (the fleet view, the backstop).
    pub preference: preference::Preference,
    /// The backstop's batched looks at the occurrences it is not in line for.
    pub sweep: sweep::Sweep,
    /// The renames the reloads found, and the runs in progress here.
    pub renames: rename::Renames,
    /// The jobs whose definition differs between live nodes, as the last
    /// drift check found them ([`Shared::is_drifting`]).
    pub drifting: RwLock<Arc<std::collections::BTreeSet<String>>>,
    /// This node's tags (`--tags`), `node=<id>` included: a job's `run_on`
    /// decides whether this node may run it.
    pub tags: crate::tags::Tags,
    /// The runs in progress here against `[daemon] max_running`.
    pub slots: slots::Slots,
    /// The runs in progress, for `solocron abort`.
    pub running: running::Running,
}

impl Shared {
    /// Appends this node's `action` on `target` to the audit trail, in the
    /// background, best effort (a few tries; the journal has the line).
    pub fn audit(&self, action: &str, target: &str, result: &str) {
        let record =
            crate::control::audit::Record::new(self.locker.node(), action, target).result(result);
        let (conn, prefix) = (self.locker.connection(), self.locker.prefix().to_string());
        self.tracker.spawn(async move {
            for _ in 0..3 {
                if crate::control::audit::append(&conn, &prefix, &record)
                    .await
                    .is_ok()
                {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        });
    }

    /// What a run started now gets: this daemon's lock, executor and
    /// stop, and the env file's variables as last loaded.
    pub fn run_env(&self) -> crate::run::RunEnv<'_> {
        crate::run::RunEnv {
            locker: &self.locker,
            executor: &self.executor,
            interrupt: &self.interrupt,
            env_file: self.env_file(),
            mask: self.mask(),
            abort: crate::run::Abort::default(),
        }
    }

    /// The claim turn of `job` (see `occurrence.rs`).
    pub fn claim_turn(&self, job: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut turns = match self.claim_turns.lock() {
            Ok(turns) => turns,
            Err(poisoned) => poisoned.into_inner(),
        };
        Arc::clone(turns.entry(job.to_string()).or_default())
    }

    /// The variables of `[daemon] env_file` for the jobs started now.
    pub fn env_file(&self) -> Arc<BTreeMap<String, String>> {
        match self.env_file.read() {
            Ok(env) => Arc::clone(&env),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Whether the last drift check found `job` defined differently on
    /// some live node (`false` before the first check).
    pub fn is_drifting(&self, job: &str) -> bool {
        match self.drifting.read() {
            Ok(jobs) => jobs.contains(job),
            Err(poisoned) => poisoned.into_inner().contains(job),
        }
    }

    /// Replaces the set [`Shared::is_drifting`] answers from.
    pub fn set_drifting(&self, jobs: std::collections::BTreeSet<String>) {
        let jobs = Arc::new(jobs);
        match self.drifting.write() {
            Ok(mut slot) => *slot = jobs,
            Err(poisoned) => *poisoned.into_inner() = jobs,
        }
    }

    /// What the output of the jobs started now must not show.
    pub fn mask(&self) -> Arc<OutputMask> {
        match self.mask.read() {
            Ok(mask) => Arc::clone(&mask),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// `name`'s definition in the loaded config if it has retries; `None`
    /// once a reload removed the job or set its `retries` to 0.
    pub fn retry_job(&self, name: &str) -> Option<Arc<Job>> {
        let jobs = match self.retry_jobs.read() {
            Ok(jobs) => Arc::clone(&jobs),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        };
        jobs.get(name).map(Arc::clone)
    }

    fn set_retry_jobs(&self, jobs: &[Arc<Job>]) {
        let jobs = Arc::new(with_retries(jobs));
        match self.retry_jobs.write() {
            Ok(mut current) => *current = jobs,
            Err(poisoned) => *poisoned.into_inner() = jobs,
        }
    }

    /// The first instant (ms) this node's gap records of `job` may cover,
    /// if a reload set one (see `gap_floors`).
    pub fn gap_floor(&self, job: &str) -> Option<i64> {
        self.gap_floors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(job)
            .copied()
    }

    /// After a reload: `job` was added, or its schedule or zone changed,
    /// at `at_ms` (see `gap_floors`).
    fn set_gap_floor(&self, job: &str, at_ms: i64) {
        self.gap_floors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(job.to_string(), at_ms);
    }

    /// The env file's variables and the output mask of `config`.
    fn set_env_file(&self, config: &Config) {
        let env = Arc::new(config.env.clone());
        match self.env_file.write() {
            Ok(mut current) => *current = env,
            Err(poisoned) => *poisoned.into_inner() = env,
        }
        let mask = Arc::new(OutputMask::of(config));
        match self.mask.write() {
            Ok(mut current) => *current = mask,
            Err(poisoned) => *poisoned.into_inner() = mask,
        }
    }

    /// Stops the daemon with `reason` (see [`StartRefused`]).
    pub fn stop_fatally(&self, reason: String) {
        match self.fatal_reason.lock() {
            Ok(mut current) => *current = Some(reason),
            Err(poisoned) => *poisoned.into_inner() = Some(reason),
        }
        self.fatal.cancel();
    }

    fn fatal_reason(&self) -> Option<String> {
        match self.fatal_reason.lock() {
            Ok(reason) => reason.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// What is wrong with Redis as this node sees it, for `status`: an
    /// outage or refusal ([`redis_health::RedisHealth::warning`]) and an evicting
    /// policy ([`eviction`]), in one line.
    pub fn redis_warning(&self) -> Option<String> {
        let eviction = self
            .eviction_warning
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        match (self.redis_health.warning(), eviction) {
            (Some(health), Some(eviction)) => Some(format!("{health}; {eviction}")),
            (health, eviction) => health.or(eviction),
        }
    }

    fn set_eviction_warning(&self, warning: Option<String>) {
        *self
            .eviction_warning
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = warning;
    }

    /// The start-up check passed (see `started`).
    fn mark_started(&self) {
        self.started.send_replace(true);
    }

    /// Whether the start-up check passed.
    fn is_started(&self) -> bool {
        *self.started.borrow()
    }

    /// Waits, without a limit but not past shutdown, for the start-up
    /// check; whether it passed (`false`: the daemon stops, e.g. Redis
    /// refused its password, which the check alone reports).
    async fn until_started(&self) -> bool {
        let mut started = self.started.subscribe();
        tokio::select! {
            waited = started.wait_for(|started| *started) => waited.is_ok(),
            _ = self.cancel.cancelled() => false,
        }
    }

    /// Waits at most `limit` (and not past shutdown) for the start-up
    /// check; whether it passed.
    async fn wait_started(&self, limit: std::time::Duration) -> bool {
        let mut started = self.started.subscribe();
        tokio::select! {
            waited = tokio::time::timeout(limit, started.wait_for(|started| *started)) => {
                waited.is_ok_and(|waited| waited.is_ok())
            }
            _ = self.cancel.cancelled() => false,
        }
    }
}

/// Runs the daemon for `config` until the first message of `stops`
/// (SIGTERM/SIGINT), reloading the file on every message from `reloads`
/// (SIGHUP). Then drains: running jobs get `shutdown_grace`, then are
/// interrupted, their locks released and their outcome recorded; a second
/// message of `stops` interrupts them at once with SIGKILL. `Err` for
/// set-up failures (metrics listener, HTTP client) and [`StartRefused`];
/// Redis being down is not one.
pub async fn run(
    config: Config,
    options: Options,
    mut stops: mpsc::UnboundedReceiver<&'static str>,
    mut reloads: mpsc::UnboundedReceiver<()>,
) -> anyhow::Result<()> {
    if let Some(listen) = &config.daemon.metrics_listen {
        // The error already says what failed and where (`cannot serve
        // metrics on ADDRESS`): no context repeating it.
        metrics::start(&config.path, listen)?;
    }
    let status_listener = match &config.daemon.status_listen {
        Some(listen) => Some(crate::status_page::bind(&config.path, listen).await?),
        None => None,
    };
    let conn = connect(&config.redis)?;
    let locker = Locker::new(
        conn,
        &config.redis.key_prefix,
        &options.node,
        config.daemon.history_max,
    );
    let hurry = CancellationToken::new();
    let executor = Executor::new()
        .context("cannot set up job execution")?
        .with_hurry(hurry.clone());
    let (job_gauges, gauge_changes) = job_gauges::JobGauges::new();
    let shared = Arc::new(Shared {
        locker,
        executor,
        tracker: TaskTracker::new(),
        cancel: CancellationToken::new(),
        interrupt: CancellationToken::new(),
        redis_health: redis_health::RedisHealth::new(&options.node).for_shards(matches!(
            config.redis.mode,
            crate::config::RedisMode::Cluster { .. }
        )),
        redis_shown: config.redis.redacted_url(),
        pending: recording::Pending::default(),
        watches: recording::Watches::default(),
        claim_turns: Mutex::new(HashMap::new()),
        claims_in_flight: tokio::sync::Semaphore::new(occurrence::CLAIMS_IN_FLIGHT),
        env_file: RwLock::new(Arc::new(config.env.clone())),
        mask: RwLock::new(Arc::new(OutputMask::of(&config))),
        retry_jobs: RwLock::new(Arc::new(with_retries(&config.jobs))),
        gap_floors: Mutex::new(HashMap::new()),
        clock: fleet_clock::FleetClock::new(config.daemon.clock),
        began: Utc::now(),
        started: watch::Sender::new(false),
        fatal: CancellationToken::new(),
        fatal_reason: Mutex::new(None),
        eviction_warning: Mutex::new(None),
        instance: registry::new_instance(),
        job_gauges,
        controls: controls::Controls::default(),
        preference: preference::Preference::default(),
        sweep: sweep::Sweep::default(),
        renames: rename::Renames::default(),
        drifting: RwLock::new(Arc::default()),
        tags: options.tags.clone(),
        slots: slots::Slots::default(),
        running: running::Running::default(),
    });
    shared.slots.set_cap(config.daemon.max_running);
    info!(
        node = %options.node,
        jobs = config.jobs.len(),
        redis = %config.redis.redacted_url(),
        key_prefix = %config.redis.key_prefix,
        config = %config.path.display(),
        tags = %options.tags,
        version = env!("CARGO_PKG_VERSION"),
        "solocron started"
    );
    log_proxies(&options.node);
    log_warnings(&config, &options.node);
    metrics::jobs_loaded(config.jobs.len());
    let config = Arc::new(config);
    let (config_tx, config_rx) = watch::channel(Arc::clone(&config));
    // The page is served through the drain (it shows what still runs),
    // outside the tracker; it stops once the drain is over.
    let page_stop = CancellationToken::new();
    let page = match status_listener {
        Some(listener) => Some(status_page_task(
            listener,
            &shared,
            &config,
            config_rx.clone(),
            &options.node,
            page_stop.clone(),
        )?),
        None => None,
    };
    let tracker = &shared.tracker;
    tracker.spawn(clock::check_loop(Arc::clone(&shared), config.path.clone()));
    tracker.spawn(eviction::check_loop(Arc::clone(&shared)));
    tracker.spawn(controls::run(Arc::clone(&shared), config_rx.clone()));
    tracker.spawn(sweep::run(Arc::clone(&shared)));
    tracker.spawn(registry_loop::run(Arc::clone(&shared), config_rx));
    tracker.spawn(job_gauges::periods_loop(Arc::clone(&shared), gauge_changes));
    // Watchdog pings go on through the drain; they stop once it is over.
    let watchdog_stop = CancellationToken::new();
    let watchdog = tokio::spawn(systemd::watchdog_loop(watchdog_stop.clone()));
    let mut timetable = timetable::Timetable::default();
    timetable.apply(&shared, &config.jobs);
    // Scheduling every job parsed again the patterns the loader let go,
    // and freed them at once; give those pages back.
    crate::memory::release_freed();
    recording::spawn_startup_check(&shared, &config.jobs);
    info!(node = %options.node, jobs = config.jobs.len(), "jobs scheduled");
    shared.audit(
        "start",
        &options.node,
        &format!(
            "{} jobs, version {}",
            config.jobs.len(),
            env!("CARGO_PKG_VERSION")
        ),
    );
    loop {
        let wake = timetable.next_wake(&shared);
        tokio::select! {
            signal = stops.recv() => {
                info!(node = %options.node, signal = signal.unwrap_or("stop"), "stop requested");
                break;
            }
            Some(()) = reloads.recv() => {
                reload::reload(&shared, &mut timetable, &config_tx, &options);
            }
            () = tokio::time::sleep_until(wake) => timetable.fire_due(&shared),
            () = shared.clock.rebase.notified() => {
                let moved = timetable.rebase(&shared);
                if moved > 0 {
                    warn!(node = %options.node, jobs = moved, offset_ms = shared.clock.offset_ms().unwrap_or(0),
                        "schedule computed again by redis's clock: this node's wall clock, which it was computed by at start, is off");
                }
            }
            _ = shared.fatal.cancelled() => break,
        }
    }
    systemd::stopping();
    let grace = config_tx.borrow().daemon.shutdown_grace;
    drain(&shared, grace, &mut stops, &hurry).await;
    watchdog_stop.cancel();
    let _ = watchdog.await;
    page_stop.cancel();
    if let Some(page) = page {
        // Requests in progress finish within their own limit; not longer.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), page).await;
    }
    let (prefix, instance) = (shared.locker.prefix(), shared.instance.as_str());
    let withdrawn = shared
        .locker
        .coordinator()
        .on_members(|conn| {
            let node = options.node.as_str();
            async move { registry::withdraw(&conn, prefix, node, instance).await }
        })
        .await;
    // Refused at start, the one error says why: a withdraw refused too
    // (a wrong password) is not worth a line of its own.
    if let Some(reason) = shared.fatal_reason() {
        return Err(StartRefused(reason).into());
    }
    if let Err(err) = withdrawn {
        warn!(node = %options.node, error = %err, "cannot withdraw from the node registry; it expires by itself");
    }
    let record = crate::control::audit::Record::new(&options.node, "stop", &options.node);
    let conn = shared.locker.connection();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        crate::control::audit::append(&conn, prefix, &record),
    )
    .await;
    info!(node = %options.node, "stopped");
    Ok(())
}

/// Starts the status page on `listener`, with a Redis connection of its
/// own (its reads never queue behind this node's claims).
fn status_page_task(
    listener: tokio::net::TcpListener,
    shared: &Arc<Shared>,
    config: &Config,
    config_rx: watch::Receiver<Arc<Config>>,
    node: &str,
    stop: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let coordinator = connect(&config.redis)?;
    let health = Arc::clone(shared);
    let setup = crate::status_page::Setup {
        node: node.to_string(),
        config: config_rx,
        coordinator,
        outage_since: Arc::new(move || health.redis_health.unreachable_since()),
    };
    Ok(crate::status_page::spawn(listener, setup, stop))
}

/// The jobs of `jobs` that have retries, by name (only those: the map
/// costs nothing for the many jobs without).
fn with_retries(jobs: &[Arc<Job>]) -> HashMap<String, Arc<Job>> {
    jobs.iter()
        .filter(|job| job.retries > 0)
        .map(|job| (job.name.clone(), Arc::clone(job)))
        .collect()
}

/// The config's warnings, one line each (at start and after a reload).
/// One line naming the proxies `http` hooks go through, if the daemon's
/// environment names any (hooks to this machine never do).
fn log_proxies(node: &str) {
    let proxies = crate::exec::proxies_from_env();
    if proxies.is_empty() {
        return;
    }
    let shown: Vec<String> = proxies
        .iter()
        .map(|(name, to)| format!("{name}={to}"))
        .collect();
    let no_proxy = std::env::var("NO_PROXY")
        .or_else(|_| std::env::var("no_proxy"))
        .unwrap_or_default();
    if no_proxy.trim() == "*" {
        return;
    }
    info!(
        node = %node,
        proxy = %shown.join(" "),
        no_proxy = %no_proxy,
        "http hooks go through the proxy of the environment, except to localhost, loopback addresses and NO_PROXY"
    );
}

fn log_warnings(config: &Config, node: &str) {
    for warning in &config.warnings {
        warn!(node = %node, config = %config.path.display(), warning = %warning, "config warning");
    }
}

/// Stops claiming and waits for the running jobs: `grace`, then they are
/// interrupted; a second stop signal interrupts them at once with SIGKILL
/// (`hurry`); a third stops waiting (the jobs are dead by then, their
/// records may be lost: each is logged).
async fn drain(
    shared: &Shared,
    grace: std::time::Duration,
    stops: &mut mpsc::UnboundedReceiver<&'static str>,
    hurry: &CancellationToken,
) {
    let node = shared.locker.node();
    info!(node = %node, grace = ?grace, "stopping: no new claims, running jobs may finish");
    shared.cancel.cancel();
    shared.tracker.close();
    let grace_over = tokio::time::sleep(grace);
    tokio::pin!(grace_over);
    let (mut signals, mut interrupted) = (1, false);
    loop {
        tokio::select! {
            () = shared.tracker.wait() => return,
            () = &mut grace_over, if !interrupted => {
                warn!(node = %node, grace = ?grace, "shutdown grace over, interrupting running jobs");
                shared.interrupt.cancel();
                interrupted = true;
            }
            Some(signal) = stops.recv() => {
                signals += 1;
                hurry.cancel();
                shared.interrupt.cancel();
                interrupted = true;
                if signals == 2 {
                    warn!(node = %node, signal,
                        "second stop signal: killing every running job now; their locks are released and the runs recorded `interrupted` before exit");
                } else {
                    error!(node = %node, signal, pending = shared.pending.count(),
                        "another stop signal: exiting without waiting for redis; the jobs were killed, their locks expire by themselves");
                    return;
                }
            }
        }
    }
}
