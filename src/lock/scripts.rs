//! The Lua scripts behind a lease and the history: claim, extend, release,
//! missed, gap and abandon.
//!
//! Each is one round trip and runs atomically in Redis. Keys of one job share
//! the hash tag `{PREFIX:JOB}`, so the scripts also run on Redis Cluster.
//! Numbers that do not fit Lua's `%.14g` number-to-string conversion (fences
//! are microsecond timestamps) are formatted with `%.0f` before Redis sees them.
//!
//! The job's state hash keeps the last decided scheduled occurrence
//! (`last_*`), the current or last holder of the lock (`holder_*`), the
//! scheduled run in progress (`run_*`: set by a won claim, cleared by its
//! release; a skip or miss decided meanwhile does not touch it), the gap
//! ids recorded lately (`recorded`: a retried gap record writes nothing
//! twice; a release remembers its token in a key of its own,
//! `{PREFIX:JOB}:recorded:TOKEN`, see [`RELEASE`]) and the runs recorded `abandoned` lately (`abandoned`:
//! `TOKEN:STREAMID ...`, so the run's own outcome can replace that entry if
//! its node was only cut off, not dead). Every script that decides a newer
//! occurrence stores the one decided before it in `last_prev` and answers
//! it: the occurrences between the two were decided by nobody (Redis was
//! unreachable, or every node was down), and the caller records them
//! `missed` with [`GAP`].

/// Helpers every script starts with.
const PRELUDE: &str = r#"
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t
end
local function ms_str(n) return string.format('%.0f', n) end
-- Whether `id` is in `recorded`, the ids recorded lately (`ID@MS ...`).
local function in_recorded(recorded, id)
  return string.find(' ' .. (recorded or ''), ' ' .. id .. '@', 1, true) ~= nil
end
-- Whether `id` is among the ids recorded lately in `state`.
local function was_recorded(state, id)
  return in_recorded(redis.call('HGET', state, 'recorded'), id)
end
-- `recorded` with `id` added and the ids older than `keep` ms forgotten.
local function remembered(recorded, id, keep, now)
  recorded = recorded or ''
  while recorded ~= '' do
    local space = string.find(recorded, ' ', 1, true)
    local first = space and string.sub(recorded, 1, space - 1) or recorded
    local at = tonumber(string.match(first, '@(%d+)$'))
    if at and now - at <= tonumber(keep) then break end
    recorded = space and string.sub(recorded, space + 1) or ''
  end
  local mine = id .. '@' .. ms_str(now)
  if recorded == '' then return mine end
  return recorded .. ' ' .. mine
end
-- Adds `id` to the ids recorded lately in `state` (see `remembered`).
local function remember(state, id, keep, now)
  redis.call('HSET', state, 'recorded', remembered(redis.call('HGET', state, 'recorded'), id, keep, now))
end
-- A scheduled run is in progress (`run_token` set) but the lock is gone
-- (the caller checked): it expired without a release, so the run's node
-- stopped renewing it. Records it `abandoned` (once: `run_token` is cleared)
-- and answers {node, fence, occurrence, attempt}, or nil if no run is in
-- progress. The attempt is read from fields every version writes: a retry's
-- claim puts its token in `retry_token` next to `run_token` and leaves its
-- number in `retry_attempt`; any other run in progress is attempt 1.
local function abandon(state, history, maxlen, recorder, now)
  local f = redis.call('HMGET', state, 'run_token', 'run_occ', 'run_node', 'run_fence', 'run_since',
    'abandoned', 'last_token', 'retry_token', 'retry_attempt')
  if not f[1] or f[1] == '' then return nil end
  local node, fence = f[3] or '', f[4] or '0'
  local attempt = '1'
  if f[8] == f[1] and tonumber(f[9]) then attempt = f[9] end
  local id = redis.call('XADD', history, 'MAXLEN', '~', maxlen, '*', 'occurrence', f[2] or '', 'node', node,
    'fence', fence, 'outcome', 'abandoned', 'started_at', f[5] or ms_str(now), 'finished_at', ms_str(now),
    'error', 'the lock expired without a release: node ' .. node .. ' stopped renewing it (it died, or lost redis); recorded by ' .. recorder,
    'attempt', attempt)
  local list, kept = f[1] .. ':' .. id, 1
  for item in string.gmatch(f[6] or '', '%S+') do
    if kept < 8 then list = list .. ' ' .. item; kept = kept + 1 end
  end
  redis.call('HSET', state, 'run_token', '', 'abandoned', list)
  if f[7] == f[1] then
    redis.call('HSET', state, 'last_outcome', 'abandoned')
  end
  return {node, fence, f[2] or '', attempt}
