//! Which nodes look at an occurrence, so that its cost does not grow with
//! the fleet (guarantee 12, docs/guarantees.md).
//!
//! For each occurrence the live, undrained nodes are ranked by rendezvous
//! hashing of the job, the occurrence and each node id: the same order on
//! every node that knows the same nodes, each node first for its share, and
//! only the occurrences of a node that comes or goes move. The *first*
//! claims at the instant. The *second* waits [`PEEK_DELAY`] and peeks
//! ([`crate::lock::Locker::peek`]: plain reads): decided, it logs who won;
//! undecided (the first is dead, stopped or slow), it claims. The
//! *backstop* (the node holding the backstop lease,
//! [`crate::registry::alive`]) does the same after [`BACKSTOP_DELAY`] for
//! every occurrence it is not first or second for, reading them in batches
//! ([`super::sweep`]), and catches up when it takes the lease over. Every other node sends nothing for the
//! occurrence. A job whose definition differs between nodes (a rollout in
//! progress) is looked at by every node that has it, as second.
//!
//! A job with `run_on` (guarantee 13) is ranked among the nodes whose tags
//! match only: the first and second eligible nodes look as above, and the
//! third eligible one is its backstop (the fleet's backstop may not be
//! allowed to run it). A node that may not run it sends nothing; if no
//! alive, undrained node may, the fleet's backstop records the occurrence
//! `missed` at its deadline, saying so ([`Place::NoEligible`]).
//!
//! Failure model: the view is what this node last read (each second when
//! a node came, went or was drained), so nodes may disagree on it for a
//! second or two; a node that dies stays in it until [`ALIVE_TTL`] passed
//! without its beat. Nothing of guarantees 1–3 depends on the order: two
//! nodes that both think they are first race as every node once did, and
//! the claim scripts decide. With no view known (before the first read,
//! or Redlock, where a majority decides and a peek proves nothing) every
//! node claims at once.
//!
//! [`ALIVE_TTL`]: crate::registry::alive::ALIVE_TTL

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::tags::{RunOn, Tags};

/// How long the second node waits before it looks whether the first one
/// took the occurrence: above the first node's claim round trip and the
/// nodes' firing spread (Redis's clock, within a millisecond), so that the
/// read usually finds the occurrence decided, and short, because it is
/// also how late an occurrence runs when its first node is slow
/// (descheduled, busy spawning) or gone.
pub const PEEK_DELAY: Duration = Duration::from_millis(5);

/// How long the backstop waits before it looks: well after the second
/// node's claim, so that it finds the occurrence decided unless both
/// nodes before it are gone; also how late an occurrence runs then.
pub const BACKSTOP_DELAY: Duration = Duration::from_millis(100);

/// The fleet view: the alive nodes, split by drain, each with the hash of
/// its id; unknown until the first read.
#[derive(Default)]
pub struct Preference {
    fleet: Mutex<Arc<Fleet>>,
    /// Until when this node holds the backstop lease, as last renewed.
    backstop_until: Mutex<Option<Instant>>,
}

#[derive(Default)]
struct Fleet {
    known: bool,
    /// Alive, not drained (sorted).
    undrained: Vec<(String, u64)>,
    /// Alive, drained (sorted).
    drained: Vec<(String, u64)>,
    /// Each alive node's tags (a node that published none: `node=<id>`).
    tags: BTreeMap<String, Tags>,
}

impl Preference {
    /// Replaces the view with `alive`, of which `drained` are drained,
    /// with the `tags` each published; answers the nodes now in line if
    /// they (or their tags) differ from the ones before.
    pub fn set_view(
        &self,
        mut alive: Vec<String>,
        drained: &BTreeSet<String>,
        tags: &BTreeMap<String, String>,
    ) -> Option<Vec<String>> {
        alive.sort();
        alive.dedup();
        let hashed = |id: &String| (id.clone(), fnv1a(&[id.as_bytes()]));
        let tags = alive
            .iter()
            .map(|id| {
                let text = tags.get(id).map_or("", String::as_str);
                (id.clone(), Tags::from_published(text, id))
            })
            .collect();
        let (drained, undrained): (Vec<String>, Vec<String>) =
            alive.into_iter().partition(|id| drained.contains(id));
        let new = Fleet {
            known: true,
            undrained: undrained.iter().map(hashed).collect(),
            drained: drained.iter().map(hashed).collect(),
            tags,
        };
        let mut fleet = lock(&self.fleet);
        let same = fleet.known
            && fleet.undrained == new.undrained
            && fleet.drained == new.drained
            && fleet.tags == new.tags;
        *fleet = Arc::new(new);
        (!same).then_some(undrained)
    }

