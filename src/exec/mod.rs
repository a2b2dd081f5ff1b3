//! Runs a job's action and classifies how it ended.
//!
//! One [`Executor`] per daemon: it holds the shared HTTP client and the kill
//! grace. [`Executor::execute`] dispatches on the action: `command` and
//! `argv` jobs go to `process.rs` (own process group, parent-death signal,
//! SIGTERM then SIGKILL to the whole group), `http` hooks to `http.rs`; the
//! job's output lines are logged by `output.rs`.
//!
//! A job that fails is a [`Report`] with an [`Outcome`], never an `Err` and
//! never a panic: `execute` always returns, and for a process it returns only
//! once every process of the job's group is gone (a run is over when its
//! last process is; guarantee 2, docs/guarantees.md): the caller keeps the
//! lease until then. When the job's `timeout` and the `stop` future race,
//! whichever fires first names the outcome, even if the process then exits 0
//! after SIGTERM.

mod child;
mod http;
mod launch;
mod output;
mod process;
mod spawner;

pub use http::proxies_from_env;
pub use launch::give_jobs_open_files;
pub use output::{MASK_MIN, OutputMask};

pub use crate::outcome::Outcome;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::config::{Action, Job};

/// Who is running which occurrence: becomes `SOLOCRON_*` env / headers.
#[derive(Debug, Clone)]
pub struct RunContext {
    /// The job to run.
    pub job: Arc<Job>,
    /// `SOLOCRON_OCCURRENCE`: RFC 3339 UTC whole seconds, or `manual-…`.
    pub occurrence: String,
    /// `SOLOCRON_FENCE`: the fence won by the claim.
    pub fence: u64,
    /// `SOLOCRON_NODE`: this daemon's node id.
    pub node: String,
    /// Extra environment from `[daemon] env_file` (the job's own `env`
    /// wins over it).
    pub env_file: Arc<BTreeMap<String, String>>,
    /// What the run's output must not show (see [`OutputMask`]).
    pub mask: Arc<OutputMask>,
    /// How long a job stopped for a lost lease gets between SIGTERM and
    /// SIGKILL: what is left before another node could take the lock.
    pub lost_lease_grace: Duration,
    /// Cancelled when the lease is lost: a job already being stopped (after
    /// its timeout, at shutdown) then gets at most `lost_lease_grace` more.
    pub lease_lost: CancellationToken,
    /// `SOLOCRON_ATTEMPT`: 1, then 2… for retries of the occurrence.
    pub attempt: u32,
    /// Set when this is a notifier (`on_failure` / `on_success`): how the
    /// job's run ended, for `SOLOCRON_OUTCOME` & co.
    pub notice: Option<Arc<Notice>>,
}

/// What a notifier is told about the run it reports (docs/configuration.md):
/// `SOLOCRON_OUTCOME`, `SOLOCRON_EXIT_CODE`, `SOLOCRON_ERROR`,
/// `SOLOCRON_OUTPUT_TAIL`, and `Solocron-*` headers / a JSON body for HTTP.
#[derive(Debug, Clone)]
pub struct Notice {
    /// The outcome it ended with.
    pub outcome: Outcome,
    pub exit_code: Option<i32>,
    pub http_status: Option<u16>,
    pub error: Option<String>,
    pub output_tail: Option<String>,
}

impl Notice {
    /// A notice of `outcome` with nothing else known yet.
    pub fn of(outcome: Outcome) -> Notice {
        Notice {
            outcome,
            exit_code: None,
            http_status: None,
            error: None,
            output_tail: None,
        }
    }

