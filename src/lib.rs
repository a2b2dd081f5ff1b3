//! solocron: run cron jobs on a fleet of servers so that every scheduled
//! occurrence runs on exactly one of them.
//!
//! Modules, from the pure core outwards; each uses only modules listed
//! above it (`tests/it/module_graph.rs` fails on any cycle between them):
//! - [`memory`]: the allocator's arenas.
//! - [`schedule`]: cron expression + time zone -> UTC occurrences (pure).
//! - [`tags`]: node tags and a job's `run_on`: parsing and matching (pure).
//! - [`config`]: `jobs.toml` -> a validated [`config::Config`].
//! - [`crontab`]: `solocron import-crontab`, a crontab -> a `jobs.toml` fragment.
//! - [`keys`]: every Redis key name (a job's, and the fleet's own).
//! - [`systemd`]: notifications to systemd (`READY=1`, `STOPPING=1`, watchdog
//!   pings); not the jobs' `on_failure` / `on_success` notifiers.
//! - [`shutdown`]: stop requests (SIGTERM, SIGINT), reloads (SIGHUP), and Ctrl-Z
//!   (SIGTSTP, SIGTTIN, SIGTTOU) refused while locks are renewed.
//! - [`logging`]: log lines that never block or panic (a queue to one writer thread),
//!   or native journal entries under systemd.
//! - [`outcome`]: the ways an occurrence ends ([`outcome::Outcome::ALL`]), and their words.
//! - [`exec`]: runs a job's action and classifies its [`Outcome`](outcome::Outcome).
//! - [`open_files`]: the open files limit raised for the process and given
//!   back to its jobs.
//! - [`metrics`]: Prometheus metrics.
//! - [`coordinator`]: how we talk to Redis: one server, Sentinel, Cluster, Redlock;
//!   what a Redis error means; the fleet's Redis `TIME`.
//! - [`history`]: the per-job decision stream (who ran which occurrence): the
//!   entry, reading it back, merging Redlock masters' histories.
//! - [`registry`]: live nodes and their job fingerprints (config drift guard).
//! - [`lock`]: the claim / extend / release scripts on Redis (`Locker`).
//! - [`limits`]: a run's room in its group: taken after the claim, kept
//!   beside the lease, given back at the end.
//! - [`run`]: one run of a job under its lease (watchdog beside the executor,
//!   release with the history entry), for the daemon and `trigger`.
//! - [`control`]: fleet-wide pauses, drains, aborts, `trigger --fleet` requests
//!   and occurrences declined at `max_running`, in Redis.
//! - [`inspect`]: read-only `status`, `history` and `audit` views for operators.
//! - [`status_page`]: the read-only web page of the fleet (`[daemon]
//!   status_listen`), from `inspect`'s reads.
//! - [`daemon`]: the loop joining schedule, lock, exec and history.
//! - [`trigger`]: `solocron trigger JOB`, a manual run under the lock.
//! - [`ops`]: `pause`, `resume`, `drain`, `undrain`, `trigger --fleet`, `abort`.
//! - [`cli`]: command-line types, logging set-up and the subcommands; its
//!   [`cli::manual`] generates man pages and shell completions for packaging.
#![deny(unsafe_code)]

pub mod cli;
pub mod config;
pub mod control;
pub mod coordinator;
pub mod crontab;
pub mod daemon;
pub mod exec;
pub mod history;
pub mod inspect;
pub mod keys;
pub mod limits;
pub mod lock;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod open_files;
pub mod ops;
pub mod outcome;
pub mod registry;
pub mod run;
pub mod schedule;
pub mod shutdown;
pub mod status_page;
pub mod systemd;
pub mod tags;
pub mod trigger;
