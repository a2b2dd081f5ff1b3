//! The registry's three Lua scripts. Each one is a single round trip that
//! reads the entry's `instance` before it writes, so a second daemon
//! running under the same node id is noticed by the write that would
//! otherwise have silently overwritten it.
//!
//! Every script stamps with Redis `TIME` (ms), renews the entry's TTL and
//! the node's score in the nodes set, and drops ids that have not written
//! within the TTL. `publish` and `heartbeat` reply `{'ok'}`, or
//! `{'collision', OTHER}` when the entry was last written by instance
//! `OTHER` (`''`: a daemon too old to write an instance id); `heartbeat`
//! replies `{}` when the entry is gone and must be published whole.

use std::sync::LazyLock;

use redis::Script;

/// KEYS: nodes zset, node hash. ARGV: node, ttl ms, instance, `1` if a
/// foreign instance in the old entry is a collision (`0` for a process's
/// first publish: the entry may be a crashed predecessor's), then
/// field/value pairs. Replaces the hash; a collision recorded earlier is
/// carried over (it ages out by its stamp).
const PUBLISH: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stamp = string.format('%.0f', now)
local old = redis.call('HMGET', KEYS[2], 'node', 'instance', 'collision_at', 'collision_by', 'collision_with')
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'updated_at', stamp, 'instance', ARGV[3], unpack(ARGV, 5))
local reply = {'ok'}
if ARGV[4] == '1' and old[1] and old[2] ~= ARGV[3] then
  local other = old[2] or ''
  redis.call('HSET', KEYS[2], 'collision_at', stamp, 'collision_by', ARGV[3], 'collision_with', other)
  reply = {'collision', other}
elseif old[3] then
  redis.call('HSET', KEYS[2], 'collision_at', old[3], 'collision_by', old[4] or '', 'collision_with', old[5] or '')
end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[1], stamp, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now - tonumber(ARGV[2])))
return reply
"#;

/// KEYS: nodes zset, node hash. ARGV: node, ttl ms, instance, then
/// field/value pairs (the clock offset). `{}` if the hash is gone. Else
/// stamps `updated_at`, re-asserts `instance` (recording a collision first
/// if another instance wrote it since our last write), renews the TTL.
const HEARTBEAT: &str = r#"
local old = redis.call('HMGET', KEYS[2], 'node', 'instance')
if not old[1] then return {} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stamp = string.format('%.0f', now)
local reply = {'ok'}
if old[2] ~= ARGV[3] then
  local other = old[2] or ''
  redis.call('HSET', KEYS[2], 'collision_at', stamp, 'collision_by', ARGV[3], 'collision_with', other)
  reply = {'collision', other}
end
redis.call('HSET', KEYS[2], 'updated_at', stamp, 'instance', ARGV[3], unpack(ARGV, 4))
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[1], stamp, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now - tonumber(ARGV[2])))
return reply
"#;

/// KEYS: nodes zset, node hash. ARGV: node, instance. Deletes the entry
/// only if this instance (or no instance id) wrote it last; if another
/// instance did, that daemon keeps its entry and only a collision naming
/// this instance is cleared (emptied with `HSET`, not `HDEL`: the
/// the docs' ACL user has no `HDEL`): it ends with this daemon. 1 if
/// deleted.
const WITHDRAW: &str = r#"
local owner = redis.call('HGET', KEYS[2], 'instance')
if owner and owner ~= ARGV[2] then
  local c = redis.call('HMGET', KEYS[2], 'collision_by', 'collision_with')
  if c[1] == ARGV[2] or c[2] == ARGV[2] then
    redis.call('HSET', KEYS[2], 'collision_at', '', 'collision_by', '', 'collision_with', '')
  end
  return 0
end
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
"#;

pub(super) static PUBLISH_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(PUBLISH));
pub(super) static HEARTBEAT_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(HEARTBEAT));
pub(super) static WITHDRAW_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(WITHDRAW));
