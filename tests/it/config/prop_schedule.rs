//! Property tests for the occurrence iterator ([`Schedule::next_after`]).
//!
//! Random valid cron expressions (5 and 6 fields, built field by field from
//! `*`, numbers, ranges, steps and lists, plus the macros) in random zones,
//! several with DST, from random start instants in 2000–2040 (most of them
//! just before a real tzdata transition of the zone). About 50 steps each:
//!
//! - `parse` accepts the expression exactly when the model says it can fire;
//! - occurrences strictly increase and fall on whole seconds;
//! - every occurrence matches the expression in its zone, checked by our own
//!   model of the fields (not croner's): the local wall time's second,
//!   minute, hour, month, and day (day of month OR day of week when both
//!   day fields are restricted, where a field starting with `*` is
//!   unrestricted, as crontab(5) reads it; `cron_as_cronie` compares whole
//!   sequences with an independent reading of cronie's rules);
//! - no matching instant between two consecutive occurrences is skipped
//!   (checked when they are at most two hours apart).
//!
//! DST exceptions (docs/configuration.md), and nothing else:
//! - a *fixed-time* pattern (no wildcard and no step in the second, minute
//!   or hour field: values, lists and ranges, like `30 2 * * *`,
//!   `0 2,14 * * *` or `30 1-3 * * *`) whose wall time falls into a
//!   spring-forward gap fires once at the first instant after the gap:
//!   an occurrence whose local time does not match is accepted only if it is
//!   exactly the end of a gap and a wall time inside that gap matches;
//! - a fixed-time pattern runs once in a fall-back repeated hour, the first
//!   time: it never fires at the later of two instants with the same wall
//!   time, that later instant is the only matching one it may skip, and its
//!   wall times strictly increase.

