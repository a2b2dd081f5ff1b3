//! Every Redis key name solocron uses, one function or field per kind.
//!
//! A job's keys ([`JobKeys`]) share the hash tag `{PREFIX:JOB}`, so they
//! live on one Cluster shard and one Lua script may touch them all. The
//! fleet's own keys (pauses, drains, requests, the node registry, the data
//! marker) share the hash tag `{PREFIX}`.

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

/// The Redis keys of one group's limits (`lock::group`); fleet keys,
/// tagged `{PREFIX}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupKeys {
    /// `{PREFIX}:group:NAME:slots`: runs in progress, scored by expiry.
    pub slots: String,
    /// `{PREFIX}:group:NAME:starts`: starts, scored by start + window.
    pub starts: String,
    /// `{PREFIX}:group:NAME:waiting`: waiting occurrences, by occurrence.
    pub waiting: String,
    /// `{PREFIX}:group:NAME:waiting_until`: the same, by expiry.
    pub waiting_until: String,
}

impl GroupKeys {
    /// The keys of group `name` under `prefix`.
    pub fn new(prefix: &str, name: &str) -> GroupKeys {
        let base = format!("{{{prefix}}}:group:{name}");
        GroupKeys {
            slots: format!("{base}:slots"),
            starts: format!("{base}:starts"),
            waiting: format!("{base}:waiting"),
            waiting_until: format!("{base}:waiting_until"),
        }
    }
}

/// `{PREFIX}:audit`: the audit trail (a capped stream).
pub fn audit_key(prefix: &str) -> String {
    format!("{{{prefix}}}:audit")
}

/// `{PREFIX}:aborts`: hash, job -> the operator's `abort` of its run in
/// progress (or of its pending retry), until the run ends.
pub fn aborts_key(prefix: &str) -> String {
    format!("{{{prefix}}}:aborts")
}

/// `{PREFIX}:pauses`.
pub fn pauses_key(prefix: &str) -> String {
    format!("{{{prefix}}}:pauses")
}

/// `{PREFIX}:drains`.
pub fn drains_key(prefix: &str) -> String {
    format!("{{{prefix}}}:drains")
}

/// `{PREFIX}:requests`: the list of waiting requests (newest at the head).
pub fn requests_key(prefix: &str) -> String {
    format!("{{{prefix}}}:requests")
}

/// `{PREFIX}:overflow`: occurrences declined at `max_running`, for a node
/// with room.
pub fn overflow_key(prefix: &str) -> String {
    format!("{{{prefix}}}:overflow")
}

/// `{PREFIX}:request:ID`: the state and result of one taken request.
pub fn request_key(prefix: &str, id: &str) -> String {
    format!("{{{prefix}}}:request:{id}")
}

/// `{PREFIX}:nodes`.
pub fn nodes_key(prefix: &str) -> String {
    format!("{{{prefix}}}:nodes")
}

/// `{PREFIX}:alive`: sorted set, node -> its last beat (Redis ms).
pub fn alive_key(prefix: &str) -> String {
    format!("{{{prefix}}}:alive")
}

/// `{PREFIX}:alive:version`: bumped when a node joins or leaves `alive`.
pub fn alive_version_key(prefix: &str) -> String {
    format!("{{{prefix}}}:alive:version")
}

/// `{PREFIX}:backstop`: the backstop node's daemon instance, with a TTL.
pub fn backstop_key(prefix: &str) -> String {
    format!("{{{prefix}}}:backstop")
}

/// `{PREFIX}:tags`: node -> the tags it published (`role=db,zone=eu`).
pub fn tags_key(prefix: &str) -> String {
    format!("{{{prefix}}}:tags")
}

/// `{PREFIX}:node:NODE`.
pub fn node_key(prefix: &str, node: &str) -> String {
    format!("{{{prefix}}}:node:{node}")
}

/// `{PREFIX}:configs`: the config fingerprints in use, scored by when a
/// node on each last wrote (Redis ms).
pub fn configs_key(prefix: &str) -> String {
    format!("{{{prefix}}}:configs")
}

/// `{PREFIX}:config:FINGERPRINT`: one config's jobs (JSON object: job ->
/// fingerprint), stored once for every node that loaded it.
pub fn config_key(prefix: &str, fingerprint: &str) -> String {
    format!("{{{prefix}}}:config:{fingerprint}")
}

/// `{PREFIX}:config:FINGERPRINT:nodes`: the nodes on one config, scored by
/// their last write (Redis ms).
pub fn config_nodes_key(prefix: &str, fingerprint: &str) -> String {
    format!("{{{prefix}}}:config:{fingerprint}:nodes")
}

/// The marker key of the fleet under `prefix` ([`crate::coordinator::identity::markers`]).
pub fn marker_key(prefix: &str) -> String {
    format!("{{{prefix}}}:dataset")
}

#[cfg(test)]
mod tests {
    use super::{request_key, requests_key};

    #[test]
    fn request_keys_share_the_fleet_tag() {
        assert_eq!(requests_key("p"), "{p}:requests");
        assert_eq!(request_key("p", "ab"), "{p}:request:ab");
    }
}
