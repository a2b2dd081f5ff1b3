//! The validated configuration: what the rest of the daemon reads.
//!
//! Everything here has passed every rule of docs/configuration.md: one action
//! per job, `${VAR}` already interpolated, durations and time zones parsed,
//! every schedule able to fire. Secrets (the Redis password, interpolated
//! values) are kept out of `Debug` output.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::schedule::Schedule;

/// A whole, validated `jobs.toml`.
#[derive(Clone)]
pub struct Config {
    /// The file it was read from (for messages).
    pub path: PathBuf,
    pub redis: RedisConfig,
    pub daemon: DaemonConfig,
    /// Jobs in file order.
    pub jobs: Vec<Arc<Job>>,
    /// `[groups.NAME]`, in file order.
    pub groups: Vec<Arc<Group>>,
    /// `NAME=value` pairs read from `[daemon] env_file` (empty without
    /// one). They fill `${VAR}` before the process environment does, and
    /// jobs get them in their environment. Values may be secrets.
    pub env: BTreeMap<String, String>,
    /// Every value a `${VAR}` of the file was filled with (from `env_file`
    /// or the process environment). Values may be secrets.
    pub filled: Vec<String>,
    /// What `check` prints as `warning:` and `run` logs at start and on
    /// reload; never a reason to refuse the file. In file order.
    pub warnings: Vec<super::Warning>,
    /// The files it names and the loader read (`password_file`,
    /// `sentinel.password_file`, `env_file`, `tls_*_file`), in file order:
    /// what `check` asks the service user to be able to read.
    pub files: Vec<super::access::NamedFile>,
}

impl fmt::Debug for Config {
    // The env file's values may be secrets: show only the names.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("path", &self.path)
            .field("redis", &self.redis)
            .field("daemon", &self.daemon)
            .field("jobs", &self.jobs)
            .field("groups", &self.groups)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("warnings", &self.warnings)
            .finish()
    }
}

/// `[redis]`.
#[derive(Clone)]
pub struct RedisConfig {
    /// With [`RedisMode::Single`]: the URL as written (may carry
    /// `user:password@`); never log it, use [`RedisConfig::redacted_url`].
    /// Empty in the other modes.
    pub url: String,
    /// Which coordinator: one server, a Sentinel-followed master, a Redis
    /// Cluster, or N independent masters (Redlock).
    pub mode: RedisMode,
    /// Replicas that must acknowledge (`WAIT`) a claim, renewal and release
    /// before they count (default 1 with `sentinel` and `cluster`, else 0).
    pub wait_replicas: u32,
    /// How long a `WAIT` may take (default 250 ms).
    pub wait_timeout: Duration,
    /// The data nodes' user name for `sentinel` (the master's address comes
    /// from the sentinels, so no URL carries it).
    pub username: Option<String>,
    /// Read from `password_file`, trailing newline trimmed; overrides any
    /// password in the URL.
    pub password: Option<String>,
    /// Namespace for every key (`{PREFIX:JOB}:...`).
    pub key_prefix: String,
    /// Certificates for a `rediss://` connection, read at load.
    pub tls: RedisTls,
}

/// Exactly one of `url`, `sentinel`, `cluster`, `redlock`
/// (docs/configuration.md).
#[derive(Clone, PartialEq, Eq)]
pub enum RedisMode {
    /// `url = "redis://…"`: one server.
    Single,
    /// `sentinel = { master = "NAME", urls = [...] }`: the master named
    /// `master`, found through these sentinels and followed across failovers.
    Sentinel {
        master: String,
        /// The sentinels' URLs (may carry their own `user:password@`).
        urls: Vec<String>,
        /// The sentinels' password, from `sentinel.password_file`, if set.
        password: Option<String>,
    },
    /// `cluster = [...]`: seed nodes of a Redis Cluster.
    Cluster { urls: Vec<String> },
    /// `redlock = [...]`: N independent masters; a majority decides.
    Redlock { urls: Vec<String> },
}

