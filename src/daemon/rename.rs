//! A reload that renames a job while it runs: no overlap across the rename.
//!
//! The lock is per name, so a run of the old name would not keep the new
//! name's occurrences out. A reload that removes a job and adds one that
//! runs the same thing (the same `command`, `argv` or `http` request after
//! interpolation, whatever its name or schedule) treats it as a rename
//! old -> new, on every node:
//!
//! - The node running the old name's run takes the new name's lock too
//!   (the manual-run claim: set only if free, token-checked), renews it
//!   with the watchdog and deletes it, recording nothing, when the run
//!   ends: every node's claim of the new name meanwhile finds it held and
//!   records the occurrence `skipped`, as for any overlap. If the new lock
//!   is already held by another, that is logged as an error.
//! - A node's claim of the new name (here a node that reloaded before the
//!   runner did) first reads the old name's lock: held, the occurrence is
//!   recorded `skipped` naming the old name and its holder, unclaimed.
//!   Once seen free it is not read again.
//!
//! A removed job whose run is in progress here runs to its end under its
//! lease, and the reload says so.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::{Shared, recording};
use crate::config::Job;
use crate::lock::{Claim, LockError, Paused, Target, Unrun, new_token};
use crate::schedule::Occurrence;

/// The renames this node knows and the runs in progress here.
#[derive(Default)]
pub(crate) struct Renames {
    /// New name -> the old names whose lock its claims read first.
    pending: Mutex<HashMap<String, Vec<String>>>,
    /// Job name -> its runs in progress here, and a token cancelled when
    /// the last of them ends.
    running: Mutex<HashMap<String, (usize, CancellationToken)>>,
}

/// A run of a job in progress on this node, from [`Renames::run_started`]
/// until dropped.
pub(crate) struct RunHere<'a> {
    renames: &'a Renames,
    job: String,
}

impl Drop for RunHere<'_> {
    fn drop(&mut self) {
        let mut running = self
            .renames
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((count, over)) = running.get_mut(&self.job) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                over.cancel();
                running.remove(&self.job);
            }
        }
    }
}

impl Renames {
    /// Counts a run of `job` as in progress here until the answer drops.
    pub(crate) fn run_started(&self, job: &str) -> RunHere<'_> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        running.entry(job.to_string()).or_default().0 += 1;
        RunHere {
            renames: self,
            job: job.to_string(),
        }
    }

    /// Cancelled when the last run of `job` in progress here ends; `None`
    /// if none is.
    fn run_over(&self, job: &str) -> Option<CancellationToken> {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        running.get(job).map(|(_, over)| over.clone())
    }

    /// The old names whose lock a claim of `job` reads first.
    fn old_names(&self, job: &str) -> Vec<String> {
        let pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending.get(job).cloned().unwrap_or_default()
    }

    /// `old`'s lock was seen free: claims of `new` stop reading it.
    fn seen_free(&self, new: &str, old: &str) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(olds) = pending.get_mut(new) {
            olds.retain(|name| name != old);
            if olds.is_empty() {
                pending.remove(new);
            }
        }
    }
}

/// The renames among the jobs a reload removes (in `old`, not in `new`)
/// and adds (in `new`, not in `old`): pairs (old name, new job) whose
/// actions are the same. A removed job may pair with several added ones.
fn renames<'a>(old: &'a [Arc<Job>], new: &'a [Arc<Job>]) -> Vec<(&'a Arc<Job>, &'a Arc<Job>)> {
    let old_names: HashSet<&str> = old.iter().map(|job| job.name.as_str()).collect();
    let new_names: HashSet<&str> = new.iter().map(|job| job.name.as_str()).collect();
    let removed = old
        .iter()
        .filter(|job| !new_names.contains(job.name.as_str()));
    let mut pairs = Vec::new();
    for gone in removed {
        for added in new
            .iter()
            .filter(|job| !old_names.contains(job.name.as_str()))
        {
            if gone.action.runs_the_same_as(&added.action) {
                pairs.push((gone, added));
            }
        }
    }
    pairs
}

/// At a reload from `old` to `new` jobs, before the new schedule starts:
/// says which removed jobs still run here, notes the renames (see the
/// module doc) and, for a renamed job running here, takes the new name's
/// lock until its run ends.
pub(super) fn reloaded(shared: &Arc<Shared>, old: &[Arc<Job>], new: &[Arc<Job>]) {
    let node = shared.locker.node();
    let new_names: HashSet<&str> = new.iter().map(|job| job.name.as_str()).collect();
    for gone in old
        .iter()
        .filter(|job| !new_names.contains(job.name.as_str()))
    {
        if shared.renames.run_over(&gone.name).is_some() {
            warn!(job = %gone.name, node = %node,
                "job `{}` was removed while its run is in progress: it runs to its end under its lease", gone.name);
        }
    }
    let pairs = renames(old, new);
    {
        let mut pending = shared
            .renames
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        pending.retain(|name, _| new_names.contains(name.as_str()));
        for (gone, added) in &pairs {
            let olds = pending.entry(added.name.clone()).or_default();
            if !olds.contains(&gone.name) {
                olds.push(gone.name.clone());
            }
        }
    }
    for (gone, added) in pairs {
        info!(job = %added.name, renamed_from = %gone.name, node = %node,
            "job `{}` is treated as `{}` renamed (a reload removed `{}` and added `{}`, which runs the same): while a run of `{}` holds its lock, `{}`'s occurrences are skipped",
            added.name, gone.name, gone.name, added.name, gone.name, added.name);
        if let Some(run_over) = shared.renames.run_over(&gone.name) {
            shared.tracker.spawn(hold_new_name(
                Arc::clone(shared),
                gone.name.clone(),
                Arc::clone(added),
                run_over,
            ));
        }
    }
}

