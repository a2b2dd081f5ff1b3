//! Which node is first in line for an occurrence, so that the others need
//! not send Redis a claim script for an occurrence already taken.
//!
//! Every node still may claim every occurrence; only the order changes. For
//! each occurrence one live node is *first* (rendezvous hashing of the job,
//! the occurrence and each node id over the live nodes of the registry: the
//! same choice on every node that knows the same nodes, spread evenly over
//! them, and only the occurrences of a node that comes or goes move). The
//! first node claims at the instant. Every other node waits [`PEEK_DELAY`]
//! and then *peeks* ([`crate::lock::Locker::peek`]: plain reads, no
//! script): if the occurrence is decided it logs who won, as a losing claim
//! would; if not (the first node is dead, paused, drained, slow, or sees
//! other nodes) it claims as before and the claim script decides. A losing
//! claim script costs Redis several times what a peek costs, and the
//! losers are N − 1 of N claims (figures: docs/performance.md).
//!
//! Failure model: the live set is what the registry listed at this node's
//! last refresh (every [`crate::registry::REFRESH`]), so nodes may disagree
//! on it for a few seconds, and a node that died stays in it until its
//! entry expires ([`crate::registry::TTL`]). Nothing of guarantees 1–3
//! depends on the choice: two nodes that both think they are first race
//! as every node did before, and an occurrence whose first node does not
//! claim it is claimed by the others [`PEEK_DELAY`] late. With no live set
//! known (before the first registry read, or Redlock, where a majority
//! decides and a peek proves nothing) every node is first.

use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a node that is not first for an occurrence waits before it
/// looks whether the first one took it: above the first node's claim
/// round trip and the nodes' firing spread (Redis's clock, within a
/// millisecond), so that the read usually finds the occurrence decided,
/// and short, because it is also how late an occurrence runs when its
/// first node is slow (descheduled, busy spawning) or gone.
pub const PEEK_DELAY: Duration = Duration::from_millis(5);

/// The live nodes as the registry last listed them (sorted, deduplicated),
/// each with the hash of its id.
#[derive(Default)]
pub struct Preference {
    live: Mutex<Arc<[(String, u64)]>>,
}

impl Preference {
    /// Replaces the live set with `ids` (as the registry listed them);
    /// answers the new set if it differs from the one before.
    pub fn set_live(&self, mut ids: Vec<String>) -> Option<Vec<String>> {
        ids.sort();
        ids.dedup();
        let mut live = match self.live.lock() {
            Ok(live) => live,
            Err(poisoned) => poisoned.into_inner(),
        };
        if live.iter().map(|(id, _)| id).eq(ids.iter()) {
            return None;
        }
        *live = ids
            .iter()
            .map(|id| (id.clone(), fnv1a(&[id.as_bytes()])))
            .collect();
        Some(ids)
    }

    fn live(&self) -> Arc<[(String, u64)]> {
        match self.live.lock() {
            Ok(live) => Arc::clone(&live),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Where `me` stands for occurrence `at_ms` of `job`: alone when no
    /// live set is known (every node claims at once), else first when its
    /// rank is the highest among the live nodes and `me` (which counts
    /// whether listed yet or not), else behind.
    pub fn place(&self, job: &str, at_ms: i64, me: &str) -> Place {
        let live = self.live();
        if live.iter().all(|(id, _)| id == me) {
            Place::Alone
        } else if first(&live, job, at_ms, me) == me {
            Place::First
        } else {
            Place::Behind
        }
    }

    /// Whether `me` claims occurrence `at_ms` of `job` at its instant.
    #[cfg(test)]
    pub fn is_first(&self, job: &str, at_ms: i64, me: &str) -> bool {
        self.place(job, at_ms, me) != Place::Behind
    }
}

/// A node's place in line for one occurrence ([`Preference::place`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// No other live node is known: claim at once, racing whoever else
    /// fires (as every node did before this order existed).
    Alone,
    /// First in line: claim at once.
    First,
    /// Another node is first: peek after [`PEEK_DELAY`], claim if undecided.
    Behind,
}

/// The node first in line for occurrence `at_ms` of `job` among `live` and
/// `me`: the highest rank, ties by id. One hash of the occurrence and one
/// mix per node, so a thousand nodes cost a few µs per occurrence.
fn first<'a>(live: &'a [(String, u64)], job: &str, at_ms: i64, me: &'a str) -> &'a str {
    let occurrence = fnv1a(&[job.as_bytes(), &[0], &at_ms.to_be_bytes()]);
    let mine = fnv1a(&[me.as_bytes()]);
    live.iter()
        .map(|(id, hash)| (id.as_str(), *hash))
        .chain(std::iter::once((me, mine)))
        .max_by_key(|(id, hash)| (mix(occurrence ^ hash), *id))
        .map_or(me, |(id, _)| id)
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

    #[test]
    fn with_no_other_live_node_known_every_node_is_alone_and_claims_at_once() {
        let preference = Preference::default();
        assert_eq!(preference.place("job", 1_000, "n1"), Place::Alone);
        assert!(preference.is_first("job", 1_000, "n2"));
        preference.set_live(ids(&["n1"]));
        assert_eq!(preference.place("job", 1_000, "n1"), Place::Alone);
        preference.set_live(ids(&["n1", "n2"]));
        let places = [
            preference.place("job", 1_000, "n1"),
            preference.place("job", 1_000, "n2"),
        ];
        assert!(
            places == [Place::First, Place::Behind] || places == [Place::Behind, Place::First],
            "{places:?}"
        );
    }

    #[test]
    fn exactly_one_node_of_an_agreed_set_is_first_and_each_gets_its_share() {
        let nodes = ["n1", "n2", "n3"];
        let views: Vec<Preference> = nodes
            .iter()
            .map(|_| {
                let preference = Preference::default();
                assert!(
                    preference
                        .set_live(ids(&["n3", "n1", "n2", "n1"]))
                        .is_some()
                );
                assert!(
                    preference.set_live(ids(&["n1", "n2", "n3"])).is_none(),
                    "the same set"
                );
                preference
            })
            .collect();
        let mut wins = [0u32; 3];
        for second in 0..3_000i64 {
            let at = 1_700_000_000_000 + second * 1_000;
            let firsts: Vec<usize> = (0..3)
                .filter(|&i| views[i].is_first("report", at, nodes[i]))
                .collect();
            assert_eq!(firsts.len(), 1, "occurrence {at}: first nodes {firsts:?}");
            wins[firsts[0]] += 1;
        }
        for (node, won) in nodes.iter().zip(wins) {
            assert!(
                (800..=1_200).contains(&won),
                "{node} first for {won} of 3000: {wins:?}"
            );
        }
    }

    #[test]
    fn a_node_not_listed_yet_counts_itself_and_a_gone_node_moves_only_its_share() {
        let all = hashed(&["n1", "n2", "n3"]);
        let without_n3 = hashed(&["n1", "n2"]);
        let mut moved = 0;
        for second in 0..1_000i64 {
            let at = second * 1_000;
            let before = first(&all, "job", at, "n1");
            let after = first(&without_n3, "job", at, "n1");
            if before != "n3" {
                assert_eq!(
                    before, after,
                    "occurrence {at} moved though its first node stayed"
                );
            } else {
                moved += 1;
            }
            // n3, not listed by the others yet, ranks itself among them as
            // they will once they list it.
            assert_eq!(first(&without_n3, "job", at, "n3"), before);
        }
        assert!(moved > 200, "n3 was first for only {moved} of 1000");
    }
}
