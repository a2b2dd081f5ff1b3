//! The GROUPS of `status`: per `[groups.NAME]` of the config, the runs
//! holding its slots, its starts in the `max_starts` window and the
//! occurrences waiting for room, read by Redis's clock in one pipeline
//! (with Redlock, from the first master: a majority decides, one master
//! shows).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::config::Group;
use crate::coordinator::Conn;
use crate::inspect::format::{NONE, Table};
use crate::keys::GroupKeys;

/// One group as `status` shows it.
pub struct GroupStatus {
    pub group: Arc<Group>,
    /// The runs holding a slot: (job, occurrence, node).
    pub holders: Vec<(String, String, String)>,
    /// Starts in the `max_starts` window now.
    pub starts: usize,
    /// Occurrences waiting for room.
    pub waiting: usize,
}

/// Reads `groups` at Redis time `now_ms`.
pub async fn read(
    conn: &Conn,
    prefix: &str,
    groups: &[Arc<Group>],
    now_ms: i64,
) -> redis::RedisResult<Vec<GroupStatus>> {
    if groups.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for group in groups {
        let keys = GroupKeys::new(prefix, &group.name);
        pipe.cmd("ZRANGEBYSCORE")
            .arg(&keys.slots)
            .arg(now_ms)
            .arg("+inf");
        pipe.cmd("ZCOUNT").arg(&keys.starts).arg(now_ms).arg("+inf");
        pipe.cmd("ZCOUNT")
            .arg(&keys.waiting_until)
            .arg(now_ms)
            .arg("+inf");
    }
    let (slots, counts): (Vec<Vec<String>>, Vec<(usize, usize)>) = {
        let values: Vec<redis::Value> = pipe.query_async(&mut conn.clone()).await?;
        let mut slots = Vec::new();
        let mut counts = Vec::new();
        for chunk in values.chunks(3) {
            let members: Vec<String> = redis::FromRedisValue::from_redis_value(
                chunk.first().cloned().unwrap_or(redis::Value::Nil),
            )
            .unwrap_or_default();
            let count = |i: usize| -> usize {
                chunk
                    .get(i)
                    .cloned()
                    .and_then(|value| redis::FromRedisValue::from_redis_value(value).ok())
                    .unwrap_or(0)
            };
            slots.push(members);
            counts.push((count(1), count(2)));
        }
        (slots, counts)
    };
    Ok(groups
        .iter()
        .zip(slots.into_iter().zip(counts))
        .map(|(group, (members, (starts, waiting)))| GroupStatus {
            group: Arc::clone(group),
            holders: members.iter().filter_map(|member| holder(member)).collect(),
            starts,
            waiting,
        })
        .collect())
}

/// `INDEX|TOKEN|JOB|OCCURRENCE|NODE` as (job, occurrence, node).
fn holder(member: &str) -> Option<(String, String, String)> {
    let mut parts = member.splitn(5, '|');
    let (_, _) = (parts.next()?, parts.next()?);
    Some((
        parts.next()?.to_string(),
        parts.next()?.to_string(),
        parts.next()?.to_string(),
    ))
}

/// The GROUPS table (empty without groups).
pub fn text(groups: &[GroupStatus]) -> String {
    if groups.is_empty() {
        return String::new();
    }
    let mut table = Table::new(&[
        "GROUP",
        "RUNNING",
        "HELD BY",
        "STARTS",
        "WAITING",
        "WHEN FULL",
    ]);
    for status in groups {
        let group = &status.group;
        let running = match group.max_running {
            Some(max) => format!("{} of {max}", status.holders.len()),
            None => status.holders.len().to_string(),
        };
        let held = if status.holders.is_empty() {
            NONE.to_string()
        } else {
            status
                .holders
                .iter()
                .map(|(job, occurrence, node)| format!("{job} {occurrence} on {node}"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let starts = match group.max_starts {
            Some(rate) => format!(
                "{} of {} in {}",
                status.starts,
                rate.count,
                humantime::format_duration(rate.window)
            ),
            None => NONE.to_string(),
        };
        table.row(vec![
            group.name.clone(),
            running,
            held,
            starts,
            status.waiting.to_string(),
            group.when_full.as_str().to_string(),
        ]);
    }
    format!("\nGROUPS\n{}", table.render())
}

/// The `groups` array of `status --json`.
pub fn to_json(groups: &[GroupStatus]) -> Value {
    json!(
        groups
            .iter()
            .map(|status| {
                let group = &status.group;
                json!({
                    "group": group.name,
                    "max_running": group.max_running,
                    "running": status.holders.len(),
                    "holders": status.holders.iter().map(|(job, occurrence, node)| json!({
                        "job": job,
                        "occurrence": occurrence,
                        "node": node,
                    })).collect::<Vec<_>>(),
                    "max_starts": group.max_starts.map(|rate| rate.to_string()),
                    "starts_in_window": group.max_starts.map(|_| status.starts),
                    "waiting": status.waiting,
                    "when_full": group.when_full.as_str(),
                })
            })
            .collect::<Vec<_>>()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_member_names_its_run() {
        assert_eq!(
            holder("1|abc|nightly|2026-12-06T02:00:00Z|web|2"),
            Some((
                "nightly".to_string(),
                "2026-12-06T02:00:00Z".to_string(),
                "web|2".to_string()
            ))
        );
        assert_eq!(holder("garbage"), None);
    }
}
