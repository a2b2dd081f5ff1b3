//! A group's fleet-wide limits in Redis (guarantee 11, docs/guarantees.md):
//! its slots (`max_running`) and its log of starts (`max_starts`), taken,
//! renewed and given back by three scripts on the group's keys
//! (`{PREFIX}:group:NAME:*`, see [`crate::keys::GroupKeys`]).
//!
//! - A slot is a member `INDEX|HOLDER` of a sorted set scored by its
//!   expiry (Redis's clock, ms): taken for `lock_ttl`, renewed beside the
//!   run's lease, given back at its end. A holder that dies stops renewing
//!   and its slot ends with its lease. At most `max_running` members count.
//! - A start is a member `INDEX|HOLDER` of another sorted set scored by
//!   its start plus the window: at most `N` unexpired members, so any
//!   window of that length holds at most `N` starts (a sliding log, never
//!   a fixed window's boundary).
//! - Waiting occurrences (`when_full = "wait"`) queue by occurrence, the
//!   oldest first; a waiter that stops asking leaves the queue after
//!   [`WAITER_TTL`].
//!
//! On one server, Sentinel and Cluster a member is `n|HOLDER` and a take
//! counts (`ZCARD`) and looks itself up (`ZSCORE`): its cost does not grow
//! with the limits. Under Redlock a member carries an index below the
//! limit, and a holder needs the same index on a majority of the masters:
//! two majorities share a master, which grants an index once (a count
//! alone would not bound the holders across masters); a take there reads
//! the group's members. A take is one script, pipelined with `WAIT` like a
//! claim (an unacknowledged take is given back and counts as a failure).
//!
//! Failure model: every script is safe to retry with the same holder (a
//! take answers the slot it already gave); a Redis error leaves the caller
//! to retry until the occurrence's deadline; a slot or a waiter a node
//! never gives back expires by itself.

use std::time::Duration;

use redis::Script;

use super::server::Server;
use super::{LockError, redis_error, ttl_ms};
use crate::keys::GroupKeys;

/// How long a waiter that stopped asking stays in the queue.
pub const WAITER_TTL: Duration = Duration::from_secs(3);

