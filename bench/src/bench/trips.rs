//! Round trips per occurrence from what several servers saw (`MONITOR`
//! lines, or a [`crate::counting_proxy::CountingProxy`]'s), each command
//! attributed to the daemon that sent it and to an occurrence.
//!
//! The daemon: every client `IP:PORT` is looked up, with the server's port,
//! among the daemons' own TCP connections (`/proc`), so a Redlock node's
//! five connections count as one node, and the sentinels', the replicas'
//! and the bench's own commands count for nobody. The occurrence: the
//! job of the key the command names (its hash tag `{PREFIX:JOB}`) and the
//! whole second nearest to the command (commands within half a second of
//! it), as scenario a does; so several every-second jobs are told apart.
//!
//! A round trip is one request on a connection: with `wait_replicas`, a
//! claim is the pipeline `[EVALSHA, WAIT, ROLE]` and a release `[EVALSHA,
//! WAIT]` (`src/lock/server.rs`), and a node that is not first in line for
//! an occurrence reads it with `[HMGET, PTTL]` (plus `WAIT, ROLE`), so a
//! `WAIT` or `ROLE` that follows an `EVALSHA` (or that `WAIT`, or a `PTTL`),
//! and a `PTTL` that follows an `HMGET`, on the same connection ride with
//! it: each is a
//! command sent, not another round trip, and belongs to the same
//! occurrence as the script. A command is the job's if it names a job key
//! (`{PREFIX:JOB}…`) or rides with one that does; the rest is periodic
//! (registry heartbeats, clock checks).
//!
//! Failure model: pure counting, nothing here fails. A command whose client
//! is no daemon's socket (a daemon reconnected after the sockets were read)
//! counts for nobody (`others`), so a reconnect shows as fewer round trips,
//! never as more.

use std::collections::BTreeMap;

use crate::monitor::MonLine;

/// The longest a pipelined `WAIT`/`ROLE` may follow its script here
/// (`WAIT` blocks up to `wait_timeout`, 250 ms by default).
const PIPELINE_GAP_S: f64 = 2.0;

/// Commands and round trips of one daemon on one server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Count {
    pub commands: u32,
    pub trips: u32,
}

/// What the servers saw in a window, attributed; see the module doc.
#[derive(Debug, Default)]
pub struct Trips {
    /// Occurrence (job's hash tag, epoch second) → node → one [`Count`]
    /// per server.
    pub per_occ: BTreeMap<Occurrence, BTreeMap<String, Vec<Count>>>,
    /// Occurrence → node → the commands it sent to its first server (the
    /// master; Redlock: master 1; Cluster: the job's shard), `|` between
    /// round trips.
    pub sequences: BTreeMap<Occurrence, BTreeMap<String, Vec<String>>>,
    /// The daemons' other commands in the window, by name.
    pub periodic: BTreeMap<String, u32>,
    /// Commands run inside scripts on a job's keys (`MONITOR` `lua`).
    pub lua_job: u64,
    /// Commands of clients that are no daemon (sentinels, replication, the bench).
    pub others: u64,
}

/// A job's hash tag (`PREFIX:JOB`) and an epoch second.
pub type Occurrence = (String, i64);

struct Last {
    cmd: String,
    ts: f64,
    occ: Option<Occurrence>,
}