impl RedisMode {
    /// `url`, `sentinel`, `cluster` or `redlock`: what `check` names.
    pub fn name(&self) -> &'static str {
        match self {
            RedisMode::Single => "url",
            RedisMode::Sentinel { .. } => "sentinel",
            RedisMode::Cluster { .. } => "cluster",
            RedisMode::Redlock { .. } => "redlock",
        }
    }
}

impl fmt::Debug for RedisMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = |urls: &[String]| urls.iter().map(|url| redact_url(url)).collect::<Vec<_>>();
        match self {
            RedisMode::Single => f.write_str("Single"),
            RedisMode::Sentinel {
                master,
                urls,
                password,
            } => f
                .debug_struct("Sentinel")
                .field("master", master)
                .field("urls", &shown(urls))
                .field("password", &password.as_ref().map(|_| "***"))
                .finish(),
            RedisMode::Cluster { urls } => f.debug_tuple("Cluster").field(&shown(urls)).finish(),
            RedisMode::Redlock { urls } => f.debug_tuple("Redlock").field(&shown(urls)).finish(),
        }
    }
}

/// Default of `wait_timeout`.
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_millis(250);

/// `tls_ca_file`, `tls_cert_file`, `tls_key_file` of `[redis]`, as PEM
/// bytes read (and parsed once) when the file loads. All `None`: a
/// `rediss://` server must present a certificate from the system's roots.
#[derive(Clone, Default)]
pub struct RedisTls {
    /// Trusted CA certificates; replaces the system roots when set.
    pub ca: Option<Vec<u8>>,
    /// Client certificate chain and private key, for mutual TLS.
    pub client: Option<ClientIdentity>,
}

impl RedisTls {
    /// Whether any TLS setting was given (then the URL must be `rediss://`).
    pub fn is_configured(&self) -> bool {
        self.ca.is_some() || self.client.is_some()
    }
}

/// A client certificate chain and its private key (PEM); never printed.
#[derive(Clone)]
pub struct ClientIdentity {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl RedisConfig {
    /// Where the coordinator is, passwords replaced by `***`, safe for logs
    /// and errors: the URL, or `sentinel NAME via URL, URL`, `cluster URL,
    /// …`, `redlock URL, …`.
    pub fn redacted_url(&self) -> String {
        let list = |urls: &[String]| {
            urls.iter()
                .map(|url| redact_url(url))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match &self.mode {
            RedisMode::Single => redact_url(&self.url),
            RedisMode::Sentinel { master, urls, .. } => {
                format!("sentinel `{master}` via {}", list(urls))
            }
            RedisMode::Cluster { urls } => format!("cluster {}", list(urls)),
            RedisMode::Redlock { urls } => format!("redlock {}", list(urls)),
        }
    }

    /// A config for one server at `url` (what `--redis URL` selects).
    pub fn use_url(&mut self, url: &str) {
        self.url = url.to_string();
        self.mode = RedisMode::Single;
        self.wait_replicas = 0;
    }
}

/// Replaces the password in `scheme://user:password@host` with `***`, and
/// the value of a `pass=` / `password=` query parameter (unix socket URLs
/// carry the password there). The user name is not a secret and shows
/// (`rediss://solocron@host`, whose password is in `password_file`, shows
/// as written). Masks too much rather than too little: the user info runs
/// to the *last* `@`, so a password with an unencoded `/`, `?` or `@` is
/// still hidden.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let (head, rest) = url.split_at(scheme_end + 3);
    let rest = match rest.rfind('@') {
        Some(at) => match rest[..at].find(':') {
            Some(colon) => format!("{}:***{}", &rest[..colon], &rest[at..]),
            None => rest.to_string(),
        },
        None => rest.to_string(),
    };
    format!("{head}{}", mask_query_passwords(&rest))
}

/// `?db=1&pass=x` -> `?db=1&pass=***`.
fn mask_query_passwords(rest: &str) -> String {
    let Some(question) = rest.find('?') else {
        return rest.to_string();
    };
    let (before, query) = rest.split_at(question + 1);
    let (query, fragment) = match query.find('#') {
        Some(hash) => query.split_at(hash),
        None => (query, ""),
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if matches!(key, "pass" | "password") => format!("{key}=***"),
            _ => pair.to_string(),
        })
        .collect();
    format!("{before}{}{fragment}", pairs.join("&"))
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &self.redacted_url())
            .field("mode", &self.mode)
            .field("wait_replicas", &self.wait_replicas)
            .field("wait_timeout", &self.wait_timeout)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("key_prefix", &self.key_prefix)
            .field("tls_ca", &self.tls.ca.is_some())
            .field("tls_client", &self.tls.client.is_some())
            .finish()
    }
}

