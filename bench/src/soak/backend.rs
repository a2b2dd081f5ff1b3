//! The coordinator a soak runs on (`--backend`), its `[redis]` section,
//! the jobs it runs, and its own faults, each injected and waited out with
//! the harness's settle or heal function before the next fault may start:
//!
//! - `url`: one `redis-server`; paused (SIGSTOP) for 6 s, twice the lock
//!   TTL;
//! - `sentinel`: 1 master, 2 replicas, 3 sentinels (`wait_replicas` 1, the
//!   default): a graceful `SENTINEL FAILOVER`, or `kill -9` of the master
//!   followed by its restart (it rejoins as a replica, so that claims can
//!   be acknowledged by two again); then until the group is settled;
//! - `cluster`: 3 masters + 3 replicas, `cluster-require-full-coverage no`,
//!   7 jobs on each shard (`job_names_per_shard`): `kill -9` of a master,
//!   then its restart as a replica; or a master paused, either 1.5 s
//!   (below the 2 s node timeout: its shard stalls) or until its replica
//!   took over, then resumed (it comes back a stale master and is
//!   demoted); then until the cluster is healthy with every replica linked;
//! - `redlock`: 5 masters with `appendfsync always`: 1 or 2 of them (never
//!   a majority) killed and restarted with their data, paused and resumed,
//!   each after 3–8 s, or killed and restarted without their data after
//!   7–10 s (longer than `lock_ttl` + `starting_deadline`); only masters 3
//!   and 4 ever lose their data (see [`WIPEABLE`]).
//!
//! Which jobs each fault may cost: see `faults.rs`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::common::RedisServer;
use crate::common::audit::now_ns;
use crate::common::cluster::JobSpec;
use crate::common::ha::{Creds, Masters, RedisCluster, SentinelGroup, role};
use crate::faults::{CoordinatorFault, Reach};
use crate::jobs::{self, LOCK_TTL_S};

/// Which coordinator, as `--backend` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Url,
    Sentinel,
    Cluster,
    Redlock,
}

impl Kind {
    /// The name `--backend` takes.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Url => "url",
            Kind::Sentinel => "sentinel",
            Kind::Cluster => "cluster",
            Kind::Redlock => "redlock",
        }
    }
}

impl std::str::FromStr for Kind {
    type Err = String;

    fn from_str(text: &str) -> Result<Kind, String> {
        match text {
            "url" => Ok(Kind::Url),
            "sentinel" => Ok(Kind::Sentinel),
            "cluster" => Ok(Kind::Cluster),
            "redlock" => Ok(Kind::Redlock),
            other => Err(format!(
                "unknown backend `{other}`: url, sentinel, cluster or redlock"
            )),
        }
    }
}

/// The running coordinator; every process it started is killed on drop.
pub enum Backend {
    Url(RedisServer),
    Sentinel(SentinelGroup),
    Cluster {
        cluster: RedisCluster,
        /// Per shard (in `master_ports` order, i.e. by first slot), the
        /// names of the jobs whose keys live there.
        shards: Vec<Vec<String>>,
    },
    Redlock(Masters),
}