/// KEYS: slots, starts, waiting, waiting_until. ARGV: holder, max_running
/// (0: none), slot ttl ms, max_starts count (0: none), window ms, wait
/// (`1`: queue), occurrence ms (the queue's order), waiter ttl ms, wanted
/// slot index (-1: any; -2: none, the members are `n|HOLDER`: one server,
/// where counting is enough and nothing is scanned), wanted start index
/// (the same). Answers `{1, slot index, start index}` (`n` without
/// indexes, -1 where the group has no such limit), or `{0, limit, ms until
/// a start ends (0 if unknown), holder, holder, …}`.
const TAKE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function fmt(n) return string.format('%.0f', n) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. fmt(now))
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. fmt(now))
local gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', '(' .. fmt(now))
for _, m in ipairs(gone) do redis.call('ZREM', KEYS[3], m) end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. fmt(now))
local holder = ARGV[1]
local suffix = '|' .. holder
local k, n = tonumber(ARGV[2]), tonumber(ARGV[4])
local function refused(limit, after)
  local reply = {0, limit, after}
  for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local bar = string.find(m, '|', 1, true)
    reply[#reply + 1] = bar and string.sub(m, bar + 1) or m
  end
  return reply
end
local function wait_rank()
  if ARGV[6] ~= '1' then return 0 end
  redis.call('ZADD', KEYS[3], ARGV[7], holder)
  redis.call('ZADD', KEYS[4], fmt(now + tonumber(ARGV[8])), holder)
  return redis.call('ZRANK', KEYS[3], holder)
end
local function start_after()
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if first[2] then return tonumber(first[2]) - now + 1 end
  return 0
end
if tonumber(ARGV[9]) == -2 then
  local member = 'n' .. suffix
  local got_slot = k > 0 and redis.call('ZSCORE', KEYS[1], member)
  local got_start = n > 0 and redis.call('ZSCORE', KEYS[2], member)
  if (k == 0 or got_slot) and (n == 0 or got_start) then
    return {1, k > 0 and 'n' or -1, n > 0 and 'n' or -1}
  end
  local rank = wait_rank()
  if k > 0 and redis.call('ZCARD', KEYS[1]) + rank >= k then return refused('max_running', 0) end
  if n > 0 and redis.call('ZCARD', KEYS[2]) + rank >= n then return refused('max_starts', start_after()) end
  if k > 0 then redis.call('ZADD', KEYS[1], fmt(now + tonumber(ARGV[3])), member) end
  if n > 0 then redis.call('ZADD', KEYS[2], fmt(now + tonumber(ARGV[5])), member) end
  redis.call('ZREM', KEYS[3], holder)
  redis.call('ZREM', KEYS[4], holder)
  return {1, k > 0 and 'n' or -1, n > 0 and 'n' or -1}
end
local function index_of(member)
  if string.sub(member, -#suffix) == suffix then
    return tonumber(string.sub(member, 1, #member - #suffix))
  end
  return nil
end
-- A retry of a take that went through answers what it got.
local mine_slot, mine_start = -1, -1
local slots = redis.call('ZRANGE', KEYS[1], 0, -1)
local starts = redis.call('ZRANGE', KEYS[2], 0, -1)
for _, m in ipairs(slots) do local i = index_of(m); if i then mine_slot = i end end
for _, m in ipairs(starts) do local i = index_of(m); if i then mine_start = i end end
if (k == 0 or mine_slot >= 0) and (n == 0 or mine_start >= 0) and (mine_slot >= 0 or mine_start >= 0) then
  return {1, mine_slot, mine_start}
end
local rank = wait_rank()
local function free_index(members, limit, wanted)
  local used = {}
  for _, m in ipairs(members) do
    local bar = string.find(m, '|', 1, true)
    if bar then used[tonumber(string.sub(m, 1, bar - 1)) or -1] = true end
  end
  if wanted >= 0 then
    if wanted < limit and not used[wanted] then return wanted end
    return nil
  end
  for i = 0, limit - 1 do
    if not used[i] then return i end
  end
  return nil
end
local slot, start = -1, -1
if k > 0 then
  if #slots + rank >= k then return refused('max_running', 0) end
  slot = free_index(slots, k, tonumber(ARGV[9]))
  if not slot then return refused('max_running', 0) end
end
if n > 0 then
  if #starts + rank >= n then return refused('max_starts', start_after()) end
  start = free_index(starts, n, tonumber(ARGV[10]))
  if not start then return refused('max_starts', start_after()) end
end
if slot >= 0 then redis.call('ZADD', KEYS[1], fmt(now + tonumber(ARGV[3])), slot .. suffix) end
if start >= 0 then redis.call('ZADD', KEYS[2], fmt(now + tonumber(ARGV[5])), start .. suffix) end
redis.call('ZREM', KEYS[3], holder)
redis.call('ZREM', KEYS[4], holder)
return {1, slot, start}
"#;

/// KEYS: slots. ARGV: member (`INDEX|HOLDER`), ttl ms. `1`: renewed;
/// `0`: the slot is gone (expired, maybe given to another run).
const RENEW: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) >= now then
  redis.call('ZADD', KEYS[1], 'XX', string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
  return 1
end
return 0
"#;

/// KEYS: slots, waiting, waiting_until. ARGV: holder. Gives back the
/// holder's slot and leaves the queue; its start stays counted.
const GIVE_BACK: &str = r#"
local suffix = '|' .. ARGV[1]
if redis.call('ZREM', KEYS[1], 'n' .. suffix) == 0 then
  for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    if string.sub(m, -#suffix) == suffix then redis.call('ZREM', KEYS[1], m) end
  end
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
"#;

/// The group scripts, parsed and hashed once per process.
pub(super) struct GroupScripts {
    take: Script,
    renew: Script,
    give_back: Script,
}

impl GroupScripts {
    pub(super) fn new() -> GroupScripts {
        GroupScripts {
            take: Script::new(TAKE),
            renew: Script::new(RENEW),
            give_back: Script::new(GIVE_BACK),
        }
    }

    pub(super) fn all(&self) -> [&Script; 3] {
        [&self.take, &self.renew, &self.give_back]
    }
}

/// What a take asks for.
#[derive(Debug, Clone)]
pub struct Ask {
    /// `TOKEN|JOB|OCCURRENCE|NODE`: who holds what it gets.
    pub holder: String,
    pub max_running: Option<u32>,
    pub slot_ttl: Duration,
    pub max_starts: Option<(u32, Duration)>,
    /// Queue for room (`when_full = "wait"`) in occurrence order.
    pub wait: bool,
    pub occurrence_ms: i64,
}

/// A group's answer to a take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// Room: the slot and start indexes held (`None` where the group has
    /// no such limit; `n` on one server, where members have no index).
    Granted {
        slot: Option<String>,
        start: Option<String>,
    },
    /// No room.
    Full(Refusal),
}

/// Why a take found no room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `max_running` or `max_starts`.
    pub limit: String,
    /// With `max_starts`: how long until the oldest start leaves the window.
    pub retry_after: Option<Duration>,
    /// The runs holding its slots (`JOB OCCURRENCE on NODE`).
    pub holders: Vec<String>,
}

/// `TOKEN|JOB|OCCURRENCE|NODE` as `JOB OCCURRENCE on NODE`.
fn shown_holder(holder: &str) -> String {
    let mut parts = holder.splitn(4, '|');
    let (_, job, occurrence, node) = (parts.next(), parts.next(), parts.next(), parts.next());
    match (job, occurrence, node) {
        (Some(job), Some(occurrence), Some(node)) => format!("{job} {occurrence} on {node}"),
        _ => holder.to_string(),
    }
}

/// The holder string of a run: `TOKEN|JOB|OCCURRENCE|NODE`.
pub fn holder(token: &str, job: &str, occurrence: &str, node: &str) -> String {
    format!("{token}|{job}|{occurrence}|{node}")
}

impl Server {
    pub(super) async fn group_take(
        &self,
        keys: &GroupKeys,
        ask: &Ask,
        wanted: (i64, i64),
        job: &str,
    ) -> Result<Taken, LockError> {
        let mut invocation = self.group_scripts.take.prepare_invoke();
        let (count, window) = ask.max_starts.unwrap_or((0, Duration::ZERO));
        invocation
            .key(&keys.slots)
            .key(&keys.starts)
            .key(&keys.waiting)
            .key(&keys.waiting_until)
            .arg(&ask.holder)
            .arg(ask.max_running.unwrap_or(0))
            .arg(ttl_ms(ask.slot_ttl))
            .arg(count)
            .arg(ttl_ms(window))
            .arg(if ask.wait { "1" } else { "0" })
            .arg(ask.occurrence_ms)
            .arg(ttl_ms(WAITER_TTL))
            .arg(wanted.0)
            .arg(wanted.1);
        let (reply, acked, listed): (Vec<redis::Value>, _, _) = self
            .invoke_with(
                &invocation,
                "take a group slot",
                job,
                self.watches_replicas(),
            )
            .await?;
        let taken = parse_take(&reply).ok_or_else(|| LockError::Reply {
            step: "take a group slot",
            job: job.to_string(),
            reply: format!("{reply:?}"),
        })?;
        if let Taken::Granted { .. } = taken {
            let checked = self
                .check_acked(acked, "take a group slot", job)
                .and_then(|()| self.check_replicas(listed, "take a group slot", job));
            if let Err(short) = checked {
                // Not known to the replicas: it may vanish in a failover.
                self.group_give_back(keys, &ask.holder, job).await.ok();
                return Err(short);
            }
        }
        Ok(taken)
    }

    pub(super) async fn group_renew(
        &self,
        keys: &GroupKeys,
        member: &str,
        ttl: Duration,
        job: &str,
    ) -> Result<bool, LockError> {
        let mut invocation = self.group_scripts.renew.prepare_invoke();
        invocation.key(&keys.slots).arg(member).arg(ttl_ms(ttl));
        let (renewed, acked, listed): (i64, _, _) = self
            .invoke_with(
                &invocation,
                "renew a group slot",
                job,
                self.watches_replicas(),
            )
            .await?;
        if renewed == 1 {
            self.check_acked(acked, "renew a group slot", job)?;
            self.check_replicas(listed, "renew a group slot", job)?;
        }
        Ok(renewed == 1)
    }

    pub(super) async fn group_give_back(
        &self,
        keys: &GroupKeys,
        holder: &str,
        job: &str,
    ) -> Result<(), LockError> {
        let mut invocation = self.group_scripts.give_back.prepare_invoke();
        invocation
            .key(&keys.slots)
            .key(&keys.waiting)
            .key(&keys.waiting_until)
            .arg(holder);
        invocation
            .invoke_async::<i64>(&mut self.conn.clone())
            .await
            .map_err(|source| redis_error("give back a group slot", job, source))?;
        Ok(())
    }
}

fn parse_take(reply: &[redis::Value]) -> Option<Taken> {
    use redis::FromRedisValue;
    let int = |value: &redis::Value| i64::from_redis_value(value.clone()).ok();
    let text = |value: &redis::Value| String::from_redis_value(value.clone()).ok();
    // An index (a number, -1 for none) or `n` (no index).
    let index = |value: &redis::Value| match int(value) {
        Some(i) if i < 0 => None,
        Some(i) => Some(i.to_string()),
        None => text(value),
    };
    match int(reply.first()?)? {
        1 => Some(Taken::Granted {
            slot: index(reply.get(1)?),
            start: index(reply.get(2)?),
        }),
        0 => {
            let limit = text(reply.get(1)?)?;
            let after = int(reply.get(2)?)?;
            let holders = reply
                .iter()
                .skip(3)
                .filter_map(text)
                .map(|holder| shown_holder(&holder))
                .collect();
            Some(Taken::Full(Refusal {
                limit,
                retry_after: u64::try_from(after)
                    .ok()
                    .filter(|ms| *ms > 0)
                    .map(Duration::from_millis),
                holders,
            }))
        }
        _ => None,
    }
}

/// The slot member a grant holds, for its renewals.
pub fn slot_member(slot: &str, holder: &str) -> String {
    format!("{slot}|{holder}")
}

/// The slot and start indexes of one grant.
type Indexes = (Option<String>, Option<String>);

/// Redlock: a take wins when a majority of the masters grant the same
/// indexes. Tried as asked first; when the masters disagree (their sets
/// differ, e.g. one restarted empty), what the first attempt got is given
/// back and the indexes most of them granted are asked for by name.
pub(super) async fn quorum_take(
    servers: &[Server],
    keys: &GroupKeys,
    ask: &Ask,
    job: &str,
) -> Result<Taken, LockError> {
    let needed = servers.len() / 2 + 1;
    let mut wanted = (-1, -1);
    for attempt in 0..2 {
        let answers = super::quorum::on_all(servers, job, "take a group slot", |server| {
            server.group_take(keys, ask, wanted, job)
        })
        .await;
        let mut grants: Vec<(Indexes, usize)> = Vec::new();
        let mut full: Vec<&Refusal> = Vec::new();
        for answer in &answers {
            match answer {
                Ok(Taken::Granted { slot, start }) => {
                    let got = (slot.clone(), start.clone());
                    match grants.iter_mut().find(|(held, _)| *held == got) {
                        Some((_, count)) => *count += 1,
                        None => grants.push((got, 1)),
                    }
                }
                Ok(Taken::Full(refusal)) => full.push(refusal),
                Err(_) => {}
            }
        }
        grants.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
        if let Some(((slot, start), count)) = grants.first().cloned()
            && count >= needed
        {
            // The masters that granted other indexes give them back.
            for (server, answer) in servers.iter().zip(&answers) {
                if matches!(answer, Ok(Taken::Granted { slot: s, start: t }) if (s, t) != (&slot, &start))
                {
                    server.group_give_back(keys, &ask.holder, job).await.ok();
                }
            }
            return Ok(Taken::Granted { slot, start });
        }
        // No majority for one grant: give back every grant.
        for (server, answer) in servers.iter().zip(&answers) {
            if matches!(answer, Ok(Taken::Granted { .. })) {
                server.group_give_back(keys, &ask.holder, job).await.ok();
            }
        }
        if (full.len() >= needed || (grants.is_empty() && attempt == 1))
            && let Some(refusal) = full.first()
        {
            return Ok(Taken::Full((*refusal).clone()));
        }
        match grants.first() {
            Some(((slot, start), _)) if attempt == 0 => {
                let wanted_index = |index: &Option<String>| {
                    index
                        .as_deref()
                        .and_then(|index| index.parse::<i64>().ok())
                        .unwrap_or(-1)
                };
                wanted = (wanted_index(slot), wanted_index(start));
            }
            _ => {
                return Err(LockError::NoQuorum {
                    step: "take a group slot",
                    job: job.to_string(),
                    agreed: grants.first().map_or(0, |(_, count)| *count),
                    needed,
                    of: servers.len(),
                    answered: super::quorum::answered(&answers),
                    first_error: super::quorum::first_error(&answers),
                });
            }
        }
    }
    Err(LockError::NoQuorum {
        step: "take a group slot",
        job: job.to_string(),
        agreed: 0,
        needed,
        of: servers.len(),
        answered: 0,
        first_error: super::DISAGREED.to_string(),
    })
}

/// Redlock: a renewal needs a majority confirming it; `Ok(false)` when a
/// majority says the slot is gone.
pub(super) async fn quorum_renew(
    servers: &[Server],
    keys: &GroupKeys,
    member: &str,
    ttl: Duration,
    job: &str,
) -> Result<bool, LockError> {
    let answers = super::quorum::on_all(servers, job, "renew a group slot", |server| {
        server.group_renew(keys, member, ttl, job)
    })
    .await;
    super::quorum::renewal_vote(servers, &answers, "renew a group slot", job)
}