use chrono::{DateTime, Datelike, Duration, NaiveDateTime, Offset, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use solocron::schedule::{Schedule, ScheduleError};

const ZONES: &[&str] = &[
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Asia/Tashkent",
    "Pacific/Chatham",
    "America/Santiago",
    "UTC",
];
/// The zones of [`ZONES`] that change their offset in 2000–2040.
const DST_ZONES: &[&str] = &[
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "America/Santiago",
];
const STEPS: usize = 50;
const CASES: u32 = 1024;
const DST_CASES: u32 = 1024;

/// One field as written, and the values it stands for (bit `v` = value `v`).
#[derive(Debug, Clone)]
struct Field {
    text: String,
    values: u64,
    /// Uses `*` (alone or as `*/n`).
    wildcard: bool,
    stepped: bool,
}

impl Field {
    fn has(&self, value: u32) -> bool {
        self.values & (1 << value) != 0
    }

    /// A fixed-time field: values, lists and ranges; no wildcard, no step.
    fn is_fixed(&self) -> bool {
        !self.wildcard && !self.stepped
    }
}

fn bits(values: impl IntoIterator<Item = u32>) -> u64 {
    values.into_iter().fold(0, |acc, v| acc | (1 << v))
}

fn fixed_field(text: &str, value: u32) -> Field {
    Field {
        text: text.to_string(),
        values: bits([value]),
        wildcard: false,
        stepped: false,
    }
}

fn star_field(lo: u32, hi: u32) -> Field {
    Field {
        text: "*".to_string(),
        values: bits(lo..=hi),
        wildcard: true,
        stepped: false,
    }
}

/// A number or a range, for lists.
fn part(lo: u32, hi: u32) -> impl Strategy<Value = (String, u64)> {
    prop_oneof![
        (lo..=hi).prop_map(|n| (n.to_string(), bits([n]))),
        (lo..=hi, lo..=hi).prop_map(|(a, b)| {
            let (a, b) = (a.min(b), a.max(b));
            (format!("{a}-{b}"), bits(a..=b))
        }),
    ]
}

/// A field over `lo..=hi`.
fn field(lo: u32, hi: u32) -> impl Strategy<Value = Field> {
    let span = hi - lo;
    prop_oneof![
        3 => Just(star_field(lo, hi)),
        3 => (lo..=hi).prop_map(|n| fixed_field(&n.to_string(), n)),
        2 => part(lo, hi).prop_map(|(text, values)| Field {
            text, values, wildcard: false, stepped: false,
        }),
        2 => (2..=span.max(2)).prop_map(move |step| Field {
            text: format!("*/{step}"),
            values: bits((lo..=hi).step_by(step as usize)),
            wildcard: true,
            stepped: true,
        }),
        1 => (lo..=hi, lo..=hi, 2..=span.max(2)).prop_map(|(a, b, step)| {
            let (a, b) = (a.min(b), a.max(b));
            Field {
                text: format!("{a}-{b}/{step}"),
                values: bits((a..=b).step_by(step as usize)),
                wildcard: false,
                stepped: true,
            }
        }),
        2 => prop::collection::vec(part(lo, hi), 2..=3).prop_map(|parts| Field {
            text: parts.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>().join(","),
            values: parts.iter().fold(0, |acc, (_, v)| acc | v),
            wildcard: false,
            stepped: false,
        }),
    ]
}

/// Day of week: 0–7, where 7 is Sunday again.
fn day_of_week() -> impl Strategy<Value = Field> {
    field(0, 7).prop_map(|mut field| {
        if field.has(7) {
            field.values = (field.values & !(1 << 7)) | 1;
        }
        field
    })
}

/// A whole expression and its model.
#[derive(Debug, Clone)]
struct Expr {
    text: String,
    second: Field,
    minute: Field,
    hour: Field,
    dom: Field,
    month: Field,
    dow: Field,
}

impl Expr {
    fn is_fixed_time(&self) -> bool {
        self.second.is_fixed() && self.minute.is_fixed() && self.hour.is_fixed()
    }

    fn day_matches(&self, local: &NaiveDateTime) -> bool {
        let dom = self.dom.has(local.day());
        let dow = self.dow.has(local.weekday().num_days_from_sunday());
        if self.dom.wildcard || self.dow.wildcard {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// Whether the wall time `local` matches every field.
    fn matches(&self, local: &NaiveDateTime) -> bool {
        self.second.has(local.second()) && self.matches_minute(local)
    }

    /// Every field but the second.
    fn matches_minute(&self, local: &NaiveDateTime) -> bool {
        self.minute.has(local.minute())
            && self.hour.has(local.hour())
            && self.month.has(local.month())
            && self.day_matches(local)
    }

    /// Whether any date can match (February has 29 days in leap years).
    fn can_fire(&self) -> bool {
        if !self.dow.wildcard {
            // Either day field matches (or day of month starts with `*`
            // and has the 1st): every month has a matching day.
            return true;
        }
        let month_days = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
        (1..=12u32).any(|month| {
            self.month.has(month) && (1..=month_days[month as usize - 1]).any(|d| self.dom.has(d))
        })
    }
}

fn expression() -> impl Strategy<Value = Expr> {
    let fields = (
        prop::option::of(field(0, 59)),
        field(0, 59),
        field(0, 23),
        field(1, 31),
        field(1, 12),
        day_of_week(),
    );
    let generated = fields.prop_map(|(second, minute, hour, dom, month, dow)| {
        let five = format!(
            "{} {} {} {} {}",
            minute.text, hour.text, dom.text, month.text, dow.text
        );
        let (text, second) = match second {
            Some(second) => (format!("{} {five}", second.text), second),
            None => (five, fixed_field("0", 0)),
        };
        Expr {
            text,
            second,
            minute,
            hour,
            dom,
            month,
            dow,
        }
    });
    prop_oneof![6 => generated, 3 => fixed_time_expression(), 1 => macro_expression()]
}

/// Fixed-time expressions, mostly daily at the hours where DST moves the
/// clock, so that they cross gaps and repeated hours: each of second,
/// minute and hour one value, or a list or range of two.
fn fixed_time_expression() -> impl Strategy<Value = Expr> {
    let number = |values: Vec<u32>, lo: u32, hi: u32| {
        let one = prop_oneof![3 => prop::sample::select(values), 1 => lo..=hi];
        let two = (one.clone(), one.clone(), any::<bool>()).prop_map(|(a, b, range)| {
            let (a, b) = (a.min(b), a.max(b));
            let (text, values) = if range {
                (format!("{a}-{b}"), bits(a..=b))
            } else {
                (format!("{a},{b}"), bits([a, b]))
            };
            Field {
                text,
                values,
                wildcard: false,
                stepped: false,
            }
        });
        prop_oneof![
            3 => one.prop_map(|n| fixed_field(&n.to_string(), n)),
            1 => two,
        ]
    };
    let day = |field: BoxedStrategy<Field>, lo: u32, hi: u32| prop_oneof![4 => Just(star_field(lo, hi)), 1 => field];
    (
        prop::option::of(number(vec![0, 30, 59], 0, 59)),
        number(vec![0, 15, 30, 45, 59], 0, 59),
        number(vec![0, 1, 2, 3, 23], 0, 23),
        day(field(1, 31).boxed(), 1, 31),
        day(field(1, 12).boxed(), 1, 12),
        day(day_of_week().boxed(), 0, 7),
    )
        .prop_map(|(second, minute, hour, dom, month, dow)| {
            let five = format!(
                "{} {} {} {} {}",
                minute.text, hour.text, dom.text, month.text, dow.text
            );
            let (text, second) = match second {
                Some(second) => (format!("{} {five}", second.text), second),
                None => (five, fixed_field("0", 0)),
            };
            Expr {
                text,
                second,
                minute,
                hour,
                dom,
                month,
                dow,
            }
        })
}

fn macro_expression() -> impl Strategy<Value = Expr> {
    let zero = |_: ()| fixed_field("0", 0);
    prop::sample::select(vec![
        "@hourly",
        "@daily",
        "@midnight",
        "@weekly",
        "@monthly",
        "@yearly",
        "@annually",
    ])
    .prop_map(move |name| {
        let hour = match name {
            "@hourly" => star_field(0, 23),
            _ => zero(()),
        };
        let dom = match name {
            "@monthly" | "@yearly" | "@annually" => fixed_field("1", 1),
            _ => star_field(1, 31),
        };
        let month = match name {
            "@yearly" | "@annually" => fixed_field("1", 1),
            _ => star_field(1, 12),
        };
        let dow = match name {
            "@weekly" => fixed_field("0", 0),
            _ => star_field(0, 7),
        };
        Expr {
            text: name.to_string(),
            second: zero(()),
            minute: zero(()),
            hour,
            dom,
            month,
            dow,
        }
    })
}

fn offset_secs(tz: Tz, at: DateTime<Utc>) -> i32 {
    tz.offset_from_utc_datetime(&at.naive_utc())
        .fix()
        .local_minus_utc()
}

fn local(tz: Tz, at: DateTime<Utc>) -> NaiveDateTime {
    at.with_timezone(&tz).naive_local()
}

/// The UTC-offset changes of `tz` in `year`, as the first instant of each
/// new offset.
fn transitions(tz: Tz, year: i32) -> Vec<DateTime<Utc>> {
    let start = Utc.with_ymd_and_hms(year, 1, 1, 0, 0, 0).unwrap();
    let step = Duration::hours(6);
    let mut found = Vec::new();
    let mut at = start;
    while at.year() == year {
        let next = at + step;
        if offset_secs(tz, at) != offset_secs(tz, next) {
            // Bisect to the whole second.
            let (mut before, mut after) = (at.timestamp(), next.timestamp());
            let offset_at = |secs: i64| offset_secs(tz, Utc.timestamp_opt(secs, 0).unwrap());
            let old_offset = offset_at(before);
            while after - before > 1 {
                let mid = before + (after - before) / 2;
                if offset_at(mid) == old_offset {
                    before = mid;
                } else {
                    after = mid;
                }
            }
            found.push(Utc.timestamp_opt(after, 0).unwrap());
        }
        at = next;
    }
    found
}

/// A start instant: uniform in 2000–2040, or shortly before a transition.
fn start_instant(tz: Tz, year: i32, pick: usize, seconds: i64, near: u8) -> DateTime<Utc> {
    let uniform = Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).unwrap()
        + Duration::seconds(seconds % (40 * 365 * 86_400));
    let list = transitions(tz, year);
    if near == 0 || list.is_empty() {
        return uniform;
    }
    let before = match near {
        1 => seconds % 120,
        2 => seconds % 7_200,
        _ => seconds % 172_800,
    };
    list[pick % list.len()] - Duration::seconds(before + 1)
}

/// The wall times skipped just before `at`, if `at` ends a spring-forward gap.
fn gap_before(tz: Tz, at: DateTime<Utc>) -> Option<(NaiveDateTime, NaiveDateTime)> {
    let before = local(tz, at - Duration::seconds(1));
    let after = local(tz, at);
    (after - before > Duration::seconds(1)).then(|| (before + Duration::seconds(1), after))
}

/// Whether `at` is the later of two instants with the same wall time.
fn is_second_pass(tz: Tz, at: DateTime<Utc>) -> bool {
    match tz.from_local_datetime(&local(tz, at)) {
        chrono::LocalResult::Ambiguous(first, _) => first.with_timezone(&Utc) < at,
        _ => false,
    }
}

fn check_occurrence(expr: &Expr, tz: Tz, at: DateTime<Utc>) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        at.timestamp_subsec_nanos(),
        0,
        "sub-second occurrence {}",
        at
    );
    prop_assert_eq!(
        offset_secs(tz, at) % 60,
        0,
        "model assumes whole-minute offsets"
    );
    let wall = local(tz, at);
    if expr.matches(&wall) {
        if expr.is_fixed_time() {
            prop_assert!(
                !is_second_pass(tz, at),
                "fixed-time pattern fired in the second pass of a repeated hour at {} ({})",
                at,
                wall
            );
        }
        return Ok(());
    }
    let gap = gap_before(tz, at);
    let replaced = gap.and_then(|(from, to)| {
        let mut wall = from;
        while wall < to {
            if expr.matches(&wall) {
                return Some(wall);
            }
            wall += Duration::seconds(1);
        }
        None
    });
    prop_assert!(
        expr.is_fixed_time() && replaced.is_some(),
        "{} (local {}) does not match; gap before it: {:?}; fixed-time: {}",
        at,
        wall,
        gap,
        expr.is_fixed_time()
    );
    Ok(())
}

