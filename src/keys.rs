//! The Redis keys of one job. All of them share the hash tag
//! `{PREFIX:JOB}`, so a job's keys live on one Cluster shard and one Lua
//! script may touch them all; the lock, the history readers and `status`
//! name them through [`JobKeys`] only.

/// The Redis keys of one job; all share the hash tag `{PREFIX:JOB}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobKeys {
    /// `{PREFIX:JOB}:lock`: `TOKEN NODE`, with a TTL.
    pub lock: String,
    /// `{PREFIX:JOB}:state`: hash with the fence and the last decision.
    pub state: String,
    /// `{PREFIX:JOB}:history`: stream of decisions.
    pub history: String,
    /// The hash tag `{PREFIX:JOB}` itself.
    tag: String,
}

impl JobKeys {
    /// The keys of `job` under `prefix`.
    pub fn new(prefix: &str, job: &str) -> JobKeys {
        let tag = format!("{{{prefix}:{job}}}");
        JobKeys {
            lock: format!("{tag}:lock"),
            state: format!("{tag}:state"),
            history: format!("{tag}:history"),
            tag,
        }
    }

    /// `{PREFIX:JOB}:recorded:TOKEN`: set (with a TTL) by the release that
    /// recorded the run of `token`, so a retried release records nothing
    /// twice (the lock's release script).
    pub fn recorded(&self, token: &str) -> String {
        format!("{}:recorded:{token}", self.tag)
    }
}
