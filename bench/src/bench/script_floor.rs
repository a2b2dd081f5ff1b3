//! How low the commandstats figure of scenario r can go while an
//! occurrence is still recorded: per occurrence on 3 nodes, on one fresh
//! idle `redis-server`, the Redis time (`INFO commandstats` `usec` of the
//! commands the clients send; a script's inner commands inside it) of
//!
//! - node-cron + redlock's calls: node-redlock 5.0.0-beta.2's own acquire
//!   script from each node (the first takes the lock, two find it) and its
//!   release script;
//! - the least a recording design can send: a Lua claim that refuses a
//!   decided occurrence, takes the lock, counts a fence and writes the
//!   decision (3 inner commands), one `HGET` from each other node, and a
//!   token-checked Lua release that appends the history entry (3 inner
//!   commands); and the same without the other nodes' reads. It leaves out
//!   what solocron's scripts also do (Redis-time fences and the late
//!   check, skips, the abandoned-run check, retries, a release recorded
//!   once when retried, the status fields), so it is a floor, not a design;
//! - solocron's calls: the daemon's own claim code (`Locker`): a won claim,
//!   two reads from the nodes not first in line, the release.
//!
//! They are measured in turns ([`TURNS`] of each, median kept), with
//! `INFO commandstats` around each call, so each gets the same cold caches.
//!
//! Failure model: set-up panics (no server, scripts that do not load); a
//! call that errs or answers other than expected panics too, since the
//! figure would then not be the call it is named after.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use solocron::lock::{Claim, Locker, Target, new_token};

use crate::monitor::{self, CmdStat};
use crate::script_cost;
use crate::topology::Topology;

/// Occurrences per turn (10 jobs), after [`WARM_UP`] unmeasured ones.
const OCCURRENCES: i64 = 200;
const WARM_UP: i64 = 20;
/// Turns of each system; the median turn is reported.
const TURNS: usize = 3;

/// node-redlock 5.0.0-beta.2 (`dist/cjs/index.js`), `ACQUIRE_SCRIPT`.
const REDLOCK_ACQUIRE: &str = r#"
  for i, key in ipairs(KEYS) do
    if redis.call("exists", key) == 1 then
      return 0
    end
  end
  for i, key in ipairs(KEYS) do
    redis.call("set", key, ARGV[1], "PX", ARGV[2])
  end
  return #KEYS
"#;

/// node-redlock 5.0.0-beta.2, `RELEASE_SCRIPT`.
const REDLOCK_RELEASE: &str = r#"
  local count = 0
  for i, key in ipairs(KEYS) do
    if redis.call("get", key) == ARGV[1] then
      redis.pcall("del", key)
      count = count + 1
    end
  end
  return count
"#;

/// KEYS: lock, state. ARGV: occurrence ms, lock value, ttl ms, node.
const LEAST_CLAIM: &str = r#"
local st = redis.call('HMGET', KEYS[2], 'last_occ', 'fence')
if tonumber(st[1]) and tonumber(ARGV[1]) <= tonumber(st[1]) then return 0 end
if not redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[3]) then return 0 end
local fence = (tonumber(st[2]) or 0) + 1
redis.call('HSET', KEYS[2], 'last_occ', ARGV[1], 'last_node', ARGV[4], 'fence', fence)
return fence
"#;

/// KEYS: lock, history. ARGV: lock value, history max, entry fields.
const LEAST_RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', unpack(ARGV, 3))
return 1
"#;

/// The systems, in the order they are measured and shown.
pub const SYSTEMS: [&str; 4] = [
    "node-cron + redlock",
    "least recording",
    "least recording, no reads",
    "solocron",
];

/// Median µs per occurrence of each of [`SYSTEMS`], and every turn's.
#[derive(Debug, Clone, Default)]
pub struct Floor {
    pub median: BTreeMap<&'static str, f64>,
    pub turns: BTreeMap<&'static str, Vec<f64>>,
}

