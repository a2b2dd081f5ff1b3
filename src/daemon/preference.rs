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
//! claim script costs Redis ~30–45 µs; a peek a few µs (docs/PERFORMANCE.md,
//! "Redis cost per occurrence"), and the losers are N − 1 of N claims.
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

use sha2::{Digest as _, Sha256};

/// How long a node that is not first for an occurrence waits before it
/// looks whether the first one took it: above the first node's claim
/// round trip and the nodes' firing spread (Redis's clock, within a few
/// ms), so that the peek usually finds the occurrence decided; also how
/// late an occurrence runs when its first node is gone.
pub const PEEK_DELAY: Duration = Duration::from_millis(50);

/// The live node ids as the registry last listed them (sorted, deduplicated).
#[derive(Default)]
pub struct Preference {
    live: Mutex<Arc<[String]>>,
}

impl Preference {
    /// Replaces the live set with `ids` (as the registry listed them);
    /// answers the new set if it differs from the one before.
    pub fn set_live(&self, mut ids: Vec<String>) -> Option<Arc<[String]>> {
        ids.sort();
        ids.dedup();
        let ids: Arc<[String]> = ids.into();
        let mut live = match self.live.lock() {
            Ok(live) => live,
            Err(poisoned) => poisoned.into_inner(),
        };
        if *live == ids {
            return None;
        }
        *live = Arc::clone(&ids);
        Some(ids)
    }

    fn live(&self) -> Arc<[String]> {
        match self.live.lock() {
            Ok(live) => Arc::clone(&live),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Whether `me` is first in line for occurrence `at_ms` of `job`: true
    /// when no live set is known, or when `me`'s rank is the highest among
    /// the live nodes and `me` (which counts whether listed yet or not).
    pub fn is_first(&self, job: &str, at_ms: i64, me: &str) -> bool {
        first(&self.live(), job, at_ms, me) == me
    }
}

/// The node first in line for occurrence `at_ms` of `job` among `live` and
/// `me`: the highest rank, ties by id.
fn first<'a>(live: &'a [String], job: &str, at_ms: i64, me: &'a str) -> &'a str {
    live.iter()
        .map(String::as_str)
        .chain(std::iter::once(me))
        .max_by_key(|node| (rank(job, at_ms, node), *node))
        .unwrap_or(me)
}

/// A stable 64-bit rank of `node` for occurrence `at_ms` of `job` (the same
/// in every build and on every machine: SHA-256, not `std`'s hasher).
fn rank(job: &str, at_ms: i64, node: &str) -> u64 {
    let mut hash = Sha256::new();
    hash.update(job.as_bytes());
    hash.update([0]);
    hash.update(at_ms.to_be_bytes());
    hash.update(node.as_bytes());
    let digest = hash.finalize();
    let mut first8 = [0u8; 8];
    first8.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn with_no_live_set_known_every_node_is_first() {
        let preference = Preference::default();
        assert!(preference.is_first("job", 1_000, "n1"));
        assert!(preference.is_first("job", 1_000, "n2"));
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
        let all = ids(&["n1", "n2", "n3"]);
        let without_n3 = ids(&["n1", "n2"]);
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
