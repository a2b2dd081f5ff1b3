//! The registry's three Lua scripts. Each one is a single round trip that
//! reads the entry's `instance` before it writes, so a second daemon
//! running under the same node id is noticed by the write that would
//! otherwise have silently overwritten it.
//!
//! Every script stamps with Redis `TIME` (ms), renews the entry's TTL and
//! the node's score in the nodes set, and drops ids that have not written
//! within the TTL; the same for the node in its config's node set and the
//! config in the configs set, in O(log N) per write. `publish` and `heartbeat` reply `{'ok'}`, or
//! `{'collision', OTHER}` when the entry was last written by instance
//! `OTHER` (`''`: a daemon too old to write an instance id); `heartbeat`
//! replies `{}` when the entry is gone and must be published whole.

use std::sync::LazyLock;

use redis::Script;

/// Lua shared by `publish` and `heartbeat`: `join` stamps the node in its
/// config's node set and the config in the configs set (both scored by
/// `now`), renews the config's keys and drops entries older than the TTL;
/// `leave` takes the node out of a config's node set, and the config out of
/// the configs set once no node is left on it.
const MEMBERSHIP: &str = r#"
local function join(configs, config, members, node, fp, now, ttl)
  local stale = string.format('%.0f', now - tonumber(ttl))
  local stamp = string.format('%.0f', now)
  redis.call('PEXPIRE', config, ttl)
  redis.call('ZADD', members, stamp, node)
  redis.call('ZREMRANGEBYSCORE', members, '-inf', stale)
  redis.call('PEXPIRE', members, ttl)
  redis.call('ZADD', configs, stamp, fp)
  redis.call('ZREMRANGEBYSCORE', configs, '-inf', stale)
  redis.call('PEXPIRE', configs, ttl)
end
local function leave(configs, members, node, fp)
  redis.call('ZREM', members, node)
  if redis.call('ZCARD', members) == 0 then redis.call('ZREM', configs, fp) end
end
"#;

/// KEYS: nodes zset, node hash, configs zset, config, config's node set,
/// the previous config's node set. ARGV: node, ttl ms, instance, `1` if a
/// foreign instance in the old entry is a collision (`0` for a process's
/// first publish: the entry may be a crashed predecessor's), config
/// fingerprint, the config's jobs (JSON), the previous config's fingerprint
/// (`''` if none or the same), then field/value pairs. Replaces the hash;
/// a collision recorded earlier is carried over (it ages out by its stamp).
/// The config is stored only if absent: a fingerprint names one content.
const PUBLISH: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stamp = string.format('%.0f', now)
local old = redis.call('HMGET', KEYS[2], 'node', 'instance', 'collision_at', 'collision_by', 'collision_with')
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'updated_at', stamp, 'instance', ARGV[3], unpack(ARGV, 8))
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
redis.call('SET', KEYS[4], ARGV[6], 'NX')
if ARGV[7] ~= '' and ARGV[7] ~= ARGV[5] then leave(KEYS[3], KEYS[6], ARGV[1], ARGV[7]) end
join(KEYS[3], KEYS[4], KEYS[5], ARGV[1], ARGV[5], now, ARGV[2])
return reply
"#;

/// KEYS: nodes zset, node hash, configs zset, config, config's node set.
/// ARGV: node, ttl ms, instance, config fingerprint, then field/value
/// pairs (the clock offset). `{}` if the hash or the config is gone. Else
/// stamps `updated_at`, re-asserts `instance` (recording a collision first
/// if another instance wrote it since our last write), renews the TTLs.
const HEARTBEAT: &str = r#"
local old = redis.call('HMGET', KEYS[2], 'node', 'instance')
if not old[1] then return {} end
if redis.call('PEXPIRE', KEYS[4], ARGV[2]) == 0 then return {} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stamp = string.format('%.0f', now)
local reply = {'ok'}
if old[2] ~= ARGV[3] then
  local other = old[2] or ''
  redis.call('HSET', KEYS[2], 'collision_at', stamp, 'collision_by', ARGV[3], 'collision_with', other)
  reply = {'collision', other}
end
redis.call('HSET', KEYS[2], 'updated_at', stamp, 'instance', ARGV[3], unpack(ARGV, 5))
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[1], stamp, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now - tonumber(ARGV[2])))
join(KEYS[3], KEYS[4], KEYS[5], ARGV[1], ARGV[4], now, ARGV[2])
return reply
"#;

/// KEYS: nodes zset, node hash, configs zset, the node's config's node
/// set. ARGV: node, instance, the config's fingerprint (`''`: none known).
/// Deletes the entry only if this instance (or no instance id) wrote it
/// last, and takes the node off its config; if another instance did, that
/// daemon keeps its entry and only a collision naming this instance is
/// cleared (emptied with `HSET`, not `HDEL`: the docs' ACL user has no
/// `HDEL`): it ends with this daemon. 1 if deleted.
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
if ARGV[3] ~= '' then leave(KEYS[3], KEYS[4], ARGV[1], ARGV[3]) end
return 1
"#;

pub(super) static PUBLISH_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{MEMBERSHIP}{PUBLISH}")));
pub(super) static HEARTBEAT_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{MEMBERSHIP}{HEARTBEAT}")));
pub(super) static WITHDRAW_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{MEMBERSHIP}{WITHDRAW}")));