/// No instant strictly between `a` and `b` matches (unless the DST rules
/// say it is skipped); checked minute by minute when `b - a` <= 2 h.
fn check_nothing_skipped(
    expr: &Expr,
    tz: Tz,
    a: DateTime<Utc>,
    b: DateTime<Utc>,
) -> Result<(), TestCaseError> {
    if b - a > Duration::hours(2) {
        return Ok(());
    }
    let mut minute = a - Duration::seconds(i64::from(a.second()));
    while minute < b {
        // Offsets are whole minutes, so the UTC second is the local one.
        if expr.matches_minute(&local(tz, minute)) {
            for second in (0..60).filter(|s| expr.second.has(*s)) {
                let x = minute + Duration::seconds(i64::from(second));
                if a < x && x < b {
                    prop_assert!(
                        expr.is_fixed_time() && is_second_pass(tz, x),
                        "{} (local {}) matches but was skipped between {} and {}",
                        x,
                        local(tz, x),
                        a,
                        b
                    );
                }
            }
        }
        minute += Duration::minutes(1);
    }
    Ok(())
}

/// A fixed-time pattern fires once on every matching day: no matching
/// date lies strictly between the local dates of two consecutive
/// occurrences (its one wall time is always there, or replaced after a gap).
fn check_no_day_skipped(
    expr: &Expr,
    tz: Tz,
    a: DateTime<Utc>,
    b: DateTime<Utc>,
) -> Result<(), TestCaseError> {
    let (first, last) = (local(tz, a).date(), local(tz, b).date());
    let mut date = first + Duration::days(1);
    while date < last {
        let noon = date.and_hms_opt(12, 0, 0).expect("noon");
        prop_assert!(
            !(expr.month.has(noon.month()) && expr.day_matches(&noon)),
            "{} matches but no occurrence between {} and {}",
            date,
            a,
            b
        );
        date += Duration::days(1);
    }
    Ok(())
}

