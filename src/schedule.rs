//! Cron expression + IANA time zone -> UTC occurrences.
//!
//! A pure function of its input: [`Schedule::next_after`] never looks at the
//! machine clock, so every node computes the same occurrences from the same
//! `after`. Expressions have 5 fields, 6 fields (seconds first) or are one of
//! `@hourly @daily @weekly @monthly @yearly` (`@annually`, `@midnight` too);
//! a 7th (year) field is refused.
//!
//! croner 4.0.3 does the calendar walk. It implements the Open Cron Pattern
//! Specification DST rules, which we rely on and test on real tzdata dates:
//! a *fixed-time* pattern (second, minute and hour each one plain value, like
//! `30 2 * * *`) whose wall time falls into a spring-forward gap runs once at
//! the first instant after the gap, and in a fall-back repeated hour runs once,
//! in the first pass. Every other pattern (a wildcard, step, range or list in
//! the second, minute or hour field, like `*/15 * * * *`) follows real
//! elapsed time: nothing is invented in the gap, and the repeated hour fires
//! in both passes. Day of month and day of week follow Vixie cron: when both
//! are restricted a day matches if *either* does (croner's default,
//! `dom_and_dow = false`).
//!
//! croner's parsed form keeps a byte per year up to 5000 (about 5 KB per
//! expression), so parsed expressions are shared: every schedule with the
//! same pattern points at one parsed form ([`parsed`]), however many jobs
//! and reloads use it. croner is given the years 1970–2199 ([`YEARS`])
//! rather than all of them, which makes parsing ~10× faster; no occurrence
//! after 2199 is computed.
//!
//! croner's messages name neither the field nor its range ("Number out of
//! bounds"); when it refuses a pattern, `fields` explains the first bad
//! field instead ("hour `25` is out of range 0–23").

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

use chrono::{DateTime, SubsecRound, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

/// Why an expression was refused. Messages are lowercase and name the
/// expression, so the config loader can prefix file, line and key.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// Not a 5-field, 6-field or `@macro` cron expression.
    #[error("invalid cron expression `{expr}`: {reason}")]
    Invalid { expr: String, reason: String },
    /// Well-formed, but no date ever matches (`0 0 30 2 *`).
    #[error("schedule `{expr}` never fires")]
    NeverFires { expr: String },
}

/// A job's schedule: the expression as written, its zone and the parsed form.
#[derive(Clone)]
pub struct Schedule {
    expr: String,
    tz: Tz,
    cron: Arc<Cron>,
}

impl Schedule {
    /// Parses a 5-field, 6-field (seconds first) or `@macro` expression read
    /// in `tz`.
    ///
    /// `Err(NeverFires)` when no date can ever match, checked with one
    /// forward search from a fixed reference instant (patterns have no year
    /// field, so what fires once after it fires forever).
    pub fn parse(expr: &str, tz: Tz) -> Result<Schedule, ScheduleError> {
        let trimmed = expr.trim();
        let invalid = |reason: String| ScheduleError::Invalid {
            expr: expr.to_string(),
            reason,
        };
        let pattern = expand_macro(trimmed).map_err(invalid)?;
        let cron = parsed(pattern).map_err(|err| match err {
            Refused::Invalid(reason) => invalid(reason),
            Refused::NeverFires => ScheduleError::NeverFires {
                expr: expr.to_string(),
            },
        })?;
        Ok(Schedule {
            expr: expr.to_string(),
            tz,
            cron,
        })
    }

    /// The same expression read in another zone, without parsing it again
    /// (a cron line means the same wall clock times in every zone).
    pub fn with_timezone(&self, tz: Tz) -> Schedule {
        Schedule { tz, ..self.clone() }
    }

    /// The expression as written.
    pub fn expression(&self) -> &str {
        &self.expr
    }

    /// The zone the expression is read in.
    pub fn timezone(&self) -> Tz {
        self.tz
    }

