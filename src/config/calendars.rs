//! `[calendars.NAME]`: dates, ranges and weekly windows a job's
//! occurrences are excluded by (`skip_during`) or kept to
//! (`only_during`), read in each job's own time zone; `file` adds lines
//! of the same three kinds from a file read at every load (start and
//! reload).
//!
//! - a date `2026-12-25`: that whole local day;
//! - a range `2026-11-27T00:00/2026-11-30T23:59`: local minutes, both ends
//!   included;
//! - a weekly window `Sat-Sun 00:00-24:00`, `Mon,Wed 22:00-06:00` (past
//!   midnight it runs into the next day).

use std::sync::Arc;

use chrono::{Datelike, NaiveDate, NaiveDateTime, TimeDelta, Timelike, Weekday};
use toml::de::DeValue;

use super::context::Context;
use super::keys::CALENDAR as CALENDAR_KEYS;
use super::model::Calendar;
use super::table::{Table, closest};

/// One line of a calendar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Span {
    Date(NaiveDate),
    /// Local minutes `[from, to]`.
    Range(NaiveDateTime, NaiveDateTime),
    /// Days of the week (Monday first) and minutes of the day `[from,
    /// to)`; `to` below `from` runs past midnight.
    Weekly([bool; 7], u32, u32),
}

impl Span {
    /// Whether the local instant `at` is inside.
    pub fn contains(&self, at: NaiveDateTime) -> bool {
        match self {
            Span::Date(date) => at.date() == *date,
            Span::Range(from, to) => at >= *from && at < *to + TimeDelta::minutes(1),
            Span::Weekly(days, from, to) => {
                let minute = at.hour() * 60 + at.minute();
                let today = days[at.weekday().num_days_from_monday() as usize];
                if from <= to {
                    today && minute >= *from && minute < *to
                } else {
                    let yesterday = days[at.weekday().pred().num_days_from_monday() as usize];
                    (today && minute >= *from) || (yesterday && minute < *to)
                }
            }
        }
    }
}

/// Reads one span as written (a date, a range or a weekly window).
pub fn parse_span(text: &str) -> Result<Span, String> {
    let text = text.trim();
    let shape = || {
        format!(
            "`{text}` is not a date (`2026-12-25`), a range (`2026-11-27T00:00/2026-11-30T23:59`) or a weekly window (`Sat-Sun 00:00-24:00`)"
        )
    };
    if let Ok(date) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok(Span::Date(date));
    }
    if let Some((from, to)) = text.split_once('/') {
        let minute = |part: &str| NaiveDateTime::parse_from_str(part.trim(), "%Y-%m-%dT%H:%M");
        let (Ok(from), Ok(to)) = (minute(from), minute(to)) else {
            return Err(shape());
        };
        if to < from {
            return Err(format!("the range `{text}` ends before it begins"));
        }
        return Ok(Span::Range(from, to));
    }
    let (days, times) = text.split_once(' ').ok_or_else(shape)?;
    let (from, to) = times.trim().split_once('-').ok_or_else(shape)?;
    let minute = |hm: &str| -> Option<u32> {
        let (h, m) = hm.trim().split_once(':')?;
        let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
        (m < 60 && (h < 24 || (h == 24 && m == 0))).then_some(h * 60 + m)
    };
    let (Some(from), Some(to)) = (minute(from), minute(to)) else {
        return Err(shape());
    };
    let mut set = [false; 7];
    for part in days.split(',') {
        let day = |name: &str| name.trim().parse::<Weekday>().ok();
        match part.split_once('-') {
            Some((first, last)) => {
                let (Some(first), Some(last)) = (day(first), day(last)) else {
                    return Err(shape());
                };
                let mut at = first;
                loop {
                    set[at.num_days_from_monday() as usize] = true;
                    if at == last {
                        break;
                    }
                    at = at.succ();
                }
            }
            None => {
                let Some(one) = day(part) else {
                    return Err(shape());
                };
                set[one.num_days_from_monday() as usize] = true;
            }
        }
    }
    if from == to {
        return Err(format!(
            "the weekly window `{text}` is empty (it begins when it ends)"
        ));
    }
    Ok(Span::Weekly(set, from, to))
}

/// The valid calendars by name, and those with an error.
#[derive(Default)]
pub(super) struct Calendars {
    defined: std::collections::BTreeMap<String, Arc<Calendar>>,
    broken: Vec<String>,
}

/// Reads every `[calendars.NAME]` table.
pub(super) fn read(
    root: &Table<'_, '_>,
    config_path: &std::path::Path,
    ctx: &Context<'_>,
) -> Calendars {
    let mut calendars = Calendars::default();
    for named in super::named_tables(root, "calendars", "calendar", ctx) {
        let named = match named {
            Ok(named) => named,
            Err(broken) => {
                calendars.broken.push(broken);
                continue;
            }
        };
        match calendar(&named.name, &named.table, config_path, ctx) {
            Some(calendar) => {
                calendars.defined.insert(named.name, Arc::new(calendar));
            }
            None => calendars.broken.push(named.name),
        }
    }
    calendars
}

