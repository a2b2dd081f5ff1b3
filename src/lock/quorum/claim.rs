//! The Redlock claim: an order the masters agree on instead of a race.
//!
//! Nodes that claim an occurrence at the same instant and send to every
//! master at once split them (2–1–1 of four masters left, 1–1–1 of
//! three): nobody has a majority, all undo, and the retries split again
//! until the deadline passes. So a claim goes first to one master alone,
//! the *lead*: the first by address ([`Order`]) that did not fail lately,
//! the same on every node. The lead runs the claims one after the other,
//! so exactly one node wins it, the *holder*; only then does a claim go to
//! the other masters, in parallel:
//!
//! - the holder sends at once; a master a competitor got first is asked
//!   again after a few ms (its competitor undoes, below), with the same
//!   token (the script answers a claim it already granted as won), while
//!   the claim's validity and [`HOLDER_PATIENCE`] last. Two holders (their
//!   nodes saw different masters failing: one was just back) tell which
//!   one gives way from the answers ([`yields`]);
//! - a node that lost the lead to a fresh claim ([`Claim::Taken`],
//!   `claimed`) waits [`HEAD_START`] before sending, so the holder's
//!   grants are there first and it reads the occurrence decided by a
//!   majority. A grant it gets anyway (the holder was slow) is undone as
//!   soon as its grants cannot make a majority (a master that failed
//!   lately is not waited for), so it blocks the holder for one round
//!   trip; with a majority it wins (every other node reads that majority
//!   as decided, so it must).
//!
//! The lead decides nothing by itself: a claim wins only with a majority of
//! fresh grants (the lead's among them or not), within its validity, and is
//! undone on every master that granted it otherwise, so two majorities can
//! never exist and the order only changes who wins, not how many. A lead
//! that fails (down, paused: no answer within [`ANSWER_TIMEOUT`]) is marked
//! failing and the next one is tried, and so is one that answers busy or
//! that the occurrence runs nothing (skipped, missed, paused: a lock only
//! it may hold, from a claim it ran after its answer timed out, and the
//! skip that lock made it record); a failing master is still asked in the
//! parallel round and is lead again once it answers. Busy and "runs
//! nothing" answers of a majority, whichever nodes they name, decide the
//! occurrence: no master that decided it grants it again. Nodes whose views
//! of a failing master differ for a moment may still split: then the old
//! undo and retry applies.
//!
//! Failure model as in [`super`]: any minority down, paused or partitioned
//! costs each node a lead's timeout per failed master it tries first, once
//! per fault. Answers are awaited in spawned tasks, so a slow master does
//! not hold up a majority that already answered; a grant that arrives
//! after this claim lost is undone by that task. Not handled: a claim a
//! paused master runs after its answer timed out is granted there and
//! nobody undoes it (its lock lasts its TTL on that master: a minority);
//! a holder that dies between the lead and the others costs that
//! occurrence (its grant on the lead lasts the lock's TTL).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use super::{ANSWER_TIMEOUT, decided_by_majority, drift, majority};
use crate::lock::server::Server;
use crate::lock::{Claim, ClaimReply, JobKeys, Lease, LockError, Target};

/// How long a node that lost the lead waits before claiming the others.
pub const HEAD_START: Duration = Duration::from_millis(25);
/// How long the holder keeps asking masters a competitor got first.
pub const HOLDER_PATIENCE: Duration = Duration::from_millis(150);
/// After how many rounds a competitor that did not undo counts as a holder.
const YIELD_AFTER: usize = 3;
/// The pause between two of the holder's rounds (plus as much at random).
const HOLDER_PAUSE: Duration = Duration::from_millis(4);

/// The order the claims of every node take through the masters.
pub struct Order {
    /// Server indices by address: the first is the lead while it answers.
    ranked: Vec<usize>,
    /// Per server: its last answer was a failure (cleared by an answer).
    failing: Vec<AtomicBool>,
}

