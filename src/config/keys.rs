//! Every key `jobs.toml` knows, per table: the loader checks tables against
//! these lists (unknown keys are errors with a "did you mean"), and the
//! property tests generate documents from them, so both stay in step.

/// Top-level tables.
pub const TOP: &[&str] = &["redis", "daemon", "defaults", "groups", "calendars", "jobs"];
/// The `[redis]` keys that name the server (the coordinator mode); a
/// `[redis]` needs exactly one.
pub const REDIS_SERVER: &[&str] = &["url", "sentinel", "cluster", "redlock"];
/// `[redis]`.
pub const REDIS: &[&str] = &[
    "url",
    "sentinel",
    "cluster",
    "redlock",
    "wait_replicas",
    "wait_timeout",
    "username",
    "password_file",
    "key_prefix",
    "tls_ca_file",
    "tls_cert_file",
    "tls_key_file",
];
/// `[redis] sentinel = { ... }`.
pub const SENTINEL: &[&str] = &["master", "urls", "password_file"];
/// `[daemon]`.
pub const DAEMON: &[&str] = &[
    "shutdown_grace",
    "history_max",
    "metrics_listen",
    "status_listen",
    "env_file",
    "clock",
    "max_running",
];
/// `[jobs.NAME]` and `[defaults]`.
pub const JOB: &[&str] = &[
    "schedule",
    "timezone",
    "command",
    "argv",
    "http",
    "env",
    "working_dir",
    "lock_ttl",
    "timeout",
    "starting_deadline",
    "on_lock_lost",
    "overlap",
    "output_log_max",
    "splay",
    "retries",
    "retry_backoff",
    "on_failure",
    "on_success",
    "max_silence",
    "run_on",
    "group",
    "skip_during",
    "only_during",
];
/// `[calendars.NAME]`.
pub const CALENDAR: &[&str] = &["dates", "ranges", "weekly", "file"];
/// `[groups.NAME]`.
pub const GROUP: &[&str] = &["max_running", "max_starts", "when_full"];
/// A job's `on_failure = { ... }` / `on_success = { ... }`.
pub const NOTIFIER: &[&str] = &["command", "argv", "http", "timeout"];
/// A job's `http = { ... }`.
pub const HTTP: &[&str] = &["url", "method", "timeout", "headers", "body"];
