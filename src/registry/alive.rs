//! Which nodes are alive right now, and which one is the backstop: the
//! fleet view the rendezvous order of the occurrences is computed from
//! (guarantee 12, docs/guarantees.md).
//!
//! Every daemon beats once a second inside the controls read it already
//! sends ([`Beat`], one script in that pipeline): it scores itself in
//! `{PREFIX}:alive` by Redis's clock, drops the nodes that have not beaten
//! for [`ALIVE_TTL`], and bumps `{PREFIX}:alive:version` when a node came
//! or went. A node reads the member list ([`read_view`], O(N)) only when
//! that version, or the drains' `~version`, changed since its last read: a
//! steady fleet pays O(1) per node and second, O(N) in all.
//!
//! The beat also publishes the node's tags in `{PREFIX}:tags` (a change
//! bumps the version too), so the view holds every alive node's tags.
//!
//! The same script keeps the backstop lease, `{PREFIX}:backstop` (the
//! holder's daemon instance, [`BACKSTOP_TTL`]): a node that asks for it
//! (not drained, not stopping) takes it when it is free and renews it
//! while it holds it; one that no longer asks gives it up. The backstop
//! looks at every occurrence the first two nodes in line may have left,
//! and catches up when it takes over.
//!
//! Failure model: a node that dies, is stopped (SIGSTOP) or loses Redis
//! stops beating and is dropped by the next beat of any other node after
//! [`ALIVE_TTL`]; its backstop lease ends by itself after
//! [`BACKSTOP_TTL`]. Nothing of guarantees 1–3 depends on the view: the
//! claim scripts decide every occurrence.

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use crate::coordinator::Conn;
use crate::keys::{alive_key, alive_version_key, backstop_key, drains_key, tags_key};

/// A node that has not beaten for this long is no longer alive.
pub const ALIVE_TTL: Duration = Duration::from_secs(3);
/// How long the backstop lease lasts without a renewal (every beat, once a
/// second, renews it).
pub const BACKSTOP_TTL: Duration = Duration::from_secs(3);

/// KEYS: alive, alive version, backstop, tags. ARGV: node, alive ttl ms,
/// instance, backstop ttl ms, `1` to hold the backstop else `0`, tags.
/// Reply: `{alive version, backstop holder or ''}`.
const BEAT_SRC: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local changed = redis.call('ZADD', KEYS[1], now, ARGV[1])
changed = changed + redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
if redis.call('HGET', KEYS[4], ARGV[1]) ~= ARGV[6] then
  redis.call('HSET', KEYS[4], ARGV[1], ARGV[6])
  changed = changed + 1
end
local version = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if changed > 0 then
  version = version + 1
  redis.call('SET', KEYS[2], string.format('%.0f', version))
end
local holder = redis.call('GET', KEYS[3])
if ARGV[5] == '1' then
  if not holder then
    redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[4])
    holder = ARGV[3]
  elseif holder == ARGV[3] then
    redis.call('PEXPIRE', KEYS[3], ARGV[4])
  end
elseif holder == ARGV[3] then
  redis.call('DEL', KEYS[3])
  holder = false
end
return {string.format('%.0f', version), holder or ''}
"#;

/// KEYS: alive, alive version, backstop, tags. ARGV: node, instance. The
/// node leaves the view (a clean stop), takes its tags back and gives up
/// the backstop if it holds it.
const LEAVE_SRC: &str = r#"
redis.call('HDEL', KEYS[4], ARGV[1])
if redis.call('ZREM', KEYS[1], ARGV[1]) > 0 then
  local version = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  redis.call('SET', KEYS[2], string.format('%.0f', version + 1))
end
if redis.call('GET', KEYS[3]) == ARGV[2] then redis.call('DEL', KEYS[3]) end
return 1
"#;

static BEAT: LazyLock<Script> = LazyLock::new(|| Script::new(BEAT_SRC));
static LEAVE: LazyLock<Script> = LazyLock::new(|| Script::new(LEAVE_SRC));

/// One node's beat, sent in the pipeline of its controls read.
#[derive(Debug, Clone)]
pub struct Beat<'a> {
    pub prefix: &'a str,
    pub node: &'a str,
    /// This daemon process ([`super::new_instance`]): the backstop's holder.
    pub instance: &'a str,
    /// Whether this node takes (or keeps) the backstop lease.
    pub hold_backstop: bool,
    /// This node's tags as published ([`crate::tags::Tags::published`]).
    pub tags: &'a str,
}