impl Order {
    /// The order of the masters shown as `shown` (in config order).
    pub fn new<'a>(shown: impl IntoIterator<Item = &'a str>) -> Order {
        let shown: Vec<&str> = shown.into_iter().collect();
        let mut ranked: Vec<usize> = (0..shown.len()).collect();
        ranked.sort_by(|&a, &b| shown[a].cmp(shown[b]).then(a.cmp(&b)));
        Order {
            failing: shown.iter().map(|_| AtomicBool::new(false)).collect(),
            ranked,
        }
    }

    /// The lead candidates: the masters not failing by rank, then the
    /// failing ones (with every master failing, the order still holds).
    fn leads(&self) -> Vec<usize> {
        let (ok, failing): (Vec<usize>, Vec<usize>) = self
            .ranked
            .iter()
            .partition(|&&i| !self.failing[i].load(Ordering::Relaxed));
        ok.into_iter().chain(failing).collect()
    }

    fn is_failing(&self, i: usize) -> bool {
        self.failing
            .get(i)
            .is_some_and(|failing| failing.load(Ordering::Relaxed))
    }

    /// The place of server `i` in the order (0: the first lead).
    fn rank(&self, i: usize) -> usize {
        self.ranked
            .iter()
            .position(|&ranked| ranked == i)
            .unwrap_or(usize::MAX)
    }

    fn answered<T>(&self, i: usize, answer: &Result<T, LockError>) {
        if let Some(failing) = self.failing.get(i) {
            failing.store(answer.is_err(), Ordering::Relaxed);
        }
    }
}

/// One claim request, as a value a spawned task can own.
#[derive(Clone)]
struct Ask {
    /// This node's id, as other nodes' answers name it.
    node: String,
    keys: JobKeys,
    job: String,
    target: Target,
    token: String,
    ttl: Duration,
}

impl Ask {
    async fn send(&self, server: &Server) -> Result<ClaimReply, LockError> {
        let answer = server.claim(&self.keys, &self.job, &self.target, &self.token, self.ttl);
        match tokio::time::timeout(ANSWER_TIMEOUT, answer).await {
            Ok(result) => result,
            Err(_) => Err(LockError::Timeout {
                step: "claim",
                job: self.job.clone(),
                server: server.shown.clone(),
            }),
        }
    }
}

/// One master's answer, `None` while not in.
type Answer = Option<Result<ClaimReply, LockError>>;
type Answers = Vec<Answer>;

/// How the claim ended, for the grants that arrive after it stopped
/// listening: `None` while undecided, `Some(true)` lost (undo them),
/// `Some(false)` won (they are part of the lease). A claim dropped before
/// its verdict counts as lost.
type Verdict = tokio::sync::watch::Sender<Option<bool>>;

fn is_lost(verdict: &Verdict) -> bool {
    *verdict.borrow() == Some(true)
}

fn is_won(answer: &Answer) -> bool {
    matches!(answer, Some(Ok(reply)) if matches!(reply.claim, Claim::Won(_)))
}

/// The answers in so far that are replies.
fn replies(answers: &Answers) -> impl Iterator<Item = &ClaimReply> {
    answers
        .iter()
        .filter_map(|answer| answer.as_ref().and_then(|answer| answer.as_ref().ok()))
}

/// A fresh grant of another node's (which it may still undo).
fn is_competitor(answer: &Answer) -> bool {
    matches!(answer, Some(Ok(ClaimReply { claim: Claim::Taken { decision, .. }, .. })) if decision == "claimed")
}

/// Whether the answers so far already say how the claim ends: a majority
/// won, or decided by one node, or busy.
fn settled(answers: &Answers, needed: usize) -> bool {
    let won = answers.iter().filter(|answer| is_won(answer)).count();
    let busy = answers
        .iter()
        .filter(
            |answer| matches!(answer, Some(Ok(reply)) if matches!(reply.claim, Claim::Busy { .. })),
        )
        .count();
    won >= needed || busy >= needed || decided_by_majority(replies(answers), needed).is_some()
}