    /// The `SOLOCRON_*` variables a notifier process gets (empty strings
    /// for what is not known). The error and the output tail carry what
    /// the run printed, which may hold NUL bytes (a job printing binary
    /// data): an environment value cannot, so each NUL becomes U+FFFD
    /// (`�`), as bytes that are not UTF-8 already do.
    pub fn variables(&self) -> [(&'static str, String); 4] {
        [
            ("SOLOCRON_OUTCOME", self.outcome.as_str().to_string()),
            (
                "SOLOCRON_EXIT_CODE",
                self.exit_code
                    .map(|code| code.to_string())
                    .unwrap_or_default(),
            ),
            (
                "SOLOCRON_ERROR",
                env_safe(self.error.as_deref().unwrap_or_default()),
            ),
            (
                "SOLOCRON_OUTPUT_TAIL",
                env_safe(self.output_tail.as_deref().unwrap_or_default()),
            ),
        ]
    }
}

/// `text` as an environment value can hold it: every NUL byte replaced by
/// U+FFFD, the replacement character.
fn env_safe(text: &str) -> String {
    text.replace('\0', "\u{fffd}")
}

/// Why the daemon stops a running job early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The lease could not be confirmed and `on_lock_lost = "kill"`.
    LockLost,
    /// Shutdown grace is over.
    Interrupted,
    /// An operator's `solocron abort`.
    Aborted,
}

impl From<StopReason> for Outcome {
    fn from(reason: StopReason) -> Outcome {
        match reason {
            StopReason::LockLost => Outcome::LockLost,
            StopReason::Interrupted => Outcome::Interrupted,
            StopReason::Aborted => Outcome::Aborted,
        }
    }
}

/// What happened, for the log line and the history entry.
#[derive(Debug, Clone)]
pub struct Report {
    /// How it ended.
    pub outcome: Outcome,
    /// Exit code of a command/argv job (`None` if killed by a signal or never started).
    pub exit_code: Option<i32>,
    /// Status of an HTTP hook, if a response arrived.
    pub http_status: Option<u16>,
    /// Why it failed to start or to connect, secrets removed.
    pub error: Option<String>,
    /// Wall-clock start, taken just before the action starts.
    pub started_at: DateTime<Utc>,
    /// Wall-clock end, taken once the process is reaped / the response is in.
    pub finished_at: DateTime<Utc>,
    /// Monotonic run time (not `finished_at - started_at`, which a clock step skews).
    pub duration: Duration,
    /// The last bytes (at most 4 KiB) a process printed, both streams.
    pub output_tail: Option<String>,
}

/// The part of a [`Report`] the action runners fill in.
#[derive(Debug)]
struct Finish {
    outcome: Outcome,
    exit_code: Option<i32>,
    http_status: Option<u16>,
    error: Option<String>,
    output_tail: Option<String>,
}

impl Finish {
    fn new(outcome: Outcome) -> Finish {
        Finish {
            outcome,
            exit_code: None,
            http_status: None,
            error: None,
            output_tail: None,
        }
    }

    fn failed(error: String) -> Finish {
        Finish {
            error: Some(error),
            ..Finish::new(Outcome::Failed)
        }
    }
}

/// Runs actions; one per daemon (holds the shared HTTP client).
#[derive(Debug, Clone)]
pub struct Executor {
    kill_grace: Duration,
    output_grace: Duration,
    echo_output: bool,
    http: reqwest::Client,
    /// The same without the proxies of the environment, for hooks to this
    /// machine (`http::is_loopback`).
    http_direct: reqwest::Client,
    spawner: spawner::Spawner,
    /// Cancelled when stopping must not wait: a second SIGTERM/SIGINT. A
    /// job being stopped then gets SIGKILL at once instead of the grace.
    hurry: CancellationToken,
}