impl Calendars {
    /// The calendars `table`'s `key` (`skip_during` / `only_during`)
    /// names; `Err(())` after an error (in `ctx`).
    pub(super) fn of(
        &self,
        table: &Table<'_, '_>,
        key: &str,
        ctx: &Context<'_>,
    ) -> Result<Vec<Arc<Calendar>>, ()> {
        let Some(value) = table.get(key) else {
            return Ok(Vec::new());
        };
        let DeValue::Array(items) = value.get_ref() else {
            ctx.error(table.expected(
                key,
                value,
                "an array of calendar names, like [\"holidays\"]",
            ));
            return Err(());
        };
        let mut found = Vec::new();
        let mut failed = false;
        for item in items {
            let DeValue::String(name) = item.get_ref() else {
                ctx.error(table.expected(key, item, "a calendar name"));
                failed = true;
                continue;
            };
            if let Some(calendar) = self.defined.get(name.as_ref()) {
                found.push(Arc::clone(calendar));
            } else if !self.broken.iter().any(|broken| broken == name.as_ref()) {
                let hint = match closest(name, self.defined.keys().map(String::as_str)) {
                    Some(close) => format!("did you mean `{close}`?"),
                    None => format!(
                        "define it as a `[calendars.{name}]` table with `dates`, `ranges`, `weekly` or `file`"
                    ),
                };
                ctx.error(table.error(
                    item.span(),
                    key,
                    format!("no calendar `{name}` is defined; {hint}"),
                ));
                failed = true;
            } else {
                failed = true;
            }
        }
        if failed { Err(()) } else { Ok(found) }
    }
}

/// One `[calendars.NAME]` table; `None` after an error.
fn calendar(
    name: &str,
    table: &Table<'_, '_>,
    config_path: &std::path::Path,
    ctx: &Context<'_>,
) -> Option<Calendar> {
    let before = ctx.error_count();
    table.check_keys(CALENDAR_KEYS, ctx);
    let mut spans = Vec::new();
    for key in ["dates", "ranges", "weekly"] {
        let Some(value) = table.get(key) else {
            continue;
        };
        let DeValue::Array(items) = value.get_ref() else {
            ctx.error(table.expected(key, value, "an array of strings"));
            continue;
        };
        for item in items {
            let DeValue::String(text) = item.get_ref() else {
                ctx.error(table.expected(key, item, "a string"));
                continue;
            };
            let parsed = parse_span(text).and_then(|span| match (key, &span) {
                ("dates", Span::Date(_))
                | ("ranges", Span::Range(..))
                | ("weekly", Span::Weekly(..)) => Ok(span),
                _ => Err(format!(
                    "`{text}` is not what `{key}` holds; write it under the right key"
                )),
            });
            match parsed {
                Ok(span) => spans.push(span),
                Err(message) => ctx.error(table.error(item.span(), key, message)),
            }
        }
    }
    if let Some(file) = ctx.keep(table.string("file")).flatten() {
        let full = super::tls::beside(config_path, file.get_ref());
        match super::read_text_file(&full) {
            Ok(text) => {
                for (number, line) in text.lines().enumerate() {
                    let line = line.trim();
                    if line.is_empty() || line.starts_with('#') {
                        continue;
                    }
                    match parse_span(line) {
                        Ok(span) => spans.push(span),
                        Err(message) => ctx.error(table.error(
                            file.span(),
                            "file",
                            format!("`{}` line {}: {message}", full.display(), number + 1),
                        )),
                    }
                }
            }
            Err(_) if ctx.inspect => {}
            Err(err) => ctx.error(table.error(
                file.span(),
                "file",
                format!("cannot read `{}`: {err}", full.display()),
            )),
        }
    }
    if ctx.error_count() > before {
        return None;
    }
    Some(Calendar {
        name: name.to_string(),
        spans,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(date: &str, time: &str) -> NaiveDateTime {
        NaiveDate::parse_from_str(date, "%Y-%m-%d")
            .map(|day| {
                day.and_time(chrono::NaiveTime::parse_from_str(time, "%H:%M").unwrap_or_default())
            })
            .unwrap_or_default()
    }

    #[test]
    fn spans_read_and_contain_local_minutes() {
        let span = |text: &str| parse_span(text).unwrap_or_else(|err| panic!("{err}"));
        let christmas = span("2026-12-25");
        assert!(
            christmas.contains(at("2026-12-25", "00:00"))
                && christmas.contains(at("2026-12-25", "23:59"))
        );
        assert!(!christmas.contains(at("2026-12-26", "00:00")));
        let range = span("2026-11-27T00:00/2026-11-30T23:59");
        assert!(
            range.contains(at("2026-11-30", "23:59")) && !range.contains(at("2026-12-01", "00:00"))
        );
        let weekend = span("Sat-Sun 00:00-24:00");
        assert!(
            weekend.contains(at("2026-12-05", "12:00"))
                && weekend.contains(at("2026-12-06", "23:59"))
        );
        assert!(!weekend.contains(at("2026-12-07", "00:00")));
        let nights = span("Mon,Wed 22:00-06:00");
        assert!(nights.contains(at("2026-12-07", "23:00")), "Monday night");
        assert!(nights.contains(at("2026-12-08", "05:59")), "into Tuesday");
        assert!(!nights.contains(at("2026-12-08", "23:00")), "Tuesday night");
        for bad in [
            "2026-13-01",
            "Sat 10:00",
            "Funday 00:00-01:00",
            "Mon 10:00-10:00",
            "2026-12-02T10:00/2026-12-01T10:00",
        ] {
            assert!(parse_span(bad).is_err(), "{bad}");
        }
    }
}