/// Sends `ask` to the masters `to` in parallel and fills in `answers` until
/// they are all in or [`settled`]. If `may_give_up` and the grants cannot
/// reach a majority any more, the claim is lost: they are undone at once
/// (a holder waiting for those masters gets them a round sooner). A grant
/// that arrives once the claim is lost, here or after the round stopped
/// listening, is undone; one that arrives late to a won claim is kept.
async fn round(
    servers: &[Server],
    order: &Arc<Order>,
    ask: &Ask,
    to: &[usize],
    answers: &mut Answers,
    verdict: &Verdict,
    may_give_up: bool,
) {
    let needed = majority(servers);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for &i in to {
        let (server, ask, order, tx) = (
            servers[i].clone(),
            ask.clone(),
            Arc::clone(order),
            tx.clone(),
        );
        tokio::spawn(async move {
            let answer = ask.send(&server).await;
            order.answered(i, &answer);
            let _ = tx.send((i, answer));
        });
    }
    drop(tx);
    let mut waiting: Vec<usize> = to.to_vec();
    while !waiting.is_empty() {
        let Some((i, answer)) = rx.recv().await else {
            break;
        };
        answers[i] = Some(answer);
        waiting.retain(|&j| j != i);
        if settled(answers, needed) {
            break;
        }
        let won: Vec<usize> = (0..answers.len())
            .filter(|&j| is_won(&answers[j]))
            .collect();
        // A master that failed lately (paused: it will time out) is no hope.
        let hope = waiting.iter().filter(|&&j| !order.is_failing(j)).count();
        if may_give_up && won.len() + hope < needed && !is_lost(verdict) {
            verdict.send_replace(Some(true));
            join_all(
                won.iter()
                    .map(|&j| servers[j].undo(&ask.keys, &ask.job, &ask.token)),
            )
            .await;
        } else if is_lost(verdict) && is_won(&answers[i]) {
            servers[i].undo(&ask.keys, &ask.job, &ask.token).await;
        }
    }
    if !waiting.is_empty() {
        let (servers, ask) = (servers.to_vec(), ask.clone());
        let mut verdict = verdict.subscribe();
        tokio::spawn(async move {
            while let Some((i, answer)) = rx.recv().await {
                let won = matches!(&answer, Ok(reply) if matches!(reply.claim, Claim::Won(_)));
                if !won {
                    continue;
                }
                let lost = match verdict.wait_for(Option::is_some).await {
                    Ok(ended) => *ended == Some(true),
                    Err(_) => true,
                };
                if lost {
                    servers[i].undo(&ask.keys, &ask.job, &ask.token).await;
                }
            }
        });
    }
}

#[allow(clippy::too_many_arguments)]
pub(in crate::lock) async fn claim(
    servers: &[Server],
    order: &Arc<Order>,
    node: &str,
    keys: &JobKeys,
    job: &str,
    target: &Target,
    token: &str,
    ttl: Duration,
) -> Result<ClaimReply, LockError> {
    let sent = Instant::now();
    let needed = majority(servers);
    let ask = Ask {
        node: node.to_string(),
        keys: keys.clone(),
        job: job.to_string(),
        target: target.clone(),
        token: token.to_string(),
        ttl,
    };
    let verdict: Verdict = tokio::sync::watch::channel(None).0;
    let mut answers: Answers = servers.iter().map(|_| None).collect();
    // The lead: one master at a time, by rank, until one orders the claims
    // (grants it, or names the node it granted) or says the occurrence is
    // superseded or late; past one that failed, or is busy or decided it
    // runs nothing (a lock only it may hold, left by a claim whose answer
    // timed out: every node walks past it alike), at most as many as may
    // be down, then the rest in parallel as they are.
    let tries = servers.len() - needed + 1;
    for i in order.leads().into_iter().take(tries) {
        let answer = ask.send(&servers[i]).await;
        order.answered(i, &answer);
        let next = match &answer {
            Err(_) => true,
            Ok(reply) => match &reply.claim {
                Claim::Busy { .. } => true,
                Claim::Taken { decision, .. } => decision != "claimed",
                _ => false,
            },
        };
        answers[i] = Some(answer);
        if !next {
            break;
        }
    }
    let holder = answers.iter().any(is_won);
    if !holder && answers.iter().any(is_competitor) {
        // Another node holds the lead: its claim goes first.
        tokio::time::sleep(HEAD_START).await;
    }
    let rest: Vec<usize> = (0..servers.len())
        .filter(|&i| answers[i].is_none())
        .collect();
    round(servers, order, &ask, &rest, &mut answers, &verdict, !holder).await;
    if holder {
        // Ask again where a competitor was first, while it undoes, unless
        // it is the holder after all (below).
        let asked = Instant::now();
        let mut rounds = 0;
        while !settled(&answers, needed)
            && asked.elapsed() < HOLDER_PATIENCE
            && sent.elapsed() + drift(ttl) < ttl
            && !yields(order, &ask.node, &answers, rounds)
        {
            let again: Vec<usize> = (0..servers.len())
                .filter(|&i| is_competitor(&answers[i]))
                .collect();
            let won = answers.iter().filter(|answer| is_won(answer)).count();
            if again.is_empty() || won + again.len() < needed {
                break;
            }
            let pause = HOLDER_PAUSE + HOLDER_PAUSE.mul_f64(rand::random::<f64>());
            tokio::time::sleep(pause).await;
            round(servers, order, &ask, &again, &mut answers, &verdict, false).await;
            rounds += 1;
        }
    }
    conclude(servers, &ask, answers, sent.elapsed(), &verdict).await
}