end
"#;

/// KEYS: lock, state, history. ARGV: mode (`scheduled`|`retry`|`manual`),
/// occurrence ms (scheduled and retry), token, node, ttl ms, occurrence
/// string, history max, deadline ms (scheduled: the last instant it may
/// still be claimed, the earlier of occurrence + starting_deadline and the
/// next occurrence; retry: the next occurrence), attempt (retry only).
///
/// A retry claims attempt N of an occurrence whose attempt N − 1 failed and
/// whose release marked the retry pending (`retry_occ`, `retry_attempt`,
/// `retry_state`): once, by any node, under the same lock and a new fence;
/// it never touches `last_*` (the occurrence stays decided). It answers
/// `won`, `claimed` (another node took this attempt), `busy` (the lock is
/// held: try again) or `late` (nothing pending, or the next occurrence is
/// due).
///
/// Replies (`PREV` is the occurrence decided before this one, ms, or ``;
/// `AB…` name a run this claim recorded `abandoned`, or are ``; a reply
/// that records nothing may leave them out):
/// - `{"won", fence, PREV, ABNODE, ABFENCE, ABOCC, ABATTEMPT}`: the lock is
///   ours; a retry with the same token gets the same fence back.
/// - `{"claimed", node, fence, decision, pttl, ABNODE, ABFENCE, ABOCC, ABATTEMPT}`:
///   this scheduled occurrence is the last decided one; `decision` is
///   `claimed`, `skipped` or `missed`; `pttl` of the lock (-2: free).
/// - `{"superseded", last}`: a newer occurrence (epoch ms `last`) was decided
///   before this claim arrived; who decided this one is not known any more.
/// - `{"early", now}`: Redis `TIME` is before the occurrence by more than
///   the time from it to its deadline: the claiming node's clock is ahead
///   of Redis's by more than the job's period; nothing is taken.
/// - `{"late", now}`: Redis `TIME` is past the deadline. A claim can reach
///   Redis long after it was sent (it sat in a paused server's socket), when
///   its node has already given up: it must not take the lock then.
/// - `{"busy", holder, fence, PREV, pttl}`: the lock is held (overlap). For a
///   scheduled occurrence the skip is recorded once, in state and history.
///
/// Every node claims every occurrence, so the losing claim is the most
/// frequent call of all: it reads the lock and the state (plus the lock's
/// `PTTL` while it is held) and answers, with no `TIME` and no write
/// (`tests/it/jobs/lock_cost.rs` counts the commands of each call).
pub const CLAIM: &str = r#"
local mode, occ, token, node = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local ttl, occ_str, maxlen = ARGV[5], ARGV[6], ARGV[7]
local value = token .. ' ' .. node
local current = redis.call('GET', KEYS[1])
if current == value then
  local again = redis.call('HMGET', KEYS[2], 'holder_fence', 'last_prev')
  return {'won', again[1] or '0', again[2] or '', '', '', ''}
end
local st = redis.call('HMGET', KEYS[2], 'last_occ', 'last_node', 'last_fence', 'last_token', 'last_decision', 'last_prev',
  'run_token', 'holder_fence', 'fence')
local last = tonumber(st[1])
if mode == 'scheduled' and last and occ == last and st[4] == token and st[5] == 'claimed' and not current then
  -- A retry of our own won claim whose lock went away meanwhile. Not of
  -- our own skip (it stores our token too): that occurrence is decided.
  redis.call('HSET', KEYS[2], 'run_token', token)
  redis.call('SET', KEYS[1], value, 'PX', ttl)
  return {'won', st[3], st[6] or '', '', '', ''}
end
local running = st[7] and st[7] ~= ''
if mode == 'scheduled' and last and occ <= last and (current or not running) then
  -- The usual losing claim, answered from the two reads above: nothing to
  -- record (no abandoned run to find: the lock is held, or no run is in
  -- progress), so neither TIME nor any write. A free lock's PTTL is -2.
  if occ < last then
    return {'superseded', st[1]}
  end
  return {'claimed', st[2] or '', st[3] or '0', st[5] or 'claimed', current and redis.call('PTTL', KEYS[1]) or -2, '', '', ''}
