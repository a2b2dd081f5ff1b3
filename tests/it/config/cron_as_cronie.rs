//! Differential test: solocron's occurrences against an independent
//! reading of cronie's rules, written here from `crontab(5)` and cronie's
//! `entry.c` / `cron.c` without croner.
//!
//! The reference parses each field into a set of values as cronie does
//! (`*` = the whole range, `N`, `N-M`, `/S` steps over a range, `N/S` =
//! `N-MAX/S`, lists, month and weekday names, 7 = Sunday), notes whether
//! each day field *starts with* `*` (cronie's `DOM_STAR` / `DOW_STAR`), and
//! matches a day as cronie's `cron.c` does: both day fields when either
//! starts with `*`, either one otherwise. It then enumerates wall times day
//! by day and places each on the time line by the DST rule of
//! docs/configuration.md: a wall time that exists once runs then; in a
//! fall-back repeated hour a *fixed-time* pattern (no `*` and no `/` in the
//! second, minute or hour field) runs at the first of the two instants and
//! any other pattern at both; in a spring-forward gap a fixed-time pattern
//! runs at the first instant after the gap and any other pattern not at
//! all.
//!
//! Random expressions (5 and 6 fields, macros, names, `N/S`, steps, lists)
//! in zones with DST, from start instants that are mostly just before a
//! real tzdata transition, each compared over its next occurrences. The
//! size is [`CASES`] expressions; the seed is fixed, so a failure names a
//! case that fails again.

use std::collections::BTreeSet;

use chrono::{
    DateTime, Datelike, Duration, LocalResult, NaiveDate, NaiveDateTime, Offset, TimeZone,
    Timelike, Utc,
};
use chrono_tz::Tz;
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng};
use solocron::schedule::{Schedule, ScheduleError};

/// Expressions compared (each in one zone from one start).
const CASES: usize = 10_000;
/// Occurrences compared per expression.
const STEPS: usize = 16;

const ZONES: &[&str] = &[
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "America/Santiago",
    "America/Havana",
    "Asia/Beirut",
    "Asia/Tashkent",
    "UTC",
];

/// One field as cronie reads it.
struct Field {
    values: u64,
    /// The field's text starts with `*`.
    star: bool,
}

impl Field {
    fn has(&self, value: u32) -> bool {
        self.values & (1 << value) != 0
    }
}

/// Bounds and names of a field, as in cronie's `entry.c`.
struct Spec {
    low: u32,
    high: u32,
    names: &'static [&'static str],
}

const SECOND: Spec = Spec {
    low: 0,
    high: 59,
    names: &[],
};
const MINUTE: Spec = SECOND;
const HOUR: Spec = Spec {
    low: 0,
    high: 23,
    names: &[],
};
const DOM: Spec = Spec {
    low: 1,
    high: 31,
    names: &[],
};
const MONTH: Spec = Spec {
    low: 1,
    high: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const DOW: Spec = Spec {
    low: 0,
    high: 7,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

fn number(spec: &Spec, text: &str) -> u32 {
    if let Ok(n) = text.parse::<u32>() {
        assert!((spec.low..=spec.high).contains(&n), "{text} out of range");
        return n;
    }
    let lower = text.to_ascii_lowercase();
    let index = spec
        .names
        .iter()
        .position(|name| *name == lower)
        .unwrap_or_else(|| panic!("`{text}` is not a number or a name"));
    // Month names count from 1, weekday names from 0 (Sunday).
    index as u32 + spec.low
}

/// cronie's `get_list` / `get_range`.
fn field(spec: &Spec, text: &str) -> Field {
    let mut values = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => (range, step.parse::<u32>().expect("step")),
            None => (part, 1),
        };
        let (first, last) = if range == "*" {
            (spec.low, spec.high)
        } else if let Some((a, b)) = range.split_once('-') {
            (number(spec, a), number(spec, b))
        } else if part.contains('/') {
            // `N/S`: from N to the end of the field.
            (number(spec, range), spec.high)
        } else {
            let n = number(spec, range);
            (n, n)
        };
        for value in (first..=last).step_by(step as usize) {
            values |= 1 << value;
        }
    }
    if spec.high == 7 && values & (1 << 7) != 0 {
        // Sunday is 0 and 7.
        values = (values & !(1 << 7)) | 1;
    }
    Field {
        values,
        star: text.starts_with('*'),
    }
}

