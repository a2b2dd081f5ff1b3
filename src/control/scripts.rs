//! The Lua scripts of the fleet controls. Each is one round trip, runs
//! atomically, and touches only keys with the hash tag `{PREFIX}` (one
//! Cluster slot). Marks are JSON (`cjson` in Redis); a value that does not
//! decode is left alone (`pcall`), never an error of the script.
//!
//! Commands used inside: `TIME HGET HSET HDEL HGETALL LRANGE LREM PEXPIRE`
//! (the ACL line of docs/operations.md lists them).

use std::sync::LazyLock;

use redis::Script;

/// KEYS: a marks hash (pauses or drains), the audit stream. ARGV: prune
/// age ms, the audit record as JSON (`''`: none), audit cap, then field /
/// JSON mark pairs. Writes each mark, its `at_ms` raised above the field's
/// current stamp if needed (two writes within one ms still order), bumps
/// `~version`, and drops inactive or expired marks stamped before `now -
/// prune age`. Reply: each field's previous value (`''` if none), in order.
const WRITE_SRC: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function decode(text)
  if not text then return nil end
  local ok, value = pcall(cjson.decode, text)
  if ok and type(value) == 'table' then return value end
  return nil
end
local previous = {}
for i = 4, #ARGV, 2 do
  local old = redis.call('HGET', KEYS[1], ARGV[i])
  local value = ARGV[i + 1]
  local mark, before = decode(value), decode(old)
  if mark and before and tonumber(before.at_ms) and tonumber(mark.at_ms)
      and tonumber(before.at_ms) >= tonumber(mark.at_ms) then
    mark.at_ms = tonumber(before.at_ms) + 1
    value = cjson.encode(mark)
  end
  redis.call('HSET', KEYS[1], ARGV[i], value)
  previous[#previous + 1] = old or ''
end
if ARGV[2] ~= '' then
  local ok, record = pcall(cjson.decode, ARGV[2])
  if ok and type(record) == 'table' then
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'who', tostring(record.who or ''),
      'action', tostring(record.action or ''), 'target', tostring(record.target or ''),
      'reason', tostring(record.reason or ''), 'result', tostring(record.result or ''))
  end
end
local version = tonumber(redis.call('HGET', KEYS[1], '~version') or '0') or 0
redis.call('HSET', KEYS[1], '~version', string.format('%.0f', version + 1))
local all = redis.call('HGETALL', KEYS[1])
local oldest = now - tonumber(ARGV[1])
for i = 1, #all, 2 do
  local mark = decode(all[i + 1])
  if mark and tonumber(mark.at_ms) and tonumber(mark.at_ms) < oldest then
    local ended = mark.active ~= true
      or (type(mark.until_ms) == 'number' and mark.until_ms <= now)
    if ended then redis.call('HDEL', KEYS[1], all[i]) end
  end
end
return previous
"#;

/// KEYS: requests, the request's hash, drains. ARGV: raw entry, node,
/// deadline ms, ttl ms. Takes the request for `node` unless the node is
/// drained, the deadline passed, or someone took (or withdrew) it first:
/// removes it from the list and creates the request hash (`state taken`)
/// with a TTL, in one step, so exactly one of the daemons and the CLI's
/// withdrawal gets it. Reply `taken`, `draining`, `late` or `gone`.
const TAKE_SRC: &str = r#"
local drain = redis.call('HGET', KEYS[3], ARGV[2])
if drain then
  local ok, mark = pcall(cjson.decode, drain)
  if ok and type(mark) == 'table' and mark.active == true then return 'draining' end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now > tonumber(ARGV[3]) then return 'late' end
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return 'gone' end
redis.call('HSET', KEYS[2], 'state', 'taken', 'node', ARGV[2], 'taken_at', string.format('%.0f', now))
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 'taken'
"#;

/// KEYS: the request's hash. ARGV: ttl ms, then field/value pairs. Only
/// while the hash exists (its CLI may still be waiting): sets the fields
/// and renews the TTL. Reply 1, or 0 if the hash is gone.
const UPDATE_SRC: &str = r#"
if not redis.call('HGET', KEYS[1], 'state') then return 0 end
if #ARGV > 1 then redis.call('HSET', KEYS[1], unpack(ARGV, 2)) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
"#;

pub static WRITE: LazyLock<Script> = LazyLock::new(|| Script::new(WRITE_SRC));
pub static TAKE: LazyLock<Script> = LazyLock::new(|| Script::new(TAKE_SRC));
pub static UPDATE: LazyLock<Script> = LazyLock::new(|| Script::new(UPDATE_SRC));