/// Set-up failures (not job failures).
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The shared `reqwest::Client` could not be built.
    #[error("cannot build the HTTP client")]
    HttpClient(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The threads that start job processes could not be started.
    #[error("cannot start the job spawning threads")]
    Spawner(#[source] std::io::Error),
}

/// Time between SIGTERM and SIGKILL (docs/configuration.md).
const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(10);

/// How long output readers may keep going after the job's process has exited
/// (a background grandchild can hold the pipes open for ever).
const DEFAULT_OUTPUT_GRACE: Duration = Duration::from_secs(2);

impl Executor {
    /// An executor whose kill sequence waits 10 s between SIGTERM and SIGKILL.
    ///
    /// Installs the `ring` rustls provider as the process default (if another
    /// one is installed already, that one is kept), builds the HTTP client and
    /// starts the threads that start job processes.
    pub fn new() -> Result<Executor, ExecError> {
        // Err means a provider is already installed, which is all we need.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // Redirects are not followed: a hook succeeds by a 2xx of its own
        // URL, never by what a redirect (a POST turned into a GET without
        // its body) answered (`http.rs`).
        let builder = || {
            reqwest::Client::builder()
                .user_agent(concat!("solocron/", env!("CARGO_PKG_VERSION")))
                .redirect(reqwest::redirect::Policy::none())
        };
        let built = |result: reqwest::Result<reqwest::Client>| {
            result.map_err(|err| ExecError::HttpClient(Box::new(err.without_url())))
        };
        let http = built(builder().build())?;
        let http_direct = built(builder().no_proxy().build())?;
        let threads = std::thread::available_parallelism().map_or(2, usize::from);
        let spawner = spawner::Spawner::start(threads.clamp(2, 4)).map_err(ExecError::Spawner)?;
        Ok(Executor {
            kill_grace: DEFAULT_KILL_GRACE,
            output_grace: DEFAULT_OUTPUT_GRACE,
            echo_output: false,
            http,
            http_direct,
            spawner,
            hurry: CancellationToken::new(),
        })
    }

    /// Jobs being stopped get SIGKILL at once (no SIGTERM grace) once
    /// `hurry` is cancelled.
    pub fn with_hurry(mut self, hurry: CancellationToken) -> Executor {
        self.hurry = hurry;
        self
    }

    /// Sets the time between SIGTERM and SIGKILL (tests use a short one).
    pub fn with_kill_grace(mut self, grace: Duration) -> Executor {
        self.kill_grace = grace;
        self
    }

    /// Also copies each output line to this process's stdout / stderr (for
    /// `solocron trigger`); the lines are logged either way.
    pub fn with_output_echo(mut self, echo: bool) -> Executor {
        self.echo_output = echo;
        self
    }

    /// Runs the action to the end, or until `stop` completes (then the
    /// process group is stopped and the outcome says why), or until the
    /// job's `timeout`.
    ///
    /// For `command` / `argv` jobs this returns only after the process has
    /// been reaped, every other process of its group is gone (stopped too
    /// by the timeout or `stop`), and its output read (or abandoned after a
    /// short grace when a process outside the group keeps the pipes open).
    /// If this future is dropped before that, the process group is sent
    /// SIGKILL.
    ///
    /// Call it from async code on a long-lived runtime thread, never from
    /// `spawn_blocking`: the child's parent-death signal is tied to the
    /// thread that spawns it (see `process.rs`).
    pub async fn execute(
        &self,
        ctx: &RunContext,
        stop: impl Future<Output = StopReason>,
    ) -> Report {
        let started_at = Utc::now();
        let start = Instant::now();
        let finish = match &ctx.job.action {
            Action::Command(_) | Action::Argv(_) => process::run(self, ctx, stop).await,
            Action::Http(action) => {
                let client = if http::is_loopback(&action.url) {
                    &self.http_direct
                } else {
                    &self.http
                };
                http::run(client, ctx, action, stop).await
            }
        };
        Report {
            outcome: finish.outcome,
            exit_code: finish.exit_code,
            http_status: finish.http_status,
            error: finish.error,
            started_at,
            finished_at: Utc::now(),
            duration: start.elapsed(),
            output_tail: finish.output_tail,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Notice;

    #[test]
    fn notice_variables_hold_no_nul_byte() {
        let notice = Notice {
            outcome: super::Outcome::Failed,
            exit_code: Some(1),
            http_status: None,
            error: Some("bad\0error".into()),
            output_tail: Some("a\0b\n".into()),
        };
        let variables = notice.variables();
        assert!(variables.iter().all(|(_, value)| !value.contains('\0')));
        assert_eq!(variables[2].1, "bad\u{fffd}error");
        assert_eq!(variables[3].1, "a\u{fffd}b\n");
    }
}
