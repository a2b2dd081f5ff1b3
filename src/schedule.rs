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

use std::fmt;

use chrono::{DateTime, SubsecRound, TimeZone, Utc};
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
    cron: Cron,
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
        let parser = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build();
        let cron = parser
            .parse(pattern)
            .map_err(|err| invalid(describe(&err)))?;
        let schedule = Schedule {
            expr: expr.to_string(),
            tz,
            cron,
        };
        let reference = Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).single();
        match reference.and_then(|at| schedule.next_after(at)) {
            Some(_) => Ok(schedule),
            None => Err(ScheduleError::NeverFires {
                expr: expr.to_string(),
            }),
        }
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
    /// (before croner's search limit, the year 5000).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Occurrences fall on whole seconds, so the first one after the
        // truncated instant is also the first one after `after` itself.
        let start = after.trunc_subsecs(0).with_timezone(&self.tz);
        self.cron
            .find_next_occurrence(&start, false)
            .ok()
            .map(|at| at.with_timezone(&Utc))
    }
}

// croner's parsed form holds a bit per year up to 5000: keep it out of logs.
impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schedule")
            .field("expr", &self.expr)
            .field("tz", &self.tz)
            .finish()
    }
}

/// The macros we accept; croner knows all but `@midnight` (= `@daily`).
const MACROS: [(&str, &str); 7] = [
    ("@hourly", "@hourly"),
    ("@daily", "@daily"),
    ("@midnight", "@daily"),
    ("@weekly", "@weekly"),
    ("@monthly", "@monthly"),
    ("@yearly", "@yearly"),
    ("@annually", "@annually"),
];

/// Checks the field count (croner would take 7) and maps macros to what
/// croner understands, so that its errors never have to be explained.
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

#[cfg(test)]
mod tests;
