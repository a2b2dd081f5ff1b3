//! A `trigger --fleet` request this node took ([`super::controls`]): the
//! job runs here exactly as `solocron trigger JOB` runs it locally (a
//! manual run `manual-<instant>` under the job's lock with a new fence,
//! never touching the occurrence record), but inside the daemon, so under
//! the unit's sandbox as the service user, with the env file, the daemon's
//! shutdown handling and its release retries. The request's hash tells
//! the waiting CLI `running` (occurrence, fence) and then `done` (outcome,
//! exit code, output tail); its TTL is renewed while the run goes on.
//!
//! Failure model: a claim Redis does not answer is retried with the same
//! token for [`CLAIM_FOR`], then reported as an error; a lock held by a
//! run in progress is reported `busy` (the CLI exits 3). A result Redis
//! does not take is retried for [`REPORT_FOR`]; the run's own history
//! entry is recorded by the release like any run's. If this node dies, the
//! hash expires and the CLI says so.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::Shared;
use super::occurrence::{How, run_won};
use crate::config::Job;
use crate::control::requests::{self, DONE_TTL, KEEPALIVE, LIVE_TTL, Request};
use crate::exec::Report;
use crate::lock::{Claim, Lease, Target, new_token};
use crate::schedule::Occurrence;

/// How long the claim of a taken request is retried while Redis fails.
const CLAIM_FOR: Duration = Duration::from_secs(5);
/// How long the result is retried while Redis fails.
const REPORT_FOR: Duration = Duration::from_secs(30);
const RETRY: Duration = Duration::from_millis(200);

/// Runs `request` of `job` in the background (tracked: shutdown waits for
/// it), holding `slot` of `[daemon] max_running` until it is over.
pub fn spawn(shared: &Arc<Shared>, job: Arc<Job>, request: Request, slot: super::slots::Slot) {
    shared
        .tracker
        .clone()
        .spawn(run(Arc::clone(shared), job, request, slot));
}

async fn run(shared: Arc<Shared>, job: Arc<Job>, request: Request, _slot: super::slots::Slot) {
    let node = shared.locker.node().to_string();
    let make_up = request
        .occurrence_ms
        .and_then(chrono::DateTime::from_timestamp_millis);
    let occurrence = make_up.map_or_else(|| Occurrence::Manual(Utc::now()), Occurrence::Scheduled);
    info!(job = %job.name, occurrence = %occurrence, node = %node, request = %request.id, by = %request.by,
        "trigger request taken: running the job now (manual run)");
    let token = new_token();
    let sent = Instant::now();
    let give_up = sent + CLAIM_FOR;
    let target = match make_up {
        Some(at) => Target::MakeUp { at },
        None => Target::Manual {
            started: occurrence.at(),
        },
    };
    let claim = loop {
        match shared
            .locker
            .claim(&job.name, &target, &token, job.lock_ttl)
            .await
        {
            Ok(claim) => break Ok(claim),
            Err(err) if Instant::now() + RETRY >= give_up || shared.cancel.is_cancelled() => {
                break Err(err);
            }
            Err(err) => {
                debug!(job = %job.name, node = %node, error = %err, "manual claim failed, retrying")
            }
        }
        tokio::time::sleep(RETRY).await;
    };
    let result = match claim {
        Ok(Claim::Won(lease)) => run_taken(&shared, &job, &request, &lease, occurrence, sent).await,
        Ok(Claim::Busy { holder, fence }) => {
            info!(job = %job.name, node = %node, holder = %holder, fence, request = %request.id,
                "trigger request not run: the job's lock is held by a run in progress");
            vec![
                ("outcome", "busy".to_string()),
                ("holder", holder.clone()),
                ("fence", fence.to_string()),
                (
                    "error",
                    format!(
                        "job `{}` is running on `{holder}` (fence {fence}); not started",
                        job.name
                    ),
                ),
            ]
        }
        Ok(other) => vec![
            ("outcome", "error".to_string()),
            (
                "error",
                format!("unexpected answer to the claim of a manual run: {other:?}"),
            ),
        ],
        Err(err) => vec![
            ("outcome", "error".to_string()),
            (
                "error",
                format!("cannot claim job `{}` on node `{node}`: {err}", job.name),
            ),
        ],
    };
    let mut fields = vec![("state", "done".to_string()), ("node", node.clone())];
    fields.extend(result);
    report(&shared, &request, DONE_TTL, &fields).await;
}