    /// Notes that this node holds the backstop lease until `until` (None:
    /// it does not); answers whether it just took it over.
    pub fn set_backstop(&self, until: Option<Instant>) -> bool {
        let mut held = lock(&self.backstop_until);
        let was = held.is_some_and(|until| Instant::now() < until);
        *held = until;
        !was && until.is_some()
    }

    /// Whether this node holds the backstop lease now.
    pub fn is_backstop(&self) -> bool {
        lock(&self.backstop_until).is_some_and(|until| Instant::now() < until)
    }

    fn fleet(&self) -> Arc<Fleet> {
        Arc::clone(&lock(&self.fleet))
    }

    /// Whether this node catches up at a start or reload: when it is the
    /// backstop, or no view is known (every node then does).
    pub fn catches_up(&self) -> bool {
        !self.fleet().known || self.is_backstop()
    }

    /// Where `me` stands for occurrence `at_ms` of `job`; `drifting`: the
    /// job's definition differs between nodes; `run_on`: the tags a node
    /// needs for it, and `mine` this node's. See [`Place`].
    pub fn place(
        &self,
        job: &str,
        at_ms: i64,
        me: &str,
        drifting: bool,
        run_on: Option<(&RunOn, &Tags)>,
    ) -> Place {
        match run_on {
            None => self.place_any(job, at_ms, me, drifting),
            Some((run_on, mine)) => self.place_eligible(job, at_ms, me, drifting, run_on, mine),
        }
    }

    fn place_eligible(
        &self,
        job: &str,
        at_ms: i64,
        me: &str,
        drifting: bool,
        run_on: &RunOn,
        mine: &Tags,
    ) -> Place {
        let fleet = self.fleet();
        let me_eligible = run_on.matches(mine);
        if !fleet.known {
            return if me_eligible {
                Place::Alone
            } else {
                Place::Ineligible {
                    first: String::new(),
                    second: String::new(),
                }
            };
        }
        let candidates: Vec<(String, u64)> = fleet
            .undrained
            .iter()
            .filter(|(id, _)| id != me)
            .filter(|(id, _)| fleet.tags.get(id).is_some_and(|tags| run_on.matches(tags)))
            .cloned()
            .collect();
        if !me_eligible {
            if candidates.is_empty() {
                return if self.is_backstop() {
                    Place::NoEligible
                } else {
                    Place::Ineligible {
                        first: String::new(),
                        second: String::new(),
                    }
                };
            }
            let [first, second, _] = top(&candidates, job, at_ms, None);
            return Place::Ineligible {
                first: first.unwrap_or_default().to_string(),
                second: second.unwrap_or_default().to_string(),
            };
        }
        if candidates.is_empty() {
            return Place::Alone;
        }
        let [first, second, third] = top(&candidates, job, at_ms, Some(me));
        if first == Some(me) {
            Place::First
        } else if second == Some(me) || drifting {
            Place::Second
        } else if third == Some(me) {
            Place::Backstop
        } else {
            Place::Beyond {
                first: first.unwrap_or_default().to_string(),
                second: second.unwrap_or_default().to_string(),
            }
        }
    }

    fn place_any(&self, job: &str, at_ms: i64, me: &str, drifting: bool) -> Place {
        let fleet = self.fleet();
        if !fleet.known || fleet.undrained.iter().all(|(id, _)| id == me) {
            return Place::Alone;
        }
        let [first, second] = top_two(&fleet.undrained, job, at_ms, me);
        if first == Some(me) {
            Place::First
        } else if second == Some(me) || drifting {
            Place::Second
        } else if self.is_backstop() {
            Place::Backstop
        } else {
            Place::Beyond {
                first: first.unwrap_or_default().to_string(),
                second: second.unwrap_or_default().to_string(),
            }
        }
    }

