//! `solocron audit [--since WHEN] [--limit N] [--json]`: the audit trail
//! ([`crate::control::audit`]), newest first, read from the first member
//! (with Redlock every master gets each command's record; the first is
//! read).
//!
//! Failure model: Redis unreachable or refusing is an error naming the
//! redacted URL (exit 1); a record missing a field shows it empty.

use serde_json::json;

use super::format::{NONE, Table};
use super::{Source, TimeBound, print, redis_failed};
use crate::control::audit;
use crate::coordinator::Coordinator;

/// Prints the newest `limit` records at or after `since`.
pub async fn audit(
    source: &Source,
    since: Option<TimeBound>,
    limit: usize,
    json: bool,
) -> anyhow::Result<()> {
    let (coordinator, now_ms) = super::open(&source.redis).await?;
    let since_ms = since.map(|bound| bound.resolve(now_ms));
    let records = read(&coordinator, source, since_ms, limit).await?;
    if json {
        return print(&format!("{:#}\n", to_json(&records)));
    }
    if records.is_empty() {
        return print(
            "AUDIT: no record (nothing was paused, drained, triggered or aborted, and no daemon started, under this key prefix)\n",
        );
    }
    let mut table = Table::new(&["TIME (UTC)", "WHO", "ACTION", "TARGET", "RESULT", "REASON"]);
    let or_none = |text: &str| {
        if text.is_empty() {
            NONE.to_string()
        } else {
            text.to_string()
        }
    };
    for read in &records {
        table.row(vec![
            crate::control::instant(read.at_ms),
            or_none(&read.record.who),
            or_none(&read.record.action),
            or_none(&read.record.target),
            or_none(&read.record.result),
            or_none(&read.record.reason),
        ]);
    }
    print(&table.render())
}

/// The newest `limit` records at or after `since_ms`, newest first, from
/// the first member. `Err` names the redacted URL.
pub async fn read(
    coordinator: &Coordinator,
    source: &Source,
    since_ms: Option<i64>,
    limit: usize,
) -> anyhow::Result<Vec<audit::Read>> {
    audit::read(
        &coordinator.first(),
        &source.redis.key_prefix,
        since_ms,
        limit,
    )
    .await
    .map_err(|err| redis_failed("cannot read the audit trail from", &source.redis, &err))
}

/// The `--json` array.
pub fn to_json(records: &[audit::Read]) -> serde_json::Value {
    json!(
        records
            .iter()
            .map(|read| json!({
                "at": crate::control::instant(read.at_ms),
                "who": read.record.who,
                "action": read.record.action,
                "target": read.record.target,
                "reason": (!read.record.reason.is_empty()).then_some(&read.record.reason),
                "result": read.record.result,
            }))
            .collect::<Vec<_>>()
    )
}
