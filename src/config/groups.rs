//! `[groups.NAME]`: limits shared by the jobs that name the group
//! (`max_running`, `max_starts`, `when_full`), and a job's `group` key
//! resolved against them. A group that limits nothing is an error, one
//! that no job uses a warning.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::context::Context;
use super::keys::GROUP as GROUP_KEYS;
use super::model::{Group, MaxStarts, WhenFull};
use super::table::{Table, closest};

/// The shortest `max_starts` window: Redis's clock is read in ms, and a
/// window shorter than a second limits nothing a cron job would notice.
const MIN_WINDOW: Duration = Duration::from_secs(1);

/// Reads every `[groups.NAME]` table; a group with an error is left out
/// (the error is in `ctx`, and a job naming it is not reported again).
pub(super) fn read(root: &Table<'_, '_>, ctx: &Context<'_>) -> Groups {
    let mut groups = Groups::default();
    for named in super::named_tables(root, "groups", "group", ctx) {
        let named = match named {
            Ok(named) => named,
            Err(broken) => {
                groups.broken.push(broken);
                continue;
            }
        };
        match group(&named.name, &named.table, ctx) {
            Some(group) => {
                groups
                    .defined
                    .insert(named.name, (Arc::new(group), named.spot));
            }
            None => groups.broken.push(named.name),
        }
    }
    groups
}

/// The groups of one file.
#[derive(Default)]
pub(super) struct Groups {
    /// Valid groups by name, with where each is defined (for the warning
    /// about a group no job uses).
    defined: BTreeMap<String, (Arc<Group>, super::warnings::Spot)>,
    /// Groups with an error (already reported): a job naming one is not
    /// reported again.
    broken: Vec<String>,
}

impl Groups {
    /// The job key `group` of `table`: `Ok(None)` when absent, `Err(())`
    /// when it names nothing usable (the error is in `ctx` unless the
    /// group itself had one).
    pub(super) fn of(
        &self,
        table: &Table<'_, '_>,
        ctx: &Context<'_>,
    ) -> Result<Option<Arc<Group>>, ()> {
        let Some(name) = ctx.keep(table.string("group")).ok_or(())? else {
            return Ok(None);
        };
        let written = *name.get_ref();
        if let Some((group, _)) = self.defined.get(written) {
            return Ok(Some(Arc::clone(group)));
        }
        if self.broken.iter().any(|broken| broken == written) {
            return Err(());
        }
        let hint = match closest(written, self.defined.keys().map(String::as_str)) {
            Some(close) => format!("did you mean `{close}`?"),
            None => format!(
                "define it as a `[groups.{written}]` table with `max_running` or `max_starts`"
            ),
        };
        let message = format!("no group `{written}` is defined; {hint}");
        ctx.error(table.error(name.span(), "group", message));
        Err(())
    }

    /// The valid groups in name order, warning about each no job uses.
    pub(super) fn finish(
        self,
        used: &[Arc<super::model::Job>],
        ctx: &Context<'_>,
    ) -> Vec<Arc<Group>> {
        let mut all = Vec::with_capacity(self.defined.len());
        for (name, (group, spot)) in self.defined {
            let in_use = used.iter().any(|job| {
                job.extras
                    .group
                    .as_ref()
                    .is_some_and(|group| group.name == name)
            });
            if !in_use && !ctx.inspect {
                let message = format!(
                    "no job has `group = \"{name}\"`, so the group limits nothing; name it in a job or remove it"
                );
                ctx.warn(spot.warning(&message));
            }
            all.push(group);
        }
        all
    }
}

/// One `[groups.NAME]` table, checked; `None` after an error.
fn group(name: &str, table: &Table<'_, '_>, ctx: &Context<'_>) -> Option<Group> {
    let before = ctx.error_count();
    table.check_keys(GROUP_KEYS, ctx);
    let mut group = Group {
        name: name.to_string(),
        max_running: None,
        max_starts: None,
        when_full: WhenFull::Skip,
    };
    if let Some(max) = ctx.keep(table.integer("max_running")).flatten() {
        match u32::try_from(*max.get_ref()).ok().filter(|max| *max >= 1) {
            Some(value) => group.max_running = Some(value),
            None => {
                let message = format!(
                    "must be a whole number from 1 to {}, found {}",
                    u32::MAX,
                    max.get_ref()
                );
                ctx.error(table.error(max.span(), "max_running", message));
            }
        }
    }
    if let Some(rate) = ctx.keep(table.string("max_starts")).flatten() {
        match max_starts(rate.get_ref()) {
            Ok(rate) => group.max_starts = Some(rate),
            Err(message) => ctx.error(table.error(rate.span(), "max_starts", message)),
        }
    }
    if let Some(when) = ctx.keep(table.string("when_full")).flatten() {
        match *when.get_ref() {
            "skip" => group.when_full = WhenFull::Skip,
            "wait" => group.when_full = WhenFull::Wait,
            other => {
                let message = format!("expected `skip` or `wait`, found `{other}`");
                ctx.error(table.error(when.span(), "when_full", message));
            }
        }
    }
    if ctx.error_count() > before {
        return None;
    }
    if group.max_running.is_none() && group.max_starts.is_none() {
        ctx.error(table.error_here(
            "limits nothing: set `max_running = K` (runs at once) or `max_starts = \"N/DURATION\"` (starts in any window), or both",
        ));
        return None;
    }
    Some(group)
}

/// `"N/DURATION"`, like `"30/1m"`: N from 1, a window of at least a second.
fn max_starts(written: &str) -> Result<MaxStarts, String> {
    let shape = format!(
        "`{written}` is not N/DURATION; write it like \"30/1m\" (at most 30 starts in any minute)"
    );
    let (count, window) = written.split_once('/').ok_or_else(|| shape.clone())?;
    let count: u32 = count
        .trim()
        .parse()
        .ok()
        .filter(|count| *count >= 1)
        .ok_or_else(|| shape.clone())?;
    let window = match window.trim() {
        // `30/m` reads as one minute, as in "per minute".
        unit @ ("s" | "m" | "h" | "d") => format!("1{unit}"),
        other => other.to_string(),
    };
    let window = humantime::parse_duration(&window).map_err(|_| shape.clone())?;
    if window < MIN_WINDOW {
        return Err(format!("the window of `{written}` must be at least 1s"));
    }
    if window > super::table::MAX_DURATION {
        return Err(format!(
            "the window of `{written}` must be at most {}",
            humantime::format_duration(super::table::MAX_DURATION)
        ));
    }
    Ok(MaxStarts { count, window })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_starts_reads_n_per_duration() {
        let rate = max_starts("30/1m").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(rate.count, 30);
        assert_eq!(rate.window, Duration::from_secs(60));
        let rate = max_starts("5/h").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(rate.window, Duration::from_secs(3600));
        for bad in ["30", "0/1m", "x/1m", "3/", "3/500ms", "-1/1m"] {
            assert!(max_starts(bad).is_err(), "{bad} was accepted");
        }
    }
}
