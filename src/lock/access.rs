//! What the Redis user may do: a probe at start that runs every command
//! the daemon's lock, history and registry need (in its scripts and plain)
//! on throwaway keys, so that an ACL user missing one of them stops the
//! daemon with exit 78 naming the command, before the first occurrence.
//! The fleet controls' commands (`HGETALL LRANGE LREM`) are not probed: a
//! user without them still runs jobs and is told by the controls read
//! (docs/operations.md, "A Redis user for solocron"); nor are the commands only the
//! command line sends (`HDEL LPUSH XREVRANGE`).
//!
//! Without it a user that may run `EVALSHA` but not, say, `HSET` passed
//! the start and then failed *inside* the claim script, after the script
//! had already taken the lock: Redis does not undo a script's writes when
//! a later command of it fails, and the retried claim found its own lock
//! and ran the job without a recorded decision, on every node.
//!
//! The probe is one script per key namespace (a job's `{PREFIX:…}` and the
//! fleet's `{PREFIX}`; on a Cluster each lives on its own slot), each
//! command wrapped in `redis.pcall`, so one refusal does not hide the
//! next. Keys are named with `#`, which no job name may contain, carry a
//! TTL from their first write, and are deleted at the end.
//!
//! Failure model: the probe answers what Redis refuses *now*; an ACL
//! changed while the daemon runs is met by the scripts' own order (a claim
//! writes its decision before it takes the lock, a release appends the
//! history entry before it deletes the lock) and reported as a refusal,
//! not an outage ([`crate::coordinator::errors::is_refusal`]).

use std::sync::LazyLock;

use redis::Script;

use crate::coordinator::Conn;

/// KEYS: a string, a hash, a stream and a sorted set, all of one hash
/// tag. Runs every command a daemon needs to run jobs (but `EVALSHA`,
/// `SCRIPT LOAD` and `SELECT`, which the start-up itself runs) and answers
/// the names of those refused: `{}` when the user may run them all.
const PROBE: &str = r#"
local refused = {}
local function try(...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err then
    local err = string.lower(reply.err)
    if string.find(err, 'noperm', 1, true) or string.find(err, "can't run", 1, true)
      or string.find(err, "can't access", 1, true) or string.find(err, 'no permissions', 1, true) then
      refused[#refused + 1] = string.lower((...))
    end
  end
end
local s, h, x, z = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
try('TIME')
try('SET', s, '1', 'PX', 10000)
try('GET', s)
try('PEXPIRE', s, 10000)
try('PTTL', s)
try('HSET', h, 'f', '1')
try('PEXPIRE', h, 10000)
try('HGET', h, 'f')
try('HMGET', h, 'f')
try('XADD', x, 'MAXLEN', '~', 10, '*', 'f', 'v')
try('PEXPIRE', x, 10000)
try('XDEL', x, '0-1')
try('ZADD', z, 1, 'm')
try('ZCARD', z)
try('PEXPIRE', z, 10000)
try('ZRANGE', z, 0, -1)
try('ZRANGEBYSCORE', z, '-inf', '+inf')
try('ZRANK', z, 'm')
try('ZSCORE', z, 'm')
try('ZREM', z, 'm')
try('ZREMRANGEBYSCORE', z, '-inf', '0')
try('DEL', s, h, x, z)
return refused
"#;

static PROBE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(PROBE));

/// The commands (lowercase, each once, in the probe's order) that the
/// user of `conn` may not run on solocron's keys under `prefix`: in a
/// job's namespace `{PREFIX:…}` or in the fleet's `{PREFIX}`.
pub async fn refused_commands(conn: &Conn, prefix: &str) -> redis::RedisResult<Vec<String>> {
    let mut refused: Vec<String> = Vec::new();
    for tag in [
        format!("{{{prefix}:#probe}}:"),
        format!("{{{prefix}}}:#probe:"),
    ] {
        let mut invocation = PROBE_SCRIPT.prepare_invoke();
        for kind in ["string", "hash", "stream", "zset"] {
            invocation.key(format!("{tag}{kind}"));
        }
        let names: Vec<String> = invocation.invoke_async(&mut conn.clone()).await?;
        for name in names {
            if !refused.contains(&name) {
                refused.push(name);
            }
        }
    }
    Ok(refused)
}

/// The start-up error for `refused` commands on `shown` (a redacted URL):
/// a refusal ([`crate::coordinator::errors::is_refusal`]), so the daemon exits 78.
pub fn refusal(shown: &str, refused: &[String]) -> redis::RedisError {
    let names = refused
        .iter()
        .map(|name| format!("`{name}`"))
        .collect::<Vec<_>>()
        .join(", ");
    redis::RedisError::from((
        redis::ErrorKind::AuthenticationFailed,
        "NOPERM",
        format!(
            "the Redis user at `{shown}` may not run {names} on solocron's keys; give it every command of the ACL line in docs/operations.md (\"A Redis user for solocron\")"
        ),
    ))
}
