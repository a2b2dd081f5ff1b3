//! Where solocron's Redis time goes, script by script: the daemon's own
//! claim code (`solocron::lock::Locker`, the same scripts as a node sends)
//! drives one fresh `redis-server` through the calls of an occurrence on 3
//! nodes, one call at a time, and `INFO commandstats` around each call
//! gives the script's time (`evalsha` `usec`, its inner commands inside)
//! and the inner commands it ran. No other client is connected, so each
//! delta is that one call.
//!
//! One round per occurrence: n1 claims (won), n2 claims while n1 holds
//! the lock (lost), n1 renews, n1 releases with the history entry, n3
//! claims after the release (lost, the lock free). [`ROUNDS`] rounds over
//! 10 jobs, newer occurrences each time.
//!
//! Failure model: set-up panics (no server, scripts that do not load); a
//! call that errs or answers other than expected panics too, since the
//! figures would then not be the call they are named after.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use solocron::history::Entry;
use solocron::lock::{Claim, Locker, Target, new_token};

use crate::monitor::{self, CmdStat};
use crate::topology::Topology;

/// Rounds measured (after [`WARM_UP`] unmeasured ones).
const ROUNDS: i64 = 300;
const WARM_UP: i64 = 20;

/// The calls of one occurrence, in the order they are made.
pub const CALLS: [&str; 5] = [
    "claim won",
    "claim lost (lock held)",
    "renew",
    "release + history entry",
    "claim lost (after the release)",
];

/// Mean figures of one kind of call.
#[derive(Debug, Clone, Default)]
pub struct CallCost {
    pub calls: u64,
    /// The script's own `usec` (inner commands inside it), summed.
    pub usec: u64,
    /// Inner commands, summed, by name.
    pub inner: BTreeMap<String, u64>,
}

impl CallCost {
    pub fn us_per_call(&self) -> f64 {
        self.usec as f64 / self.calls.max(1) as f64
    }

    pub fn inner_per_call(&self) -> f64 {
        self.inner.values().sum::<u64>() as f64 / self.calls.max(1) as f64
    }

    pub fn describe_inner(&self) -> String {
        let per: BTreeMap<String, u64> = self
            .inner
            .iter()
            .map(|(name, n)| (name.clone(), n / self.calls.max(1)))
            .collect();
        monitor::describe_counts(&per)
    }
}

/// Measures every kind of [`CALLS`].
pub fn measure() -> BTreeMap<&'static str, CallCost> {
    let topology = Topology::single();
    let port = topology.masters()[0];
    let mut conn = topology.conn(port);
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let lockers = three_lockers(&runtime, &topology, "cost", 1000);
    let ttl = Duration::from_secs(30);
    let mut costs: BTreeMap<&'static str, CallCost> = BTreeMap::new();
    for round in 0..WARM_UP + ROUNDS {
        let job = format!("s{}", round % 10);
        let at_ms = (round / 10 + 1) * 1000;
        let target = Target::Scheduled {
            at: chrono::DateTime::from_timestamp_millis(at_ms).expect("an instant"),
            deadline_ms: i64::MAX,
        };
        let measured = round >= WARM_UP;
        let mut timed =
            |kind: &'static str, conn: &mut redis::Connection, call: &mut dyn FnMut()| {
                let before = monitor::commandstats_usec(conn);
                call();
                let after = monitor::commandstats_usec(conn);
                if measured {
                    add(
                        costs.entry(kind).or_default(),
                        &monitor::delta_usec(&before, &after),
                    );
                }
            };
        let mut lease = None;
        timed(
            CALLS[0],
            &mut conn,
            &mut || match runtime.block_on(lockers[0].claim(&job, &target, &new_token(), ttl)) {
                Ok(Claim::Won(won)) => lease = Some(won),
                other => panic!("n1's claim of {job} {at_ms} was not won: {other:?}"),
            },
        );
        let lease = lease.expect("a won claim");
        timed(
            CALLS[1],
            &mut conn,
            &mut || match runtime.block_on(lockers[1].claim(&job, &target, &new_token(), ttl)) {
                Ok(Claim::Taken { .. }) => {}
                other => panic!("n2's claim of {job} {at_ms} was not lost: {other:?}"),
            },
        );
        timed(
            CALLS[2],
            &mut conn,
            &mut || match runtime.block_on(lockers[0].extend(&lease)) {
                Ok(true) => {}
                other => panic!("n1's renewal of {job} failed: {other:?}"),
            },
        );
        timed(CALLS[3], &mut conn, &mut || {
            let entry = succeeded_entry(&target.name(), lease.fence);
            if let Err(err) = runtime.block_on(lockers[0].release(&lease, &entry)) {
                panic!("n1's release of {job} failed: {err}");
            }
        });
        timed(
            CALLS[4],
            &mut conn,
            &mut || match runtime.block_on(lockers[2].claim(&job, &target, &new_token(), ttl)) {
                Ok(Claim::Taken { .. }) => {}
                other => panic!("n3's claim of {job} {at_ms} was not lost: {other:?}"),
            },
        );
    }
    costs
}