    /// For a drained `me`: `Some(true)` if the view is known, no alive
    /// node is undrained, and `me` is first among the drained ones for the
    /// occurrence (it records it `missed`); `Some(false)` if another node
    /// decides it; `None` without a view.
    pub fn records_fleet_drained(&self, job: &str, at_ms: i64, me: &str) -> Option<bool> {
        let fleet = self.fleet();
        if !fleet.known {
            return None;
        }
        if !fleet.undrained.is_empty() {
            return Some(false);
        }
        Some(top_two(&fleet.drained, job, at_ms, me)[0] == Some(me))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// A node's place in line for one occurrence ([`Preference::place`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// No other node in line is known: claim at once, racing whoever else
    /// fires.
    Alone,
    /// First in line: claim at once.
    First,
    /// Second in line (or the job is drifting): peek after
    /// [`PEEK_DELAY`], claim if undecided.
    Second,
    /// The backstop: peek after [`BACKSTOP_DELAY`], claim if undecided.
    Backstop,
    /// Nothing to do: `first` and `second` in line (and the backstop)
    /// decide the occurrence.
    Beyond { first: String, second: String },
    /// This node may not run the job (`run_on`): `first` and `second` of
    /// the eligible nodes decide it (empty: none is known).
    Ineligible { first: String, second: String },
    /// No alive, undrained node may run the job, and this node is the
    /// backstop: it records the occurrence `missed` at its deadline.
    NoEligible,
}

/// The two nodes first in line for occurrence `at_ms` of `job` among `live`
/// and `me` (which counts whether listed or not): the highest ranks, ties
/// by id. One hash of the occurrence and one mix per node, so a thousand
/// nodes cost a few µs per occurrence.
fn top_two<'a>(
    live: &'a [(String, u64)],
    job: &str,
    at_ms: i64,
    me: &'a str,
) -> [Option<&'a str>; 2] {
    let occurrence = fnv1a(&[job.as_bytes(), &[0], &at_ms.to_be_bytes()]);
    let mine = (me, fnv1a(&[me.as_bytes()]));
    let ranked = live
        .iter()
        .map(|(id, hash)| (id.as_str(), *hash))
        .filter(|(id, _)| *id != me)
        .chain(std::iter::once(mine))
        .map(|(id, hash)| ((mix(occurrence ^ hash), id), id));
    let mut top: [Option<((u64, &str), &str)>; 2] = [None, None];
    for entry in ranked {
        if top[0].is_none_or(|best| entry.0 > best.0) {
            top[1] = top[0];
            top[0] = Some(entry);
        } else if top[1].is_none_or(|next| entry.0 > next.0) {
            top[1] = Some(entry);
        }
    }
    [top[0].map(|(_, id)| id), top[1].map(|(_, id)| id)]
}

/// The three nodes first in line for occurrence `at_ms` of `job` among
/// `live` and `me` (if given; it counts whether listed or not), ranked as
/// [`top_two`] ranks them.
fn top<'a>(
    live: &'a [(String, u64)],
    job: &str,
    at_ms: i64,
    me: Option<&'a str>,
) -> [Option<&'a str>; 3] {
    let occurrence = fnv1a(&[job.as_bytes(), &[0], &at_ms.to_be_bytes()]);
    let mine = me.map(|me| (me, fnv1a(&[me.as_bytes()])));
    let ranked = live
        .iter()
        .map(|(id, hash)| (id.as_str(), *hash))
        .filter(|(id, _)| Some(*id) != me)
        .chain(mine)
        .map(|(id, hash)| (mix(occurrence ^ hash), id));
    let mut best: [Option<(u64, &str)>; 3] = [None, None, None];
    for entry in ranked {
        let mut entry = Some(entry);
        for slot in best.iter_mut() {
            if entry > *slot {
                std::mem::swap(slot, &mut entry);
            }
        }
    }
    best.map(|slot| slot.map(|(_, id)| id))
}

