//! What this node knows of the fleet controls (`pause`, `drain`, `trigger
//! --fleet`), and the loop that keeps it current.
//!
//! Every [`control::REFRESH`] (1 s, at the half second of the wall clock,
//! away from the whole seconds occurrences fall on) the loop reads one
//! snapshot per member in one round trip of plain reads each
//! ([`control::snapshot`], a second one only when the pauses changed):
//! this node's drain mark, the pauses hash only when its `~version`
//! changed, and (first member only) the oldest waiting `trigger --fleet`
//! requests, one of which it takes if it runs that job and is not drained
//! ([`super::fleet_run`]).
//! So a pause, resume, drain or undrain takes effect on a node within
//! about a second of the command returning, and costs no Redis round trip
//! per occurrence: the occurrences read the cached state ([`Controls`]).
//! With Redlock a majority of masters must answer, and per field the
//! newest stamp wins ([`control::merge`]).
//!
//! Failure model: while Redis does not answer, the last known state stays
//! (claims fail anyway then). Until the first snapshot has been read
//! (start-up; retried every 100 ms meanwhile), an occurrence waits for it
//! ([`Controls::wait_known`], at most until shortly before its deadline),
//! so a drained node that restarts never claims before it knows. If Redis
//! refuses the read (an ACL user without the commands), the node says so
//! (a warning every 5 minutes) and runs without the controls rather than
//! not at all.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::{Shared, fleet_run};
use crate::config::Config;
use crate::control::overflow::{self, Overflowed};
use crate::control::requests::{self, PENDING_LOOKED_AT, Request, Take};
use crate::control::{self, ALL, Mark, Pauses, Snapshot};
use crate::registry::alive::{self, Beat, Beaten};

/// How soon a failed first read is retried (occurrences wait for it).
const FIRST_RETRY: Duration = Duration::from_millis(100);
/// How often a refused controls read (ACL) is logged again.
const REFUSED_REPEAT: Duration = Duration::from_secs(300);
/// Longest wait for one member's snapshot: a stalled Redlock master must
/// not slow the others' refresh down much (the next one is a second away).
const SNAPSHOT_TIMEOUT: Duration = Duration::from_millis(500);
/// How much sooner than its lease this node stops counting itself the
/// backstop: the beat that renewed it may have taken this long to arrive.
const BACKSTOP_MARGIN: Duration = Duration::from_millis(500);