/// No date after `at`'s up to the end of 2199 matches `expr`'s days.
fn check_no_day_left(expr: &Expr, tz: Tz, at: DateTime<Utc>) -> Result<(), TestCaseError> {
    let mut date = local(tz, at).date() + Duration::days(1);
    let last = chrono::NaiveDate::from_ymd_opt(2199, 12, 31).expect("date");
    while date <= last {
        let noon = date.and_hms_opt(12, 0, 0).expect("noon");
        prop_assert!(
            !(expr.month.has(noon.month()) && expr.day_matches(&noon)),
            "`{}` stopped after {} but {} matches",
            expr.text,
            at,
            date
        );
        date += Duration::days(1);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn occurrences_increase_and_match_the_expression_in_its_zone(
        expr in expression(),
        zone in prop::sample::select(ZONES),
        year in 2000..2040i32,
        pick in 0..4usize,
        seconds in 0..i64::MAX,
        near in 0..4u8,
    ) {
        let tz: Tz = zone.parse().expect("zone");
        let parsed = Schedule::parse(&expr.text, tz);
        if !expr.can_fire() {
            prop_assert!(
                matches!(parsed, Err(ScheduleError::NeverFires { .. })),
                "`{}` cannot fire but parse gave {:?}", expr.text, parsed
            );
            return Ok(());
        }
        let schedule = match parsed {
            Ok(schedule) => schedule,
            Err(err) => return Err(TestCaseError::fail(format!("`{}` refused: {err}", expr.text))),
        };
        let mut at = start_instant(tz, year, pick, seconds, near);
        let mut wall_before: Option<NaiveDateTime> = None;
        for _ in 0..STEPS {
            let Some(next) = schedule.next_after(at) else {
                // Occurrences are computed up to 2199: a line that fires
                // every few years (`0 0 1 1 */4`) may stop before STEPS.
                check_no_day_left(&expr, tz, at)?;
                return Ok(());
            };
            prop_assert!(next > at, "{} not after {}", next, at);
            check_occurrence(&expr, tz, next)?;
            check_nothing_skipped(&expr, tz, at, next)?;
            if expr.is_fixed_time() {
                let wall = local(tz, next);
                if let Some(before) = wall_before {
                    prop_assert!(wall > before, "wall time {} after {} ({})", wall, before, next);
                    check_no_day_skipped(&expr, tz, at, next)?;
                }
                wall_before = Some(wall);
            }
            at = next;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: DST_CASES, ..ProptestConfig::default() })]

    /// A fixed daily time placed near a real transition (inside a gap, in
    /// a repeated hour, or just around them) fires exactly where docs/configuration.md
    /// says: at its instant if the wall time exists once, at the earlier
    /// instant if it exists twice, at the end of the gap if it does not
    /// exist; then daily as before.
    #[test]
    fn fixed_times_near_transitions_fire_where_the_spec_says(
        zone in prop::sample::select(DST_ZONES),
        year in 2000..2040i32,
        pick in 0..4usize,
        shift in -5_400..5_400i64,
        lead in 1..72_000i64,
        six_fields in any::<bool>(),
    ) {
        let tz: Tz = zone.parse().expect("zone");
        let list = transitions(tz, year);
        prop_assume!(!list.is_empty());
        let transition = list[pick % list.len()];
        let mut wall = local(tz, transition - Duration::seconds(1)) + Duration::seconds(shift);
        if !six_fields {
            wall -= Duration::seconds(i64::from(wall.second()));
        }
        let expected = match tz.from_local_datetime(&wall) {
            chrono::LocalResult::Single(at) => at.with_timezone(&Utc),
            chrono::LocalResult::Ambiguous(first, _) => first.with_timezone(&Utc),
            chrono::LocalResult::None => transition,
        };
        let text = if six_fields {
            format!("{} {} {} * * *", wall.second(), wall.minute(), wall.hour())
        } else {
            format!("{} {} * * *", wall.minute(), wall.hour())
        };
        let expr = Expr {
            text: text.clone(),
            second: fixed_field("", wall.second()),
            minute: fixed_field("", wall.minute()),
            hour: fixed_field("", wall.hour()),
            dom: star_field(1, 31),
            month: star_field(1, 12),
            dow: star_field(0, 7),
        };
        let schedule = Schedule::parse(&text, tz).expect("a daily fixed time parses");
        let start = expected - Duration::seconds(lead);
        let first = schedule.next_after(start);
        prop_assert_eq!(
            first, Some(expected),
            "`{}` in {} from {} (transition {}, wall {})", text, zone, start, transition, wall
        );
        let mut at = expected;
        check_occurrence(&expr, tz, at)?;
        for _ in 0..5 {
            let next = schedule.next_after(at).expect("fires daily");
            prop_assert!(next > at);
            check_occurrence(&expr, tz, next)?;
            check_no_day_skipped(&expr, tz, at, next)?;
            prop_assert!(local(tz, next) > local(tz, at));
            at = next;
        }
    }
}
