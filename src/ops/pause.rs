//! `solocron pause JOB… | --all [--for DURATION] [--reason TEXT]` and
//! `solocron resume JOB… | --all`.
//!
//! A pause is a mark in `{PREFIX}:pauses` (see [`crate::control`]): who
//! (`user@host`), since when (Redis time), until when (`--for`) and why.
//! Every node reads it within about a second and from then on records each
//! occurrence of the job `paused` instead of claiming it (a run already in
//! progress finishes). `resume` writes the end of the pause; `resume
//! --all` ends `pause --all` and every job's own pause.
//!
//! A pause in force is replaced by a new one of the same job (or `--all`):
//! the new who, end and reason apply, and a warning on stderr names the
//! pause it replaced (who, since, until, why), and says when the job now
//! runs sooner. `resume JOB` while `pause --all` holds ends the job's own
//! pause only, and says that every job stays paused until `resume --all`.
//!
//! Failure model: see [`super`]; an unknown job is refused before anything
//! is written, with the closest known name.

use std::time::Duration;

use super::{check_jobs, instant, known_jobs, read_merged, write_everywhere};
use crate::control::audit::Record;
use crate::control::{ALL, Mark, Pauses, who};
use crate::inspect::{Source, print};
use crate::keys::pauses_key;

/// What `pause` was asked.
#[derive(Debug, Clone)]
pub struct PauseRequest {
    /// The jobs; empty with `all`.
    pub jobs: Vec<String>,
    /// `--all`: every job, also those added later.
    pub all: bool,
    /// `--for`: ends by itself after this long.
    pub duration: Option<Duration>,
    /// `--from` / `--until` (UTC epoch ms): a pause booked ahead, covering
    /// the occurrences in `[from, until)`.
    pub window: Option<(Option<i64>, i64)>,
    /// `--reason`.
    pub reason: Option<String>,
}

/// Pauses `request.jobs` (or every job) fleet-wide; prints what it did.
pub async fn pause(source: &Source, request: &PauseRequest) -> anyhow::Result<()> {
    let (coordinator, now_ms) = super::open_as_operator(source).await?;
    let fields: Vec<String> = if request.all {
        vec![ALL.to_string()]
    } else {
        let known = known_jobs(&coordinator, source).await?;
        check_jobs(source, &request.jobs, &known)?;
        let mut jobs = request.jobs.clone();
        jobs.dedup();
        jobs
    };
    // The end is a whole second, rounded up: the one printed, shown by
    // `status` and kept are then the same instant, and the occurrence due
    // at that second is the first that runs (cut to the second, an end of
    // 14:09:06.5 printed as 14:09:06 still paused the 14:09:06 occurrence).
    let whole = |ms: i64| {
        ms.div_euclid(1000)
            .saturating_add(i64::from(ms.rem_euclid(1000) != 0))
            .saturating_mul(1000)
    };
    let mut until_ms = request.duration.map(|duration| {
        whole(now_ms.saturating_add(i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)))
    });
    let mut from_ms = None;
    if let Some((from, until)) = request.window {
        if until <= now_ms {
            return Err(crate::inspect::UsageError(format!(
                "--until {} is already past: nothing left to pause",
                instant(until)
            ))
            .into());
        }
        if from.is_some_and(|from| from >= until) {
            return Err(crate::inspect::UsageError(format!(
                "--from {} is not before --until {}",
                instant(from.unwrap_or_default()),
                instant(until)
            ))
            .into());
        }
        from_ms = from.filter(|from| *from > now_ms).map(whole);
        until_ms = Some(whole(until));
    }
    let mark = Mark {
        at_ms: now_ms,
        active: true,
        by: who(),
        since_ms: now_ms,
        until_ms,
        from_ms,
        reason: request
            .reason
            .as_deref()
            .map(str::trim)
            .filter(|reason| !reason.is_empty())
            .map(str::to_string),
    };
    let marks: Vec<(String, Mark)> = fields
        .iter()
        .map(|field| (field.clone(), mark.clone()))
        .collect();
    let key = pauses_key(&source.redis.key_prefix);
    let target = if request.all {
        ALL.to_string()
    } else {
        fields.join(",")
    };
    let mut record = Record::new(&mark.by, "pause", &target).reason(mark.reason.as_deref());
    match (from_ms, until_ms) {
        (Some(from), Some(until)) => {
            record = record.result(&format!(
                "ok, booked from {} until {}",
                instant(from),
                instant(until)
            ));
        }
        (None, Some(until)) => record = record.result(&format!("ok, until {}", instant(until))),
        _ => {}
    }
    let previous = write_everywhere(&coordinator, source, &key, &marks, &record).await?;
    let mut out = String::new();
    let until = match (from_ms, until_ms) {
        (Some(from), Some(until)) => {
            format!("booked: from {} until {}", instant(from), instant(until))
        }
        (_, Some(until)) => format!("until {}", instant(until)),
        _ => "until `solocron resume`".to_string(),
    };
    let mut replaced = Vec::new();
    for (field, before) in fields.iter().zip(previous) {
        let what = if field == ALL {
            "every job".to_string()
        } else {
            format!("job `{field}`")
        };
        if let Some(before) = before.filter(|before| before.covers(now_ms)) {
            replaced.push(replaced_words(&what, &before, until_ms));
        }
        out.push_str(&format!(
            "paused {what} on every node (by {} {until}{})\n",
            mark.by,
            mark.reason
                .as_deref()
                .map(|reason| format!(": {}", crate::inspect::flat(reason)))
                .unwrap_or_default()
        ));
    }
    out.push_str(&format!(
        "every node takes it up within about {}s: from then on each occurrence is recorded \
         `paused`, not run; runs already going finish. `solocron status` shows it.\n",
        crate::control::REFRESH.as_secs().max(1)
    ));
    print(&out)?;
    for text in replaced {
        crate::logging::to_stderr(&format!("warning: {text}\n"));
    }
    Ok(())
}

