//! Redlock: the lock over N independent masters, as a combinator of the
//! one-server operations of [`super::server`] (guarantee 9,
//! docs/guarantees.md).
//!
//! A claim goes first to one master, the lead (the first by address that
//! answers), then to the others in parallel, each answer awaited at most
//! [`ANSWER_TIMEOUT`] (`claim.rs`: nodes claiming at once then agree on an
//! order instead of splitting the masters). It wins only with a majority
//! (N/2 + 1) of `won` answers, within its validity (`lock_ttl` minus the
//! time the claim took minus a drift allowance of 1 % + 2 ms). The fence is
//! the largest of the majority's (every master hands out `max(previous +
//! 1, its TIME in µs)`). A claim that does not win is undone, with its
//! token, on every master that granted it, and retried by the caller with
//! the same token until the occurrence's deadline; an occurrence counts as
//! decided by another node only when a majority names that node, or a
//! majority decided that it runs nothing (busy, skipped, missed, paused).
//! A renewal needs a majority confirming it; release, miss and gap records
//! go to every master; answers read back (abandoned runs) are combined the
//! same way.
//!
//! Failure model: any minority of masters may be down, paused, partitioned
//! or restarted without data; then every occurrence runs exactly once. With
//! a majority unreachable nothing runs (fail closed), and the occurrences
//! are recorded `missed` once a majority is back. Timing assumptions (the
//! ones Kleppmann's critique of Redlock is about: bounded clock drift, no
//! pause of the runner longer than the validity) are stated in docs/HA.md;
//! the fence is what a downstream store checks to refuse a stale runner.
//! A master that restarts empty must stay down longer than `lock_ttl` and
//! the claim window, or persist with `appendfsync always`.

mod claim;

use crate::outcome::Outcome;
use std::time::Duration;

use futures_util::future::join_all;

use super::server::Server;
use super::{
    AbandonCheck, Claim, ClaimReply, JobKeys, Lease, LockError, Missed, Paused, Released,
    RetryState, Unrun,
};
use crate::coordinator::ANSWER_TIMEOUT;
use crate::history::Entry;

pub(super) use claim::{Order, claim};

/// Runs `op` on every master at once, each bounded by [`ANSWER_TIMEOUT`];
/// a master that does not answer in time counts as failed.
pub(super) async fn on_all<'a, T, F, Fut>(
    servers: &'a [Server],
    job: &str,
    step: &'static str,
    op: F,
) -> Vec<Result<T, LockError>>
where
    F: Fn(&'a Server) -> Fut,
    Fut: std::future::Future<Output = Result<T, LockError>> + 'a,
{
    join_all(servers.iter().map(|server| {
        let answer = op(server);
        async move {
            match tokio::time::timeout(ANSWER_TIMEOUT, answer).await {
                Ok(result) => result,
                Err(_) => Err(LockError::Timeout {
                    step,
                    job: job.to_string(),
                    server: server.shown.clone(),
                }),
            }
        }
    }))
    .await
}

fn majority(servers: &[Server]) -> usize {
    servers.len() / 2 + 1
}

/// The drift allowance of a lease of `ttl`.
fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The answer of the masters that agree an occurrence was decided, if a
/// majority of them name the same decider (or a newer occurrence), or a
/// majority decided that it runs nothing: `busy` (the claim recorded the
/// skip there) or decided `skipped`, `missed` or `paused`, by any node.
/// Several nodes' skips of one occurrence land first on different masters,
/// so they name different nodes; but a master that decided an occurrence
/// never grants it, so with such a majority no claim of it can ever win.
/// Then a `busy` answer is the one returned (this node recorded the skip
/// on some of them), else the first.
fn decided_by_majority<'a>(
    replies: impl IntoIterator<Item = &'a ClaimReply>,
    majority: usize,
) -> Option<ClaimReply> {
    let mut groups: Vec<(Option<&str>, usize, &ClaimReply)> = Vec::new();
    let mut ran_nothing: Vec<&ClaimReply> = Vec::new();
    for reply in replies {
        let key = match &reply.claim {
            Claim::Taken { by, decision, .. } => {
                if decision != "claimed" {
                    ran_nothing.push(reply);
                }
                Some(by.as_str())
            }
            Claim::Superseded { .. } => None,
            Claim::Busy { .. } => {
                ran_nothing.push(reply);
                continue;
            }
            _ => continue,
        };
        match groups.iter_mut().find(|(group, _, _)| *group == key) {
            Some((_, count, _)) => *count += 1,
            None => groups.push((key, 1, reply)),
        }
    }
    if let Some((_, _, reply)) = groups.into_iter().find(|(_, count, _)| *count >= majority) {
        return Some(reply.clone());
    }
    if ran_nothing.len() < majority {
        return None;
    }
    ran_nothing
        .iter()
        .find(|reply| matches!(reply.claim, Claim::Busy { .. }))
        .or(ran_nothing.first())
        .map(|reply| (*reply).clone())
}

