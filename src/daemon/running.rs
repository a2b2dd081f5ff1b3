//! The runs in progress on this node, by job and fence, so that an
//! operator's `solocron abort` ([`crate::control::aborts`]) read with the
//! controls reaches the run it names.
//!
//! Failure model: in memory only; a run registers when its lease is won
//! and leaves when it is released (the guard's drop), so a mark naming a
//! fence this node does not run changes nothing here.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tracing::warn;

use crate::control::aborts::AbortMark;
use crate::run::Abort;

/// The runs in progress: (job, fence, its abort handle).
#[derive(Default)]
pub struct Running {
    runs: Arc<Mutex<Vec<(String, u64, Abort)>>>,
}

/// A registered run; leaves the registry when dropped.
pub struct Registered {
    runs: Arc<Mutex<Vec<(String, u64, Abort)>>>,
    job: String,
    fence: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut runs = match self.runs.lock() {
            Ok(runs) => runs,
            Err(poisoned) => poisoned.into_inner(),
        };
        runs.retain(|(job, fence, _)| !(*job == self.job && *fence == self.fence));
    }
}

impl Running {
    /// Registers the run of `job` under `fence`: its abort handle, and the
    /// guard that unregisters it.
    pub fn register(&self, job: &str, fence: u64) -> (Abort, Registered) {
        let abort = Abort::default();
        let mut runs = match self.runs.lock() {
            Ok(runs) => runs,
            Err(poisoned) => poisoned.into_inner(),
        };
        runs.push((job.to_string(), fence, abort.clone()));
        (
            abort,
            Registered {
                runs: Arc::clone(&self.runs),
                job: job.to_string(),
                fence,
            },
        )
    }

    /// Stops each registered run an abort names (its job and fence).
    pub fn apply(&self, marks: &BTreeMap<String, AbortMark>, node: &str) {
        if marks.is_empty() {
            return;
        }
        let runs = match self.runs.lock() {
            Ok(runs) => runs,
            Err(poisoned) => poisoned.into_inner(),
        };
        for (job, fence, abort) in runs.iter() {
            let Some(mark) = marks.get(job).filter(|mark| mark.fence == *fence) else {
                continue;
            };
            if abort.fire(mark.describe()) {
                warn!(job = %job, node = %node, fence = *fence, by = %mark.by,
                    reason = %mark.reason.as_deref().unwrap_or_default(),
                    "run aborted by an operator: stopping its process group (SIGTERM, SIGKILL 10 s later)");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_abort_reaches_only_the_run_with_its_fence_until_it_ends() {
        let running = Running::default();
        let (old, old_guard) = running.register("report", 7);
        let (new, _new_guard) = running.register("report", 8);
        let mark = |fence| AbortMark {
            id: "1".into(),
            fence,
            by: "ops@laptop".into(),
            reason: None,
            at_ms: 0,
        };
        running.apply(&BTreeMap::from([("report".to_string(), mark(8))]), "n1");
        assert!(!old.fired() && new.fired());
        drop(old_guard);
        running.apply(&BTreeMap::from([("report".to_string(), mark(7))]), "n1");
        assert!(!old.fired(), "a run that ended is not in the registry");
    }
}