/// `"a", "b"` for a TOML array.
fn quoted(urls: &[String]) -> String {
    urls.iter()
        .map(|url| format!("\"{url}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A random pause in `[from_ms, to_ms)`.
fn random_ms(from_ms: u64, to_ms: u64) -> Duration {
    Duration::from_millis(rand::random_range(from_ms..to_ms))
}

impl Backend {
    /// Starts the coordinator and waits until it is ready.
    pub fn start(kind: Kind) -> Backend {
        match kind {
            Kind::Url => Backend::Url(RedisServer::start()),
            Kind::Sentinel => Backend::Sentinel(SentinelGroup::start("solocron")),
            Kind::Cluster => {
                let cluster = RedisCluster::start(3, 1);
                let shards = cluster.job_names_per_shard("solocron", jobs::PER_SHARD.len());
                Backend::Cluster { cluster, shards }
            }
            Kind::Redlock => Backend::Redlock(Masters::start_persistent(5)),
        }
    }

    /// What runs, for the soak's first line.
    pub fn describe(&self) -> String {
        match self {
            Backend::Url(_) => "url: one redis-server".to_string(),
            Backend::Sentinel(_) => {
                "sentinel: 1 master, 2 replicas, 3 sentinels, wait_replicas 1".to_string()
            }
            Backend::Cluster { shards, .. } => {
                let kinds: Vec<&str> = jobs::PER_SHARD.iter().map(|kind| kind.label()).collect();
                let names: Vec<String> = shards.iter().map(|names| names.join(" ")).collect();
                format!(
                    "cluster: 3 masters + 3 replicas, wait_replicas 1; per shard one job of each of [{}]: {}",
                    kinds.join(", "),
                    names.join(" | ")
                )
            }
            Backend::Redlock(_) => "redlock: 5 masters, appendfsync always".to_string(),
        }
    }

    /// Copies the servers' logs into `dir` (`redis-NAME.log`), for a soak
    /// whose records are kept; a single server (`url`) writes none.
    pub fn keep_logs(&self, dir: &std::path::Path) {
        let logs = match self {
            Backend::Url(_) => Vec::new(),
            Backend::Sentinel(group) => group.logs(),
            Backend::Cluster { cluster, .. } => cluster.logs(),
            Backend::Redlock(masters) => masters.logs(),
        };
        for (name, path) in logs {
            if let Err(err) = std::fs::copy(&path, dir.join(format!("redis-{name}.log"))) {
                eprintln!("soak: cannot keep {}: {err}", path.display());
            }
        }
    }

    /// The body of `jobs.toml`'s `[redis]` section.
    pub fn redis_section(&self) -> String {
        match self {
            Backend::Url(redis) => format!("url = \"{}\"", redis.url()),
            Backend::Sentinel(group) => format!(
                "sentinel = {{ master = \"{}\", urls = [{}] }}",
                group.name(),
                quoted(&group.sentinel_urls())
            ),
            Backend::Cluster { cluster, .. } => {
                format!("cluster = [{}]", quoted(&cluster.seed_urls()))
            }
            Backend::Redlock(masters) => format!("redlock = [{}]", quoted(&masters.urls())),
        }
    }

    /// The jobs: 55 on one server (as before the backends), 20 on
    /// Sentinel and Redlock, 21 on a Cluster (7 per shard), so that 5 nodes
    /// and the coordinator's servers fit on 2 cores.
    pub fn jobs(&self) -> Vec<JobSpec> {
        match self {
            Backend::Url(_) => jobs::url(),
            Backend::Sentinel(_) | Backend::Redlock(_) => jobs::small(),
            Backend::Cluster { shards, .. } => jobs::per_shard(shards),
        }
    }

    /// The sides of the soak's fault dice: 0 and 1 kill a node, 2 sends it
    /// a double SIGTERM, the rest are the coordinator's faults (a quarter
    /// of them with one server, as before the backends; half otherwise).
    pub fn fault_dice(&self) -> u64 {
        match self {
            Backend::Url(_) => 4,
            _ => 6,
        }
    }

    /// Injects one of the coordinator's faults, waits until the harness
    /// says it settled, logs a line and returns it.
    pub fn inject(&mut self) -> CoordinatorFault {
        let (from, from_ns, started) = (Utc::now(), now_ns(), Instant::now());
        let injected = match self {
            Backend::Url(redis) => {
                let pause = Duration::from_secs(2 * LOCK_TTL_S as u64);
                redis.pause();
                std::thread::sleep(pause);
                redis.resume();
                let kind = format!("redis pause ({} s)", pause.as_secs());
                Injected::new(&kind, Reach::All, kind.clone())
            }
            Backend::Sentinel(group) => sentinel_fault(group),
            Backend::Cluster { cluster, shards } => cluster_fault(cluster, shards),
            Backend::Redlock(masters) => redlock_fault(masters),
        };
        let settled = Utc::now();
        println!(
            "{} {}; settled after {:.1} s",
            from.format("%H:%M:%S"),
            injected.what,
            started.elapsed().as_secs_f64()
        );
        CoordinatorFault {
            kind: injected.kind,
            from,
            from_ns,
            over: injected.over.unwrap_or(settled),
            reach: injected.reach,
        }
    }
}

/// What a backend's fault function did.
struct Injected {
    /// For the counts.
    kind: String,
    reach: Reach,
    /// For the log line.
    what: String,
    /// When the fault's effect on claims ended, if before the settle wait
    /// returned (`None`: when it returned).
    over: Option<DateTime<Utc>>,
}

impl Injected {
    fn new(kind: &str, reach: Reach, what: String) -> Injected {
        Injected {
            kind: kind.to_string(),
            reach,
            what,
            over: None,
        }
    }
}

/// A graceful failover or a killed master (restarted as a replica), until
/// the group is settled.
fn sentinel_fault(group: &mut SentinelGroup) -> Injected {
    if rand::random_range(0..2) == 0 {
        let switch = group.failover();
        group.wait_settled();
        let what = format!(
            "SENTINEL FAILOVER {} -> {} in {} ms",
            switch.from,
            switch.to,
            switch.took.as_millis()
        );
        Injected::new("graceful SENTINEL FAILOVER", Reach::All, what)
    } else {
        let switch = group.kill_master();
        group.restart(switch.from);
        group.wait_settled();
        let what = format!(
            "kill -9 of master {}: {} promoted in {} ms, {} back as a replica",
            switch.from,
            switch.to,
            switch.took.as_millis(),
            switch.from
        );
        let kind = "kill -9 of the master, restarted as a replica";
        Injected::new(kind, Reach::All, what)
    }
}

/// A killed master (restarted as a replica) or a paused one, on a random
/// shard, until the cluster is healthy with every replica linked again.
fn cluster_fault(cluster: &mut RedisCluster, shards: &[Vec<String>]) -> Injected {
    let masters = cluster.master_ports();
    let shard = rand::random_range(0..masters.len());
    let port = masters[shard];
    let reach = Reach::Jobs(shards[shard].iter().cloned().collect::<BTreeSet<_>>());
    let (kind, what, over) = match rand::random_range(0..3) {
        0 => {
            let pause = Duration::from_millis(1500);
            cluster.pause(port);
            std::thread::sleep(pause);
            cluster.resume(port);
            let resumed = Utc::now();
            // Let a failure report that started die down before the wait.
            std::thread::sleep(Duration::from_secs(3));
            let kind = "pause of a master for 1.5 s (no failover)";
            let what = format!("master {port} (shard {shard}) paused for 1.5 s");
            (kind, what, Some(resumed))
        }
        1 => {
            let paused = Instant::now();
            cluster.pause(port);
            crate::common::wait_until(
                Duration::from_secs(30),
                "a replica of the paused master took over",
                || {
                    let now = cluster.master_ports();
                    now.len() == masters.len() && !now.contains(&port)
                },
            );
            let took = paused.elapsed();
            cluster.resume(port);
            crate::common::wait_until(
                Duration::from_secs(30),
                "the resumed master is a replica",
                || {
                    matches!(
                        role(port, &Creds::default()),
                        Some(redis::Role::Replica { .. })
                    )
                },
            );
            let kind = "pause of a master until failed over, resumed";
            let what = format!(
                "master {port} (shard {shard}) paused until its replica took over ({} ms), resumed",
                took.as_millis()
            );
            (kind, what, None)
        }
        _ => {
            let switch = cluster.kill_master(port);
            cluster.restart(port);
            let kind = "kill -9 of a master, restarted as a replica";
            let what = format!(
                "kill -9 of master {port} (shard {shard}): {} promoted in {} ms, {port} back as a replica",
                switch.to,
                switch.took.as_millis()
            );
            (kind, what, None)
        }
    };
    cluster.wait_healthy();
    cluster.wait_replicas_linked();
    Injected {
        over,
        ..Injected::new(kind, reach, what)
    }
}

/// The masters a Redlock fault may restart without their data: always the
/// same two (a minority). Each entry of the history is written to every
/// master that answers, so to at least three; wiping any masters at random
/// would, fault after fault, wipe all three holders of an entry written
/// while two were down, which no Redlock can survive.
const WIPEABLE: [usize; 2] = [3, 4];

/// `count` distinct indices out of `from`, at random.
fn pick(from: &[usize], count: usize) -> Vec<usize> {
    let mut left = from.to_vec();
    let mut picked = Vec::new();
    while picked.len() < count && !left.is_empty() {
        picked.push(left.swap_remove(rand::random_range(0..left.len())));
    }
    picked
}

/// A minority (1 or 2 of 5) killed and restarted with their data, paused
/// and resumed, or killed and restarted without their data (only masters
/// of [`WIPEABLE`]).
fn redlock_fault(masters: &mut Masters) -> Injected {
    let count = rand::random_range(1..3);
    let all: Vec<usize> = (0..masters.len()).collect();
    let of = |victims: &[usize]| match victims {
        [one] => format!("master {one}"),
        _ => format!("{} masters {victims:?}", victims.len()),
    };
    let (kind, victims, down) = match rand::random_range(0..3) {
        0 => {
            let (victims, down) = (pick(&all, count), random_ms(3000, 8000));
            victims.iter().for_each(|&i| masters.kill(i));
            std::thread::sleep(down);
            victims.iter().for_each(|&i| masters.restart(i));
            ("kill -9, restart with data", victims, down)
        }
        1 => {
            let (victims, down) = (pick(&all, count), random_ms(3000, 8000));
            victims.iter().for_each(|&i| masters.pause(i));
            std::thread::sleep(down);
            victims.iter().for_each(|&i| masters.resume(i));
            ("SIGSTOP, then SIGCONT", victims, down)
        }
        _ => {
            // Down longer than `lock_ttl` + `starting_deadline` (docs/ha.md).
            let (victims, down) = (pick(&WIPEABLE, count), random_ms(7000, 10000));
            victims.iter().for_each(|&i| masters.kill(i));
            std::thread::sleep(down);
            victims.iter().for_each(|&i| masters.restart_empty(i));
            ("kill -9, restart without data", victims, down)
        }
    };
    let what = format!("{kind} of {} for {} ms", of(&victims), down.as_millis());
    let kind = format!("{kind} of {} master(s)", victims.len());
    Injected::new(&kind, Reach::Nothing, what)
}