end
local now, t = now_ms()
local ab = {'', '', '', ''}
if not current and running then
  ab = abandon(KEYS[2], KEYS[3], maxlen, node, now) or ab
end
if mode == 'retry' then
  -- Attempt ARGV[9] of occurrence ARGV[2], which the release of the
  -- attempt before marked pending (`retry_*`); run only once the next
  -- occurrence is not due yet (deadline ARGV[8]).
  local r = redis.call('HMGET', KEYS[2], 'retry_occ', 'retry_attempt', 'retry_state', 'retry_node', 'retry_fence')
  local marked, wanted = tonumber(r[2]) or 0, tonumber(ARGV[9])
  if r[1] ~= ARGV[2] or marked < wanted then
    return {'late', ms_str(now)}
  end
  if marked > wanted or r[3] ~= 'pending' then
    -- Taken by another node (and maybe over already).
    return {'claimed', r[4] or '', r[5] or '0', 'claimed', redis.call('PTTL', KEYS[1]), ab[1], ab[2], ab[3], ab[4]}
  end
  if now > tonumber(ARGV[8]) then
    return {'late', ms_str(now)}
  end
  if current then
    local sp = string.find(current, ' ', 1, true)
    return {'busy', sp and string.sub(current, sp + 1) or current, redis.call('HGET', KEYS[2], 'holder_fence') or '0', '',
      redis.call('PTTL', KEYS[1])}
  end
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local fence = (tonumber(redis.call('HGET', KEYS[2], 'fence')) or 0) + 1
  if now_us > fence then fence = now_us end
  fence = string.format('%.0f', fence)
  redis.call('HSET', KEYS[2], 'fence', fence, 'holder_node', node, 'holder_fence', fence,
    'holder_since', ms_str(now), 'holder_occ', occ_str, 'last_outcome', 'running', 'last_outcome_occ', occ_str,
    'run_token', token, 'run_occ', occ_str, 'run_node', node, 'run_fence', fence, 'run_since', ms_str(now),
    'retry_state', 'claimed', 'retry_node', node, 'retry_fence', fence, 'retry_token', token)
  redis.call('SET', KEYS[1], value, 'PX', ttl)
  return {'won', fence, '', ab[1], ab[2], ab[3], ab[4]}
end
if mode == 'scheduled' and last and occ <= last then
  if occ < last then
    return {'superseded', st[1]}
  end
  return {'claimed', st[2] or '', st[3] or '0', st[5] or 'claimed', redis.call('PTTL', KEYS[1]), ab[1], ab[2], ab[3], ab[4]}
end
if mode == 'scheduled' and now > tonumber(ARGV[8]) then
  return {'late', ms_str(now)}
end
-- Early by more than the occurrence's own window (up to its deadline): the
-- claiming node's clock is ahead of Redis's by more than the job's period
-- (`clock = "local"` and a wrong clock). Deciding it would make every
-- occurrence up to it look decided to the nodes with the right time.
if mode == 'scheduled' and occ - now > tonumber(ARGV[8]) - occ then
  return {'early', ms_str(now)}
end
local prev = st[1] or ''
if current then
  local sp = string.find(current, ' ', 1, true)
  local holder = sp and string.sub(current, sp + 1) or current
  local holder_fence = st[8] or '0'
  if mode == 'scheduled' then
    redis.call('HSET', KEYS[2], 'last_occ', ARGV[2], 'last_node', node, 'last_fence', holder_fence,
      'last_token', token, 'last_decision', 'skipped', 'last_outcome', 'skipped', 'last_outcome_occ', occ_str,
      'last_prev', prev)
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', maxlen, '*', 'occurrence', occ_str, 'node', node,
      'fence', holder_fence, 'outcome', 'skipped', 'started_at', ms_str(now), 'finished_at', ms_str(now),
      'error', 'lock held by ' .. holder)
  end
  return {'busy', holder, holder_fence, prev, redis.call('PTTL', KEYS[1])}