    /// The first occurrence strictly after `after`, `None` if there is none
    /// up to the end of 2199 ([`YEARS`]).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Occurrences fall on whole seconds, so the first one after the
        // truncated instant is also the first one after `after` itself.
        let start = after.trunc_subsecs(0).with_timezone(&self.tz);
        self.cron
            .find_next_occurrence(&start, false)
            .ok()
            .map(|at| at.with_timezone(&Utc))
    }

    /// The last occurrence strictly before `before`, `None` if there is
    /// none from 1970 on ([`YEARS`]).
    pub fn previous_before(&self, before: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // An occurrence on the truncated second is before `before` itself
        // when `before` has a fraction of a second.
        let inclusive = before.timestamp_subsec_nanos() > 0;
        let start = before.trunc_subsecs(0).with_timezone(&self.tz);
        self.cron
            .find_previous_occurrence(&start, inclusive)
            .ok()
            .map(|at| at.with_timezone(&Utc))
    }

    /// The longest interval between two consecutive occurrences from the
    /// first one after `from` until `horizon` later (and over at least two
    /// intervals, so a yearly schedule gets one); `None` if the schedule
    /// has fewer than two occurrences left.
    ///
    /// Exact for every interval longer than [`EXACT_ABOVE`] and for those
    /// among the first [`WALKED`] occurrences; a shorter interval further
    /// out may be passed over (it is then no longer than [`EXACT_ABOVE`]).
    /// That keeps the cost near [`WALKED`] + 2 × `horizon` / [`EXACT_ABOVE`]
    /// occurrence searches whatever the schedule, where walking every
    /// occurrence of `* * * * * *` over two months would take 5 million.
    pub fn longest_interval(&self, from: DateTime<Utc>, horizon: Duration) -> Option<Duration> {
        let end = TimeDelta::from_std(horizon)
            .ok()
            .and_then(|horizon| from.checked_add_signed(horizon))
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        let mut at = self.next_after(from)?;
        let mut longest = TimeDelta::zero();
        let mut intervals = 0u32;
        let covered = |at: DateTime<Utc>, intervals: u32| at >= end && intervals >= 2;
        // The first occurrences one by one.
        for _ in 0..WALKED {
            if covered(at, intervals) {
                break;
            }
            let Some(next) = self.next_after(at) else {
                break;
            };
            longest = longest.max(next - at);
            intervals += 1;
            at = next;
        }
        // Then in jumps: every interval longer than the jump holds some
        // probe, and the occurrences on either side of the probe bound it.
        // What lies between `at` and the probe is shorter than the jump.
        let min_jump = TimeDelta::from_std(EXACT_ABOVE).unwrap_or(TimeDelta::MAX);
        for _ in 0..MAX_JUMPS {
            if covered(at, intervals) {
                break;
            }
            let Some(probe) = at.checked_add_signed(longest.max(min_jump)) else {
                break;
            };
            let Some(next) = self.next_after(probe) else {
                break;
            };
            let previous = self
                .previous_before(next)
                .map_or(at, |previous| previous.clamp(at, probe));
            longest = longest.max(next - previous);
            intervals += 1;
            at = next;
        }
        if intervals == 0 {
            return None;
        }
        longest.to_std().ok()
    }
}

/// [`Schedule::longest_interval`] walks this many occurrences one by one.
pub const WALKED: usize = 64;
/// [`Schedule::longest_interval`] finds every interval longer than this.
pub const EXACT_ABOVE: Duration = Duration::from_secs(6 * 3600);
/// At most this many jumps: enough for a horizon of ten years.
const MAX_JUMPS: usize = 15_000;

// croner's parsed form holds a bit per year up to 5000: keep it out of logs.
impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schedule")
            .field("expr", &self.expr)
            .field("tz", &self.tz)
            .finish()
    }
}

enum Refused {
    Invalid(String),
    NeverFires,
}

/// Parsed patterns by text; entries die with the last schedule using them.
static PARSED: LazyLock<Mutex<HashMap<String, Weak<Cron>>>> = LazyLock::new(Mutex::default);