/// FNV-1a, 64 bits, over `parts` in order: stable in every build and on
/// every machine (unlike `std`'s hasher), which every node must agree on.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in parts.iter().flat_map(|part| part.iter()) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// SplitMix64's finalizer: spreads the bits of an occurrence-and-node hash
/// so that each node is first for its share of the occurrences.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn hashed(names: &[&str]) -> Vec<(String, u64)> {
        names
            .iter()
            .map(|n| (n.to_string(), fnv1a(&[n.as_bytes()])))
            .collect()
    }

    fn view(alive: &[&str], drained: &[&str]) -> Preference {
        let preference = Preference::default();
        let drained = drained.iter().map(|n| n.to_string()).collect();
        assert!(
            preference
                .set_view(ids(alive), &drained, &BTreeMap::new())
                .is_some()
        );
        preference
    }

    #[test]
    fn without_a_view_or_another_node_in_line_every_node_claims_at_once() {
        let preference = Preference::default();
        assert_eq!(
            preference.place("job", 1_000, "n1", false, None),
            Place::Alone
        );
        assert!(preference.catches_up(), "no view: every node catches up");
        let preference = view(&["n1"], &[]);
        assert_eq!(
            preference.place("job", 1_000, "n1", false, None),
            Place::Alone
        );
        assert!(!preference.catches_up(), "a view and no backstop lease");
        let preference = view(&["n1", "n2"], &["n2"]);
        assert_eq!(
            preference.place("job", 1_000, "n1", false, None),
            Place::Alone
        );
        let preference = view(&["n1", "n2"], &[]);
        let places = [
            preference.place("job", 1_000, "n1", false, None),
            preference.place("job", 1_000, "n2", false, None),
        ];
        assert!(
            places == [Place::First, Place::Second] || places == [Place::Second, Place::First],
            "{places:?}"
        );
    }

    #[test]
    fn one_first_one_second_and_the_rest_send_nothing_each_with_its_share() {
        let nodes = ["n1", "n2", "n3", "n4", "n5"];
        let views: Vec<Preference> = nodes
            .iter()
            .map(|_| {
                let preference = view(&["n5", "n3", "n1", "n2", "n4", "n1"], &[]);
                assert!(
                    preference
                        .set_view(ids(&nodes), &BTreeSet::new(), &BTreeMap::new())
                        .is_none(),
                    "the same view"
                );
                preference
            })
            .collect();
        let mut firsts = [0u32; 5];
        for second in 0..5_000i64 {
            let at = 1_700_000_000_000 + second * 1_000;
            let places: Vec<Place> = (0..5)
                .map(|i| views[i].place("report", at, nodes[i], false, None))
                .collect();
            let count = |want: fn(&Place) -> bool| places.iter().filter(|p| want(p)).count();
            assert_eq!(
                (
                    count(|p| *p == Place::First),
                    count(|p| *p == Place::Second),
                    count(|p| matches!(p, Place::Beyond { .. }))
                ),
                (1, 1, 3),
                "occurrence {at}: {places:?}"
            );
            let first = nodes[places.iter().position(|p| *p == Place::First).unwrap()];
            let second = nodes[places.iter().position(|p| *p == Place::Second).unwrap()];
            for place in &places {
                if let Place::Beyond {
                    first: f,
                    second: s,
                } = place
                {
                    assert_eq!((f.as_str(), s.as_str()), (first, second), "{places:?}");
                }
            }
            firsts[places.iter().position(|p| *p == Place::First).unwrap()] += 1;
        }
        for (node, won) in nodes.iter().zip(firsts) {
            assert!(
                (800..=1_200).contains(&won),
                "{node} first for {won} of 5000: {firsts:?}"
            );
        }
    }

    #[test]
    fn the_backstop_and_a_drifting_job_look_and_drained_nodes_are_out_of_line() {
        let preference = view(&["n1", "n2", "n3", "n4"], &["n2"]);
        let mut beyond = 0;
        for second in 0..200i64 {
            let at = second * 1_000;
            let place = preference.place("job", at, "n4", false, None);
            assert_ne!(
                top_two(&hashed(&["n1", "n3", "n4"]), "job", at, "n4")[0],
                Some("n2"),
                "a drained node is never first"
            );
            if matches!(place, Place::Beyond { .. }) {
                beyond += 1;
                assert_eq!(preference.place("job", at, "n4", true, None), Place::Second);
            }
        }
        assert!(beyond > 0, "n4 is third of three for some occurrences");
        assert!(preference.set_backstop(Some(Instant::now() + Duration::from_secs(60))));
        assert!(
            !preference.set_backstop(Some(Instant::now() + Duration::from_secs(60))),
            "kept, not taken over"
        );
        assert!(preference.catches_up());
        for second in 0..200i64 {
            let place = preference.place("job", second * 1_000, "n4", false, None);
            assert!(!matches!(place, Place::Beyond { .. }), "{place:?}");
        }
        assert!(!preference.set_backstop(None));
        assert!(!preference.is_backstop());
    }

    #[test]
    fn a_fully_drained_fleet_is_recorded_by_one_drained_node() {
        assert_eq!(
            Preference::default().records_fleet_drained("job", 0, "n1"),
            None
        );
        assert_eq!(
            view(&["n1", "n2"], &["n1"]).records_fleet_drained("job", 0, "n1"),
            Some(false)
        );
        let all = view(&["n1", "n2", "n3"], &["n1", "n2", "n3"]);
        for second in 0..100i64 {
            let recorders = ["n1", "n2", "n3"]
                .iter()
                .filter(|n| all.records_fleet_drained("job", second * 1_000, n) == Some(true))
                .count();
            assert_eq!(recorders, 1, "occurrence {second}");
        }
    }

    #[test]
    fn a_node_not_listed_yet_counts_itself_and_a_gone_node_moves_only_its_share() {
        let all = hashed(&["n1", "n2", "n3"]);
        let without_n3 = hashed(&["n1", "n2"]);
        let mut moved = 0;
        for second in 0..1_000i64 {
            let at = second * 1_000;
            let before = top_two(&all, "job", at, "n1")[0];
            let after = top_two(&without_n3, "job", at, "n1")[0];
            if before != Some("n3") {
                assert_eq!(
                    before, after,
                    "occurrence {at} moved though its first node stayed"
                );
            } else {
                moved += 1;
            }
            // n3, not listed by the others yet, ranks itself among them as
            // they will once they list it.
            assert_eq!(top_two(&without_n3, "job", at, "n3")[0], before);
        }
        assert!(moved > 200, "n3 was first for only {moved} of 1000");
    }
}