end
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
-- `fence` as read above: nothing since (an abandon record) writes it.
local fence = (tonumber(st[9]) or 0) + 1
if now_us > fence then fence = now_us end
fence = string.format('%.0f', fence)
-- The decision is written before the lock is taken: Redis does not undo a
-- script's writes when a later command of it fails (a command the ACL user
-- may not run), and a lock without its decision would let a retry of this
-- claim answer `won` from the lock alone.
if mode == 'scheduled' then
  redis.call('HSET', KEYS[2], 'fence', fence, 'holder_node', node, 'holder_fence', fence,
    'holder_since', ms_str(now), 'holder_occ', occ_str,
    'last_occ', ARGV[2], 'last_node', node, 'last_fence', fence,
    'last_token', token, 'last_decision', 'claimed', 'last_outcome', 'running', 'last_outcome_occ', occ_str,
    'last_prev', prev, 'run_token', token, 'run_occ', occ_str, 'run_node', node, 'run_fence', fence,
    'run_since', ms_str(now))
else
  redis.call('HSET', KEYS[2], 'fence', fence, 'holder_node', node, 'holder_fence', fence,
    'holder_since', ms_str(now), 'holder_occ', occ_str)
  prev = ''
end
redis.call('SET', KEYS[1], value, 'PX', ttl)
return {'won', fence, prev, ab[1], ab[2], ab[3], ab[4]}
"#;

/// KEYS: lock. ARGV: lock value, ttl ms. Reply 1 if still ours and extended.
pub const EXTEND: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"#;

/// KEYS: lock, state, history, recorded (`{PREFIX:JOB}:recorded:TOKEN`).
/// ARGV: lock value, token, history max, remember ms, fence (unused; kept
/// for the argument order), then field/value pairs of the history entry
/// (the first pair is `occurrence`). Deletes the lock only if it still
/// holds our value; appends the history entry once per token: the release
/// that records it sets KEYS[4] for `remember` ms (longer than a node
/// retries a release after Redis answers again), so a retried release
/// whose first attempt did reach Redis records nothing, even after later
/// runs of the job released. (Until 2026-12 the tokens were kept in the
/// state's `recorded` list, a ~1.4 KB string for an every-second job that
/// every release read, searched and wrote back; it is still looked at,
/// for a release retried across an upgrade, and keeps the gap ids.)
/// An entry with a `retry_at` field (epoch ms) marks the next attempt of
/// the occurrence pending, for any node to claim (see [`CLAIM`]); the
/// release of a retry's last attempt marks the retry `done`.
/// If the run was recorded `abandoned` meanwhile (its node was cut off from
/// Redis longer than the lock's TTL, not dead), that entry is replaced by
/// this one. Reply `{released, replaced}`: 1 if the lock was ours and is now
/// deleted; 1 if an `abandoned` entry was replaced.
pub const RELEASE: &str = r#"
-- Everything the release reads, first. It writes nothing until the history
-- entry is appended, and deletes the lock last: Redis does not undo a
-- script's writes when a later command of it fails (a command the ACL user
-- may not run), so a release that fails midway must leave the lock held and
-- the entry unrecorded, for its retry to do both.
local ours = redis.call('GET', KEYS[1]) == ARGV[1]
local released = ours and 1 or 0
local st = redis.call('HMGET', KEYS[2], 'recorded', 'abandoned', 'last_token', 'run_token', 'retry_token',
  'last_occ', 'retry_occ')
if in_recorded(st[1], ARGV[2]) or not redis.call('SET', KEYS[4], '1', 'PX', ARGV[4], 'NX') then
  if ours then redis.call('DEL', KEYS[1]) end
  return {released, 0}