impl Floor {
    /// `system µs; …` in [`SYSTEMS`]' order.
    pub fn describe(&self) -> String {
        SYSTEMS
            .iter()
            .map(|system| format!("{system} {:.1}", self.median[system]))
            .collect::<Vec<_>>()
            .join("; ")
    }

    pub fn json(&self) -> Value {
        json!({"median_us_per_occurrence": self.median, "turns": self.turns,
               "occurrences_per_turn": OCCURRENCES})
    }
}

/// Measures [`SYSTEMS`] in [`TURNS`] turns each.
pub fn measure() -> Floor {
    let topology = Topology::single();
    let port = topology.masters()[0];
    let mut stats = topology.conn(port);
    let mut nodes: Vec<redis::Connection> = (0..3).map(|_| topology.conn(port)).collect();
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let lockers = script_cost::three_lockers(&runtime, &topology, "floor", 1000);
    let scripts =
        [REDLOCK_ACQUIRE, REDLOCK_RELEASE, LEAST_CLAIM, LEAST_RELEASE].map(redis::Script::new);
    let [acquire, release, claim, record] = &scripts;
    let mut floor = Floor::default();
    let mut first_occurrence = 0;
    for _ in 0..TURNS {
        for system in SYSTEMS {
            let mut usec = 0;
            for n in 0..WARM_UP + OCCURRENCES {
                let job = format!("f{}", n % 10);
                let at_ms = (first_occurrence + n / 10 + 1) * 1000;
                let timed = |conn: &mut redis::Connection, call: &mut dyn FnMut()| -> u64 {
                    let before = monitor::commandstats_usec(conn);
                    call();
                    top_level_usec(&monitor::delta_usec(
                        &before,
                        &monitor::commandstats_usec(conn),
                    ))
                };
                let spent = match system {
                    "node-cron + redlock" => {
                        redlock_occurrence(&mut stats, &mut nodes, acquire, release, &job, timed)
                    }
                    "least recording" | "least recording, no reads" => least_occurrence(
                        &mut stats,
                        &mut nodes,
                        (claim, record),
                        &job,
                        at_ms,
                        system == "least recording",
                        timed,
                    ),
                    _ => solocron_occurrence(&mut stats, &runtime, &lockers, &job, at_ms, timed),
                };
                if n >= WARM_UP {
                    usec += spent;
                }
            }
            first_occurrence += (WARM_UP + OCCURRENCES) / 10 + 1;
            floor
                .turns
                .entry(system)
                .or_default()
                .push(usec as f64 / OCCURRENCES as f64);
        }
    }
    for (system, turns) in &floor.turns {
        let mut sorted = turns.clone();
        sorted.sort_by(f64::total_cmp);
        floor.median.insert(system, sorted[sorted.len() / 2]);
    }
    floor
}

/// The time of the commands a client sent: a script's own `usec` (its
/// inner commands are inside it and listed again on their own), or every
/// command's when no script ran.
fn top_level_usec(delta: &BTreeMap<String, CmdStat>) -> u64 {
    let scripts: u64 = delta
        .iter()
        .filter(|(name, _)| matches!(name.as_str(), "evalsha" | "eval"))
        .map(|(_, stat)| stat.usec)
        .sum();
    let script_ran = delta.contains_key("evalsha") || delta.contains_key("eval");
    if script_ran {
        scripts
    } else {
        delta.values().map(|stat| stat.usec).sum()
    }
}