/// `[calendars.NAME]`: local dates, ranges and weekly windows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calendar {
    pub name: String,
    pub(crate) spans: Vec<super::calendars::Span>,
}

impl Calendar {
    /// Whether the local instant `at` (in a job's zone) is inside.
    pub fn contains(&self, at: chrono::NaiveDateTime) -> bool {
        self.spans.iter().any(|span| span.contains(at))
    }
}

/// `[groups.NAME]`: limits the group's jobs share, fleet-wide (counted
/// in Redis by Redis's clock, guarantee 11 of docs/guarantees.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub name: String,
    /// `max_running`: at most this many runs of the group's jobs at once.
    pub max_running: Option<u32>,
    /// `max_starts`: at most this many starts in any window this long.
    pub max_starts: Option<MaxStarts>,
    pub when_full: WhenFull,
}

/// `max_starts = "N/DURATION"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxStarts {
    pub count: u32,
    pub window: Duration,
}

impl fmt::Display for MaxStarts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}",
            self.count,
            humantime::format_duration(self.window)
        )
    }
}

/// `when_full`: what an occurrence does when its group has no room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenFull {
    /// Recorded `throttled` at once.
    Skip,
    /// Waits for room, oldest occurrence first, until its
    /// `starting_deadline`; then `throttled`.
    Wait,
}

impl WhenFull {
    pub fn as_str(self) -> &'static str {
        match self {
            WhenFull::Skip => "skip",
            WhenFull::Wait => "wait",
        }
    }
}

/// `[daemon]`.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// SIGTERM: running jobs get this long to finish (default 30 s).
    pub shutdown_grace: Duration,
    /// Approximate cap of each job's history stream (default 10,000).
    pub history_max: u64,
    /// Prometheus listener, off by default.
    pub metrics_listen: Option<String>,
    /// The status page's listener (`crate::status_page`), off by default.
    pub status_listen: Option<String>,
    /// `env_file`, resolved against the config's directory; re-read at
    /// every load (start and each reload).
    pub env_file: Option<PathBuf>,
    /// Which clock fires occurrences (default [`ClockSource::Redis`]).
    pub clock: ClockSource,
    /// `max_running`: at most this many runs at once on this node; at the
    /// cap it claims nothing (`None`: no cap).
    pub max_running: Option<u32>,
}

/// `[daemon] clock`: by whose clock a node fires occurrences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockSource {
    /// Redis `TIME`: this node's clock plus the offset it measures against
    /// Redis (local time until the first measurement).
    Redis,
    /// This node's own wall clock.
    Local,
}

/// What to do with a running job whose lease can no longer be confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLockLost {
    /// Stop the job's process group (SIGTERM, SIGKILL after 10 s).
    Kill,
    /// Let it run; the loss is logged.
    Continue,
}

/// What to do when an occurrence comes while the job's lock is still held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlap {
    /// Record the occurrence as skipped.
    Skip,
}

/// One `[jobs.NAME]` entry with `[defaults]` applied.
#[derive(Clone)]
pub struct Job {
    /// `[A-Za-z0-9_.-]{1,64}`.
    pub name: String,
    /// The expression and its time zone.
    pub schedule: Schedule,
    /// At least 1 s.
    pub lock_ttl: Duration,
    /// `None` = no timeout; else at least 1 s.
    pub timeout: Option<Duration>,
    /// How late an occurrence may still be claimed (also the catch-up window).
    pub starting_deadline: Duration,
    pub on_lock_lost: OnLockLost,
    pub overlap: Overlap,
    pub action: Action,
    /// Bytes of one run's output that go to the log; the rest is counted.
    pub output_log_max: u64,
    /// This job's own offset in `[0, splay)`, from a hash of its name: each
    /// occurrence fires this long after its instant (its name stays the
    /// instant).
    pub splay_offset: Duration,
    /// How many times a failed or timed-out run of an occurrence is tried
    /// again (0: never).
    pub retries: u32,
    /// The settings most jobs leave at their defaults ([`JobExtras`]).
    pub extras: Arc<JobExtras>,
    /// Filled by [`Job::fingerprint`]; `Default::default()` when making a job.
    pub fingerprint: super::fingerprint::FingerprintCache,
}