/// Three nodes' `Locker`s (`n1`, `n2`, `n3`) on `topology`, under key
/// prefix `prefix`, keeping `history_max` entries, their scripts loaded.
pub fn three_lockers(
    runtime: &tokio::runtime::Runtime,
    topology: &Topology,
    prefix: &str,
    history_max: u64,
) -> Vec<Locker> {
    let config = topology.redis_config(prefix);
    runtime.block_on(async {
        let mut lockers = Vec::new();
        for node in 1..=3 {
            let coordinator = solocron::coordinator::connect(&config)
                .unwrap_or_else(|err| panic!("connect to {}: {err:#}", config.redacted_url()));
            let locker = Locker::new(coordinator, prefix, &format!("n{node}"), history_max);
            locker
                .load_scripts()
                .await
                .unwrap_or_else(|err| panic!("load the scripts: {err}"));
            lockers.push(locker);
        }
        lockers
    })
}

/// The history entry of a successful run of `occurrence` on `n1`.
pub fn succeeded_entry(occurrence: &str, fence: u64) -> Entry {
    let now = chrono::Utc::now();
    Entry {
        occurrence: occurrence.to_string(),
        node: "n1".to_string(),
        fence,
        outcome: "succeeded".to_string(),
        exit_code: Some(0),
        http_status: None,
        started_at: now,
        finished_at: now,
        duration_ms: Some(1),
        error: None,
        output_tail: None,
        attempt: Some(1),
        retry_at: None,
        by: None,
    }
}

/// Adds one call's commandstats delta: `evalsha`/`eval` is the script, the
/// rest its inner commands.
fn add(into: &mut CallCost, delta: &BTreeMap<String, CmdStat>) {
    for (name, stat) in delta {
        if matches!(name.as_str(), "evalsha" | "eval") {
            into.calls += stat.calls;
            into.usec += stat.usec;
        } else if !name.starts_with("script") {
            *into.inner.entry(name.clone()).or_default() += stat.calls;
        }
    }
}

/// The markdown table of the calls and the JSON of them.
pub fn table(costs: &BTreeMap<&'static str, CallCost>) -> (String, Value) {
    let mut text = String::from(
        "\nsolocron's Redis time per script call (one call at a time on an otherwise idle server; `evalsha` usec from commandstats, the inner commands inside it):\n\n| call | calls | µs per call | inner commands per call | inner commands |\n|---|---|---|---|---|\n",
    );
    let mut raw = serde_json::Map::new();
    for kind in CALLS {
        let Some(cost) = costs.get(kind) else {
            continue;
        };
        text.push_str(&format!(
            "| {kind} | {} | {:.1} | {:.1} | {} |\n",
            cost.calls,
            cost.us_per_call(),
            cost.inner_per_call(),
            cost.describe_inner()
        ));
        raw.insert(
            kind.to_string(),
            json!({"calls": cost.calls, "us_per_call": cost.us_per_call(),
                   "inner_per_call": cost.inner_per_call(), "inner": cost.inner}),
        );
    }
    (text, Value::Object(raw))
}