pub(super) async fn extend(servers: &[Server], lease: &Lease) -> Result<bool, LockError> {
    let answers = on_all(servers, &lease.job, "extend", |server| server.extend(lease)).await;
    renewal_vote(servers, &answers, "extend", &lease.job)
}

/// A renewal's answers combined: `Ok(true)` when a majority confirmed
/// it, `Ok(false)` when a majority (or every answer) refused it, else
/// `Err(NoQuorum)`.
pub(super) fn renewal_vote(
    servers: &[Server],
    answers: &[Result<bool, LockError>],
    step: &'static str,
    job: &str,
) -> Result<bool, LockError> {
    let confirmed = answers
        .iter()
        .filter(|answer| matches!(answer, Ok(true)))
        .count();
    let refused = answers
        .iter()
        .filter(|answer| matches!(answer, Ok(false)))
        .count();
    if confirmed >= majority(servers) {
        return Ok(true);
    }
    if refused >= majority(servers) || refused + confirmed == servers.len() {
        return Ok(false);
    }
    Err(LockError::NoQuorum {
        step,
        job: job.to_string(),
        agreed: confirmed,
        needed: majority(servers),
        of: servers.len(),
        answered: answered(answers),
        first_error: first_error(answers),
    })
}

pub(super) async fn release(
    servers: &[Server],
    lease: &Lease,
    entry: &Entry,
) -> Result<Released, LockError> {
    let answers = on_all(servers, &lease.job, "release", |server| {
        server.release(lease, entry)
    })
    .await;
    let done: Vec<&Released> = answers
        .iter()
        .filter_map(|answer| answer.as_ref().ok())
        .collect();
    if done.len() < majority(servers) {
        // A retry releases nothing twice: each master records once per token.
        return Err(LockError::NoQuorum {
            step: "release",
            job: lease.job.clone(),
            agreed: done.len(),
            needed: majority(servers),
            of: servers.len(),
            answered: answered(&answers),
            first_error: first_error(&answers),
        });
    }
    Ok(Released {
        lock_was_ours: done
            .iter()
            .filter(|released| released.lock_was_ours)
            .count()
            >= majority(servers),
        replaced_abandoned: done.iter().any(|released| released.replaced_abandoned),
    })
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn record_missed(
    servers: &[Server],
    keys: &JobKeys,
    job: &str,
    at_ms: i64,
    name: &str,
    reason: &str,
    token: &str,
    outcome: Outcome,
) -> Result<Missed, LockError> {
    let answers = on_all(servers, job, "record missed", |server| {
        server.record_missed(keys, job, at_ms, name, reason, token, outcome)
    })
    .await;
    let done: Vec<&Missed> = answers
        .iter()
        .filter_map(|answer| answer.as_ref().ok())
        .collect();
    if done.len() < majority(servers) {
        return Err(no_quorum(
            "record missed",
            job,
            servers,
            done.len(),
            &answers,
        ));
    }
    Ok(Missed {
        recorded: done.iter().any(|missed| missed.recorded),
        previous_ms: done.iter().filter_map(|missed| missed.previous_ms).max(),
    })
}

pub(super) async fn record_gap(
    servers: &[Server],
    keys: &JobKeys,
    job: &str,
    gap_id: &str,
    entries: &[super::GapEntry],
) -> Result<bool, LockError> {
    let answers = on_all(servers, job, "record missed", |server| {
        server.record_gap(keys, job, gap_id, entries)
    })
    .await;
    let done: Vec<bool> = answers
        .iter()
        .filter_map(|answer| answer.as_ref().ok().copied())
        .collect();
    if done.len() < majority(servers) {
        return Err(no_quorum(
            "record missed",
            job,
            servers,
            done.len(),
            &answers,
        ));
    }
    Ok(done.iter().any(|recorded| *recorded))
}

/// A `paused` record (or `outcome`: `skipped`) on every master. It counts
/// once a majority of the masters has the occurrence decided so (by this
/// node or another: nodes record it at the same instant, each master keeps
/// the first); readers count such entries once. A majority decided
/// otherwise (a claim of a node that did not know the pause yet) is that
/// decision. Anything
/// else, e.g. a claim won on some masters that its node is undoing because
/// this record holds others, is `Err(NoQuorum)`: the caller retries, and
/// once the claim is undone this record takes those masters too, so the
/// occurrence ends up `paused` on a majority and is never run.
pub(super) async fn record_decision(
    servers: &[Server],
    keys: &JobKeys,
    job: &str,
    at_ms: i64,
    name: &str,
    why: &str,
    outcome: Unrun,
) -> Result<Paused, LockError> {
    let step = super::decision_step(outcome);
    let word = outcome.outcome().as_str();
    let answers = on_all(servers, job, step, |server| {
        server.record_decision(keys, job, at_ms, name, why, outcome)
    })
    .await;
    let done: Vec<&Paused> = answers
        .iter()
        .filter_map(|answer| answer.as_ref().ok())
        .collect();
    let paused = done
        .iter()
        .filter(|answer| {
            answer.recorded
                || answer
                    .decided
                    .as_ref()
                    .is_some_and(|(decision, _)| decision == word)
        })
        .count();
    if paused >= majority(servers) {
        // Not recorded here: the node that did, for the "already decided
        // by another node" line (it said `decided_by=` and `decision=`
        // with nothing after them).
        let decided = done
            .iter()
            .filter_map(|answer| answer.decided.clone())
            .find(|(decision, _)| decision == word);
        return Ok(Paused {
            recorded: done.iter().any(|answer| answer.recorded),
            previous_ms: done.iter().filter_map(|answer| answer.previous_ms).max(),
            decided,
        });
    }
    let other = done
        .iter()
        .filter_map(|answer| answer.decided.clone())
        .filter(|(decision, _)| decision != word)
        .collect::<Vec<_>>();
    if other.len() >= majority(servers) {
        return Ok(Paused {
            recorded: false,
            previous_ms: None,
            decided: other.into_iter().next(),
        });
    }
    Err(no_quorum(step, job, servers, paused, &answers))
}

pub(super) async fn check_abandoned(
    servers: &[Server],
    keys: &JobKeys,
    job: &str,
) -> Result<AbandonCheck, LockError> {
    let answers = on_all(servers, job, "abandon check", |server| {
        server.check_abandoned(keys, job)
    })
    .await;
    let done: Vec<&AbandonCheck> = answers
        .iter()
        .filter_map(|answer| answer.as_ref().ok())
        .collect();
    if done.len() < majority(servers) {
        return Err(no_quorum(
            "abandon check",
            job,
            servers,
            done.len(),
            &answers,
        ));
    }
    if let Some(AbandonCheck::Abandoned(abandoned)) = done
        .iter()
        .find(|check| matches!(check, AbandonCheck::Abandoned(_)))
    {
        return Ok(AbandonCheck::Abandoned(abandoned.clone()));
    }
    Ok(done
        .iter()
        .filter_map(|check| match check {
            AbandonCheck::Held { ttl_left, holder } => Some((*ttl_left, holder.clone())),
            _ => None,
        })
        .min_by_key(|(ttl_left, _)| *ttl_left)
        .map_or(AbandonCheck::Idle, |(ttl_left, holder)| {
            AbandonCheck::Held { ttl_left, holder }
        }))
}

/// The most advanced view any member that answered has (a pending later
/// attempt, else a running one); only a hint for when to claim.
pub(super) async fn retry_state(
    servers: &[Server],
    keys: &JobKeys,
    job: &str,
    at_ms: i64,
) -> Result<RetryState, LockError> {
    let answers = on_all(servers, job, "retry state", |server| {
        server.retry_state(keys, job, at_ms)
    })
    .await;
    let done: Vec<RetryState> = answers
        .iter()
        .filter_map(|answer| answer.as_ref().ok().copied())
        .collect();
    if done.len() < majority(servers) {
        return Err(no_quorum("retry state", job, servers, done.len(), &answers));
    }
    Ok(done
        .into_iter()
        .max_by_key(|state| state.rank())
        .unwrap_or(RetryState::Finished { attempt: 0 }))
}

fn no_quorum<T>(
    step: &'static str,
    job: &str,
    servers: &[Server],
    agreed: usize,
    answers: &[Result<T, LockError>],
) -> LockError {
    LockError::NoQuorum {
        step,
        job: job.to_string(),
        agreed,
        needed: majority(servers),
        of: servers.len(),
        answered: answered(answers),
        first_error: first_error(answers),
    }
}

/// How many masters answered at all (whatever they answered).
pub(super) fn answered<T>(answers: &[Result<T, LockError>]) -> usize {
    answers.iter().filter(|answer| answer.is_ok()).count()
}

/// The first failure among `answers`, for the message.
pub(super) fn first_error<T>(answers: &[Result<T, LockError>]) -> String {
    answers
        .iter()
        .find_map(|answer| answer.as_ref().err().map(ToString::to_string))
        .unwrap_or_else(|| super::DISAGREED.to_string())
}
