//! The histories of several Redlock masters as one: every occurrence once
//! (guarantee 3, docs/guarantees.md), newest first.
//!
//! Each master records what *it* decided, and they need not agree: a
//! master that granted a claim whose answer timed out keeps a lock the
//! others do not, and records `skipped` for the next occurrence that only
//! it finds busy; two nodes' skips or miss records land first on different
//! masters; an `abandoned` entry stays on a master the run's own release
//! did not reach; a gap record says `missed` on a master that was down
//! while the occurrence ran. So entries are grouped by occurrence (job,
//! occurrence name, attempt), and of each group one is kept, by this rule:
//!
//! 1. A run's own outcome (`succeeded`, `failed`, `timed_out`, `lock_lost`,
//!    `interrupted`) beats `abandoned`, which beats every decision that ran
//!    nothing (`skipped`, `missed`, `paused`): the run happened, and a
//!    master that says otherwise missed its claim or its release. But an
//!    `abandoned` entry held by fewer than a majority of the masters read
//!    weighs as a decision that ran nothing: a claim that won only a
//!    minority (undone, or its answer lost) leaves it when that master's
//!    lock expires, and the run it names never started.
//! 2. Among decisions of the same class, the one held by the most masters
//!    (a decision counts only on a majority), then the earliest appended
//!    (the first decision made), then the lower node id. A skip, a miss or
//!    a pause counts as one decision whichever node recorded it (each
//!    master keeps that of the node that came first there); the entry
//!    shown is the earliest appended.
//!
//! One exception: two *different* runs of one occurrence (other node or
//! other fence) are both kept. That would be a duplicate run, which the
//! history must show, not hide.
//!
//! Failure model: pure; entries it cannot place (no attempt) count as
//! attempt 1. With the newest `limit` entries read from each master, an
//! occurrence at the very end of the window may be judged on part of its
//! entries; the caller reads more when it needs more.

use std::collections::{BTreeMap, BTreeSet};

use super::{Entry, Recorded};
use crate::outcome::Outcome;

/// The class of an entry's outcome in rule 1: the higher, the stronger. An
/// outcome this version does not know counts as a run's.
fn class(entry: &Entry) -> u8 {
    match entry.known_outcome() {
        Some(Outcome::Abandoned) => 1,
        Some(outcome) if outcome.ran_nothing() => 0,
        _ => 2,
    }
}

/// The entries of several masters, one list per master, as one history:
/// one entry per occurrence by the module's rule, newest occurrence first,
/// at most `limit`.
pub fn merge(mut lists: Vec<Vec<Recorded>>, limit: usize) -> Vec<Recorded> {
    if lists.len() <= 1 {
        let mut only = lists.pop().unwrap_or_default();
        only.truncate(limit);
        return only;
    }
    let masters = lists.len();
    type Occurrence = (String, String, u32);
    let mut groups: BTreeMap<Occurrence, Vec<(usize, Recorded)>> = BTreeMap::new();
    for (master, list) in lists.into_iter().enumerate() {
        for recorded in list {
            let key = (
                recorded.job.clone(),
                recorded.entry.occurrence.clone(),
                recorded.entry.attempt.unwrap_or(1),
            );
            groups.entry(key).or_default().push((master, recorded));
        }
    }
    let majority = masters / 2 + 1;
    let mut all: Vec<Recorded> = groups
        .into_values()
        .flat_map(|entries| choose(entries, majority))
        .collect();
    super::read::sort(&mut all);
    all.truncate(limit);
    all
}

/// What one occurrence's entries (each with its master's index) leave;
/// `majority` of the masters read.
fn choose(entries: Vec<(usize, Recorded)>, majority: usize) -> Vec<Recorded> {
    // The same decision on several masters: one group. A run is known by
    // its node and fence, an abandoned run by its node, other decisions by
    // their outcome alone (not the fence: a skip or abandoned entry
    // carries each master's own; not the node: each master keeps the skip,
    // miss or pause of the node that came first there).
    let mut same: BTreeMap<(String, String, u64), (BTreeSet<usize>, Recorded)> = BTreeMap::new();
    for (master, recorded) in entries {
        let entry = &recorded.entry;
        let key = match class(entry) {
            2 => (String::new(), entry.node.clone(), entry.fence),
            1 => (entry.outcome.clone(), entry.node.clone(), 0),
            _ => (entry.outcome.clone(), String::new(), 0),
        };
        let group = same
            .entry(key)
            .or_insert_with(|| (BTreeSet::new(), recorded.clone()));
        group.0.insert(master);
        if appended(&recorded) < appended(&group.1) {
            group.1 = recorded;
        }
    }
    // An `abandoned` entry on a minority is no run's: it comes from a
    // grant that never had a majority (its lock expired on that master
    // with nothing released there), so it weighs as what ran nothing.
    let weight = |(masters, recorded): &(BTreeSet<usize>, Recorded)| match class(&recorded.entry) {
        1 if masters.len() < majority => 0,
        strength => strength,
    };
    let groups: Vec<(BTreeSet<usize>, Recorded)> = same.into_values().collect();
    if groups.iter().any(|group| weight(group) == 2) {
        return groups
            .into_iter()
            .filter(|group| weight(group) == 2)
            .map(|(_, recorded)| recorded)
            .collect();
    }
    groups
        .iter()
        .min_by(|a, b| {
            weight(b)
                .cmp(&weight(a))
                .then(b.0.len().cmp(&a.0.len()))
                .then(appended(&a.1).cmp(&appended(&b.1)))
                .then(a.1.entry.node.cmp(&b.1.entry.node))
        })
        .map(|(_, recorded)| recorded.clone())
        .into_iter()
        .collect()
}

