//! The three Lua scripts behind a lease: claim, extend, release.
//!
//! Each is one round trip and runs atomically in Redis. Keys of one job share
//! the hash tag `{PREFIX:JOB}`, so the scripts also run on Redis Cluster.
//! Numbers that do not fit Lua's `%.14g` number-to-string conversion (fences
//! are microsecond timestamps) are formatted with `%.0f` before Redis sees them.

/// KEYS: lock, state, history. ARGV: mode (`scheduled`|`manual`), occurrence
/// ms (scheduled only), token, node, ttl ms, occurrence string, history max,
/// deadline ms (scheduled only: occurrence + starting_deadline).
///
/// Replies:
/// - `{"won", fence}`: the lock is ours; a retry with the same token gets the
///   same fence back.
/// - `{"claimed", node, fence, decision}`: this scheduled occurrence is the
///   last decided one; `decision` is `claimed`, `skipped` or `missed`.
/// - `{"superseded", last}`: a newer occurrence (epoch ms `last`) was decided
///   before this claim arrived; who decided this one is not known any more.
/// - `{"late", now}`: Redis `TIME` is past the deadline. A claim can reach
///   Redis long after it was sent (it sat in a paused server's socket), when
///   its node has already given up: it must not take the lock then.
/// - `{"busy", holder, fence}`: the lock is held (overlap). For a scheduled
///   occurrence the skip is recorded once, in state and history.
pub const CLAIM: &str = r#"
local mode, occ, token, node = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local ttl, occ_str, maxlen = ARGV[5], ARGV[6], ARGV[7]
local value = token .. ' ' .. node
local current = redis.call('GET', KEYS[1])
if current == value then
  return {'won', redis.call('HGET', KEYS[2], 'holder_fence') or '0'}
end
local st = redis.call('HMGET', KEYS[2], 'last_occ', 'last_node', 'last_fence', 'last_token', 'last_decision')
if mode == 'scheduled' then
  local last = tonumber(st[1])
  if last and occ <= last then
    if occ == last and st[4] == token and not current then
      redis.call('SET', KEYS[1], value, 'PX', ttl)
      return {'won', st[3]}
    end
    if occ < last then
      return {'superseded', st[1]}
    end
    return {'claimed', st[2] or '', st[3] or '0', st[5] or 'claimed'}
  end
end
local t = redis.call('TIME')
local now_ms = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
if mode == 'scheduled' and tonumber(now_ms) > tonumber(ARGV[8]) then
  return {'late', now_ms}
end
if current then
  local sp = string.find(current, ' ', 1, true)
  local holder = sp and string.sub(current, sp + 1) or current
  local holder_fence = redis.call('HGET', KEYS[2], 'holder_fence') or '0'
  if mode == 'scheduled' then
    redis.call('HSET', KEYS[2], 'last_occ', ARGV[2], 'last_node', node, 'last_fence', holder_fence,
      'last_token', token, 'last_decision', 'skipped', 'last_outcome', 'skipped', 'last_outcome_occ', occ_str)
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', maxlen, '*', 'occurrence', occ_str, 'node', node,
      'fence', holder_fence, 'outcome', 'skipped', 'started_at', now_ms, 'finished_at', now_ms,
      'error', 'lock held by ' .. holder)
  end
  return {'busy', holder, holder_fence}
end
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fence = (tonumber(redis.call('HGET', KEYS[2], 'fence')) or 0) + 1
if now_us > fence then fence = now_us end
fence = string.format('%.0f', fence)
redis.call('SET', KEYS[1], value, 'PX', ttl)
redis.call('HSET', KEYS[2], 'fence', fence, 'holder_node', node, 'holder_fence', fence,
  'holder_since', now_ms, 'holder_occ', occ_str)
if mode == 'scheduled' then
  redis.call('HSET', KEYS[2], 'last_occ', ARGV[2], 'last_node', node, 'last_fence', fence,
    'last_token', token, 'last_decision', 'claimed', 'last_outcome', 'running', 'last_outcome_occ', occ_str)
end
return {'won', fence}
"#;

/// KEYS: lock. ARGV: lock value, ttl ms. Reply 1 if still ours and extended.
pub const EXTEND: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"#;

/// KEYS: lock, state, history. ARGV: lock value, token, history max,
/// remember ms, then field/value pairs of the history entry (the first pair
/// is `occurrence`). Deletes the lock only if it still holds our value;
/// appends the history entry once per token: the tokens recorded within the
/// last `remember` ms (longer than a node retries a release) are kept in the
/// state as `TOKEN@MS ...`, so a retried release whose first attempt did
/// reach Redis records nothing, even after later runs of the job released.
/// Reply 1 if the lock was ours and is now deleted.
pub const RELEASE: &str = r#"
local released = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  released = 1
end
local recorded = redis.call('HGET', KEYS[2], 'recorded') or ''
if string.find(recorded, ARGV[2] .. '@', 1, true) then
  return released
end
local fields = {}
local outcome = ''
for i = 5, #ARGV, 2 do
  fields[#fields + 1] = ARGV[i]
  fields[#fields + 1] = ARGV[i + 1]
  if ARGV[i] == 'outcome' then outcome = ARGV[i + 1] end
end
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*', unpack(fields))
if redis.call('HGET', KEYS[2], 'last_token') == ARGV[2] then
  redis.call('HSET', KEYS[2], 'last_outcome', outcome)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Oldest first: forget the entries recorded longer ago than `remember`.
while recorded ~= '' do
  local space = string.find(recorded, ' ', 1, true)
  local first = space and string.sub(recorded, 1, space - 1) or recorded
  local at = tonumber(string.match(first, '@(%d+)$'))
  if at and now - at <= tonumber(ARGV[4]) then break end
  recorded = space and string.sub(recorded, space + 1) or ''
end
local mine = ARGV[2] .. '@' .. string.format('%.0f', now)
if recorded == '' then recorded = mine else recorded = recorded .. ' ' .. mine end
redis.call('HSET', KEYS[2], 'recorded', recorded)
return released
"#;

/// KEYS: state, history, lock. ARGV: occurrence ms, occurrence string, node,
/// history max, reason, token (of this node's claims of it, or empty).
/// Records a scheduled occurrence as missed (past its starting deadline) once:
/// if it is newer than the last decided occurrence, or if the last decision
/// is this node's own claim of it with `token`, which then won only after the
/// node had given up (its lock is deleted: no run holds it). Reply 1 if
/// recorded.
pub const MISSED: &str = r#"
local st = redis.call('HMGET', KEYS[1], 'last_occ', 'last_token')
local last, occ = tonumber(st[1]), tonumber(ARGV[1])
if last and occ < last then
  return 0
end
if last and occ == last then
  if ARGV[6] == '' or st[2] ~= ARGV[6] then
    return 0
  end
  if redis.call('GET', KEYS[3]) == ARGV[6] .. ' ' .. ARGV[3] then
    redis.call('DEL', KEYS[3])
  end
end
local t = redis.call('TIME')
local now_ms = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('HSET', KEYS[1], 'last_occ', ARGV[1], 'last_node', ARGV[3], 'last_fence', '0', 'last_token', '',
  'last_decision', 'missed', 'last_outcome', 'missed', 'last_outcome_occ', ARGV[2])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 'occurrence', ARGV[2], 'node', ARGV[3],
  'fence', '0', 'outcome', 'missed', 'started_at', now_ms, 'finished_at', now_ms, 'error', ARGV[5])
return 1
"#;