/// The parsed form of `pattern`, shared with every other live schedule of
/// the same pattern. A pattern that can never fire is refused here, checked
/// with one forward search from a fixed reference instant in UTC (patterns
/// have no year field, so what fires once after it fires forever, and a
/// zone only moves the instants).
fn parsed(pattern: &str) -> Result<Arc<Cron>, Refused> {
    let cache = || {
        PARSED
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    };
    if let Some(cron) = cache().get(pattern).and_then(Weak::upgrade) {
        return Ok(cron);
    }
    // Parsed without the lock, so that threads warming the cache run in
    // parallel; a pattern parsed twice at once is shared by the first one in.
    let parser = CronParser::builder()
        .seconds(Seconds::Required)
        .year(Year::Required)
        .build();
    let cron = parser.parse(&spelled_out(pattern)).map_err(|err| {
        Refused::Invalid(fields::explain(pattern).unwrap_or_else(|| describe(&err)))
    })?;
    let reference = Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).single();
    let fires = reference.is_some_and(|at| cron.find_next_occurrence(&at, false).is_ok());
    if !fires {
        return Err(Refused::NeverFires);
    }
    let mut cache = cache();
    if let Some(cron) = cache.get(pattern).and_then(Weak::upgrade) {
        return Ok(cron);
    }
    let cron = Arc::new(cron);
    // Forget dead entries once they could make up half of the map.
    if cache.len() >= 64 && cache.len().is_power_of_two() {
        cache.retain(|_, cron| cron.strong_count() > 0);
    }
    cache.insert(pattern.to_string(), Arc::downgrade(&cron));
    Ok(cron)
}

/// Parses `exprs` (in UTC) on every core, so that a config loader that
/// then parses them one by one finds them parsed: with many distinct
/// expressions, parsing is most of a config load. Invalid expressions are
/// skipped here, for the loader to report with their position. The cache
/// keeps a parsed pattern only while a schedule uses it: hold the result
/// until the loader is done.
pub fn parse_in_parallel<'a>(exprs: impl Iterator<Item = &'a str>) -> Vec<Schedule> {
    let mut exprs: Vec<&str> = exprs.collect();
    exprs.sort_unstable();
    exprs.dedup();
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    if threads < 2 || exprs.len() < 256 {
        return Vec::new();
    }
    let chunk = exprs.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let workers: Vec<_> = exprs
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .filter_map(|expr| Schedule::parse(expr, Tz::UTC).ok())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| worker.join().unwrap_or_default())
            .collect()
    })
}

/// The macros we accept, as the 6-field patterns they stand for (croner's
/// and Vixie cron's meaning; `@midnight` = `@daily`).
const MACROS: [(&str, &str); 7] = [
    ("@hourly", "0 0 * * * *"),
    ("@daily", "0 0 0 * * *"),
    ("@midnight", "0 0 0 * * *"),
    ("@weekly", "0 0 0 * * 0"),
    ("@monthly", "0 0 0 1 * *"),
    ("@yearly", "0 0 0 1 1 *"),
    ("@annually", "0 0 0 1 1 *"),
];

/// The years croner is told a pattern may fire in. Left open (`*`), croner
/// fills its year table one entry at a time up to the year 5000, which was
/// most of a config load (`docs/PERFORMANCE.md`); occurrences after 2199
/// are not computed (a schedule then has no further occurrences).
const YEARS: &str = "1970-2199";

/// `pattern` (5 or 6 fields) with seconds and years spelled out, the form
/// croner parses without filling a 5,000-year table: a 5-field pattern gets
/// second 0, as croner itself gives it.
fn spelled_out(pattern: &str) -> String {
    match pattern.split_whitespace().count() {
        5 => format!("0 {pattern} {YEARS}"),
        _ => format!("{pattern} {YEARS}"),
    }
}

/// Checks the field count (croner would take 7) and maps macros to the
/// patterns they stand for, so that croner's errors never have to be
/// explained.
fn expand_macro(expr: &str) -> Result<&str, String> {
    if expr.starts_with('@') {
        return MACROS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(expr))
            .map(|(_, pattern)| *pattern)
            .ok_or_else(|| {
                "unknown macro; use `@hourly`, `@daily`, `@weekly`, `@monthly` or `@yearly`"
                    .to_string()
            });
    }
    match expr.split_whitespace().count() {
        0 => Err("the expression is empty".to_string()),
        5 | 6 => Ok(expr),
        n => Err(format!(
            "expected 5 fields (minute first) or 6 (seconds first), found {n}"
        )),
    }
}

/// croner's messages are sentences ("Component error: Number out of
/// bounds."); ours are lowercase without a trailing period.
fn describe(err: &croner::errors::CronError) -> String {
    let text = err.to_string();
    let text = text.trim_end_matches('.');
    let text = text.strip_prefix("Component error: ").unwrap_or(text);
    let text = text
        .strip_prefix("Pattern contains illegal characters: CronPattern contains ")
        .unwrap_or(text);
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

mod fields;

#[cfg(test)]
mod tests;