/// First and longest pause between tries of the new name's lock.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Holds `new`'s lock while this node's run of `old` (its name before a
/// rename) goes on, until `run_over`; see the module doc.
async fn hold_new_name(
    shared: Arc<Shared>,
    old: String,
    new: Arc<Job>,
    run_over: CancellationToken,
) {
    let node = shared.locker.node().to_string();
    let token = new_token();
    let target = Target::Rename { old: old.clone() };
    let mut pause = RETRY_FIRST;
    let (lease, sent) = loop {
        let sent = Instant::now();
        match shared
            .locker
            .claim(&new.name, &target, &token, new.lock_ttl)
            .await
        {
            Ok(Claim::Won(lease)) => break (lease, sent),
            Ok(Claim::Busy { holder, fence }) => {
                error!(job = %new.name, renamed_from = %old, node = %node, holder = %holder, fence,
                    "job `{}`'s lock is held by {holder} while the run of `{old}` (its name before the reload) is in progress here: the two may overlap", new.name);
                return;
            }
            Ok(other) => {
                error!(job = %new.name, renamed_from = %old, node = %node, answer = ?other,
                    "cannot take the renamed job's lock while the run of its old name is in progress here: the two may overlap");
                return;
            }
            Err(err) => {
                debug!(job = %new.name, renamed_from = %old, node = %node, error = %err, retry_in = ?pause,
                    "taking the renamed job's lock failed, retrying while the run of its old name goes on");
            }
        }
        tokio::select! {
            _ = run_over.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(RETRY_MAX);
    };
    info!(job = %new.name, renamed_from = %old, node = %node, fence = lease.fence,
        "holding the renamed job's lock until the run of its old name ends here");
    tokio::select! {
        lost = crate::run::keep(&shared.locker, &lease, sent) => {
            error!(job = %new.name, renamed_from = %old, node = %node, reason = lost.as_str(),
                "the renamed job's lock was lost while the run of its old name goes on here: the two may overlap");
        }
        _ = run_over.cancelled() => {}
    }
    shared.locker.drop_lease(&lease).await;
    debug!(job = %new.name, renamed_from = %old, node = %node, "renamed job's lock given back");
}

/// Before a claim of `job`'s occurrence `at` (named `name`): if a rename
/// from an old name is pending and that name's lock is held, records the
/// occurrence `skipped` naming it and its holder, unclaimed. `Ok(true)`:
/// the occurrence is decided (so, or by another node), claim nothing;
/// `Ok(false)`: claim it. `Err`: Redis failed, try again.
pub(super) async fn skipped_behind_old_name(
    shared: &Shared,
    job: &Arc<Job>,
    occurrence: Occurrence,
) -> Result<bool, LockError> {
    let (node, at) = (shared.locker.node(), occurrence.at());
    for old in shared.renames.old_names(&job.name) {
        let Some(holder) = shared.locker.holder(&old).await? else {
            shared.renames.seen_free(&job.name, &old);
            continue;
        };
        let why = format!(
            "lock of `{old}` held by {holder}: this job's run under its name before a reload renamed it"
        );
        let recorded = shared
            .locker
            .record_unrun(&job.name, at, &why, Unrun::Skipped)
            .await?;
        match recorded {
            Paused {
                recorded: true,
                previous_ms,
                ..
            } => {
                shared.redis_health.confirmed();
                info!(job = %job.name, occurrence = %occurrence, node = %node, renamed_from = %old, holder = %holder, outcome = %crate::outcome::Outcome::Skipped,
                    "occurrence skipped: the run of the job's old name still holds its lock (overlap = skip)");
                recording::record_gap_before(shared, job, previous_ms, at).await;
            }
            Paused { decided, .. } => {
                shared.redis_health.answered();
                let (decision, by) = decided.unwrap_or_default();
                info!(job = %job.name, occurrence = %occurrence, node = %node, decided_by = %by, decision = %decision,
                    "occurrence already decided by another node");
            }
        }
        return Ok(true);
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn jobs(text: &str) -> Vec<Arc<Job>> {
        let text = format!("[redis]\nurl = \"redis://127.0.0.1:6379\"\n{text}");
        crate::config::parse(&text, Path::new("jobs.toml"), &|_| Some("v".to_string()))
            .expect("valid config")
            .jobs
    }

    fn names(pairs: &[(&Arc<Job>, &Arc<Job>)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(old, new)| (old.name.clone(), new.name.clone()))
            .collect()
    }

    #[test]
    fn a_removed_and_an_added_job_that_run_the_same_are_a_rename() {
        let old = jobs(
            "[jobs.long]\nschedule = \"@hourly\"\ncommand = \"sleep 25\"\n\
             [jobs.other]\nschedule = \"@hourly\"\nargv = [\"true\"]\n\
             [jobs.kept]\nschedule = \"@hourly\"\ncommand = \"sleep 25\"\n",
        );
        let new = jobs(
            "[jobs.long-job]\nschedule = \"@daily\"\ncommand = \"sleep 25\"\n\
             [jobs.fresh]\nschedule = \"@hourly\"\nargv = [\"false\"]\n\
             [jobs.kept]\nschedule = \"@hourly\"\ncommand = \"sleep 25\"\n",
        );
        assert_eq!(
            names(&renames(&old, &new)),
            [("long".to_string(), "long-job".to_string())]
        );
        // The same text as a command and as argv is not the same action.
        let argv = jobs("[jobs.b]\nschedule = \"@hourly\"\nargv = [\"sleep 25\"]\n");
        assert!(renames(&old, &argv).is_empty());
    }
}
