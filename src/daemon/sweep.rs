//! The backstop's look at the occurrences it is not in line for, in
//! batches: each occurrence due a look is queued ([`Sweep::look`]), and
//! every [`TICK`] the queued ones whose time has come are read together in
//! one round trip ([`crate::lock::Locker::peek_many`]), so the backstop pays
//! Redis about one round trip per tick, not one per occurrence (guarantee
//! 12, docs/guarantees.md).
//!
//! Failure model: a read that fails answers every queued look with
//! "undecided", so each of those occurrences is claimed and the claim
//! script decides, as after a failed single read. At shutdown the queue is
//! answered "stopping" and nothing is claimed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::debug;

use super::Shared;
use crate::lock::{ClaimReply, Target};

/// How often the queued looks are read: the most a look waits past its
/// time, and about the backstop's round trips a second.
pub const TICK: Duration = Duration::from_millis(50);

/// What a queued look found.
pub enum Looked {
    /// Decided: the answer a losing claim would have given.
    Decided(Box<ClaimReply>),
    /// Undecided, or the read failed: claim it.
    Undecided,
    /// The daemon is stopping: claim nothing.
    Stopping,
}

struct Queued {
    job: String,
    target: Target,
    due: Instant,
    answer: oneshot::Sender<Looked>,
}

/// The queue of looks; see the module doc.
#[derive(Default)]
pub struct Sweep {
    queued: Mutex<Vec<Queued>>,
}

impl Sweep {
    fn queue(&self) -> std::sync::MutexGuard<'_, Vec<Queued>> {
        match self.queued.lock() {
            Ok(queued) => queued,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Whether `target` of `job` is decided, read with the other looks due
    /// at about the same time, `after` from now.
    pub async fn look(&self, job: &str, target: &Target, after: Duration) -> Looked {
        let (answer, answered) = oneshot::channel();
        self.queue().push(Queued {
            job: job.to_string(),
            target: target.clone(),
            due: Instant::now() + after,
            answer,
        });
        answered.await.unwrap_or(Looked::Stopping)
    }
}

/// Reads the due looks every [`TICK`] until shutdown, then answers the
/// rest "stopping".
pub async fn run(shared: Arc<Shared>) {
    loop {
        tokio::select! {
            _ = shared.cancel.cancelled() => break,
            _ = tokio::time::sleep(TICK) => {}
        }
        let now = Instant::now();
        let due: Vec<Queued> = {
            let mut queued = shared.sweep.queue();
            let (due, later) = std::mem::take(&mut *queued)
                .into_iter()
                .partition(|look| look.due <= now);
            *queued = later;
            due
        };
        if due.is_empty() {
            continue;
        }
        let items: Vec<(&str, &Target)> = due
            .iter()
            .map(|look| (look.job.as_str(), &look.target))
            .collect();
        let permit = shared.claims_in_flight.acquire().await.ok();
        let read = shared.locker.peek_many(&items).await;
        drop(permit);
        drop(items);
        let answers = match read {
            Ok(answers) => answers,
            Err(err) => {
                debug!(node = %shared.locker.node(), looks = due.len(), error = %err,
                    "the backstop's read of whether occurrences are decided failed; claiming them");
                Vec::new()
            }
        };
        let mut answers = answers.into_iter();
        for look in due {
            let looked = match answers.next().flatten() {
                Some(reply) => Looked::Decided(Box::new(reply)),
                None => Looked::Undecided,
            };
            let _ = look.answer.send(looked);
        }
    }
    for look in std::mem::take(&mut *shared.sweep.queue()) {
        let _ = look.answer.send(Looked::Stopping);
    }
}
