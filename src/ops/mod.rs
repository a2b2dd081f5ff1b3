//! The fleet-wide operator commands: `pause` / `resume` ([`pause`]),
//! `drain` / `undrain` ([`drain`]), `trigger --fleet` ([`fleet_trigger`])
//! and `abort` ([`abort`]).
//!
//! They write the controls of [`crate::control`] (and read what they need
//! to answer for people); the daemons pick them up within about a second
//! ([`crate::control::REFRESH`]). Like `status` they need neither the
//! jobs' `${VAR}` secrets nor, with `--redis`, the file: job names are
//! checked against the config and the live nodes, and a name nobody knows
//! is an error with the closest known one. With Redlock, pauses and drains
//! are written to every master (a majority must take them) and read
//! merged; `trigger --fleet` goes through the first master.
//!
//! Failure model: Redis unreachable, refusing us, or not answering within
//! a few seconds is an error naming the redacted URL (exit 1); nothing is
//! half-written in a way a retry of the same command would not repair
//! (every write is a whole mark with a newer stamp).

pub mod abort;
pub mod drain;
pub mod fleet_trigger;
pub mod pause;

use std::collections::BTreeMap;

use crate::control::{self, Mark};
use crate::coordinator::Coordinator;
use crate::inspect::{Source, job_hint, known_jobs};

/// Opens the coordinator for an operator's command and checks first that
/// its user may run the operator's scripts (`EVALSHA` of a script that
/// does nothing): a viewer's user is refused here, before anything is read
/// or written, whatever the command would have found (see `cli`'s
/// `needs_role` for the message). Answers the coordinator and Redis time.
async fn open_as_operator(source: &Source) -> anyhow::Result<(Coordinator, i64)> {
    static PROBE: std::sync::LazyLock<redis::Script> =
        std::sync::LazyLock::new(|| redis::Script::new("return 1"));
    let (coordinator, now_ms) = crate::inspect::open(&source.redis).await?;
    // The first member that answers decides (with Redlock a minority may
    // be down; the command then says so itself).
    for member in coordinator.members() {
        match PROBE
            .prepare_invoke()
            .invoke_async::<i64>(&mut member.conn.clone())
            .await
        {
            Ok(_) => break,
            Err(err) if crate::coordinator::errors::is_refusal(&err) => {
                return Err(crate::inspect::redis_failed(
                    "cannot run the operator's scripts on",
                    &source.redis,
                    &err,
                ));
            }
            Err(_) => continue,
        }
    }
    Ok((coordinator, now_ms))
}

/// Every mark of `key`, read from every member and merged (tombstones included).
async fn read_merged(
    coordinator: &Coordinator,
    source: &Source,
    key: &str,
) -> anyhow::Result<BTreeMap<String, Mark>> {
    let lists = coordinator
        .on_members(|conn| async move { control::read_marks(&conn, key).await })
        .await
        .map_err(|err| crate::inspect::redis_failed("cannot read", &source.redis, &err))?;
    Ok(control::merge(lists))
}

/// Writes `marks` to `key` on every member, with the audit `record` in
/// the same script; returns each field's previous mark (the newest any
/// member had).
async fn write_everywhere(
    coordinator: &Coordinator,
    source: &Source,
    key: &str,
    marks: &[(String, Mark)],
    record: &control::audit::Record,
) -> anyhow::Result<Vec<Option<Mark>>> {
    let prefix = source.redis.key_prefix.as_str();
    let answers = coordinator
        .on_members(|conn| async move {
            control::write_marks(&conn, key, marks, Some((prefix, record))).await
        })
        .await
        .map_err(|err| crate::inspect::redis_failed("cannot write to", &source.redis, &err))?;
    let mut previous: Vec<Option<Mark>> = vec![None; marks.len()];
    for answer in answers {
        for (slot, mark) in previous.iter_mut().zip(answer) {
            if let Some(mark) = mark
                && slot.as_ref().is_none_or(|known| known.at_ms < mark.at_ms)
            {
                *slot = Some(mark);
            }
        }
    }
    Ok(previous)
}

/// `Err` for the first of `jobs` that is not in `known`, naming it and the
/// closest known name (as `history` does).
fn check_jobs(source: &Source, jobs: &[String], known: &[String]) -> anyhow::Result<()> {
    for job in jobs {
        if known.iter().any(|name| name == job) {
            continue;
        }
        let hint = job_hint(job, known.iter().map(String::as_str), || {
            "`solocron status` lists the jobs".to_string()
        });
        anyhow::bail!(
            "unknown job `{job}`: {} and no live node runs it (key prefix `{}`); {hint}",
            source.config_words(),
            source.redis.key_prefix
        );
    }
    Ok(())
}

/// `2026-11-30T21:00:00Z` for UTC epoch ms.
fn instant(ms: i64) -> String {
    control::instant(ms)
}