#[cfg(test)]
mod eligible {
    use super::*;
    use crate::tags::Term;

    fn db() -> RunOn {
        RunOn::new(vec![Term::parse("role=db").expect("a term")])
    }

    /// n1..n5 alive; n1, n2, n3, n4 tagged `role=db`, n5 `role=web`.
    fn fleet(drained: &[&str]) -> (Preference, BTreeMap<String, Tags>) {
        let names = ["n1", "n2", "n3", "n4", "n5"];
        let published: BTreeMap<String, String> = names
            .iter()
            .map(|n| {
                (
                    n.to_string(),
                    if *n == "n5" { "role=web" } else { "role=db" }.to_string(),
                )
            })
            .collect();
        let preference = Preference::default();
        let drained = drained.iter().map(|n| n.to_string()).collect();
        let alive = names.iter().map(|n| n.to_string()).collect();
        assert!(preference.set_view(alive, &drained, &published).is_some());
        let tags = published
            .iter()
            .map(|(n, t)| (n.clone(), Tags::from_published(t, n)))
            .collect();
        (preference, tags)
    }

    #[test]
    fn only_eligible_nodes_are_in_line_and_the_third_is_the_jobs_backstop() {
        let (preference, tags) = fleet(&[]);
        let run_on = db();
        for second in 0..500i64 {
            let at = second * 1_000;
            let places: Vec<Place> = ["n1", "n2", "n3", "n4", "n5"]
                .iter()
                .map(|n| preference.place("dump", at, n, false, Some((&run_on, &tags[*n]))))
                .collect();
            let count = |want: fn(&Place) -> bool| places.iter().filter(|p| want(p)).count();
            assert_eq!(
                (
                    count(|p| *p == Place::First),
                    count(|p| *p == Place::Second),
                    count(|p| *p == Place::Backstop),
                    count(|p| matches!(p, Place::Beyond { .. })),
                ),
                (1, 1, 1, 1),
                "occurrence {at}: {places:?}"
            );
            assert!(matches!(&places[4], Place::Ineligible { first, .. } if first != "n5"));
        }
        // The fleet's backstop, not eligible, does not look.
        preference.set_backstop(Some(Instant::now() + Duration::from_secs(60)));
        assert!(matches!(
            preference.place("dump", 0, "n5", false, Some((&run_on, &tags["n5"]))),
            Place::Ineligible { .. }
        ));
    }

    #[test]
    fn with_no_eligible_node_left_only_the_backstop_records_the_miss() {
        let (preference, tags) = fleet(&["n1", "n2", "n3", "n4"]);
        let run_on = db();
        let web = Some((&run_on, &tags["n5"]));
        assert!(matches!(
            preference.place("dump", 0, "n5", false, web),
            Place::Ineligible { .. }
        ));
        preference.set_backstop(Some(Instant::now() + Duration::from_secs(60)));
        assert_eq!(
            preference.place("dump", 0, "n5", false, web),
            Place::NoEligible
        );
        // Without a view, an eligible node claims and another sends nothing.
        let unknown = Preference::default();
        assert_eq!(
            unknown.place("dump", 0, "n1", false, Some((&run_on, &tags["n1"]))),
            Place::Alone
        );
        assert!(matches!(
            unknown.place("dump", 0, "n5", false, web),
            Place::Ineligible { .. }
        ));
    }

    #[test]
    fn a_change_of_tags_is_a_change_of_view() {
        let (preference, _) = fleet(&[]);
        let alive: Vec<String> = ["n1", "n2", "n3", "n4", "n5"]
            .iter()
            .map(|n| n.to_string())
            .collect();
        let mut published: BTreeMap<String, String> = alive
            .iter()
            .map(|n| (n.clone(), "role=db".to_string()))
            .collect();
        published.insert("n5".to_string(), "role=web".to_string());
        assert!(
            preference
                .set_view(alive.clone(), &BTreeSet::new(), &published)
                .is_none()
        );
        published.insert("n5".to_string(), "role=db".to_string());
        assert!(
            preference
                .set_view(alive, &BTreeSet::new(), &published)
                .is_some()
        );
    }
}