/// The stream id as numbers, for "earliest appended".
fn appended(recorded: &Recorded) -> (i64, u64) {
    let (ms, seq) = recorded.id.split_once('-').unwrap_or((&recorded.id, "0"));
    (ms.parse().unwrap_or(i64::MAX), seq.parse().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;

    use super::*;
    use crate::history::Entry;

    const OCC: &str = "2026-11-30T21:00:00Z";

    fn at(occurrence: &str, id: &str, node: &str, fence: u64, outcome: &str) -> Recorded {
        let time = DateTime::from_timestamp_millis(1_796_072_400_000).expect("valid");
        Recorded {
            job: "tick".into(),
            id: id.into(),
            entry: Entry {
                occurrence: occurrence.into(),
                node: node.into(),
                fence,
                outcome: outcome.into(),
                exit_code: None,
                http_status: None,
                started_at: time,
                finished_at: time,
                duration_ms: None,
                error: None,
                output_tail: None,
                attempt: None,
                retry_at: None,
                by: None,
            },
        }
    }

    fn one(id: &str, node: &str, fence: u64, outcome: &str) -> Recorded {
        at(OCC, id, node, fence, outcome)
    }

    /// (node, outcome) of what the merge keeps.
    fn kept(lists: Vec<Vec<Recorded>>) -> Vec<(String, String)> {
        merge(lists, 100)
            .into_iter()
            .map(|r| (r.entry.node, r.entry.outcome))
            .collect()
    }

    fn pair(node: &str, outcome: &str) -> (String, String) {
        (node.to_string(), outcome.to_string())
    }

    #[test]
    fn a_run_beats_a_skip_a_gap_miss_and_its_abandoned_entry_on_other_masters() {
        let run = |id| one(id, "n1", 7, "succeeded");
        let lists = vec![
            vec![run("100-0")],
            vec![run("100-0"), one("99-0", "n3", 5, "skipped")],
            vec![one("150-0", "n2", 0, "missed")],
            vec![one("120-0", "n4", 7, "abandoned")],
            vec![run("101-0")],
        ];
        assert_eq!(kept(lists), [pair("n1", "succeeded")]);
    }

    #[test]
    fn abandoned_on_a_majority_beats_what_ran_nothing_on_a_minority_it_does_not() {
        let lists = vec![
            vec![one("120-0", "n2", 3, "abandoned")],
            vec![one("121-0", "n2", 4, "abandoned")],
            vec![
                one("90-0", "n3", 0, "missed"),
                one("91-0", "n3", 0, "skipped"),
            ],
        ];
        assert_eq!(kept(lists), [pair("n2", "abandoned")]);
        // A grant of n2 on one master that expired there; n4's skip on three.
        let skip = |id| one(id, "n4", 5, "skipped");
        let lists = vec![
            vec![one("100-0", "n2", 3, "abandoned")],
            vec![skip("90-0")],
            vec![skip("91-0")],
            vec![skip("92-0")],
            vec![],
        ];
        assert_eq!(kept(lists), [pair("n4", "skipped")]);
        // The skips of three nodes, one master each, against that grant
        // left on the two other masters: skipped (found by the soak).
        let lists = vec![
            vec![one("100-0", "n3", 3, "abandoned")],
            vec![one("101-0", "n3", 3, "abandoned")],
            vec![one("90-0", "n3", 5, "skipped")],
            vec![one("91-0", "n1", 5, "skipped")],
            vec![one("92-0", "n2", 5, "skipped")],
        ];
        assert_eq!(kept(lists), [pair("n3", "skipped")]);
    }

    #[test]
    fn between_decisions_that_ran_nothing_the_one_most_masters_hold() {
        // n1's skip is on one master (a lock left there), n2's miss on three.
        let miss = |id| one(id, "n2", 0, "missed");
        let lists = vec![
            vec![one("100-0", "n1", 9, "skipped")],
            vec![miss("101-0")],
            vec![miss("102-0")],
            vec![miss("103-0")],
        ];
        assert_eq!(kept(lists), [pair("n2", "missed")]);
        // Two nodes' skips, two masters each: one skip, the earliest.
        let lists = vec![
            vec![one("100-1", "n2", 9, "skipped")],
            vec![one("100-2", "n2", 8, "skipped")],
            vec![one("100-0", "n1", 9, "skipped")],
            vec![one("101-0", "n1", 8, "skipped")],
        ];
        assert_eq!(kept(lists), [pair("n1", "skipped")]);
    }

    #[test]
    fn two_different_runs_of_one_occurrence_both_stay_visible() {
        let lists = vec![
            vec![one("100-0", "n1", 7, "succeeded")],
            vec![one("100-0", "n2", 8, "succeeded")],
            vec![one("100-0", "n1", 7, "succeeded")],
        ];
        assert_eq!(
            kept(lists),
            [pair("n1", "succeeded"), pair("n2", "succeeded")]
        );
    }

    #[test]
    fn attempts_and_occurrences_are_kept_apart_and_the_limit_applies_after_merging() {
        let mut retry = one("200-0", "n2", 9, "succeeded");
        retry.entry.attempt = Some(2);
        let mut first = one("100-0", "n1", 7, "failed");
        first.entry.attempt = Some(1);
        let later = at("2026-11-30T21:00:01Z", "300-0", "n3", 10, "skipped");
        let lists = vec![
            vec![first.clone(), retry.clone(), later.clone()],
            vec![first, retry, later],
        ];
        assert_eq!(merge(lists.clone(), 100).len(), 3);
        let newest = merge(lists, 1);
        assert_eq!(newest.len(), 1);
        assert_eq!(newest[0].entry.occurrence, "2026-11-30T21:00:01Z");
    }
}