/// Runs the won manual run to its end (renewing the request's TTL), and
/// returns the result fields.
async fn run_taken(
    shared: &Arc<Shared>,
    job: &Arc<Job>,
    request: &Request,
    lease: &Lease,
    occurrence: Occurrence,
    sent: Instant,
) -> Vec<(&'static str, String)> {
    let running = [
        ("state", "running".to_string()),
        ("occurrence", occurrence.to_string()),
        ("fence", lease.fence.to_string()),
    ];
    report(shared, request, LIVE_TTL, &running).await;
    let how = How {
        room_until: (!request.ignore_limits).then(|| Instant::now() + job.starting_deadline),
        by: Some(request.by.clone()),
        make_up: request.occurrence_ms.is_some(),
    };
    let attempt = request.attempt.unwrap_or(1);
    let run = run_won(shared, job, lease, occurrence, sent, attempt, how);
    let renew = keep_alive(shared, request);
    let report = tokio::select! {
        (report, _) = run => report,
        never = renew => match never {},
    };
    result_fields(&occurrence.to_string(), lease.fence, &report)
}

/// The `done` fields of a finished run.
fn result_fields(name: &str, fence: u64, report: &Report) -> Vec<(&'static str, String)> {
    let mut fields = vec![
        ("outcome", report.outcome.as_str().to_string()),
        ("occurrence", name.to_string()),
        ("fence", fence.to_string()),
        (
            "duration_ms",
            u64::try_from(report.duration.as_millis())
                .unwrap_or(u64::MAX)
                .to_string(),
        ),
    ];
    if let Some(code) = report.exit_code {
        fields.push(("exit_code", code.to_string()));
    }
    if let Some(status) = report.http_status {
        fields.push(("http_status", status.to_string()));
    }
    if let Some(error) = &report.error {
        fields.push(("error", error.clone()));
    }
    if let Some(tail) = &report.output_tail {
        fields.push(("output_tail", tail.clone()));
    }
    fields
}

/// Renews the request's TTL every [`KEEPALIVE`]; never completes.
async fn keep_alive(shared: &Shared, request: &Request) -> std::convert::Infallible {
    let prefix = shared.locker.prefix();
    loop {
        tokio::time::sleep(KEEPALIVE).await;
        let conn = shared.locker.connection();
        if let Err(err) = requests::update(&conn, prefix, &request.id, LIVE_TTL, &[]).await {
            debug!(request = %request.id, error = %err, "cannot renew a trigger request");
        }
    }
}

/// Writes `fields` into the request's hash (TTL `ttl`), retrying for
/// [`REPORT_FOR`] while Redis fails.
async fn report(shared: &Shared, request: &Request, ttl: Duration, fields: &[(&str, String)]) {
    let prefix = shared.locker.prefix();
    let give_up = Instant::now() + REPORT_FOR;
    loop {
        let conn = shared.locker.connection();
        match requests::update(&conn, prefix, &request.id, ttl, fields).await {
            Ok(true) => return,
            Ok(false) => {
                info!(node = %shared.locker.node(), request = %request.id, job = %request.job,
                    "trigger request expired before its result was written: its CLI stopped waiting (the run's outcome is in the history)");
                return;
            }
            Err(err) if Instant::now() + RETRY >= give_up => {
                warn!(node = %shared.locker.node(), request = %request.id, job = %request.job, error = %err,
                    "cannot report a trigger request's result (the run's outcome is in the history)");
                return;
            }
            Err(_) => tokio::time::sleep(RETRY).await,
        }
    }
}
