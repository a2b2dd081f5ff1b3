//! The soak's jobs: five kinds, each a [`JobSpec`] of the fault harness
//! (one process from START to END), in the numbers each backend runs.
//!
//! Every job has `lock_ttl = "3s"` and `starting_deadline = "2s"`, except
//! the stubborn ones: they ignore SIGTERM, time out at 2 s and end by
//! themselves at 11.5 s, just before their SIGKILL, with `lock_ttl = "1s"`,
//! so their lease must be renewed all through the kill grace.

use crate::common::cluster::JobSpec;

/// `lock_ttl` of every job but the stubborn ones (the longest one here).
pub const LOCK_TTL_S: i64 = 3;

/// `starting_deadline` of every job.
pub const DEADLINE_S: i64 = 2;

/// What a job does and how often.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Every second, 5 ms.
    S1Short,
    /// Every second, 0.4 s.
    S1Long,
    /// Every 5 s, 5 ms.
    S5Short,
    /// Every 5 s, 3 s.
    S5Long,
    /// Every 5 s, ignores SIGTERM, times out at 2 s, ends at 11.5 s.
    Stubborn,
}

impl Kind {
    /// The name prefix of the jobs of this kind (`s1-short-`, …).
    pub fn label(self) -> &'static str {
        match self {
            Kind::S1Short => "s1-short",
            Kind::S1Long => "s1-long",
            Kind::S5Short => "s5-short",
            Kind::S5Long => "s5-long",
            Kind::Stubborn => "stubborn",
        }
    }

    /// A job of this kind called `name`.
    pub fn spec(self, name: &str) -> JobSpec {
        let deadline = format!("starting_deadline = \"{DEADLINE_S}s\"");
        let plain = |schedule: &str, seconds: f64| {
            JobSpec::new(name, schedule, seconds)
                .with(&format!("lock_ttl = \"{LOCK_TTL_S}s\""))
                .with(&deadline)
        };
        match self {
            Kind::S1Short => plain("* * * * * *", 0.005),
            Kind::S1Long => plain("* * * * * *", 0.4),
            Kind::S5Short => plain("*/5 * * * * *", 0.005),
            Kind::S5Long => plain("*/5 * * * * *", 3.0),
            Kind::Stubborn => JobSpec::new(name, "*/5 * * * * *", 11.5)
                .ignoring_term()
                .with("timeout = \"2s\"")
                .with("lock_ttl = \"1s\"")
                .with(&deadline),
        }
    }
}

/// `count` jobs of each kind, named `s1-short-00`, … (`stubborn-0`, …).
pub fn named(counts: &[(Kind, usize)]) -> Vec<JobSpec> {
    let mut jobs = Vec::new();
    for &(kind, count) in counts {
        for i in 0..count {
            let name = match kind {
                Kind::Stubborn => format!("{}-{i}", kind.label()),
                _ => format!("{}-{i:02}", kind.label()),
            };
            jobs.push(kind.spec(&name));
        }
    }
    jobs
}

/// The url soak's 55 jobs (as before the backends): 20 + 10 every second,
/// 10 + 10 every 5 s, 5 stubborn.
pub fn url() -> Vec<JobSpec> {
    named(&[
        (Kind::S1Short, 20),
        (Kind::S1Long, 10),
        (Kind::S5Short, 10),
        (Kind::S5Long, 10),
        (Kind::Stubborn, 5),
    ])
}

/// The 20 jobs of the Sentinel and Redlock soaks: 8 + 4 every second,
/// 3 + 3 every 5 s, 2 stubborn.
pub fn small() -> Vec<JobSpec> {
    named(&[
        (Kind::S1Short, 8),
        (Kind::S1Long, 4),
        (Kind::S5Short, 3),
        (Kind::S5Long, 3),
        (Kind::Stubborn, 2),
    ])
}

/// The kinds of one Cluster shard's 7 jobs, in the order of its names.
pub const PER_SHARD: [Kind; 7] = [
    Kind::S1Short,
    Kind::S1Short,
    Kind::S1Short,
    Kind::S1Long,
    Kind::S5Short,
    Kind::S5Long,
    Kind::Stubborn,
];

/// The Cluster soak's jobs: for each shard's names (from
/// `RedisCluster::job_names_per_shard`, whose keys live on that shard), one
/// job of each kind of [`PER_SHARD`].
pub fn per_shard(shards: &[Vec<String>]) -> Vec<JobSpec> {
    shards
        .iter()
        .flat_map(|names| {
            names
                .iter()
                .zip(PER_SHARD)
                .map(|(name, kind)| kind.spec(name))
        })
        .collect()
}