/// Attributes `servers` (port, and the lines in the order that server saw
/// them) within `[lo, hi)` (epoch seconds); `owners` maps a connection
/// (client port, server port) to its node.
pub fn count(
    servers: &[(u16, Vec<MonLine>)],
    owners: &BTreeMap<(u16, u16), String>,
    lo: f64,
    hi: f64,
) -> Trips {
    let mut trips = Trips::default();
    for (index, (server, lines)) in servers.iter().enumerate() {
        let mut last: BTreeMap<&str, Last> = BTreeMap::new();
        for line in lines.iter().filter(|l| l.ts >= lo && l.ts < hi) {
            if line.is_lua() {
                if line.job_key().is_some() || line.cmd == "TIME" {
                    trips.lua_job += 1;
                }
                continue;
            }
            let node = line
                .client
                .rsplit_once(':')
                .and_then(|(_, port)| port.parse::<u16>().ok())
                .and_then(|port| owners.get(&(port, *server)));
            let Some(node) = node else {
                trips.others += 1;
                continue;
            };
            let previous = last.get(line.client.as_str());
            let rides = previous.is_some_and(|p| {
                line.ts - p.ts < PIPELINE_GAP_S
                    && match line.cmd.as_str() {
                        "WAIT" | "ROLE" => {
                            matches!(p.cmd.as_str(), "EVALSHA" | "EVAL" | "WAIT" | "PTTL")
                        }
                        "PTTL" => p.cmd == "HMGET",
                        _ => false,
                    }
            });
            let occ = if rides {
                previous.and_then(|p| p.occ.clone())
            } else {
                line.job_key()
                    .and_then(job_tag)
                    .map(|tag| (tag.to_string(), (line.ts + 0.5).floor() as i64))
            };
            match &occ {
                Some(occ) => {
                    let counts = trips
                        .per_occ
                        .entry(occ.clone())
                        .or_default()
                        .entry(node.clone())
                        .or_insert_with(|| vec![Count::default(); servers.len()]);
                    counts[index].commands += 1;
                    if !rides {
                        counts[index].trips += 1;
                    }
                    // The first server this node used for the occurrence:
                    // the master, Redlock's master 1, the job's shard.
                    let first = counts.iter().position(|c| c.commands > 0) == Some(index);
                    if first {
                        let sequence = trips
                            .sequences
                            .entry(occ.clone())
                            .or_default()
                            .entry(node.clone())
                            .or_default();
                        if !rides && !sequence.is_empty() {
                            sequence.push("|".to_string());
                        }
                        sequence.push(line.cmd.clone());
                    }
                }
                None => *trips.periodic.entry(line.cmd.clone()).or_insert(0) += 1,
            }
            last.insert(
                line.client.as_str(),
                Last {
                    cmd: line.cmd.clone(),
                    ts: line.ts,
                    occ,
                },
            );
        }
    }
    trips
}

/// Per-occurrence figures of the winner and of each loser.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub occurrences: usize,
    /// Mean round trips and commands of all nodes together, over all servers.
    pub all: Mean,
    /// Round trips of all nodes together, one per occurrence.
    pub all_trips: Vec<u32>,
    /// Mean round trips and commands over all servers.
    pub winner: Mean,
    pub loser: Mean,
    /// The same per server (Redlock: per master).
    pub winner_per_server: Vec<Mean>,
    pub loser_per_server: Vec<Mean>,
    /// Occurrences whose winner and every loser show the most common totals.
    pub typical: usize,
    /// The most common command sequence of a winner and of a loser on the
    /// first server.
    pub winner_sequence: String,
    pub loser_sequence: String,
}

/// Mean round trips and commands sent.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mean {
    pub trips: f64,
    pub commands: f64,
}