/// A whole line as the reference reads it.
struct Cron {
    second: Field,
    minute: Field,
    hour: Field,
    dom: Field,
    month: Field,
    dow: Field,
    fixed_time: bool,
}

impl Cron {
    fn parse(expr: &str) -> Cron {
        let expanded = match expr {
            "@hourly" => "0 * * * *",
            "@daily" | "@midnight" => "0 0 * * *",
            "@weekly" => "0 0 * * 0",
            "@monthly" => "0 0 1 * *",
            "@yearly" | "@annually" => "0 0 1 1 *",
            other => other,
        };
        let parts: Vec<&str> = expanded.split_whitespace().collect();
        let (second, rest) = match parts.len() {
            5 => ("0", &parts[..]),
            6 => (parts[0], &parts[1..]),
            n => panic!("{n} fields"),
        };
        let fixed = |text: &str| !text.contains(['*', '/']);
        Cron {
            second: field(&SECOND, second),
            minute: field(&MINUTE, rest[0]),
            hour: field(&HOUR, rest[1]),
            dom: field(&DOM, rest[2]),
            month: field(&MONTH, rest[3]),
            dow: field(&DOW, rest[4]),
            fixed_time: fixed(second) && fixed(rest[0]) && fixed(rest[1]),
        }
    }

    /// cronie's `cron.c`: both day fields if either starts with `*`.
    fn day_matches(&self, date: NaiveDate) -> bool {
        if !self.month.has(date.month()) {
            return false;
        }
        let dom = self.dom.has(date.day());
        let dow = self.dow.has(date.weekday().num_days_from_sunday());
        if self.dom.star || self.dow.star {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// The instants of one local date's matching wall times.
    fn instants_on(&self, tz: Tz, date: NaiveDate, into: &mut BTreeSet<DateTime<Utc>>) {
        for hour in (0..24).filter(|h| self.hour.has(*h)) {
            for minute in (0..60).filter(|m| self.minute.has(*m)) {
                for second in (0..60).filter(|s| self.second.has(*s)) {
                    let wall = date.and_hms_opt(hour, minute, second).expect("wall time");
                    match tz.from_local_datetime(&wall) {
                        LocalResult::Single(at) => {
                            into.insert(at.with_timezone(&Utc));
                        }
                        LocalResult::Ambiguous(first, second) => {
                            into.insert(first.with_timezone(&Utc));
                            if !self.fixed_time {
                                into.insert(second.with_timezone(&Utc));
                            }
                        }
                        LocalResult::None => {
                            if self.fixed_time {
                                into.insert(first_instant_after_gap(tz, wall));
                            }
                        }
                    }
                }
            }
        }
    }

    /// The first `count` occurrences after `after`, or fewer if the line
    /// stops firing before 2199.
    fn occurrences_after(&self, tz: Tz, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        let mut found = BTreeSet::new();
        let mut date = after.with_timezone(&tz).date_naive() - Duration::days(1);
        let last = NaiveDate::from_ymd_opt(2199, 12, 31).expect("date");
        // A day's instants all come before the next-but-one day's, so once
        // `count` are found, one more day settles the order.
        let mut settle = 2;
        while date <= last && settle > 0 {
            if self.day_matches(date) {
                self.instants_on(tz, date, &mut found);
                found.retain(|at| *at > after);
            }
            if found.len() >= count {
                settle -= 1;
            }
            date += Duration::days(1);
        }
        found.into_iter().take(count).collect()
    }
}

/// The first instant whose wall time is past `wall`, a wall time that a
/// spring-forward gap skips (whole minutes: every transition here is).
fn first_instant_after_gap(tz: Tz, wall: NaiveDateTime) -> DateTime<Utc> {
    // No zone is 15 hours ahead of UTC: this instant's wall time is
    // before `wall`. Walk forward to the transition.
    let mut at = Utc.from_utc_datetime(&wall) - Duration::hours(15);
    at -= Duration::seconds(i64::from(at.second()));
    while at.with_timezone(&tz).naive_local() < wall {
        at += Duration::minutes(1);
    }
    at
}

/// The instants at which `tz` changes its offset in `year`.
fn transitions(tz: Tz, year: i32) -> Vec<DateTime<Utc>> {
    let offset = |secs: i64| {
        tz.offset_from_utc_datetime(&DateTime::from_timestamp(secs, 0).expect("t").naive_utc())
            .fix()
            .local_minus_utc()
    };
    let mut found = Vec::new();
    let start = Utc
        .with_ymd_and_hms(year, 1, 1, 0, 0, 0)
        .single()
        .expect("new year")
        .timestamp();
    let end = start + 366 * 86_400;
    let mut at = start;
    while at < end {
        let next = at + 6 * 3_600;
        if offset(at) != offset(next) {
            let (mut before, mut after) = (at, next);
            while after - before > 1 {
                let mid = before + (after - before) / 2;
                if offset(mid) == offset(before) {
                    before = mid;
                } else {
                    after = mid;
                }
            }
            found.push(DateTime::from_timestamp(after, 0).expect("t"));
        }
        at = next;
    }
    found
}

/// A random field over `spec`, as a person might write it.
fn random_field(rng: &mut StdRng, spec: &Spec) -> String {
    let (low, high) = (spec.low, spec.high);
    let value = |rng: &mut StdRng| -> String {
        let n = rng.random_range(low..=high);
        let name_index = if spec.low == 1 { n - 1 } else { n };
        match spec.names.get(name_index as usize) {
            Some(name) if rng.random_bool(0.3) => {
                if rng.random_bool(0.5) {
                    name.to_uppercase()
                } else {
                    (*name).to_string()
                }
            }
            _ => n.to_string(),
        }
    };
    let range = |rng: &mut StdRng| -> (u32, u32) {
        let a = rng.random_range(low..=high);
        let b = rng.random_range(a..=high);
        (a, b)
    };
    let step = |rng: &mut StdRng| rng.random_range(1..=(high - low).max(2));
    let part = |rng: &mut StdRng| -> String {
        match rng.random_range(0..5) {
            0 => value(rng),
            1 => {
                let (a, b) = range(rng);
                format!("{a}-{b}")
            }
            2 => {
                let (a, b) = range(rng);
                format!("{a}-{b}/{}", step(rng))
            }
            3 => format!("{}/{}", rng.random_range(low..=high), step(rng)),
            _ => value(rng),
        }
    };
    match rng.random_range(0..10) {
        0..=2 => "*".to_string(),
        3 => format!("*/{}", step(rng)),
        4 | 5 => value(rng),
        6 | 7 => part(rng),
        _ => {
            let n = rng.random_range(2..=3);
            (0..n).map(|_| part(rng)).collect::<Vec<_>>().join(",")
        }
    }
}

/// A random expression: mostly 5 fields, some 6, some macros; the time
/// fields lean towards values near DST transitions (hours 0-3).
fn random_expression(rng: &mut StdRng) -> String {
    if rng.random_bool(0.04) {
        let macros = [
            "@hourly",
            "@daily",
            "@midnight",
            "@weekly",
            "@monthly",
            "@yearly",
        ];
        return macros[rng.random_range(0..macros.len())].to_string();
    }
    let time = |rng: &mut StdRng, spec: &Spec, usual: &[u32]| -> String {
        if rng.random_bool(0.4) {
            usual[rng.random_range(0..usual.len())].to_string()
        } else {
            random_field(rng, spec)
        }
    };
    let minute = time(rng, &MINUTE, &[0, 15, 30, 45]);
    let hour = time(rng, &HOUR, &[0, 1, 2, 3, 23]);
    // Every day in a good share, so that DST nights are reached often.
    let days = if rng.random_bool(0.4) {
        "* * *".to_string()
    } else {
        format!(
            "{} {} {}",
            random_field(rng, &DOM),
            random_field(rng, &MONTH),
            random_field(rng, &DOW)
        )
    };
    if rng.random_bool(0.15) {
        // Seconds make every-second lines; keep them sparse enough.
        let second = match rng.random_range(0..3) {
            0 => "0".to_string(),
            1 => format!("{}/{}", rng.random_range(0..60), rng.random_range(10..=40)),
            _ => format!("*/{}", rng.random_range(10..=30)),
        };
        format!("{second} {minute} {hour} {days}")
    } else {
        format!("{minute} {hour} {days}")
    }
}

/// Whether the reference says the line can ever fire (its day fields
/// name a date that exists with a matching weekday).
fn can_fire(cron: &Cron) -> bool {
    let start = NaiveDate::from_ymd_opt(2000, 1, 1).expect("date");
    // 28 years repeat every date and weekday pair.
    (0..(28 * 366)).any(|day| cron.day_matches(start + Duration::days(day)))
}

#[test]
fn occurrences_agree_with_an_independent_reading_of_cronie() {
    let mut rng = StdRng::seed_from_u64(0x5010_c207);
    let (mut compared, mut around_dst) = (0usize, 0usize);
    for case in 0..CASES {
        let expr = random_expression(&mut rng);
        let zone = ZONES[rng.random_range(0..ZONES.len())];
        let tz: Tz = zone.parse().expect("zone");
        let year = rng.random_range(2000..2040);
        let list = transitions(tz, year);
        let after = if list.is_empty() || rng.random_bool(0.2) {
            Utc.with_ymd_and_hms(year, 1, 1, 0, 0, 0)
                .single()
                .expect("t")
                + Duration::seconds(rng.random_range(0..365 * 86_400))
        } else {
            let lead = if rng.random_bool(0.8) {
                3 * 3_600
            } else {
                2 * 86_400
            };
            list[rng.random_range(0..list.len())] - Duration::seconds(rng.random_range(1..=lead))
        };
        let reference = Cron::parse(&expr);
        let context = format!("case {case}: `{expr}` in {zone} after {after}");
        if !can_fire(&reference) {
            assert!(
                matches!(
                    Schedule::parse(&expr, tz),
                    Err(ScheduleError::NeverFires { .. })
                ),
                "{context}: cronie never fires it, solocron accepted it"
            );
            continue;
        }
        let schedule =
            Schedule::parse(&expr, tz).unwrap_or_else(|err| panic!("{context}: refused: {err}"));
        let ours = schedule.occurrences_after(after, STEPS);
        let theirs = reference.occurrences_after(tz, after, STEPS);
        assert_eq!(
            ours.iter()
                .map(|at| local_and_utc(tz, *at))
                .collect::<Vec<_>>(),
            theirs
                .iter()
                .map(|at| local_and_utc(tz, *at))
                .collect::<Vec<_>>(),
            "{context}"
        );
        compared += ours.len();
        around_dst += theirs
            .iter()
            .filter(|at| {
                let wall = at.with_timezone(&tz).naive_local();
                !matches!(tz.from_local_datetime(&wall), LocalResult::Single(_))
                    || list.contains(at)
            })
            .count();
    }
    eprintln!(
        "{CASES} expressions, {compared} occurrences compared, {around_dst} in a repeated hour or at the end of a gap"
    );
    assert!(compared > CASES * STEPS * 9 / 10, "{compared} occurrences");
    assert!(around_dst > 1_500, "{around_dst} occurrences around DST");
}

fn local_and_utc(tz: Tz, at: DateTime<Utc>) -> String {
    format!(
        "{} ({})",
        at.with_timezone(&tz).format("%a %F %T %:z"),
        at.format("%FT%TZ")
    )
}
