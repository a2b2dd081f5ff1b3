//! `on_failure` and `on_success`: the notifier of a job, run once per
//! occurrence by the node that recorded its outcome (the runner; for
//! `missed` and `abandoned` the node whose record went through).
//!
//! A notifier is an action like a job's own (command, argv, http) with the
//! run's variables plus `SOLOCRON_OUTCOME`, `SOLOCRON_EXIT_CODE`,
//! `SOLOCRON_ERROR`, `SOLOCRON_OUTPUT_TAIL` (headers and a JSON body for a
//! hook without a `body`). A process notifier gets the daemon's environment
//! and `[daemon] env_file` plus those variables, in the daemon's working
//! directory: not the job's `env` or `working_dir`, which may be what made
//! the job fail. Its output is logged as `notifier output`, never as the
//! job's own `job output`. It runs in the background, under its own
//! timeout, and takes no lock: it never delays the next occurrence and
//! never changes the job's outcome. Its failure is logged and counted
//! (`solocron_notifications_total{result}`), never retried. At shutdown a
//! notifier still running when the grace is over is stopped like a job.
//!
//! Failure model: a node that dies between the end of a run and starting
//! the notifier sends nothing (at most once, never twice). A run's notifier
//! starts before its outcome is recorded (`occurrence::run_won`): an
//! outcome held in memory while Redis is away is notified at once, not
//! when it is recorded.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Shared;
use crate::config::{Job, JobExtras, Notifier};
use crate::exec::{Executor, Notice, Outcome, RunContext, StopReason};

/// Which run of which occurrence the notice is about.
pub struct Subject<'a> {
    pub occurrence: &'a str,
    pub fence: u64,
    pub attempt: u32,
}

/// Runs `job`'s notifier for `notice.outcome`, if it has one, in the
/// background.
pub fn send(shared: &Shared, job: &Arc<Job>, subject: Subject<'_>, notice: Notice) {
    let Some(prepared) = prepare(shared, job, subject, notice) else {
        return;
    };
    let executor = shared.executor.clone();
    let interrupt = shared.interrupt.clone();
    shared
        .tracker
        .spawn(async move { run(&executor, &interrupt, prepared).await });
}

/// [`send`] for several occurrences at once (a gap of missed ones): the
/// notifiers run one after the other, not all at the same moment.
pub fn send_each(shared: &Shared, job: &Arc<Job>, notices: Vec<(String, Notice)>) {
    let prepared: Vec<Prepared> = notices
        .into_iter()
        .filter_map(|(occurrence, notice)| {
            let subject = Subject {
                occurrence: &occurrence,
                fence: 0,
                attempt: 1,
            };
            prepare(shared, job, subject, notice)
        })
        .collect();
    if prepared.is_empty() {
        return;
    }
    let executor = shared.executor.clone();
    let interrupt = shared.interrupt.clone();
    shared.tracker.spawn(async move {
        for one in prepared {
            if interrupt.is_cancelled() {
                return;
            }
            run(&executor, &interrupt, one).await;
        }
    });
}

/// A notifier ready to run: which one, and what it is told.
struct Prepared {
    kind: &'static str,
    ctx: RunContext,
}

fn prepare(
    shared: &Shared,
    job: &Arc<Job>,
    subject: Subject<'_>,
    notice: Notice,
) -> Option<Prepared> {
    let (kind, notifier) = match notice.outcome {
        Outcome::Succeeded => ("on_success", job.extras.on_success.as_ref()),
        outcome if outcome.is_failure() => ("on_failure", job.extras.on_failure.as_ref()),
        _ => return None,
    };
    let notifier = notifier?;
    let ctx = RunContext {
        job: Arc::new(notifier_job(job, notifier)),
        occurrence: subject.occurrence.to_string(),
        fence: subject.fence,
        node: shared.locker.node().to_string(),
        env_file: shared.env_file(),
        mask: shared.mask(),
        lost_lease_grace: notifier.timeout,
        lease_lost: Default::default(),
        attempt: subject.attempt,
        notice: Some(Arc::new(notice)),
    };
    Some(Prepared { kind, ctx })
}

async fn run(executor: &Executor, interrupt: &CancellationToken, prepared: Prepared) {
    let Prepared { kind, ctx } = prepared;
    let stop = async move {
        interrupt.cancelled().await;
        StopReason::Interrupted
    };
    let report = executor.execute(&ctx, stop).await;
    let result = report.outcome.as_str();
    crate::metrics::notification(&ctx.job.name, kind, result);
    let about = ctx
        .notice
        .as_ref()
        .map(|n| n.outcome.as_str())
        .unwrap_or_default();
    let duration_ms = u64::try_from(report.duration.as_millis()).unwrap_or(u64::MAX);
    if report.outcome == Outcome::Succeeded {
        info!(job = %ctx.job.name, occurrence = %ctx.occurrence, node = %ctx.node, fence = ctx.fence,
            notifier = kind, about = %about, duration_ms, "notifier ran");
    } else {
        warn!(job = %ctx.job.name, occurrence = %ctx.occurrence, node = %ctx.node, fence = ctx.fence,
            notifier = kind, about = %about, result = %result, exit_code = report.exit_code,
            http_status = report.http_status, error = report.error.as_deref().map(tracing::field::display),
            duration_ms, "notifier failed (not retried; the job's outcome is unchanged)");
    }
}

/// The job as its notifier runs: the notifier's action and timeout under
/// the job's name, and none of the job's own settings for its process: not
/// its `env` (a `PATH` of its own would hide `curl` from the notifier) and
/// not its `working_dir` (a missing mount would keep the notifier from
/// starting exactly when it has something to report). A notifier has no
/// `env` or `working_dir` of its own: it runs with the daemon's
/// environment, `[daemon] env_file` and the `SOLOCRON_*` variables, in the
/// daemon's working directory.
fn notifier_job(job: &Job, notifier: &Notifier) -> Job {
    Job {
        action: notifier.action.clone(),
        timeout: Some(notifier.timeout),
        extras: JobExtras::default().shared(),
        ..job.clone()
    }
}

/// A notice for a decision that ran nothing (`missed`, `abandoned`).
pub fn decided(outcome: Outcome, error: String) -> Notice {
    Notice {
        error: Some(error),
        ..Notice::of(outcome)
    }
}