fn redlock_occurrence(
    stats: &mut redis::Connection,
    nodes: &mut [redis::Connection],
    acquire: &redis::Script,
    release: &redis::Script,
    job: &str,
    timed: impl Fn(&mut redis::Connection, &mut dyn FnMut()) -> u64,
) -> u64 {
    let key = format!("cron-lock:{job}");
    let token = new_token();
    let mut spent = 0;
    for (index, node) in nodes.iter_mut().enumerate() {
        let value = format!("{token}-{index}");
        spent += timed(stats, &mut || {
            let got: i64 = acquire
                .key(&key)
                .arg(&value)
                .arg(30_000)
                .invoke(node)
                .expect("redlock acquire");
            assert_eq!(
                got,
                i64::from(index == 0),
                "node {index}'s acquire of {key}"
            );
        });
    }
    let value = format!("{token}-0");
    spent += timed(stats, &mut || {
        let released: i64 = release
            .key(&key)
            .arg(&value)
            .invoke(&mut nodes[0])
            .expect("redlock release");
        assert_eq!(released, 1, "the release of {key}");
    });
    spent
}

fn least_occurrence(
    stats: &mut redis::Connection,
    nodes: &mut [redis::Connection],
    (claim, record): (&redis::Script, &redis::Script),
    job: &str,
    at_ms: i64,
    reads: bool,
    timed: impl Fn(&mut redis::Connection, &mut dyn FnMut()) -> u64,
) -> u64 {
    let (lock, state, history) = (
        format!("{{least:{job}}}:lock"),
        format!("{{least:{job}}}:state"),
        format!("{{least:{job}}}:history"),
    );
    let value = new_token();
    let mut fence = 0;
    let mut spent = timed(stats, &mut || {
        fence = claim
            .key(&lock)
            .key(&state)
            .arg(at_ms)
            .arg(&value)
            .arg(30_000)
            .arg("n1")
            .invoke(&mut nodes[0])
            .expect("least claim");
        assert!(fence > 0, "the least claim of {job} {at_ms} was not won");
    });
    let readers = if reads { &mut nodes[1..] } else { &mut [] };
    for node in readers {
        spent += timed(stats, &mut || {
            let last: Option<i64> = redis::cmd("HGET")
                .arg(&state)
                .arg("last_occ")
                .query(node)
                .expect("HGET");
            assert_eq!(last, Some(at_ms), "the decision of {job}");
        });
    }
    let fields =
        script_cost::succeeded_entry(&format!("occ-{at_ms}"), u64::try_from(fence).unwrap_or(0))
            .to_fields();
    spent += timed(stats, &mut || {
        let mut invocation = record.prepare_invoke();
        invocation.key(&lock).key(&history).arg(&value).arg(1000);
        for (field, value) in &fields {
            invocation.arg(field).arg(value);
        }
        let _: i64 = invocation.invoke(&mut nodes[0]).expect("least release");
    });
    spent
}

fn solocron_occurrence(
    stats: &mut redis::Connection,
    runtime: &tokio::runtime::Runtime,
    lockers: &[Locker],
    job: &str,
    at_ms: i64,
    timed: impl Fn(&mut redis::Connection, &mut dyn FnMut()) -> u64,
) -> u64 {
    let target = Target::Scheduled {
        at: chrono::DateTime::from_timestamp_millis(at_ms).expect("an instant"),
        deadline_ms: i64::MAX,
    };
    let mut lease = None;
    let ttl = Duration::from_secs(30);
    let mut spent = timed(stats, &mut || match runtime.block_on(lockers[0].claim(
        job,
        &target,
        &new_token(),
        ttl,
    )) {
        Ok(Claim::Won(won)) => lease = Some(won),
        other => panic!("n1's claim of {job} {at_ms} was not won: {other:?}"),
    });
    let lease = lease.expect("a won claim");
    for locker in &lockers[1..] {
        spent += timed(
            stats,
            &mut || match runtime.block_on(locker.peek(job, &target)) {
                Ok(Some(_)) => {}
                other => panic!("a read of {job} {at_ms} did not find it decided: {other:?}"),
            },
        );
    }
    let entry = script_cost::succeeded_entry(&target.name(), lease.fence);
    spent += timed(stats, &mut || {
        if let Err(err) = runtime.block_on(lockers[0].release(&lease, &entry)) {
            panic!("n1's release of {job} failed: {err}");
        }
    });
    spent
}