end
local fields = {}
local outcome, attempt, retry_at = '', '1', ''
for i = 6, #ARGV, 2 do
  fields[#fields + 1] = ARGV[i]
  fields[#fields + 1] = ARGV[i + 1]
  if ARGV[i] == 'outcome' then outcome = ARGV[i + 1] end
  if ARGV[i] == 'attempt' then attempt = ARGV[i + 1] end
  if ARGV[i] == 'retry_at' then retry_at = ARGV[i + 1] end
end
local added = redis.pcall('XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*', unpack(fields))
if type(added) == 'table' and added.err then
  -- Not recorded: forget the token, so that the retry records it.
  redis.call('DEL', KEYS[4])
  return added
end
-- The state's writes, made by one HSET at the end.
local set = {}
local function put(name, value)
  set[#set + 1] = name
  set[#set + 1] = value
end
local replaced, kept = 0, {}
for item in string.gmatch(st[2] or '', '%S+') do
  local token, id = string.match(item, '^(%x+):(.+)$')
  if token == ARGV[2] then
    redis.call('XDEL', KEYS[3], id)
    replaced = 1
  else
    kept[#kept + 1] = item
  end
end
if replaced == 1 then
  put('abandoned', table.concat(kept, ' '))
end
if st[3] == ARGV[2] or st[5] == ARGV[2] then
  put('last_outcome', outcome)
  -- The occurrence this run was an attempt of: a retry's is `retry_occ`
  -- (a newer occurrence may be decided meanwhile), a first attempt's the
  -- last decided one.
  local occ = st[6] or ''
  if st[5] == ARGV[2] then occ = st[7] or '' end
  if retry_at ~= '' then
    put('retry_occ', occ)
    put('retry_attempt', tostring((tonumber(attempt) or 1) + 1))
    put('retry_state', 'pending')
    put('retry_at', retry_at)
    put('retry_token', '')
  elseif st[5] == ARGV[2] then
    put('retry_state', 'done')
  end
end
if st[4] == ARGV[2] then
  put('run_token', '')
end
if #set > 0 then
  redis.call('HSET', KEYS[2], unpack(set))
end
if ours then redis.call('DEL', KEYS[1]) end
return {released, replaced}
"#;

/// KEYS: state, history, lock. ARGV: occurrence ms, occurrence string, node,
/// history max, reason, token (of this node's claims of it, or empty),
/// outcome (`missed`, or `throttled`; absent: `missed`).
/// Records a scheduled occurrence as missed (past its starting deadline) once:
/// if it is newer than the last decided occurrence, or if the last decision
/// is this node's own claim of it with `token`, which then won only after the
/// node had given up (its lock is deleted: no run holds it). Reply
/// `{recorded, PREV}`: `1` if recorded, with the occurrence decided before
/// it (ms, or ``).
pub const MISSED: &str = r#"
local st = redis.call('HMGET', KEYS[1], 'last_occ', 'last_token', 'last_prev')
local last, occ = tonumber(st[1]), tonumber(ARGV[1])
local prev = st[1] or ''
if last and occ < last then
  return {'0', ''}
end
if last and occ == last then
  if ARGV[6] == '' or st[2] ~= ARGV[6] then
    return {'0', ''}
  end
  if redis.call('GET', KEYS[3]) == ARGV[6] .. ' ' .. ARGV[3] then
    redis.call('DEL', KEYS[3])
  end
  if redis.call('HGET', KEYS[1], 'run_token') == ARGV[6] then
    redis.call('HSET', KEYS[1], 'run_token', '')
  end
  prev = st[3] or ''
end
local now_s = ms_str(now_ms())
local outcome = 'missed'
if ARGV[7] == 'throttled' then outcome = 'throttled' end
redis.call('HSET', KEYS[1], 'last_occ', ARGV[1], 'last_node', ARGV[3], 'last_fence', '0', 'last_token', '',
  'last_decision', outcome, 'last_outcome', outcome, 'last_outcome_occ', ARGV[2], 'last_prev', prev)
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 'occurrence', ARGV[2], 'node', ARGV[3],
  'fence', '0', 'outcome', outcome, 'started_at', now_s, 'finished_at', now_s, 'error', ARGV[5])
return {'1', prev}
"#;

/// KEYS: state, history. ARGV: gap id, history max, remember ms, node, then
/// occurrence/outcome/error triples (`missed`, or `paused` for one a pause
/// covered). Records each occurrence, once per gap id. The caller passes only occurrences older than the last decided one
/// and newer than the one decided before it, which no claim or miss record
/// can decide any more, so nothing else writes them. Reply 1 if recorded.
pub const GAP: &str = r#"
if was_recorded(KEYS[1], ARGV[1]) then
  return 0
end
local now = now_ms()
for i = 5, #ARGV, 3 do
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', 'occurrence', ARGV[i], 'node', ARGV[4],
    'fence', '0', 'outcome', ARGV[i + 1], 'started_at', ms_str(now), 'finished_at', ms_str(now), 'error', ARGV[i + 2])
end
remember(KEYS[1], ARGV[1], ARGV[3], now)
return 1
"#;

/// KEYS: lock, state, history. ARGV: node (the recorder), history max.
/// Looks whether the job's last run was abandoned: `{"held", pttl, holder}`
/// while its lock exists, `{"abandoned", node, fence, occurrence, attempt}`
/// when this call recorded it, `{"idle"}` when there is nothing to record.
pub const ABANDON: &str = r#"
local pttl = redis.call('PTTL', KEYS[1])
if pttl ~= -2 then
  local value = redis.call('GET', KEYS[1]) or ''
  local sp = string.find(value, ' ', 1, true)
  return {'held', pttl, sp and string.sub(value, sp + 1) or value}
end
local ab = abandon(KEYS[2], KEYS[3], ARGV[2], ARGV[1], now_ms())
if ab then
  return {'abandoned', ab[1], ab[2], ab[3], ab[4]}
end
return {'idle'}
"#;

/// KEYS: lock, state, history. ARGV: lock value, token, node, history max,
/// record (`1`: one coordinator; `0`: one Redlock master, whose majority
/// decides elsewhere). Undoes a claim won with `token` that must not run
/// (its `WAIT` came back short, a replica was lost, or a Redlock majority
/// was not reached): deletes the lock if it still holds our value and, if
/// the state's last decision is that claim, puts the occurrence decided
/// before it back, so the occurrence can be claimed again (a retry with the
/// same token wins it anew).
///
/// If a newer occurrence was decided meanwhile (the undone claim's lock was
/// still there, so it was skipped) the undone one can be claimed by nobody
/// any more, and nobody else records it: the other nodes were told it was
/// claimed, the newer decision names it as the one decided before (no gap),
/// and its run is not in progress any more (no `abandoned`). With `record`
/// it is recorded `missed` here, at once with the undo, so the occurrence
/// ends in exactly one record. Reply 1, or 2 if it was recorded missed.
pub const UNDO: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
local st = redis.call('HMGET', KEYS[2], 'last_token', 'last_prev', 'run_token', 'retry_token', 'run_occ')
if st[4] == ARGV[2] then
  redis.call('HSET', KEYS[2], 'retry_state', 'pending', 'retry_token', '')
end
if st[1] == ARGV[2] then
  redis.call('HSET', KEYS[2], 'last_occ', st[2] or '', 'last_token', '', 'last_decision', 'undone',
    'last_outcome', 'undone')
end
local recorded = 1
if st[3] == ARGV[2] then
  redis.call('HSET', KEYS[2], 'run_token', '')
  if ARGV[5] == '1' and st[1] ~= ARGV[2] and st[4] ~= ARGV[2] then
    local now_s = ms_str(now_ms())
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[4], '*', 'occurrence', st[5] or '', 'node', ARGV[3],
      'fence', '0', 'outcome', 'missed', 'started_at', now_s, 'finished_at', now_s,
      'error', 'its claim won but was not confirmed (too few replicas acknowledged it, or the master was in doubt) and was undone after a newer occurrence had been decided; never run')
    recorded = 2
  end
end
return recorded
"#;

/// The full text of `body` with the helpers it uses.
pub fn with_prelude(body: &str) -> String {
    format!("{PRELUDE}{body}")
}

/// KEYS: state, history. ARGV: occurrence ms, occurrence string, node,
/// history max, error text (who paused it, since when, why), outcome
/// (`paused`, or `skipped` for an occurrence of a renamed job whose old
/// name's run still holds its lock; absent: `paused`). Records a
/// scheduled occurrence `paused` (`pause JOB` / `pause --all`) once, the
/// way [`MISSED`] records a miss: only if it is newer than the job's last
/// decided occurrence. Then no claim decided it before, and none can after
/// (claims and miss records refuse an occurrence not newer than the last
/// decided one), so a paused occurrence is never also run or missed, and
/// two nodes never both record it on one server (with Redlock each master
/// keeps the first, and a majority decides: `quorum.rs`). The lock and a run in progress
/// (`run_*`) are not touched. Reply `{'1', PREV}` if recorded (PREV as in
/// [`CLAIM`]); else `{'0', DECISION, NODE}` of the last decided occurrence.
pub const PAUSED: &str = r#"
local st = redis.call('HMGET', KEYS[1], 'last_occ', 'last_decision', 'last_node')
local last, occ = tonumber(st[1]), tonumber(ARGV[1])
if last and occ <= last then
  return {'0', st[2] or '', st[3] or ''}
end
local now_s = ms_str(now_ms())
local outcome = ARGV[6] or 'paused'
redis.call('HSET', KEYS[1], 'last_occ', ARGV[1], 'last_node', ARGV[3], 'last_fence', '0', 'last_token', '',
  'last_decision', outcome, 'last_outcome', outcome, 'last_outcome_occ', ARGV[2], 'last_prev', st[1] or '')
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 'occurrence', ARGV[2], 'node', ARGV[3],
  'fence', '0', 'outcome', outcome, 'started_at', now_s, 'finished_at', now_s, 'error', ARGV[5])
return {'1', st[1] or ''}
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Outcome;

    /// Words the state hash's `last_outcome` / `last_decision` take that
    /// are not outcomes: a run in progress, a won claim, an undone one.
    const STATE_WORDS: [&str; 3] = ["running", "claimed", "undone"];

    /// The quoted literals of Lua `source` (comments skipped), each with
    /// the text between it and the literal before it.
    fn literals(source: &str) -> Vec<(&str, &str)> {
        let mut found = Vec::new();
        let (mut at, mut after_last) = (0, 0);
        while let Some(rest) = source.get(at..) {
            let Some(first) = rest.chars().next() else {
                break;
            };
            if rest.starts_with("--") {
                at += rest.find('\n').unwrap_or(rest.len());
            } else if first == '\'' || first == '"' {
                let mut end = at + 1;
                while let Some(c) = source.get(end..).and_then(|tail| tail.chars().next()) {
                    match c {
                        '\\' => end += 2,
                        c if c == first => break,
                        c => end += c.len_utf8(),
                    }
                }
                let end = end.min(source.len());
                found.push((&source[after_last..at], &source[at + 1..end]));
                after_last = end + 1;
                at = end + 1;
            } else {
                at += first.len_utf8();
            }
        }
        found
    }

    /// Edits (insert, delete, substitute one character) from `a` to `b`.
    fn distance(a: &str, b: &str) -> usize {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut diagonal = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let substituted = diagonal + usize::from(ca != *cb);
                diagonal = row[j + 1];
                row[j + 1] = substituted.min(row[j] + 1).min(row[j + 1] + 1);
            }
        }
        row[b.len()]
    }

    /// Every outcome a script writes is a word of [`Outcome`]: the
    /// `outcome` of a history entry, and the state's `last_outcome` and
    /// `last_decision` (or one of [`STATE_WORDS`]); and no literal is a
    /// near miss of an outcome's word, so a typo anywhere fails here.
    #[test]
    fn every_outcome_the_scripts_write_is_an_outcome_word() {
        let scripts = [
            PRELUDE, CLAIM, EXTEND, RELEASE, MISSED, GAP, ABANDON, UNDO, PAUSED,
        ];
        let words = Outcome::ALL.map(Outcome::as_str);
        let mut written = Vec::new();
        for script in scripts {
            let found = literals(script);
            // Field names a read (`HGET`, `HMGET`) lists are not values.
            let mut reading = false;
            for pair in found.windows(2) {
                let [(_, key), (between, value)] = pair else {
                    continue;
                };
                if between.contains(')') {
                    reading = false;
                }
                if matches!(*key, "HGET" | "HMGET") {
                    reading = true;
                }
                if reading || between.trim() != "," {
                    continue;
                }
                match *key {
                    "outcome" => {
                        assert!(Outcome::parse(value).is_some(), "history outcome `{value}`");
                        written.push(*value);
                    }
                    "last_outcome" | "last_decision" => assert!(
                        Outcome::parse(value).is_some() || STATE_WORDS.contains(value),
                        "{key} `{value}`"
                    ),
                    _ => {}
                }
            }
            for (_, literal) in found {
                for word in words {
                    let edits = distance(literal, word);
                    assert!(
                        edits == 0 || edits > 2,
                        "`{literal}` looks like a typo of the outcome `{word}`"
                    );
                }
            }
        }
        written.sort_unstable();
        written.dedup();
        assert_eq!(
            written,
            ["abandoned", "missed", "skipped"],
            "the outcomes the scripts write as literals"
        );
    }

    #[test]
    fn the_lua_scanner_finds_literals_outside_comments() {
        let found = literals("x('a', \"b\") -- it's 'c'\ny('it\\'s', 'outcome',  'd')");
        let values: Vec<&str> = found.iter().map(|(_, value)| *value).collect();
        assert_eq!(values, ["a", "b", "it\\'s", "outcome", "d"]);
        assert_eq!(found[4].0, ",  ");
        assert_eq!(distance("skipped", "skiped"), 1);
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