/// The controls as this node last read them.
pub struct Controls {
    state: RwLock<State>,
    known_tx: watch::Sender<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct State {
    pauses: Pauses,
    /// This node's drain (active marks only).
    drain: Option<Mark>,
}

impl Default for Controls {
    fn default() -> Controls {
        Controls {
            state: RwLock::new(State::default()),
            known_tx: watch::channel(false).0,
        }
    }
}

impl Controls {
    fn read(&self) -> State {
        match self.state.read() {
            Ok(state) => state.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Whether this node is drained: it claims nothing and takes no request.
    pub fn draining(&self) -> bool {
        match self.state.read() {
            Ok(state) => state.drain.is_some(),
            Err(poisoned) => poisoned.into_inner().drain.is_some(),
        }
    }

    /// The pause covering `job`'s occurrence at `at_ms`, if any (with
    /// `true` when it is `pause --all`).
    pub fn pause_for(&self, job: &str, at_ms: i64) -> Option<(Mark, bool)> {
        let state = match self.state.read() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        };
        state
            .pauses
            .covering(job, at_ms)
            .map(|(mark, all)| (mark.clone(), all))
    }

    /// Waits at most `limit` until the first snapshot was read.
    pub async fn wait_known(&self, limit: Duration) {
        let mut known = self.known_tx.subscribe();
        let _ = tokio::time::timeout(limit, known.wait_for(|known| *known)).await;
    }

    /// Replaces the state; returns the one before.
    fn replace(&self, new: State) -> State {
        let old = match self.state.write() {
            Ok(mut state) => std::mem::replace(&mut *state, new),
            Err(poisoned) => std::mem::replace(&mut *poisoned.into_inner(), new),
        };
        self.mark_known();
        old
    }

    /// The occurrences stop waiting for a first snapshot: one was read, or
    /// Redis refuses the read (then none will be; the node runs without
    /// the controls rather than not at all).
    fn mark_known(&self) {
        self.known_tx.send_replace(true);
    }

    fn is_known(&self) -> bool {
        *self.known_tx.borrow()
    }
}

/// Per member: the pauses version and marks last read from it.
#[derive(Default, Clone)]
struct MemberView {
    version: String,
    pauses: BTreeMap<String, Mark>,
}

/// Runs until shutdown; see the module doc.
pub async fn run(shared: Arc<Shared>, config_rx: watch::Receiver<Arc<Config>>) {
    let coordinator = shared.locker.coordinator().clone();
    let node = shared.locker.node().to_string();
    let prefix = shared.locker.prefix().to_string();
    let mut views = vec![MemberView::default(); coordinator.members().len()];
    let mut first = true;
    // The pauses last logged as in effect (a `--for` end is logged too).
    let mut logged: BTreeMap<String, Mark> = BTreeMap::new();
    let mut refused_warned: Option<tokio::time::Instant> = None;
    // The fleet view (one coordinator only: with Redlock a majority
    // decides, every node claims at once, and nobody beats).
    let beats = !coordinator.is_quorum();
    let mut fleet = FleetWatch::default();
    let tags = shared.tags.published();
    loop {
        let beat = Beat {
            prefix: &prefix,
            node: &node,
            instance: &shared.instance,
            hold_backstop: !shared.controls.draining(),
            tags: &tags,
        };
        let sent = tokio::time::Instant::now();
        let answers = join_all(coordinator.members().iter().enumerate().map(|(i, member)| {
            let (prefix, node, known) = (&prefix, &node, views[i].version.clone());
            let pending = if i == 0 { PENDING_LOOKED_AT } else { 0 };
            let beat = (i == 0 && beats).then_some(&beat);
            async move {
                let read = control::snapshot(&member.conn, prefix, node, &known, pending, beat);
                match tokio::time::timeout(SNAPSHOT_TIMEOUT, read).await {
                    Ok(answer) => answer.map_err(|err| err.to_string()),
                    Err(_) => Err("no answer in time".to_string()),
                }
            }
        }))
        .await;
        let beaten = answers
            .first()
            .and_then(|answer| answer.as_ref().ok())
            .and_then(|snapshot| snapshot.beaten.clone());
        if let Some(beaten) = beaten {
            fleet.absorb(&shared, &config_rx, beaten, sent, first).await;
        }
        // Every member's aborts (with Redlock one may have missed a write).
        let mut aborts = BTreeMap::new();
        for snapshot in answers.iter().flatten() {
            for (job, mark) in &snapshot.aborts {
                aborts.entry(job.clone()).or_insert_with(|| mark.clone());
            }
        }
        shared.running.apply(&aborts, &node);
        match absorb(&mut views, answers, coordinator.majority()) {
            Ok((pauses, drain, pending, overflowed)) => {
                let old = shared.controls.replace(State { pauses, drain });
                let now_ms = shared.clock.now().timestamp_millis();
                log_changes(
                    &node,
                    &old,
                    &shared.controls.read(),
                    first,
                    &mut logged,
                    now_ms,
                );
                first = false;
                if !shared.controls.draining() && !shared.cancel.is_cancelled() {
                    take_one(&shared, &config_rx, &prefix, &pending).await;
                    take_offered(&shared, &config_rx, &prefix, &overflowed).await;
                }
            }
            Err(error) => {
                crate::metrics::redis_error("controls");
                let refused = crate::coordinator::errors::is_refusal_text(&error);
                if refused {
                    shared.controls.mark_known();
                }
                // Before the start-up check passed a refusal is its to tell
                // (a wrong password refuses everything): said from then on.
                if refused
                    && shared.is_started()
                    && refused_warned.is_none_or(|at| at.elapsed() >= REFUSED_REPEAT)
                {
                    refused_warned = Some(tokio::time::Instant::now());
                    warn!(node = %node, error = %error,
                        "redis refuses the fleet controls read: `pause`, `drain` and `trigger --fleet` are not seen by this node; give its ACL user the commands docs/operations.md (\"A Redis user for solocron\") lists");
                } else {
                    debug!(node = %node, error = %error, "cannot read the fleet controls (pauses, drain, requests); keeping the last known");
                }
            }
        }
        // Until the first snapshot, sooner: occurrences wait for it.
        let wait = if shared.controls.is_known() {
            until_half_second(chrono::Utc::now())
        } else {
            FIRST_RETRY
        };
        tokio::select! {
            _ = shared.cancel.cancelled() => {
                if beats {
                    leave(&shared, &prefix, &node).await;
                }
                return;
            }
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// The fleet view as this node last read it: the versions it was read at.
#[derive(Default)]
struct FleetWatch {
    alive_version: String,
    drains_version: String,
}

impl FleetWatch {
    /// Takes in a beat's answer (sent at `sent`): reads the view again if a
    /// node came, went, or was drained or undrained; notes whether this
    /// node holds the backstop lease, and catches up when it takes it over
    /// after its first read (the first is the start's own catch-up).
    async fn absorb(
        &mut self,
        shared: &Arc<Shared>,
        config_rx: &watch::Receiver<Arc<Config>>,
        beaten: Beaten,
        sent: tokio::time::Instant,
        first: bool,
    ) {
        let node = shared.locker.node();
        if beaten.version != self.alive_version || beaten.drains_version != self.drains_version {
            let conn = shared.locker.connection();
            match alive::read_view(&conn, shared.locker.prefix()).await {
                Ok(view) => {
                    let drained = control::parse_marks(view.drains)
                        .into_iter()
                        .filter(|(_, mark)| mark.active)
                        .map(|(node, _)| node)
                        .collect();
                    if let Some(in_line) =
                        shared.preference.set_view(view.alive, &drained, &view.tags)
                    {
                        info!(node = %node, in_line = %in_line.join(", "), count = in_line.len(),
                            "nodes in line changed: each is first for its share of the occurrences");
                    }
                    self.alive_version = beaten.version;
                    self.drains_version = beaten.drains_version;
                }
                Err(err) => {
                    crate::metrics::redis_error("controls");
                    debug!(node = %node, error = %err, "cannot read the alive nodes; keeping the last known");
                }
            }
        }
        let mine = beaten.backstop.as_deref() == Some(shared.instance.as_str());
        let until = mine.then(|| sent + alive::BACKSTOP_TTL.saturating_sub(BACKSTOP_MARGIN));
        if shared.preference.set_backstop(until) {
            info!(node = %node, catch_up = !first,
                "backstop: this node now looks at every occurrence the first two nodes in line may leave");
            if !first && !shared.cancel.is_cancelled() {
                let jobs = config_rx.borrow().jobs.clone();
                super::timetable::catch_up_all(shared, &jobs);
                super::recording::spawn_startup_check(shared, &jobs);
            }
        } else if !mine && beaten.backstop.is_none() {
            debug!(node = %node, "no backstop node holds the lease");
        }
    }
}

/// Takes this node out of the fleet view and gives up the backstop lease
/// (a clean stop), so that the others stop counting on it at once.
async fn leave(shared: &Shared, prefix: &str, node: &str) {
    let conn = shared.locker.connection();
    let left = alive::leave(&conn, prefix, node, &shared.instance);
    match tokio::time::timeout(SNAPSHOT_TIMEOUT, left).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => {
            debug!(node = %node, error = %err, "cannot leave the alive nodes; the others drop this node when its beat is overdue")
        }
        Err(_) => {
            debug!(node = %node, "leaving the alive nodes took too long; the others drop this node when its beat is overdue")
        }
    }
    shared.preference.set_backstop(None);
}

/// How long until the next half second of the wall clock (`x.500`), at
/// least 100 ms: occurrences fall on whole seconds, so the reads stay out
/// of the way of their claims (and of a thousand jobs due at once).
fn until_half_second(now: chrono::DateTime<chrono::Utc>) -> Duration {
    let into = u64::from(now.timestamp_subsec_millis()) % 1000;
    let mut wait = (1500 - into) % 1000;
    if wait < 100 {
        wait += 1000;
    }
    Duration::from_millis(wait)
}

/// Folds the members' snapshots into the views; with a majority answering,
/// the merged pauses, this node's active drain and the first member's
/// waiting requests.
#[allow(clippy::type_complexity)]
fn absorb(
    views: &mut [MemberView],
    answers: Vec<Result<Snapshot, String>>,
    majority: usize,
) -> Result<(Pauses, Option<Mark>, Vec<String>, Vec<String>), String> {
    let answered = answers.iter().filter(|answer| answer.is_ok()).count();
    if answered < majority {
        return Err(answers
            .into_iter()
            .find_map(Result::err)
            .unwrap_or_else(|| "no member answered".to_string()));
    }
    let mut drains = Vec::new();
    let mut pending = Vec::new();
    let mut overflowed = Vec::new();
    for (i, answer) in answers.into_iter().enumerate() {
        let Ok(snapshot) = answer else { continue };
        let Some(view) = views.get_mut(i) else {
            continue;
        };
        view.version = snapshot.version;
        if let Some(pauses) = snapshot.pauses {
            view.pauses = pauses;
        }
        if let Some(drain) = snapshot.drain {
            drains.push(BTreeMap::from([(String::new(), drain)]));
        }
        if i == 0 {
            pending = snapshot.pending;
            overflowed = snapshot.overflowed;
        }
    }
    let pauses = Pauses::from_marks(control::merge(
        views.iter().map(|view| view.pauses.clone()).collect(),
    ));
    let drain = control::merge(drains)
        .into_values()
        .next()
        .filter(|mark| mark.active);
    Ok((pauses, drain, pending, overflowed))
}

/// Takes the oldest occurrence a node at its `max_running` declined, of a
/// job this node has and may run, if this node has room, and claims it
/// (one per snapshot, so they spread over the nodes with room).
async fn take_offered(
    shared: &Arc<Shared>,
    config_rx: &watch::Receiver<Arc<Config>>,
    prefix: &str,
    overflowed: &[String],
) {
    let node = shared.locker.node();
    for raw in overflowed.iter().rev() {
        let Some(entry) = Overflowed::from_raw(raw) else {
            continue;
        };
        let job = config_rx
            .borrow()
            .jobs
            .iter()
            .find(|job| job.name == entry.job)
            .cloned();
        let Some(job) = job.filter(|job| job.runs_on(&shared.tags)) else {
            continue;
        };
        let Some(at) = chrono::DateTime::from_timestamp_millis(entry.at_ms) else {
            continue;
        };
        let Some(slot) = shared.slots.take() else {
            return;
        };
        let conn = shared.locker.connection();
        match overflow::take(&conn, prefix, raw).await {
            Ok(true) => {
                shared.tracker.spawn(super::occurrence::claim_offered(
                    Arc::clone(shared),
                    job,
                    at,
                    slot,
                ));
                return;
            }
            Ok(false) => {}
            Err(err) => {
                crate::metrics::redis_error("controls");
                debug!(node = %node, job = %entry.job, error = %err, "cannot take a declined occurrence");
                return;
            }
        }
    }
}

/// Takes the oldest waiting request for a job this node runs, if any, and
/// starts it (one per snapshot, so the requests spread over the nodes).
async fn take_one(
    shared: &Arc<Shared>,
    config_rx: &watch::Receiver<Arc<Config>>,
    prefix: &str,
    pending: &[String],
) {
    let node = shared.locker.node();
    for raw in pending {
        let Some(request) = Request::from_raw(raw) else {
            continue;
        };
        let job = config_rx
            .borrow()
            .jobs
            .iter()
            .find(|job| job.name == request.job)
            .cloned();
        let Some(job) = job else {
            debug!(node = %node, job = %request.job, request = %request.id,
                "trigger request for a job this node does not have: left to the others");
            continue;
        };
        if !job.runs_on(&shared.tags) {
            debug!(node = %node, job = %request.job, request = %request.id,
                "trigger request for a job this node may not run (run_on): left to the others");
            continue;
        }
        let Some(slot) = shared.slots.take() else {
            debug!(node = %node, job = %request.job, request = %request.id,
                "trigger request left to the others: this node is at its max_running");
            continue;
        };
        let conn = shared.locker.connection();
        match requests::take(&conn, prefix, raw, &request, node).await {
            Ok(Take::Taken) => {
                fleet_run::spawn(shared, job, request, slot);
                return;
            }
            Ok(Take::Draining) => return,
            Ok(Take::Late | Take::Gone) => {}
            Err(err) => {
                crate::metrics::redis_error("controls");
                debug!(node = %node, request = %request.id, error = %err, "cannot take a trigger request");
                return;
            }
        }
    }
}

/// One line per change this node now acts on (at start: what is in effect;
/// a pause whose `--for` ran out counts as resumed).
fn log_changes(
    node: &str,
    old: &State,
    new: &State,
    first: bool,
    logged: &mut BTreeMap<String, Mark>,
    now_ms: i64,
) {
    match (&old.drain, &new.drain) {
        (None, Some(drain)) => {
            warn!(node = %node, drained_by = %drain.by, since = %since(drain),
                "draining: this node claims no new occurrences and takes no trigger requests; its running jobs finish (`solocron undrain` ends it)")
        }
        (Some(_), None) if !first => {
            info!(node = %node, "undrained: this node claims occurrences again")
        }
        _ => {}
    }
    let describe = |job: &str| {
        if job == ALL {
            "every job (pause --all)".to_string()
        } else {
            job.to_string()
        }
    };
    let before = std::mem::take(logged);
    let after = marks(&new.pauses, now_ms);
    for (job, mark) in &after {
        if before.get(job) != Some(mark) {
            info!(node = %node, job = %describe(job), paused_by = %mark.by, until = mark.until_ms.map(|ms| tracing::field::display(control::instant(ms))),
                reason = mark.reason.as_deref(),
                "job paused fleet-wide: its occurrences are recorded `paused`, not run");
        }
    }
    for job in before.keys().filter(|job| !after.contains_key(*job)) {
        info!(node = %node, job = %describe(job), "job resumed: its occurrences run again");
    }
    *logged = after;
}

/// The pauses in effect at `now_ms` (the clock occurrences fire by, not
/// the wall clock: a node a day ahead logged a `--for` pause as resumed at
/// once; for the log lines only, occurrences compare their own instant
/// with a pause's end).
fn marks(pauses: &Pauses, now_ms: i64) -> BTreeMap<String, Mark> {
    let mut all = pauses.jobs.clone();
    if let Some(mark) = &pauses.all {
        all.insert(ALL.to_string(), mark.clone());
    }
    all.retain(|_, mark| mark.covers(now_ms));
    all
}

fn since(mark: &Mark) -> String {
    control::instant(mark.since_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(at_ms: i64, active: bool) -> Mark {
        Mark {
            at_ms,
            active,
            by: "ops@laptop".into(),
            since_ms: at_ms,
            until_ms: None,
            from_ms: None,
            reason: None,
        }
    }

    #[test]
    fn reads_fall_on_half_seconds() {
        let at = |ms: i64| chrono::DateTime::from_timestamp_millis(ms).expect("valid");
        assert_eq!(until_half_second(at(10_000)), Duration::from_millis(500));
        assert_eq!(until_half_second(at(10_499)), Duration::from_millis(1001));
        assert_eq!(until_half_second(at(10_501)), Duration::from_millis(999));
        assert_eq!(until_half_second(at(10_950)), Duration::from_millis(550));
    }

    #[test]
    fn a_majority_must_answer_and_the_newest_drain_mark_decides() {
        let mut views = vec![MemberView::default(); 3];
        let snapshot = |drain: Option<Mark>| Snapshot {
            version: "1".into(),
            pauses: Some(BTreeMap::from([("x".to_string(), mark(5, true))])),
            drain,
            pending: vec!["r".into()],
            beaten: None,
            overflowed: vec!["o".into()],
            aborts: BTreeMap::new(),
        };
        let short = absorb(
            &mut views,
            vec![Ok(snapshot(None)), Err("down".into()), Err("down".into())],
            2,
        );
        assert_eq!(short, Err("down".to_string()));
        let (pauses, drain, pending, overflowed) = absorb(
            &mut views,
            vec![
                Ok(snapshot(Some(mark(10, true)))),
                Ok(snapshot(Some(mark(20, false)))),
                Err("down".into()),
            ],
            2,
        )
        .expect("a majority answered");
        assert!(pauses.jobs.contains_key("x"));
        assert_eq!(drain, None, "the undrain is newer");
        assert_eq!(pending, vec!["r".to_string()]);
        assert_eq!(overflowed, vec!["o".to_string()], "the first member's");
    }
}