/// The settings of a job that most jobs leave at their defaults, kept
/// apart so that 10,000 loaded jobs do not each carry room for them: the
/// jobs that set none share one ([`JobExtras::shared`]). No `Debug`: `env`
/// values may be secrets (the job's `Debug` shows their names).
#[derive(Clone)]
pub struct JobExtras {
    /// Extra environment for `command` / `argv` jobs (values interpolated).
    pub env: BTreeMap<String, String>,
    pub working_dir: Option<PathBuf>,
    /// `splay`: occurrences fire up to this much after their instant.
    pub splay: Duration,
    /// The pause before the first retry; doubled for each later one.
    pub retry_backoff: Duration,
    /// Run once per occurrence that ends `failed`, `timed_out`,
    /// `lock_lost`, `missed` or `abandoned` (after the last retry).
    pub on_failure: Option<Arc<Notifier>>,
    /// Run once per occurrence that ends `succeeded`.
    pub on_success: Option<Arc<Notifier>>,
    /// How long the job may go without a success before the Prometheus
    /// rules alert (`solocron_job_max_silence_seconds`); `None`: a multiple
    /// of its schedule's longest interval, set in the rules. At least 1 s.
    pub max_silence: Option<Duration>,
    /// `run_on`: the tags a node needs to run the job (`None`: every node).
    pub run_on: Option<Arc<crate::tags::RunOn>>,
    /// `group`: the fleet-wide limits the job shares with its group.
    pub group: Option<Arc<Group>>,
    /// `skip_during`: calendars whose occurrences are recorded `excluded`.
    pub skip_during: Vec<Arc<Calendar>>,
    /// `only_during`: if any, occurrences outside all of them are excluded.
    pub only_during: Vec<Arc<Calendar>>,
}

impl Default for JobExtras {
    fn default() -> JobExtras {
        JobExtras {
            env: BTreeMap::new(),
            working_dir: None,
            splay: Duration::ZERO,
            retry_backoff: DEFAULT_RETRY_BACKOFF,
            on_failure: None,
            on_success: None,
            max_silence: None,
            run_on: None,
            group: None,
            skip_during: Vec::new(),
            only_during: Vec::new(),
        }
    }
}

impl JobExtras {
    /// `self` behind an `Arc`: the one every default-only job shares when
    /// it is all defaults, else a new one.
    pub fn shared(self) -> Arc<JobExtras> {
        static DEFAULTS: std::sync::LazyLock<Arc<JobExtras>> =
            std::sync::LazyLock::new(|| Arc::new(JobExtras::default()));
        let defaults = JobExtras::default();
        let is_default = self.env.is_empty()
            && self.working_dir.is_none()
            && self.splay == defaults.splay
            && self.retry_backoff == defaults.retry_backoff
            && self.on_failure.is_none()
            && self.on_success.is_none()
            && self.max_silence.is_none()
            && self.run_on.is_none()
            && self.group.is_none()
            && self.skip_during.is_empty()
            && self.only_during.is_empty();
        if is_default {
            Arc::clone(&DEFAULTS)
        } else {
            Arc::new(self)
        }
    }
}