/// Sums up `trips` for `nodes`; `winners` names the node that ran each
/// occurrence (the probe's line), else the node with the most round trips wins.
pub fn summarise(
    trips: &Trips,
    nodes: &[String],
    winners: &BTreeMap<Occurrence, String>,
) -> Summary {
    let servers = trips
        .per_occ
        .values()
        .flat_map(|by_node| by_node.values().map(Vec::len))
        .max()
        .unwrap_or(0);
    let zero = vec![Count::default(); servers];
    let mut winner_rows: Vec<&Vec<Count>> = Vec::new();
    let mut loser_rows: Vec<&Vec<Count>> = Vec::new();
    let mut shapes: Vec<(u32, Vec<u32>)> = Vec::new();
    let mut winner_seqs: BTreeMap<String, usize> = BTreeMap::new();
    let mut loser_seqs: BTreeMap<String, usize> = BTreeMap::new();
    let total = |counts: &Vec<Count>| counts.iter().map(|c| c.trips).sum::<u32>();
    let mut all = (0u64, 0u64);
    let mut all_trips = Vec::new();
    for (occ, by_node) in &trips.per_occ {
        let mut these = 0;
        for counts in by_node.values().flatten() {
            these += counts.trips;
            all.0 += u64::from(counts.trips);
            all.1 += u64::from(counts.commands);
        }
        all_trips.push(these);
        let winner = winners.get(occ).cloned().unwrap_or_else(|| {
            by_node
                .iter()
                .max_by_key(|(_, counts)| total(counts))
                .map(|(node, _)| node.clone())
                .unwrap_or_default()
        });
        let mut loser_totals = Vec::new();
        for node in nodes {
            let counts = by_node.get(node).unwrap_or(&zero);
            let sequence = trips
                .sequences
                .get(occ)
                .and_then(|s| s.get(node))
                .map(|s| s.join(" "))
                .unwrap_or_default();
            if *node == winner {
                winner_rows.push(counts);
                *winner_seqs.entry(sequence).or_insert(0) += 1;
            } else {
                loser_rows.push(counts);
                loser_totals.push(total(counts));
                *loser_seqs.entry(sequence).or_insert(0) += 1;
            }
        }
        loser_totals.sort_unstable();
        let winner_total = by_node.get(&winner).map(total).unwrap_or(0);
        shapes.push((winner_total, loser_totals));
    }
    let mean = |rows: &[&Vec<Count>], server: Option<usize>| {
        if rows.is_empty() {
            return Mean {
                trips: f64::NAN,
                commands: f64::NAN,
            };
        }
        let pick = |counts: &Vec<Count>| match server {
            Some(i) => counts.get(i).copied().unwrap_or_default(),
            None => counts.iter().fold(Count::default(), |a, c| Count {
                commands: a.commands + c.commands,
                trips: a.trips + c.trips,
            }),
        };
        let sum = rows.iter().fold((0u64, 0u64), |(t, c), counts| {
            let one = pick(counts);
            (t + u64::from(one.trips), c + u64::from(one.commands))
        });
        Mean {
            trips: sum.0 as f64 / rows.len() as f64,
            commands: sum.1 as f64 / rows.len() as f64,
        }
    };
    let most_common = |map: &BTreeMap<String, usize>| {
        map.iter()
            .max_by_key(|(_, n)| **n)
            .map(|(s, _)| s.clone())
            .unwrap_or_default()
    };
    let mut shape_counts: BTreeMap<&(u32, Vec<u32>), usize> = BTreeMap::new();
    for shape in &shapes {
        *shape_counts.entry(shape).or_insert(0) += 1;
    }
    let occurrences = trips.per_occ.len().max(1) as f64;
    Summary {
        occurrences: trips.per_occ.len(),
        all: Mean {
            trips: all.0 as f64 / occurrences,
            commands: all.1 as f64 / occurrences,
        },
        all_trips,
        winner: mean(&winner_rows, None),
        loser: mean(&loser_rows, None),
        winner_per_server: (0..servers).map(|i| mean(&winner_rows, Some(i))).collect(),
        loser_per_server: (0..servers).map(|i| mean(&loser_rows, Some(i))).collect(),
        typical: shape_counts.values().copied().max().unwrap_or(0),
        winner_sequence: most_common(&winner_seqs),
        loser_sequence: most_common(&loser_seqs),
    }
}

/// (local port, remote port) → node, from each daemon's TCP connections.
pub fn owners(daemons: &[(String, i32)]) -> BTreeMap<(u16, u16), String> {
    daemons
        .iter()
        .flat_map(|(node, pid)| {
            crate::procfs::tcp_connections(*pid)
                .into_iter()
                .map(move |connection| (connection, node.clone()))
        })
        .collect()
}

/// The hash tag of a key (`{PREFIX:JOB}:lock` → `PREFIX:JOB`).
fn job_tag(key: &str) -> Option<&str> {
    key.strip_prefix('{')?.split_once('}').map(|(tag, _)| tag)
}