/// Whether a holder gives way to a competitor: two nodes can each hold a
/// lead when they saw different masters failing (one of them was just
/// back). The one whose best grant ranks lower gives way; if neither can
/// tell (each saw only part of the other's grants), once the competitor
/// outlasted [`YIELD_AFTER`] rounds, the one with the larger node id.
fn yields(order: &Order, me: &str, answers: &Answers, rounds: usize) -> bool {
    let best = |pick: &dyn Fn(&Answer) -> bool| {
        (0..answers.len())
            .filter(|&i| pick(&answers[i]))
            .map(|i| order.rank(i))
            .min()
    };
    let (mine, theirs) = (best(&is_won), best(&is_competitor));
    if let (Some(mine), Some(theirs)) = (mine, theirs)
        && theirs < mine
    {
        return true;
    }
    rounds >= YIELD_AFTER
        && replies(answers).any(|reply| {
            matches!(&reply.claim, Claim::Taken { by, decision, .. } if decision == "claimed" && by.as_str() < me)
        })
}

/// The claim's answer from every master's (`None`: not in yet): won with a
/// majority of fresh grants within the validity; else undone wherever
/// granted, and decided, busy, too late or `NoQuorum` as the answers say.
async fn conclude(
    servers: &[Server],
    ask: &Ask,
    answers: Answers,
    elapsed: Duration,
    verdict: &Verdict,
) -> Result<ClaimReply, LockError> {
    let needed = majority(servers);
    let won: Vec<(usize, &ClaimReply)> = answers
        .iter()
        .enumerate()
        .filter_map(|(i, answer)| match answer {
            Some(Ok(reply)) if matches!(reply.claim, Claim::Won(_)) => Some((i, reply)),
            _ => None,
        })
        .collect();
    let valid = elapsed + drift(ask.ttl) < ask.ttl;
    // A majority of fresh grants wins, whatever a minority says: no other
    // claim can hold a majority at the same time, and "decided" answers
    // from a minority are other nodes' grants of this same moment, which
    // they undo.
    if won.len() >= needed && valid && !is_lost(verdict) {
        verdict.send_replace(Some(false));
        let fence = won
            .iter()
            .filter_map(|(_, reply)| match &reply.claim {
                Claim::Won(lease) => Some(lease.fence),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let previous_ms = won.iter().filter_map(|(_, reply)| reply.previous_ms).max();
        let abandoned = answers.iter().flatten().find_map(|answer| {
            answer
                .as_ref()
                .ok()
                .and_then(|reply| reply.abandoned.clone())
        });
        return Ok(ClaimReply {
            claim: Claim::Won(Lease {
                job: ask.job.clone(),
                keys: ask.keys.clone(),
                token: ask.token.clone(),
                fence,
                ttl: ask.ttl,
            }),
            previous_ms,
            lock_ttl_left: None,
            abandoned,
        });
    }
    // Not won: give back what was granted (and what is granted later), so
    // that a retry or another node finds the occurrence free there.
    verdict.send_replace(Some(true));
    join_all(
        won.iter()
            .map(|(i, _)| servers[*i].undo(&ask.keys, &ask.job, &ask.token)),
    )
    .await;
    // Decided by one node on a majority: it is. Decided on a minority, or
    // by different nodes none of which has a majority: those are claims
    // like ours, which their nodes undo as we undo ours; the caller
    // retries (after a random pause) until one wins or the deadline passes.
    if let Some(decided) = decided_by_majority(replies(&answers), needed) {
        return Ok(decided);
    }
    let busy: Vec<&ClaimReply> = replies(&answers)
        .filter(|reply| matches!(reply.claim, Claim::Busy { .. }))
        .collect();
    if busy.len() >= needed {
        return Ok(busy[0].clone());
    }
    if let Some(reply) = replies(&answers)
        .find(|reply| matches!(reply.claim, Claim::TooLate | Claim::TooEarly { .. }))
    {
        return Ok(reply.clone());
    }
    let first_error = answers
        .iter()
        .flatten()
        .find_map(|answer| answer.as_ref().err().map(ToString::to_string))
        .unwrap_or_else(|| crate::lock::DISAGREED.to_string());
    Err(LockError::NoQuorum {
        step: "claim",
        job: ask.job.clone(),
        agreed: won.len(),
        needed,
        of: servers.len(),
        answered: answers
            .iter()
            .flatten()
            .filter(|answer| answer.is_ok())
            .count(),
        first_error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_ranks_the_masters_by_address_whatever_the_config_order() {
        let one = Order::new(["redis://b:1/", "redis://a:1/", "redis://c:1/"]);
        let other = Order::new(["redis://c:1/", "redis://b:1/", "redis://a:1/"]);
        let named = |order: &Order, shown: &[&str]| -> Vec<String> {
            order
                .leads()
                .iter()
                .map(|&i| shown[i].to_string())
                .collect()
        };
        assert_eq!(
            named(&one, &["redis://b:1/", "redis://a:1/", "redis://c:1/"]),
            named(&other, &["redis://c:1/", "redis://b:1/", "redis://a:1/"])
        );
        assert_eq!(one.leads(), [1, 0, 2]);
    }

    fn reply(claim: Claim) -> ClaimReply {
        ClaimReply {
            claim,
            previous_ms: None,
            lock_ttl_left: None,
            abandoned: None,
        }
    }

    fn taken(by: &str, decision: &str) -> ClaimReply {
        reply(Claim::Taken {
            by: by.into(),
            fence: 1,
            decision: decision.into(),
        })
    }

    #[test]
    fn skips_of_different_nodes_on_a_majority_decide_but_grants_of_different_nodes_do_not() {
        let busy = reply(Claim::Busy {
            holder: "n9".into(),
            fence: 1,
        });
        // Three nodes' skips, each first on one master: skipped.
        let skips = [taken("n1", "skipped"), taken("n2", "skipped"), busy.clone()];
        assert_eq!(decided_by_majority(&skips, 3), Some(busy));
        let skips = [
            taken("n1", "skipped"),
            taken("n2", "missed"),
            taken("n3", "skipped"),
        ];
        assert_eq!(decided_by_majority(&skips, 3), Some(taken("n1", "skipped")));
        // Three nodes' fresh grants: nobody decided it yet.
        let grants = [
            taken("n1", "claimed"),
            taken("n2", "claimed"),
            taken("n2", "skipped"),
        ];
        assert_eq!(decided_by_majority(&grants, 3), None);
        let one = [
            taken("n1", "claimed"),
            taken("n1", "claimed"),
            taken("n2", "skipped"),
        ];
        assert_eq!(decided_by_majority(&one, 2), Some(taken("n1", "claimed")));
    }

    #[test]
    fn a_failing_master_leads_again_once_it_answers() {
        let order = Order::new(["a", "b", "c"]);
        let timeout: Result<(), LockError> = Err(LockError::Timeout {
            step: "claim",
            job: "j".into(),
            server: "a".into(),
        });
        order.answered(0, &timeout);
        assert_eq!(order.leads(), [1, 2, 0]);
        order.answered(1, &timeout);
        assert_eq!(order.leads(), [2, 0, 1]);
        order.answered(0, &Ok(()));
        assert_eq!(order.leads(), [0, 2, 1]);
    }
}