impl Job {
    /// Why the calendars exclude the occurrence `at` (read in the job's
    /// zone), if they do: inside a `skip_during` calendar, or outside
    /// every `only_during` one.
    pub fn excluded_by(&self, at: chrono::DateTime<chrono::Utc>) -> Option<String> {
        let extras = &self.extras;
        if extras.skip_during.is_empty() && extras.only_during.is_empty() {
            return None;
        }
        let local = at.with_timezone(&self.schedule.timezone()).naive_local();
        if let Some(calendar) = extras.skip_during.iter().find(|c| c.contains(local)) {
            return Some(format!(
                "excluded: inside calendar `{}` (skip_during), {local} in {}",
                calendar.name,
                self.schedule.timezone()
            ));
        }
        if !extras.only_during.is_empty() && !extras.only_during.iter().any(|c| c.contains(local)) {
            let names: Vec<&str> = extras.only_during.iter().map(|c| c.name.as_str()).collect();
            return Some(format!(
                "excluded: outside every only_during calendar ({}), {local} in {}",
                names.join(", "),
                self.schedule.timezone()
            ));
        }
        None
    }

    /// Whether a node with `tags` may run this job (its `run_on`).
    pub fn runs_on(&self, tags: &crate::tags::Tags) -> bool {
        self.extras
            .run_on
            .as_ref()
            .is_none_or(|run_on| run_on.matches(tags))
    }

    /// When occurrence `at` fires: `at` plus the job's splay offset.
    pub fn fires_at(&self, at: chrono::DateTime<chrono::Utc>) -> chrono::DateTime<chrono::Utc> {
        splayed(at, self.splay_offset)
    }

    /// `now` moved back by the job's splay offset: the occurrences at or
    /// before it have fired by `now`, the later ones have not.
    pub fn unsplayed(&self, now: chrono::DateTime<chrono::Utc>) -> chrono::DateTime<chrono::Utc> {
        unsplayed(now, self.splay_offset)
    }

    /// The first occurrence that fires after `now`. With a splay this can
    /// be one whose instant has passed but whose start is still to come
    /// (always so when the splay is longer than the job's period), so a
    /// schedule started at `now` begins here, not at the first instant
    /// after `now`, which would skip the occurrences in between.
    pub fn next_to_fire(
        &self,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Option<chrono::DateTime<chrono::Utc>> {
        self.schedule.next_after(self.unsplayed(now))
    }
}

/// `at` moved on by a splay `offset` (unchanged if that would overflow).
pub fn splayed(
    at: chrono::DateTime<chrono::Utc>,
    offset: Duration,
) -> chrono::DateTime<chrono::Utc> {
    chrono::TimeDelta::from_std(offset)
        .ok()
        .and_then(|offset| at.checked_add_signed(offset))
        .unwrap_or(at)
}

/// `now` moved back by a splay `offset`: the occurrences at or before it
/// have started by `now` (unchanged if that would overflow).
pub fn unsplayed(
    now: chrono::DateTime<chrono::Utc>,
    offset: Duration,
) -> chrono::DateTime<chrono::Utc> {
    chrono::TimeDelta::from_std(offset)
        .ok()
        .and_then(|offset| now.checked_sub_signed(offset))
        .unwrap_or(now)
}

/// The offset of job `name` within `[0, splay)`: the same on every node and
/// at every start (a hash of the name, not a random draw), so the fleet
/// agrees on when each occurrence fires; 1 ms steps.
pub fn splay_offset(name: &str, splay: Duration) -> Duration {
    use sha2::Digest as _;
    let steps = u64::try_from(splay.as_millis()).unwrap_or(u64::MAX);
    if steps == 0 {
        return Duration::ZERO;
    }
    let digest = sha2::Sha256::digest(name.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    Duration::from_millis(u64::from_be_bytes(first) % steps)
}

#[cfg(test)]
mod splay_tests {
    use super::*;

    #[test]
    fn the_offset_is_the_same_for_a_name_and_within_the_splay() {
        let splay = Duration::from_secs(30);
        let a = splay_offset("nightly-report", splay);
        assert_eq!(a, splay_offset("nightly-report", splay));
        assert!(a < splay);
        assert_eq!(
            splay_offset("nightly-report", Duration::ZERO),
            Duration::ZERO
        );
        let spread: std::collections::BTreeSet<u128> = (0..1000)
            .map(|i| splay_offset(&format!("job-{i}"), splay).as_millis() / 1000)
            .collect();
        assert_eq!(
            spread.len(),
            30,
            "1,000 jobs cover every second of the splay"
        );
    }
}

/// `on_failure = { ... }` / `on_success = { ... }`: an action of its own,
/// run with the outcome of the job's run, under its own timeout.
#[derive(Clone, Debug)]
pub struct Notifier {
    pub action: Action,
    /// Default [`DEFAULT_NOTIFIER_TIMEOUT`].
    pub timeout: Duration,
}

/// Default `timeout` of a notifier: 30 s.
pub const DEFAULT_NOTIFIER_TIMEOUT: Duration = Duration::from_secs(30);
/// Default `retry_backoff`: 30 s.
pub const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_secs(30);
/// Longest pause between two attempts, unless `retry_backoff` is longer.
pub const RETRY_BACKOFF_CAP: Duration = Duration::from_secs(3600);

/// The pause after failed attempt `attempt` before the next one: `base`
/// (`retry_backoff`) doubled `attempt − 1` times, capped at an hour (or at
/// `base` when that is longer).
pub fn retry_backoff(base: Duration, attempt: u32) -> Duration {
    let cap = RETRY_BACKOFF_CAP.max(base);
    let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
    base.checked_mul(factor).unwrap_or(cap).min(cap)
}

/// How many of `retries` can start within `interval` of a failed first
/// attempt (taken to end at its occurrence): a retry never starts once the
/// next occurrence is due, and each waits [`retry_backoff`] after the one
/// before (whose own run is taken to last no time).
pub fn retries_within(base: Duration, retries: u32, interval: Duration) -> u32 {
    let mut waited = Duration::ZERO;
    let mut fit = 0;
    for attempt in 1..=retries {
        waited = waited.saturating_add(retry_backoff(base, attempt));
        if waited >= interval {
            break;
        }
        fit = attempt;
    }
    fit
}

/// Default of `output_log_max`: 64 KiB.
pub const DEFAULT_OUTPUT_LOG_MAX: u64 = 64 * 1024;

/// Exactly one per job.
#[derive(Clone)]
pub enum Action {
    /// Run by `/bin/sh -c`.
    Command(String),
    /// Run directly, no shell; never empty.
    Argv(Vec<String>),
    /// Boxed: most jobs are processes, and 10,000 loaded jobs should not
    /// each carry room for a hook's URL, method, headers and body.
    Http(Box<HttpAction>),
}

impl fmt::Debug for Action {
    // Interpolated values may be secrets: show only the shape.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Command(_) => f.write_str("Command(..)"),
            Action::Argv(argv) => write!(f, "Argv({:?}, ..)", argv.first()),
            Action::Http(http) => write!(f, "Http({} ..)", http.method),
        }
    }
}