/// What a beat answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Beaten {
    /// `{PREFIX}:alive:version`: changes when a node comes or goes.
    pub version: String,
    /// The daemon instance holding the backstop lease, if any.
    pub backstop: Option<String>,
    /// The drains' `~version`: changes with every drain and undrain.
    pub drains_version: String,
}

impl Beat<'_> {
    /// Adds the beat to `pipe`: two replies, read back by [`Beat::read`].
    pub fn add_to(&self, pipe: &mut redis::Pipeline) {
        let mut invocation = BEAT.prepare_invoke();
        invocation
            .key(alive_key(self.prefix))
            .key(alive_version_key(self.prefix))
            .key(backstop_key(self.prefix))
            .key(tags_key(self.prefix))
            .arg(self.node)
            .arg(millis(ALIVE_TTL))
            .arg(self.instance)
            .arg(millis(BACKSTOP_TTL))
            .arg(if self.hold_backstop { "1" } else { "0" })
            .arg(self.tags);
        pipe.invoke_script(&invocation)
            .hget(drains_key(self.prefix), "~version");
    }

    /// Loads the beat's script into the server behind `conn` (a pipeline
    /// does not load it by itself: a new, restarted or promoted server
    /// answers `NOSCRIPT` until then).
    pub async fn load(conn: &Conn) -> redis::RedisResult<()> {
        BEAT.prepare_invoke()
            .load_async(&mut conn.clone())
            .await
            .map(drop)
    }

    /// Reads the two replies [`Beat::add_to`] added, in order.
    pub fn read(mut next: impl FnMut() -> redis::Value) -> redis::RedisResult<Beaten> {
        let (version, holder): (String, String) = redis::from_redis_value(next())?;
        let drains: Option<String> = redis::from_redis_value(next())?;
        Ok(Beaten {
            version,
            backstop: Some(holder).filter(|holder| !holder.is_empty()),
            drains_version: drains.unwrap_or_else(|| "0".to_string()),
        })
    }
}

/// The alive nodes and the drain marks, as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    /// Every node that beat within [`ALIVE_TTL`], sorted.
    pub alive: Vec<String>,
    /// The drains hash: node -> mark as JSON (`crate::control::parse_marks`).
    pub drains: BTreeMap<String, String>,
    /// The tags each node published (`crate::tags::Tags::from_published`).
    pub tags: BTreeMap<String, String>,
}

/// Reads the alive nodes, the drain marks and the tags: one round trip,
/// O(N).
pub async fn read_view(conn: &Conn, prefix: &str) -> redis::RedisResult<View> {
    let mut conn = conn.clone();
    let (mut alive, drains, tags): (
        Vec<String>,
        BTreeMap<String, String>,
        BTreeMap<String, String>,
    ) = redis::pipe()
        .zrange(alive_key(prefix), 0, -1)
        .hgetall(drains_key(prefix))
        .hgetall(tags_key(prefix))
        .query_async(&mut conn)
        .await?;
    alive.sort();
    Ok(View {
        alive,
        drains,
        tags,
    })
}

/// The tags the alive nodes published, by node (status): alive nodes only.
pub async fn read_tags(conn: &Conn, prefix: &str) -> redis::RedisResult<BTreeMap<String, String>> {
    let view = read_view(conn, prefix).await?;
    Ok(view
        .tags
        .into_iter()
        .filter(|(node, _)| view.alive.binary_search(node).is_ok())
        .collect())
}

/// The tags `node` published, if its daemon is running (`trigger` on
/// this node checks a job's `run_on` against them).
pub async fn published_tags(
    conn: &Conn,
    prefix: &str,
    node: &str,
) -> redis::RedisResult<Option<String>> {
    redis::cmd("HGET")
        .arg(tags_key(prefix))
        .arg(node)
        .query_async(&mut conn.clone())
        .await
}

/// Takes `node` out of the view and gives up the backstop if `instance`
/// holds it (a clean stop).
pub async fn leave(
    conn: &Conn,
    prefix: &str,
    node: &str,
    instance: &str,
) -> redis::RedisResult<()> {
    let _: i64 = LEAVE
        .key(alive_key(prefix))
        .key(alive_version_key(prefix))
        .key(backstop_key(prefix))
        .key(tags_key(prefix))
        .arg(node)
        .arg(instance)
        .invoke_async(&mut conn.clone())
        .await?;
    Ok(())
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