/// What a new pause of `what` replaced: the pause in force before (who,
/// since when, until when, why), and whether the job now runs sooner.
fn replaced_words(what: &str, before: &Mark, until_ms: Option<i64>) -> String {
    let sooner = match (before.until_ms, until_ms) {
        (None, Some(until)) => format!(
            "; that one lasted until `solocron resume`, this one ends at {}",
            instant(until)
        ),
        (Some(old), Some(until)) if until < old => format!(
            "; that one lasted until {}, this one ends sooner, at {}",
            instant(old),
            instant(until)
        ),
        _ => String::new(),
    };
    format!(
        "this replaced the pause of {what} that was in force ({}){sooner}",
        before.describe()
    )
}

/// What `resume` was asked.
#[derive(Debug, Clone)]
pub struct ResumeRequest {
    /// The jobs; empty with `all`.
    pub jobs: Vec<String>,
    /// `--all`: end `pause --all` and every job's own pause.
    pub all: bool,
}

/// Ends the pauses `request` names; prints what it did.
pub async fn resume(source: &Source, request: &ResumeRequest) -> anyhow::Result<()> {
    let (coordinator, now_ms) = super::open_as_operator(source).await?;
    let key = pauses_key(&source.redis.key_prefix);
    let marks = read_merged(&coordinator, source, &key).await?;
    let paused = Pauses::from_marks(marks.clone());
    // In force now, or booked ahead: `resume` ends both.
    let in_effect = |field: &str| {
        marks
            .get(field)
            .is_some_and(|mark| mark.covers(now_ms) || mark.booked_after(now_ms))
    };
    let fields: Vec<String> = if request.all {
        let mut fields: Vec<String> = paused
            .jobs
            .keys()
            .filter(|job| in_effect(job))
            .cloned()
            .collect();
        if in_effect(ALL) {
            fields.insert(0, ALL.to_string());
        }
        fields
    } else {
        let mut known = known_jobs(&coordinator, source).await?;
        known.extend(marks.keys().filter(|field| *field != ALL).cloned());
        check_jobs(source, &request.jobs, &known)?;
        let mut jobs = request.jobs.clone();
        jobs.dedup();
        jobs
    };
    let by = who();
    let end = Mark {
        at_ms: now_ms,
        active: false,
        by: by.clone(),
        since_ms: now_ms,
        until_ms: None,
        from_ms: None,
        reason: None,
    };
    let writes: Vec<(String, Mark)> = fields
        .iter()
        .filter(|field| marks.contains_key(*field))
        .map(|field| (field.clone(), end.clone()))
        .collect();
    if !writes.is_empty() {
        let target: Vec<&str> = writes.iter().map(|(field, _)| field.as_str()).collect();
        let record = Record::new(&by, "resume", &target.join(","));
        write_everywhere(&coordinator, source, &key, &writes, &record).await?;
    }
    // `resume JOB` leaves `pause --all` in force: the job stays paused.
    let all_holds = paused
        .all
        .as_ref()
        .filter(|all| !request.all && all.covers(now_ms));
    let mut out = String::new();
    if request.all && fields.is_empty() {
        out.push_str("nothing was paused\n");
    }
    for field in &fields {
        let what = if field == ALL {
            "every job (pause --all)".to_string()
        } else {
            format!("job `{field}`")
        };
        match (in_effect(field), all_holds) {
            (true, None) => out.push_str(&format!(
                "resumed {what} on every node (by {by}): every node runs its occurrences again \
                 within about {}s\n",
                crate::control::REFRESH.as_secs().max(1)
            )),
            (true, Some(_)) => out.push_str(&format!(
                "ended the pause of {what} (by {by}), but it stays paused: `pause --all` holds\n"
            )),
            (false, None) => out.push_str(&format!("{what} was not paused\n")),
            (false, Some(_)) => out.push_str(&format!(
                "{what} had no pause of its own; it stays paused: `pause --all` holds\n"
            )),
        }
    }
    print(&out)?;
    if let Some(all) = all_holds {
        crate::logging::to_stderr(&format!(
            "warning: every job is still paused by `pause --all` ({}): no occurrence runs \
             until `solocron resume --all` ends it\n",
            all.describe()
        ));
    }
    Ok(())
}