/// `http = { url, method, timeout, headers, body }`.
#[derive(Clone)]
pub struct HttpAction {
    pub url: String,
    /// Upper-case HTTP method, default `POST`.
    pub method: String,
    /// Request timeout, if set (the job's `timeout` still applies).
    pub timeout: Option<Duration>,
    /// Header name -> value, in file order.
    pub headers: Vec<(String, String)>,
    pub body: Option<String>,
    /// The values `${VAR}`s filled into `url`, `headers` and `body`: what
    /// the hook's error messages mask (`***`), since any of them may be a
    /// secret. The rest of those texts is the file's own and is shown.
    pub secrets: Vec<String>,
}

impl fmt::Debug for Job {
    // `env` values may be interpolated secrets: show only the names.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("name", &self.name)
            .field("schedule", &self.schedule)
            .field("lock_ttl", &self.lock_ttl)
            .field("timeout", &self.timeout)
            .field("starting_deadline", &self.starting_deadline)
            .field("on_lock_lost", &self.on_lock_lost)
            .field("overlap", &self.overlap)
            .field("action", &self.action)
            .field("env", &self.extras.env.keys().collect::<Vec<_>>())
            .field("working_dir", &self.extras.working_dir)
            .field("output_log_max", &self.output_log_max)
            .field("splay", &self.extras.splay)
            .field("retries", &self.retries)
            .field("retry_backoff", &self.extras.retry_backoff)
            .field("on_failure", &self.extras.on_failure)
            .field("on_success", &self.extras.on_success)
            .field("max_silence", &self.extras.max_silence)
            .finish()
    }
}
