//! Unit tests for [`super::Schedule`]: exact UTC instants on real tzdata
//! transition dates (2026, 2027), the accepted forms, and the refused ones.

use chrono::{DateTime, NaiveDate, SubsecRound as _, TimeZone, Utc};
use chrono_tz::Tz;

use std::sync::Arc;

use super::{
    Form, PARSED, RECENT, RECENT_MAX, Schedule, ScheduleError, lock, parse_in_parallel, parsed,
};
use std::sync::Weak;

fn utc_at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("test instant is RFC 3339")
        .with_timezone(&Utc)
}

fn zone(name: &str) -> Tz {
    name.parse().expect("test zone exists")
}

/// The first `count` occurrences strictly after `after`, as RFC 3339 strings.
fn next(expr: &str, tz: &str, after: &str, count: usize) -> Vec<String> {
    let schedule = Schedule::parse(expr, zone(tz)).expect("test expression parses");
    let mut at = utc_at(after);
    let mut out = Vec::new();
    for _ in 0..count {
        at = schedule.next_after(at).expect("schedule fires");
        out.push(at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    }
    out
}

/// Checks the tzdata transition the DST tests below are built on: `gap` is
/// a local time that does not exist, `repeated` one that exists twice.
fn assert_transitions(
    year: i32,
    tz: &str,
    gap: (u32, u32, u32, u32),
    repeated: (u32, u32, u32, u32),
) {
    let local = |(m, d, h, min): (u32, u32, u32, u32)| {
        NaiveDate::from_ymd_opt(year, m, d)
            .and_then(|date| date.and_hms_opt(h, min, 0))
            .expect("valid civil time")
    };
    let tz = zone(tz);
    assert!(tz.from_local_datetime(&local(gap)).earliest().is_none());
    assert!(matches!(
        tz.from_local_datetime(&local(repeated)),
        chrono::LocalResult::Ambiguous(_, _)
    ));
}

#[test]
fn tzdata_has_the_2026_and_2027_transitions_these_tests_use() {
    assert_transitions(2026, "America/New_York", (3, 8, 2, 30), (11, 1, 1, 30));
    assert_transitions(2026, "Europe/Berlin", (3, 29, 2, 30), (10, 25, 2, 30));
    assert_transitions(2026, "Australia/Lord_Howe", (10, 4, 2, 15), (4, 5, 1, 45));
    assert_transitions(2027, "America/New_York", (3, 14, 2, 30), (11, 7, 1, 30));
    assert_transitions(2027, "Europe/Berlin", (3, 28, 2, 30), (10, 31, 2, 30));
}

#[test]
fn new_york_spring_forward_runs_fixed_times_after_the_gap() {
    let ny = "America/New_York";
    // 02:00 EST jumps to 03:00 EDT (07:00Z).
    let at_0230 = next("30 2 * * *", ny, "2026-03-08T00:00:00Z", 2);
    assert_eq!(at_0230, ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]);
    assert_eq!(
        next("0 2 * * *", ny, "2026-03-08T00:00:00Z", 1),
        ["2026-03-08T07:00:00Z"]
    );
    assert_eq!(
        next("30 1 * * *", ny, "2026-03-08T00:00:00Z", 1),
        ["2026-03-08T06:30:00Z"]
    );
    assert_eq!(
        next("0 30 2 * * *", ny, "2026-03-08T00:00:00Z", 1),
        ["2026-03-08T07:00:00Z"]
    );
}

#[test]
fn new_york_spring_forward_invents_nothing_for_stepped_patterns() {
    let ny = "America/New_York";
    let quarter = next("*/15 * * * *", ny, "2026-03-08T06:30:00Z", 3);
    assert_eq!(
        quarter,
        [
            "2026-03-08T06:45:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-08T07:15:00Z"
        ]
    );
    let hourly = next("0 * * * *", ny, "2026-03-08T05:30:00Z", 3);
    assert_eq!(
        hourly,
        [
            "2026-03-08T06:00:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-08T08:00:00Z"
        ]
    );
    let seconds = next("*/30 * * * * *", ny, "2026-03-08T06:59:00Z", 3);
    assert_eq!(
        seconds,
        [
            "2026-03-08T06:59:30Z",
            "2026-03-08T07:00:00Z",
            "2026-03-08T07:00:30Z"
        ]
    );
}

#[test]
fn new_york_fall_back_runs_fixed_times_once() {
    let ny = "America/New_York";
    // 02:00 EDT falls back to 01:00 EST (06:00Z); 01:xx happens twice.
    let at_0130 = next("30 1 * * *", ny, "2026-11-01T00:00:00Z", 2);
    assert_eq!(at_0130, ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]);
    // Asked from inside the second pass, the first one is already behind.
    assert_eq!(
        next("30 1 * * *", ny, "2026-11-01T06:10:00Z", 1),
        ["2026-11-02T06:30:00Z"]
    );
    assert_eq!(
        next("0 2 * * *", ny, "2026-11-01T00:00:00Z", 1),
        ["2026-11-01T07:00:00Z"]
    );
    assert_eq!(
        next("30 2 * * *", ny, "2026-11-01T00:00:00Z", 1),
        ["2026-11-01T07:30:00Z"]
    );
}

#[test]
fn new_york_fall_back_runs_stepped_patterns_in_both_passes() {
    let ny = "America/New_York";
    let quarter = next("*/15 * * * *", ny, "2026-11-01T05:30:00Z", 6);
    let expected = [
        "2026-11-01T05:45:00Z",
        "2026-11-01T06:00:00Z",
        "2026-11-01T06:15:00Z",
        "2026-11-01T06:30:00Z",
        "2026-11-01T06:45:00Z",
        "2026-11-01T07:00:00Z",
    ];
    assert_eq!(quarter, expected);
    let hourly = next("@hourly", ny, "2026-11-01T04:30:00Z", 3);
    assert_eq!(
        hourly,
        [
            "2026-11-01T05:00:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T07:00:00Z"
        ]
    );
    let seconds = next("*/30 * * * * *", ny, "2026-11-01T05:59:00Z", 3);
    assert_eq!(
        seconds,
        [
            "2026-11-01T05:59:30Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T06:00:30Z"
        ]
    );
}

#[test]
fn berlin_spring_forward() {
    let berlin = "Europe/Berlin";
    // 02:00 CET jumps to 03:00 CEST (01:00Z).
    assert_eq!(
        next("30 2 * * *", berlin, "2026-03-28T12:00:00Z", 2),
        ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]
    );
    assert_eq!(
        next("0 2 * * *", berlin, "2026-03-28T12:00:00Z", 1),
        ["2026-03-29T01:00:00Z"]
    );
    assert_eq!(
        next("30 1 * * *", berlin, "2026-03-28T12:00:00Z", 1),
        ["2026-03-29T00:30:00Z"]
    );
    let quarter = next("*/15 * * * *", berlin, "2026-03-29T00:30:00Z", 3);
    assert_eq!(
        quarter,
        [
            "2026-03-29T00:45:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-29T01:15:00Z"
        ]
    );
}

#[test]
fn berlin_fall_back() {
    let berlin = "Europe/Berlin";
    // 03:00 CEST falls back to 02:00 CET (01:00Z); 02:xx happens twice.
    assert_eq!(
        next("30 2 * * *", berlin, "2026-10-24T12:00:00Z", 2),
        ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
    );
    assert_eq!(
        next("0 2 * * *", berlin, "2026-10-24T12:00:00Z", 1),
        ["2026-10-25T00:00:00Z"]
    );
    let quarter = next("*/15 * * * *", berlin, "2026-10-25T00:30:00Z", 4);
    let expected = [
        "2026-10-25T00:45:00Z",
        "2026-10-25T01:00:00Z",
        "2026-10-25T01:15:00Z",
        "2026-10-25T01:30:00Z",
    ];
    assert_eq!(quarter, expected);
}

#[test]
fn lord_howe_half_hour_spring_forward() {
    let lh = "Australia/Lord_Howe";
    // 02:00 LHST (+10:30) jumps to 02:30 LHDT (+11:00) = 15:30Z the day before.
    for expr in ["0 2 * * *", "15 2 * * *", "30 2 * * *"] {
        assert_eq!(
            next(expr, lh, "2026-10-03T12:00:00Z", 1),
            ["2026-10-03T15:30:00Z"],
            "{expr}"
        );
    }
    let quarter = next("*/15 * * * *", lh, "2026-10-03T15:00:00Z", 3);
    assert_eq!(
        quarter,
        [
            "2026-10-03T15:15:00Z",
            "2026-10-03T15:30:00Z",
            "2026-10-03T15:45:00Z"
        ]
    );
}

#[test]
fn lord_howe_half_hour_fall_back() {
    let lh = "Australia/Lord_Howe";
    // 02:00 LHDT (+11:00) falls back to 01:30 LHST (+10:30) = 15:00Z.
    let at_0145 = next("45 1 * * *", lh, "2026-04-04T12:00:00Z", 2);
    assert_eq!(at_0145, ["2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"]);
    assert_eq!(
        next("0 2 * * *", lh, "2026-04-04T12:00:00Z", 1),
        ["2026-04-04T15:30:00Z"]
    );
    let quarter = next("*/15 * * * *", lh, "2026-04-04T14:00:00Z", 6);
    let expected = [
        "2026-04-04T14:15:00Z",
        "2026-04-04T14:30:00Z",
        "2026-04-04T14:45:00Z",
        "2026-04-04T15:00:00Z",
        "2026-04-04T15:15:00Z",
        "2026-04-04T15:30:00Z",
    ];
    assert_eq!(quarter, expected);
}

/// Every occurrence strictly between `from` and `until`, as RFC 3339
/// strings, found forward with `next_after`. Walking back from `until` with
/// `previous_before`, and `occurrences_after`, must find the same ones.
fn between(expr: &str, tz: &str, from: &str, until: &str) -> Vec<String> {
    let schedule = Schedule::parse(expr, zone(tz)).expect("test expression parses");
    let (from, until) = (utc_at(from), utc_at(until));
    let mut forward = Vec::new();
    let mut at = from;
    while let Some(next) = schedule.next_after(at).filter(|next| *next < until) {
        assert!(next > at, "{expr} in {tz}: {next} after {at}");
        forward.push(next);
        at = next;
    }
    let mut backward = Vec::new();
    let mut at = until;
    while let Some(previous) = schedule.previous_before(at).filter(|at| *at > from) {
        assert!(previous < at, "{expr} in {tz}: {previous} before {at}");
        backward.push(previous);
        at = previous;
    }
    backward.reverse();
    assert_eq!(forward, backward, "{expr} in {tz}: forward and backward");
    let listed = schedule.occurrences_after(from, forward.len());
    assert_eq!(forward, listed, "{expr} in {tz}: occurrences_after");
    forward
        .iter()
        .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .collect()
}

/// The fixed-time rule holds for lists and ranges as for one value: a
/// list with a wall time in the gap runs once at its end, and is not lost.
#[test]
fn berlin_2027_spring_forward_runs_lists_and_ranges_once_after_the_gap() {
    let berlin = "Europe/Berlin";
    // 28 March 2027, 02:00 CET jumps to 03:00 CEST (01:00Z). From 27 March
    // 00:00 CET to 30 March 00:00 CEST.
    let (from, until) = ("2027-03-26T23:00:00Z", "2027-03-29T22:00:00Z");
    assert_eq!(
        between("0 2,14 * * *", berlin, from, until),
        [
            "2027-03-27T01:00:00Z",
            "2027-03-27T13:00:00Z",
            "2027-03-28T01:00:00Z",
            "2027-03-28T12:00:00Z",
            "2027-03-29T00:00:00Z",
            "2027-03-29T12:00:00Z",
        ]
    );
    // 02:00 and 02:30 both fall in the gap: one run at its end.
    let half_hours = [
        "2027-03-27T01:00:00Z",
        "2027-03-27T01:30:00Z",
        "2027-03-28T01:00:00Z",
        "2027-03-29T00:00:00Z",
        "2027-03-29T00:30:00Z",
    ];
    assert_eq!(between("0,30 2 * * *", berlin, from, until), half_hours);
    assert_eq!(between("0 0,30 2 * * *", berlin, from, until), half_hours);
    // 02:30 runs at 03:00 CEST, then 03:30 CEST as usual.
    assert_eq!(
        between("30 1-3 * * *", berlin, from, until),
        [
            "2027-03-27T00:30:00Z",
            "2027-03-27T01:30:00Z",
            "2027-03-27T02:30:00Z",
            "2027-03-28T00:30:00Z",
            "2027-03-28T01:00:00Z",
            "2027-03-28T01:30:00Z",
            "2027-03-28T23:30:00Z",
            "2027-03-29T00:30:00Z",
            "2027-03-29T01:30:00Z",
        ]
    );
    // 03:00 itself is scheduled too: still one run at 03:00.
    assert_eq!(
        between("0 2,3 28 3 *", berlin, from, until),
        ["2027-03-28T01:00:00Z"]
    );
    // One value: croner's own fixed-time reading, unchanged.
    assert_eq!(
        between("0 2 * * *", berlin, from, until),
        [
            "2027-03-27T01:00:00Z",
            "2027-03-28T01:00:00Z",
            "2027-03-29T00:00:00Z"
        ]
    );
    // A step in the minute field: real elapsed time, nothing in the gap.
    assert_eq!(
        between("*/30 2 * * *", berlin, from, until),
        [
            "2027-03-27T01:00:00Z",
            "2027-03-27T01:30:00Z",
            "2027-03-29T00:00:00Z",
            "2027-03-29T00:30:00Z",
        ]
    );
    // A step in the hour field: 02:00 is lost. Three days hold 36 even
    // hours; the open window leaves out the first midnight and the gap one.
    assert_eq!(
        between(
            "0 */2 * * *",
            berlin,
            "2027-03-27T20:00:00Z",
            "2027-03-28T05:00:00Z"
        ),
        [
            "2027-03-27T21:00:00Z",
            "2027-03-27T23:00:00Z",
            "2027-03-28T02:00:00Z",
            "2027-03-28T04:00:00Z",
        ]
    );
    assert_eq!(between("0 */2 * * *", berlin, from, until).len(), 34);
}

#[test]
fn berlin_2027_fall_back_runs_lists_and_ranges_in_the_first_pass_only() {
    let berlin = "Europe/Berlin";
    // 31 October 2027, 03:00 CEST falls back to 02:00 CET (01:00Z): 02:xx
    // is 00:xxZ, then 01:xxZ. From 30 October 00:00 CEST to 2 November
    // 00:00 CET.
    let (from, until) = ("2027-10-29T22:00:00Z", "2027-11-01T23:00:00Z");
    assert_eq!(
        between("0 2,14 * * *", berlin, from, until),
        [
            "2027-10-30T00:00:00Z",
            "2027-10-30T12:00:00Z",
            "2027-10-31T00:00:00Z",
            "2027-10-31T13:00:00Z",
            "2027-11-01T01:00:00Z",
            "2027-11-01T13:00:00Z",
        ]
    );
    let half_hours = [
        "2027-10-30T00:00:00Z",
        "2027-10-30T00:30:00Z",
        "2027-10-31T00:00:00Z",
        "2027-10-31T00:30:00Z",
        "2027-11-01T01:00:00Z",
        "2027-11-01T01:30:00Z",
    ];
    assert_eq!(between("0,30 2 * * *", berlin, from, until), half_hours);
    assert_eq!(between("0 0,30 2 * * *", berlin, from, until), half_hours);
    assert_eq!(
        between("30 1-3 * * *", berlin, from, until),
        [
            "2027-10-29T23:30:00Z",
            "2027-10-30T00:30:00Z",
            "2027-10-30T01:30:00Z",
            "2027-10-30T23:30:00Z",
            "2027-10-31T00:30:00Z",
            "2027-10-31T02:30:00Z",
            "2027-11-01T00:30:00Z",
            "2027-11-01T01:30:00Z",
            "2027-11-01T02:30:00Z",
        ]
    );
    assert_eq!(
        between("0 2 * * *", berlin, from, until),
        [
            "2027-10-30T00:00:00Z",
            "2027-10-31T00:00:00Z",
            "2027-11-01T01:00:00Z"
        ]
    );
    // A step: both passes.
    assert_eq!(
        between("*/30 2 * * *", berlin, from, until),
        [
            "2027-10-30T00:00:00Z",
            "2027-10-30T00:30:00Z",
            "2027-10-31T00:00:00Z",
            "2027-10-31T00:30:00Z",
            "2027-10-31T01:00:00Z",
            "2027-10-31T01:30:00Z",
            "2027-11-01T01:00:00Z",
            "2027-11-01T01:30:00Z",
        ]
    );
    assert_eq!(
        between(
            "0 */2 * * *",
            berlin,
            "2027-10-30T19:00:00Z",
            "2027-10-31T05:00:00Z"
        ),
        [
            "2027-10-30T20:00:00Z",
            "2027-10-30T22:00:00Z",
            "2027-10-31T00:00:00Z",
            "2027-10-31T01:00:00Z",
            "2027-10-31T03:00:00Z",
        ]
    );
    // 36 even hours, one twice, the first midnight not in the window.
    assert_eq!(between("0 */2 * * *", berlin, from, until).len(), 36);
    // Asked from inside the second pass (02:10 CET), the 02:xx runs are
    // behind: the first pass had them.
    assert_eq!(
        next("0,30 2 * * *", berlin, "2027-10-31T01:10:00Z", 1),
        ["2027-11-01T01:00:00Z"]
    );
    let schedule = Schedule::parse("0,30 2 * * *", zone(berlin)).expect("parses");
    assert_eq!(
        schedule.previous_before(utc_at("2027-10-31T01:10:00Z")),
        Some(utc_at("2027-10-31T00:30:00Z"))
    );
}

#[test]
fn new_york_2027_spring_forward_runs_lists_and_ranges_once_after_the_gap() {
    let ny = "America/New_York";
    // 14 March 2027, 02:00 EST jumps to 03:00 EDT (07:00Z). From 13 March
    // 00:00 EST to 16 March 00:00 EDT.
    let (from, until) = ("2027-03-13T05:00:00Z", "2027-03-16T04:00:00Z");
    assert_eq!(
        between("0 2,14 * * *", ny, from, until),
        [
            "2027-03-13T07:00:00Z",
            "2027-03-13T19:00:00Z",
            "2027-03-14T07:00:00Z",
            "2027-03-14T18:00:00Z",
            "2027-03-15T06:00:00Z",
            "2027-03-15T18:00:00Z",
        ]
    );
    let half_hours = [
        "2027-03-13T07:00:00Z",
        "2027-03-13T07:30:00Z",
        "2027-03-14T07:00:00Z",
        "2027-03-15T06:00:00Z",
        "2027-03-15T06:30:00Z",
    ];
    assert_eq!(between("0,30 2 * * *", ny, from, until), half_hours);
    assert_eq!(between("0 0,30 2 * * *", ny, from, until), half_hours);
    assert_eq!(
        between("30 1-3 * * *", ny, from, until),
        [
            "2027-03-13T06:30:00Z",
            "2027-03-13T07:30:00Z",
            "2027-03-13T08:30:00Z",
            "2027-03-14T06:30:00Z",
            "2027-03-14T07:00:00Z",
            "2027-03-14T07:30:00Z",
            "2027-03-15T05:30:00Z",
            "2027-03-15T06:30:00Z",
            "2027-03-15T07:30:00Z",
        ]
    );
    assert_eq!(
        between("0 2 * * *", ny, from, until),
        [
            "2027-03-13T07:00:00Z",
            "2027-03-14T07:00:00Z",
            "2027-03-15T06:00:00Z"
        ]
    );
    assert_eq!(
        between("*/30 2 * * *", ny, from, until),
        [
            "2027-03-13T07:00:00Z",
            "2027-03-13T07:30:00Z",
            "2027-03-15T06:00:00Z",
            "2027-03-15T06:30:00Z",
        ]
    );
    assert_eq!(
        between(
            "0 */2 * * *",
            ny,
            "2027-03-14T02:00:00Z",
            "2027-03-14T11:00:00Z"
        ),
        [
            "2027-03-14T03:00:00Z",
            "2027-03-14T05:00:00Z",
            "2027-03-14T08:00:00Z",
            "2027-03-14T10:00:00Z",
        ]
    );
    assert_eq!(between("0 */2 * * *", ny, from, until).len(), 34);
}

#[test]
fn new_york_2027_fall_back_runs_lists_and_ranges_in_the_first_pass_only() {
    let ny = "America/New_York";
    // 7 November 2027, 02:00 EDT falls back to 01:00 EST (06:00Z): 01:xx
    // is 05:xxZ, then 06:xxZ; 02:xx happens once. From 6 November 00:00
    // EDT to 9 November 00:00 EST.
    let (from, until) = ("2027-11-06T04:00:00Z", "2027-11-09T05:00:00Z");
    assert_eq!(
        between("0 2,14 * * *", ny, from, until),
        [
            "2027-11-06T06:00:00Z",
            "2027-11-06T18:00:00Z",
            "2027-11-07T07:00:00Z",
            "2027-11-07T19:00:00Z",
            "2027-11-08T07:00:00Z",
            "2027-11-08T19:00:00Z",
        ]
    );
    assert_eq!(
        between("0 1,13 * * *", ny, from, until),
        [
            "2027-11-06T05:00:00Z",
            "2027-11-06T17:00:00Z",
            "2027-11-07T05:00:00Z",
            "2027-11-07T18:00:00Z",
            "2027-11-08T06:00:00Z",
            "2027-11-08T18:00:00Z",
        ]
    );
    assert_eq!(
        between("0,30 2 * * *", ny, from, until),
        [
            "2027-11-06T06:00:00Z",
            "2027-11-06T06:30:00Z",
            "2027-11-07T07:00:00Z",
            "2027-11-07T07:30:00Z",
            "2027-11-08T07:00:00Z",
            "2027-11-08T07:30:00Z",
        ]
    );
    let half_hours = [
        "2027-11-06T05:00:00Z",
        "2027-11-06T05:30:00Z",
        "2027-11-07T05:00:00Z",
        "2027-11-07T05:30:00Z",
        "2027-11-08T06:00:00Z",
        "2027-11-08T06:30:00Z",
    ];
    assert_eq!(between("0,30 1 * * *", ny, from, until), half_hours);
    assert_eq!(between("0 0,30 1 * * *", ny, from, until), half_hours);
    assert_eq!(
        between("30 1-3 * * *", ny, from, until),
        [
            "2027-11-06T05:30:00Z",
            "2027-11-06T06:30:00Z",
            "2027-11-06T07:30:00Z",
            "2027-11-07T05:30:00Z",
            "2027-11-07T07:30:00Z",
            "2027-11-07T08:30:00Z",
            "2027-11-08T06:30:00Z",
            "2027-11-08T07:30:00Z",
            "2027-11-08T08:30:00Z",
        ]
    );
    assert_eq!(
        between("0 2 * * *", ny, from, until),
        [
            "2027-11-06T06:00:00Z",
            "2027-11-07T07:00:00Z",
            "2027-11-08T07:00:00Z"
        ]
    );
    // Steps: both passes of 01:xx; 02:xx is not repeated.
    assert_eq!(
        between("*/30 1 * * *", ny, from, until),
        [
            "2027-11-06T05:00:00Z",
            "2027-11-06T05:30:00Z",
            "2027-11-07T05:00:00Z",
            "2027-11-07T05:30:00Z",
            "2027-11-07T06:00:00Z",
            "2027-11-07T06:30:00Z",
            "2027-11-08T06:00:00Z",
            "2027-11-08T06:30:00Z",
        ]
    );
    assert_eq!(
        between("*/30 2 * * *", ny, from, until),
        [
            "2027-11-06T06:00:00Z",
            "2027-11-06T06:30:00Z",
            "2027-11-07T07:00:00Z",
            "2027-11-07T07:30:00Z",
            "2027-11-08T07:00:00Z",
            "2027-11-08T07:30:00Z",
        ]
    );
    assert_eq!(
        between(
            "0 */2 * * *",
            ny,
            "2027-11-07T01:00:00Z",
            "2027-11-07T11:00:00Z"
        ),
        [
            "2027-11-07T02:00:00Z",
            "2027-11-07T04:00:00Z",
            "2027-11-07T07:00:00Z",
            "2027-11-07T09:00:00Z",
        ]
    );
}

/// Which patterns we place ourselves: fixed-time by the rule (no `*`, no
/// step in second, minute or hour) but read by croner as interval ones.
#[test]
fn lists_and_ranges_are_fixed_time_and_placed_by_us() {
    let placed_by_us = |expr: &str| {
        let pattern = super::expand_macro(expr).expect("valid");
        super::parse_form(pattern).ok().expect("parses").fixed_by_us
    };
    for expr in [
        "0 2,14 * * *",
        "0,30 2 * * *",
        "30 1-3 * * *",
        "0 0,30 2 * * *",
        "0-4 2 * * *",
        "1-3,5 1,7-9 1-2,14 * * 1-5",
    ] {
        assert!(placed_by_us(expr), "{expr}");
    }
    // croner's own fixed-time patterns (one value in each field, however
    // written), and interval ones (a wildcard or a step).
    for expr in [
        "0 2 * * *",
        "@daily",
        "@weekly",
        "2-2 2 * * *",
        "2-2/1 2 * * *",
        "@hourly",
        "*/30 2 * * *",
        "0 */2 * * *",
        "0 0-10/5 2 * * *",
        "0 2 * * * *",
        "0,30 2-4/2 * * *",
    ] {
        assert!(!placed_by_us(expr), "{expr}");
    }
}

/// The offset changes of `tz` in `year`: the first instant of each offset.
fn transitions(tz: Tz, year: i32) -> Vec<DateTime<Utc>> {
    use chrono::Offset as _;
    let offset = |at: DateTime<Utc>| tz.offset_from_utc_datetime(&at.naive_utc()).fix();
    let mut found = Vec::new();
    let mut at = Utc
        .with_ymd_and_hms(year, 1, 1, 0, 0, 0)
        .single()
        .expect("valid");
    let end = Utc
        .with_ymd_and_hms(year + 1, 1, 1, 0, 0, 0)
        .single()
        .expect("valid");
    let step = chrono::TimeDelta::hours(6);
    while at < end {
        if offset(at) != offset(at + step) {
            let (mut before, mut after) = (at, at + step);
            while after - before > chrono::TimeDelta::seconds(1) {
                let middle =
                    before + chrono::TimeDelta::seconds((after - before).num_seconds() / 2);
                if offset(middle) == offset(before) {
                    before = middle;
                } else {
                    after = middle;
                }
            }
            found.push(after);
        }
        at += step;
    }
    found
}

/// Where the fixed-time rule (module doc) runs `expr` in `tz`, by brute
/// force: every wall time from a week before `from` to a week after
/// `until` that the pattern schedules, at its instant, at the first of its
/// two instants, or at the first instant after the gap it falls in (found
/// second by second).
fn fixed_time_model(
    expr: &str,
    tz: Tz,
    from: DateTime<Utc>,
    until: DateTime<Utc>,
) -> std::collections::BTreeSet<DateTime<Utc>> {
    let form = super::parse_form(expr).ok().expect("parses");
    let seconds = form.cron.pattern.seconds.values();
    let week = chrono::TimeDelta::days(8);
    let mut minute = (from - week).with_timezone(&tz).naive_local();
    minute -= chrono::TimeDelta::seconds(i64::from(chrono::Timelike::second(&minute)));
    let last = (until + week).with_timezone(&tz).naive_local();
    let mut runs = std::collections::BTreeSet::new();
    while minute < last {
        for second in &seconds {
            let wall = minute + chrono::TimeDelta::seconds(i64::from(*second));
            if !form.cron.is_time_matching(&wall).expect("matches") {
                continue;
            }
            let mut after_gap = wall;
            let at = loop {
                if let Some(at) = tz.from_local_datetime(&after_gap).earliest() {
                    break at.with_timezone(&Utc);
                }
                after_gap += chrono::TimeDelta::seconds(1);
            };
            runs.insert(at);
        }
        minute += chrono::TimeDelta::minutes(1);
    }
    runs
}

/// Lists and ranges in the second, minute and hour fields, around every
/// transition of zones with an hour, a half hour, two hours or a midnight
/// gap in 2027, and Samoa's skipped day (30 December 2011):
/// the occurrences strictly increase (none twice) and are exactly those of
/// the brute-force model; from any instant in between, `next_after` and
/// `previous_before` answer the model's next and previous run.
#[test]
fn fixed_time_lists_and_ranges_follow_the_rule_around_every_transition() {
    let patterns = [
        "0 2,14 * * *",
        "0,30 2 * * *",
        "30 1-3 * * *",
        "0 0,30 2 * * *",
        "15,45 0-3 * * *",
        "0-4 2 * * *",
        "10,20 30,45 1-2,3 * * *",
        "0 2,3 * * 0",
        "30 23,0 * * *",
        "0,30 0 * * *",
        "45 1,2 * * *",
    ];
    let zones = [
        ("Europe/Berlin", 2027, 2),
        ("America/New_York", 2027, 2),
        ("Australia/Lord_Howe", 2027, 2),
        ("America/Santiago", 2027, 2),
        ("Pacific/Chatham", 2027, 2),
        ("Antarctica/Troll", 2027, 2),
        ("Pacific/Apia", 2011, 3),
    ];
    let hours = |n: i64| chrono::TimeDelta::hours(n);
    for (name, year, count) in zones {
        let tz = zone(name);
        let changes = transitions(tz, year);
        assert_eq!(changes.len(), count, "{name}: transitions in {year}");
        for change in changes {
            let (from, until) = (change - hours(30), change + hours(30));
            for expr in patterns {
                let model = fixed_time_model(expr, tz, from, until);
                let schedule = Schedule::parse(expr, tz).expect("parses");
                let mut found = Vec::new();
                let mut at = from;
                while let Some(next) = schedule.next_after(at).filter(|next| *next < until) {
                    assert!(next > at, "{expr} in {name}: {next} after {at}");
                    found.push(next);
                    at = next;
                }
                let start = from + chrono::TimeDelta::seconds(1);
                let expected: Vec<_> = model.range(start..until).copied().collect();
                assert_eq!(found, expected, "{expr} in {name} around {change}");
                // From instants all over the window: inside gaps' ends,
                // both passes of repeated ranges, on and off occurrences.
                let mut probe = from + hours(2);
                while probe < until - hours(2) {
                    let next = model.range(probe + chrono::TimeDelta::seconds(1)..).next();
                    assert_eq!(
                        schedule.next_after(probe).as_ref(),
                        next,
                        "{expr} in {name}: next after {probe}"
                    );
                    let previous = model.range(..probe).next_back();
                    assert_eq!(
                        schedule.previous_before(probe).as_ref(),
                        previous,
                        "{expr} in {name}: previous before {probe}"
                    );
                    probe += chrono::TimeDelta::seconds(7 * 60 + 30);
                }
                for at in model.range(start..until) {
                    let later = *at + chrono::TimeDelta::milliseconds(1);
                    assert_eq!(
                        schedule.previous_before(later),
                        Some(*at),
                        "{expr} in {name}"
                    );
                    assert_eq!(
                        schedule.next_after(*at - chrono::TimeDelta::seconds(1)),
                        Some(*at)
                    );
                }
            }
        }
    }
}

#[test]
fn tashkent_has_no_dst_and_runs_at_21z_the_day_before() {
    let at = next("0 2 * * *", "Asia/Tashkent", "2026-11-29T00:00:00Z", 2);
    assert_eq!(at, ["2026-11-29T21:00:00Z", "2026-11-30T21:00:00Z"]);
    // The same in the middle of the northern summer.
    let at = next("0 2 * * *", "Asia/Tashkent", "2026-07-01T00:00:00Z", 1);
    assert_eq!(at, ["2026-07-01T21:00:00Z"]);
}

#[test]
fn macros_and_field_counts() {
    let from = "2026-01-01T00:00:00Z"; // a Thursday
    assert_eq!(next("@hourly", "UTC", from, 1), ["2026-01-01T01:00:00Z"]);
    assert_eq!(next("@daily", "UTC", from, 1), ["2026-01-02T00:00:00Z"]);
    assert_eq!(next("@midnight", "UTC", from, 1), ["2026-01-02T00:00:00Z"]);
    assert_eq!(next("@weekly", "UTC", from, 1), ["2026-01-04T00:00:00Z"]);
    assert_eq!(next("@monthly", "UTC", from, 1), ["2026-02-01T00:00:00Z"]);
    assert_eq!(next("@yearly", "UTC", from, 1), ["2027-01-01T00:00:00Z"]);
    assert_eq!(next("@annually", "UTC", from, 1), ["2027-01-01T00:00:00Z"]);
    assert_eq!(next("5 4 * * *", "UTC", from, 1), ["2026-01-01T04:05:00Z"]);
    assert_eq!(
        next("3 5 4 * * *", "UTC", from, 1),
        ["2026-01-01T04:05:03Z"]
    );
    assert_eq!(
        next("*/2 * * * * *", "UTC", from, 2),
        ["2026-01-01T00:00:02Z", "2026-01-01T00:00:04Z"]
    );
}

#[test]
fn next_after_is_strictly_after_and_ignores_subseconds() {
    let every_second = Schedule::parse("* * * * * *", Tz::UTC).expect("parses");
    let at = utc_at("2026-01-01T00:00:00Z");
    assert_eq!(
        every_second.next_after(at),
        Some(utc_at("2026-01-01T00:00:01Z"))
    );
    let half = utc_at("2026-01-01T00:00:00.500Z");
    assert_eq!(
        every_second.next_after(half),
        Some(utc_at("2026-01-01T00:00:01Z"))
    );
    let hourly = Schedule::parse("0 * * * *", Tz::UTC).expect("parses");
    let just_before = utc_at("2026-01-01T00:59:59.999Z");
    assert_eq!(
        hourly.next_after(just_before),
        Some(utc_at("2026-01-01T01:00:00Z"))
    );
}

#[test]
fn day_of_month_or_day_of_week_like_vixie_cron() {
    // The 13th OR any Friday: Friday 2 January comes first.
    let at = next("0 0 13 * 5", "UTC", "2026-01-01T00:00:00Z", 3);
    assert_eq!(
        at,
        [
            "2026-01-02T00:00:00Z",
            "2026-01-09T00:00:00Z",
            "2026-01-13T00:00:00Z"
        ]
    );
}

#[test]
fn schedules_that_never_fire_are_refused_quickly() {
    let started = std::time::Instant::now();
    for expr in ["0 0 30 2 *", "0 0 31 4 *", "0 0 0 31 11 *"] {
        let err = Schedule::parse(expr, Tz::UTC).expect_err(expr);
        assert!(
            matches!(err, ScheduleError::NeverFires { .. }),
            "{expr}: {err}"
        );
        assert_eq!(err.to_string(), format!("schedule `{expr}` never fires"));
    }
    // Rare but real: 29 February.
    assert_eq!(
        next("0 0 29 2 *", "UTC", "2026-01-01T00:00:00Z", 1),
        ["2028-02-29T00:00:00Z"]
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn seven_fields_and_garbage_are_refused() {
    let err = Schedule::parse("0 0 0 1 1 * 2027", Tz::UTC).expect_err("7 fields");
    assert_eq!(
        err.to_string(),
        "invalid cron expression `0 0 0 1 1 * 2027`: expected 5 fields (minute first) or 6 (seconds first), found 7"
    );
    for expr in [
        "",
        "hello",
        "* * *",
        "61 * * * *",
        "* 25 * * *",
        "@reboot",
        "@every 5m",
        "*/0 * * * *",
    ] {
        let err = Schedule::parse(expr, Tz::UTC).expect_err(expr);
        assert!(
            matches!(err, ScheduleError::Invalid { .. }),
            "{expr}: {err}"
        );
        assert!(
            err.to_string()
                .starts_with(&format!("invalid cron expression `{expr}`: ")),
            "{err}"
        );
    }
}

#[test]
fn accessors_return_what_was_parsed() {
    let schedule = Schedule::parse("0 2 * * *", zone("Asia/Tashkent")).expect("parses");
    assert_eq!(schedule.expression(), "0 2 * * *");
    assert_eq!(schedule.timezone(), chrono_tz::Asia::Tashkent);
}

#[test]
fn occurrences_strictly_increase_over_1000_steps() {
    let cases = [
        ("*/15 * * * *", "America/New_York", "2026-10-30T00:00:00Z"),
        ("30 2 * * *", "America/New_York", "2026-01-01T00:00:00Z"),
        ("* * * * * *", "Australia/Lord_Howe", "2026-04-04T14:50:00Z"),
        ("*/30 * * * * *", "Europe/Berlin", "2026-10-25T00:55:00Z"),
        ("0 * * * *", "Australia/Lord_Howe", "2026-10-01T00:00:00Z"),
    ];
    for (expr, tz, from) in cases {
        let schedule = Schedule::parse(expr, zone(tz)).expect("parses");
        let mut at = utc_at(from);
        for _ in 0..1000 {
            let following = schedule.next_after(at).expect("fires");
            assert!(following > at, "{expr} in {tz}: {following} after {at}");
            at = following;
        }
    }
}

#[test]
fn schedule_is_shareable_across_tasks() {
    fn assert_traits<T: Clone + std::fmt::Debug + Send + Sync>() {}
    assert_traits::<Schedule>();
}

#[test]
fn with_timezone_moves_the_wall_clock_and_debug_stays_short() {
    let utc = Schedule::parse("0 2 * * *", Tz::UTC).expect("parses");
    let tashkent = utc.with_timezone(zone("Asia/Tashkent"));
    assert_eq!(tashkent.expression(), "0 2 * * *");
    let at = tashkent.next_after(utc_at("2026-11-29T00:00:00Z"));
    assert_eq!(at, Some(utc_at("2026-11-29T21:00:00Z")));
    assert_eq!(
        format!("{tashkent:?}"),
        "Schedule { expr: \"0 2 * * *\", tz: Asia/Tashkent }"
    );
}

#[test]
fn schedules_of_one_pattern_share_its_parsed_form_in_any_zone() {
    let a = Schedule::parse("17 3 * * *", Tz::UTC).unwrap();
    let b = Schedule::parse(" 17 3 * * * ", Tz::Europe__Berlin).unwrap();
    let c = a.with_timezone(Tz::Asia__Tashkent);
    let form = |s: &Schedule| parsed(s.pattern()).ok().expect("parses");
    assert!(Arc::ptr_eq(&form(&a), &form(&b)));
    assert!(Arc::ptr_eq(&form(&a), &form(&c)));
    let other = Schedule::parse("18 3 * * *", Tz::UTC).unwrap();
    assert!(!Arc::ptr_eq(&form(&a), &form(&other)));
    // Shared, yet each reads the pattern in its own zone.
    let after = utc_at("2026-06-01T00:00:00Z");
    assert_eq!(a.next_after(after), Some(utc_at("2026-06-01T03:17:00Z")));
    assert_eq!(b.next_after(after), Some(utc_at("2026-06-01T01:17:00Z")));
}

/// Parses made on this test's thread so far.
fn parses_here() -> usize {
    super::PARSES_HERE.with(std::cell::Cell::get)
}

#[test]
fn parsing_in_parallel_gives_what_parsing_one_by_one_gives() {
    // Seconds 41 and days 1-28 of months 1-12 in a 6-field form no other
    // test parses: the cache says whether this test parsed them.
    let exprs: Vec<String> = (0..600)
        .map(|i| format!("41 {} {} {} * *", i % 60, (i / 60) % 24, i % 28 + 1))
        .chain(["not cron".to_string(), "41 0 0 30 2 *".to_string()])
        .collect();
    let warmed = parse_in_parallel(exprs.iter().map(|expr| (expr.as_str(), Tz::UTC)));
    // The invalid one is left to the loader; the one that never fires has
    // that for its answer.
    assert_eq!(warmed.len(), 601);
    let after = utc_at("2026-11-30T12:00:00Z");
    for expr in &exprs[..600] {
        let before = parses_here();
        let one = Schedule::parse(expr, Tz::UTC).unwrap();
        assert_eq!(
            parses_here(),
            before,
            "{expr}: answered by the loader's threads, not parsed again"
        );
        let form = super::parse_form(one.pattern()).ok().expect("parses");
        // From now on, answered by the hint the loader's thread found.
        let now = Utc::now();
        assert_eq!(
            one.next_after(now),
            one.next_with(&form, now.trunc_subsecs(0)),
            "{expr}"
        );
        assert_eq!(one.next_after(after), one.next_with(&form, after), "{expr}");
    }
    let before = parses_here();
    assert!(matches!(
        Schedule::parse("41 0 0 30 2 *", Tz::UTC),
        Err(ScheduleError::NeverFires { .. })
    ));
    assert_eq!(parses_here(), before, "never fires: the threads' answer");
}

/// With one thread (the daemon's one malloc arena) the answers are made
/// on the loader's own thread, and are the same.
#[test]
fn parsing_on_one_thread_answers_the_same() {
    let exprs: Vec<String> = (0..300)
        .map(|i| format!("47 {} {} 5 * *", i % 60, (i / 60) % 24))
        .collect();
    let warm = super::parse_on(1, exprs.iter().map(|expr| (expr.as_str(), Tz::UTC)));
    assert_eq!(warm.len(), 300);
    let now = Utc::now();
    for expr in &exprs {
        let before = parses_here();
        let one = Schedule::parse(expr, Tz::UTC).expect("parses");
        assert_eq!(parses_here(), before, "{expr}: answered without a parse");
        let form = super::parse_form(expr).ok().expect("parses");
        assert_eq!(
            one.next_after(now),
            one.next_with(&form, now.trunc_subsecs(0)),
            "{expr}"
        );
    }
    drop(warm);
}

/// A job read in its own zone gets its first occurrence from the loader's
/// threads too: the same one a search of its own finds, without a parse.
#[test]
fn parsing_in_parallel_answers_in_each_jobs_zone() {
    let tokyo = zone("Asia/Tokyo");
    let exprs: Vec<String> = (0..300)
        .map(|i| format!("43 {} {} * * *", i % 60, (i / 60) % 24))
        .collect();
    let warm = parse_in_parallel(exprs.iter().map(|expr| (expr.as_str(), tokyo)));
    // Each in UTC (where the loader checks that it fires) and in Tokyo.
    assert_eq!(warm.len(), 600);
    for expr in &exprs {
        let before = parses_here();
        let utc = Schedule::parse(expr, Tz::UTC).expect("parses");
        let local = utc.with_timezone(tokyo);
        assert_eq!(parses_here(), before, "{expr}: answered without a parse");
        let form = super::parse_form(expr).ok().expect("parses");
        let now = Utc::now();
        let expected = local.next_with(&form, now.trunc_subsecs(0));
        assert_eq!(local.next_after(now), expected, "{expr}");
        assert_ne!(
            utc.next_after(now),
            expected,
            "{expr}: Tokyo's occurrence is not UTC's"
        );
    }
    drop(warm);
}

/// A schedule keeps no parsed form: once nothing holds it and it fell out
/// of the recent ones, it is dropped, and parsed again when needed, with
/// the same answers (10,000 distinct expressions must not hold 70 MB).
#[test]
fn a_schedule_holds_no_parsed_form_and_answers_the_same_after_it_was_dropped() {
    let expr = "7 11 13 2 *";
    let schedule = Schedule::parse(expr, Tz::Europe__Berlin).unwrap();
    let after = utc_at("2031-01-01T00:00:00Z");
    let before = schedule.next_after(after);
    // Push it out of the recent ones with other patterns.
    for i in 0..(RECENT_MAX + 10) {
        Schedule::parse(&format!("{} {} 1 1 *", i % 60, (i / 60) % 24), Tz::UTC).unwrap();
    }
    let alive = lock(&PARSED).get(expr).and_then(Weak::upgrade).is_some();
    assert!(!alive, "nothing holds the parsed form any more");
    assert_eq!(schedule.next_after(after), before);
    assert_eq!(before, Some(utc_at("2031-02-13T10:07:00Z")));
    // The hint answers from its own instant up to its occurrence.
    let hint = schedule.hint.expect("computed at parse");
    assert_eq!(schedule.next_after(hint.after), Some(hint.next));
}

#[test]
fn occurrences_are_computed_up_to_the_end_of_2199() {
    let yearly = Schedule::parse("0 0 1 1 *", Tz::UTC).unwrap();
    assert_eq!(
        yearly.next_after(utc_at("2198-06-01T00:00:00Z")),
        Some(utc_at("2199-01-01T00:00:00Z"))
    );
    assert_eq!(yearly.next_after(utc_at("2199-06-01T00:00:00Z")), None);
    // Macros stand for the same instants as the patterns they name.
    let after = utc_at("2026-11-30T21:17:05Z");
    for (name, pattern) in [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
    ] {
        let by_name = Schedule::parse(name, Tz::Europe__Berlin).unwrap();
        let spelled = Schedule::parse(pattern, Tz::Europe__Berlin).unwrap();
        assert_eq!(
            by_name.next_after(after),
            spelled.next_after(after),
            "{name}"
        );
        assert!(by_name.next_after(after).is_some(), "{name}");
    }
}

/// croner says only "number out of bounds"; the message names the field,
/// the value and the field's range.
#[test]
fn a_refused_field_is_named_with_its_range() {
    for (expr, reason) in [
        ("0 25 * * *", "hour `25` is out of range 0–23"),
        ("61 * * * *", "minute `61` is out of range 0–59"),
        ("0 0 0 32 * *", "day-of-month `32` is out of range 1–31"),
        ("0 0 * 13 *", "month `13` is out of range 1–12 or JAN–DEC"),
        (
            "0 0 * * MON#6",
            "day-of-week `MON#6` has week `6`: the number after `#` is 1–5 (the first to fifth such day of the month)",
        ),
        (
            "0 0 L * L#1",
            "day-of-week `L#1`: `L` is not a number or a name: use 0–7 or SUN–SAT",
        ),
        (
            "0 0 15W 5W *",
            "month `5W` (nearest weekday) is allowed only in day-of-month",
        ),
        ("70/10 * * * *", "minute `70/10`: `70` is out of range 0–59"),
        (
            "/10 * * * *",
            "minute `/10` needs `*`, a value or a range before the `/`: write `*/10`",
        ),
    ] {
        let err = Schedule::parse(expr, Tz::UTC).expect_err(expr);
        assert_eq!(
            err.to_string(),
            format!("invalid cron expression `{expr}`: {reason}")
        );
    }
    // croner takes a range before `#`.
    assert!(Schedule::parse("0 0 * * 1-5#2", Tz::UTC).is_ok());
    let err = Schedule::parse("0 0 * * 1-5#9", Tz::UTC).expect_err("nth");
    assert!(err.to_string().ends_with("day-of-week `1-5#9` has week `9`: the number after `#` is 1–5 (the first to fifth such day of the month)"), "{err}");
}

/// The longest interval found by walking every occurrence, for comparison
/// with [`Schedule::longest_interval`].
fn longest_by_walking(schedule: &Schedule, from: DateTime<Utc>, days: i64) -> std::time::Duration {
    let end = from + chrono::TimeDelta::days(days);
    let mut at = schedule.next_after(from).expect("fires");
    let (mut longest, mut intervals) = (chrono::TimeDelta::zero(), 0);
    while at < end || intervals < 2 {
        let next = schedule.next_after(at).expect("fires again");
        longest = longest.max(next - at);
        intervals += 1;
        at = next;
    }
    longest.to_std().expect("positive")
}

const SIXTY_TWO_DAYS: std::time::Duration = std::time::Duration::from_secs(62 * 86_400);

#[test]
fn longest_interval_finds_weekends_nights_and_month_ends() {
    let monday = utc_at("2026-03-02T10:00:00Z");
    let hours = |h: u64, m: u64| std::time::Duration::from_secs(h * 3600 + m * 60);
    for (expr, tz, expected) in [
        // Friday 17:55 to Monday 09:00, far beyond the 64 occurrences walked
        // one by one (they end on Monday afternoon).
        ("*/5 9-17 * * 1-5", "UTC", hours(63, 5)),
        ("0 9 * * 1-5", "UTC", hours(72, 0)),
        ("* * * * * *", "UTC", std::time::Duration::from_secs(1)),
        ("*/15 * * * *", "Europe/Berlin", hours(0, 15)),
        // Only months with 31 days: 31 March to 31 May.
        ("0 0 31 * *", "UTC", hours(61 * 24, 0)),
        // New York's spring forward (8 March 2026) takes an hour out of the
        // night; its fall back is outside the horizon.
        ("0 22 * * *", "America/New_York", hours(24, 0)),
        ("30 1 * * 0", "America/New_York", hours(7 * 24, 0)),
    ] {
        let schedule = Schedule::parse(expr, zone(tz)).expect("parses");
        let found = schedule
            .longest_interval(monday, SIXTY_TWO_DAYS)
            .expect("fires");
        assert_eq!(found, expected, "{expr} in {tz}");
        if expr == "* * * * * *" {
            continue; // 5 million occurrences to walk
        }
        assert_eq!(
            found,
            longest_by_walking(&schedule, monday, 62),
            "{expr} in {tz}: same as walking every occurrence"
        );
    }
}

#[test]
fn longest_interval_spans_two_intervals_and_ends_with_the_schedule() {
    let schedule = Schedule::parse("@yearly", Tz::UTC).expect("parses");
    // 2027 -> 2028 (365 days), 2028 -> 2029 (leap year: 366).
    let found = schedule.longest_interval(utc_at("2026-06-01T00:00:00Z"), SIXTY_TWO_DAYS);
    assert_eq!(found, Some(std::time::Duration::from_secs(366 * 86_400)));
    // The last occurrence computed is 2199-01-01: no interval after it.
    assert_eq!(
        schedule.longest_interval(utc_at("2198-06-01T00:00:00Z"), SIXTY_TWO_DAYS),
        None
    );
}

#[test]
fn longest_interval_is_exact_above_six_hours_on_random_looking_patterns() {
    let from = utc_at("2026-10-20T07:13:29Z");
    for expr in [
        "0 */7 * * *",
        "0 3,4,23 * * 2,5",
        "*/20 8-11,14 1-10 * *",
        "15 10 * * MON#2",
        "0 0 L * *",
        "*/10 * * * 6",
        "0 12 13 * 5",
        "*/30 0-2 * * *",
    ] {
        let schedule = Schedule::parse(expr, zone("Europe/London")).expect("parses");
        let walked = longest_by_walking(&schedule, from, 62);
        let found = schedule
            .longest_interval(from, SIXTY_TWO_DAYS)
            .expect("fires");
        assert_eq!(found, walked, "{expr}");
    }
}

#[test]
fn previous_before_is_the_occurrence_next_after_steps_to() {
    let schedule = Schedule::parse("*/15 * * * *", zone("America/New_York")).expect("parses");
    let at = utc_at("2026-03-08T06:00:00Z");
    let next = schedule.next_after(at).expect("fires");
    assert_eq!(schedule.previous_before(next), Some(at));
    // Strictly before: an occurrence is not its own predecessor, but it is
    // the predecessor of any instant a fraction of a second later.
    assert_eq!(
        schedule.previous_before(at + chrono::TimeDelta::milliseconds(1)),
        Some(at)
    );
}

/// Dropping what a config load held forgets the cache entries nobody
/// holds: each keeps its form's allocation, and 10,000 distinct
/// expressions left behind held 50 MB of an idle daemon.
#[test]
fn a_load_leaves_no_cache_entry_behind_but_the_recent_ones() {
    let exprs: Vec<String> = (0..1_000)
        .map(|i| format!("{} {} {} 3 {} *", i % 60, (i / 60) % 24, 17, i % 12 + 1))
        .collect();
    let warm = parse_in_parallel(exprs.iter().map(|expr| (expr.as_str(), Tz::UTC)));
    for expr in &exprs {
        Schedule::parse(expr, Tz::UTC).expect("parses");
    }
    drop(warm);
    let cache = lock(&PARSED);
    let left = exprs
        .iter()
        .filter(|expr| cache.contains_key(*expr))
        .count();
    assert!(
        left <= RECENT_MAX,
        "{left} of 1,000 entries left behind (at most the {RECENT_MAX} recent ones may stay)"
    );
}

/// A job that fires rarely is scheduled at start without parsing its
/// pattern again: the hint made at parse time also covers the last hour,
/// where a daemon looks for an occurrence it missed (`starting_deadline`).
#[test]
fn a_rare_schedule_answers_for_the_last_hour_without_parsing_again() {
    let expr = "41 5 29 2 *";
    let schedule = Schedule::parse(expr, Tz::UTC).expect("parses");
    for i in 0..(RECENT_MAX + 10) {
        Schedule::parse(&format!("{} {} 2 2 *", i % 60, (i / 60) % 24), Tz::UTC).expect("parses");
    }
    assert!(
        lock(&PARSED).get(expr).and_then(Weak::upgrade).is_none(),
        "pushed out of the cache"
    );
    let now = Utc::now();
    let expected = schedule.next_after(now);
    assert_eq!(
        schedule.next_after(now - chrono::TimeDelta::minutes(59)),
        expected,
        "an hour back: the same next occurrence"
    );
    assert!(
        lock(&PARSED).get(expr).and_then(Weak::upgrade).is_none(),
        "answered from the hint, not parsed again (a parse keeps it among the recent ones)"
    );
}

/// A load of many rare patterns leaves none of them among the recent
/// forms: they were held by the load, and only patterns that fire after it
/// belong there (a 10,000-job load left its last 256, 1.3 MB).
#[test]
fn a_load_keeps_none_of_its_patterns_among_the_recent_ones() {
    let exprs: Vec<String> = (0..600)
        .map(|i| format!("{} {} {} 9 {} *", i % 60, (i / 60) % 24, 23, i % 12 + 1))
        .collect();
    let warm = parse_in_parallel(exprs.iter().map(|expr| (expr.as_str(), Tz::UTC)));
    assert_eq!(warm.len(), 600);
    for expr in &exprs {
        Schedule::parse(expr, Tz::UTC).expect("parses");
    }
    drop(warm);
    // PARSED before RECENT, as `parsed` takes them.
    let alive: Vec<Arc<Form>> = exprs
        .iter()
        .filter_map(|expr| lock(&PARSED).get(expr.as_str()).and_then(Weak::upgrade))
        .collect();
    let recent = lock(&RECENT);
    let kept = alive
        .iter()
        .filter(|form| recent.iter().any(|held| Arc::ptr_eq(held, form)))
        .count();
    assert_eq!(
        kept, 0,
        "{kept} of the load's 600 patterns among the recent ones"
    );
}

#[test]
fn shortest_interval_finds_each_patterns_rhythm() {
    let monday = utc_at("2026-03-02T10:00:00Z");
    let week = std::time::Duration::from_secs(8 * 86_400);
    let secs = std::time::Duration::from_secs;
    for (expr, expected) in [
        ("*/5 * * * * *", secs(5)),
        ("* * * * * *", secs(1)),
        // 56 -> 0 at every hour.
        ("*/7 * * * *", secs(4 * 60)),
        ("0 9,10 * * *", secs(3600)),
        // Monday to Friday, never the weekend's 72 h.
        ("0 9 * * 1-5", secs(86_400)),
        ("@hourly", secs(3600)),
        // 2 April -> 3 April, the only day apart in the list.
        ("0 0 2,3,20 4 *", secs(86_400)),
        // Yearly: at least two intervals even with a short span.
        ("@yearly", secs(365 * 86_400)),
    ] {
        let schedule = Schedule::parse(expr, Tz::UTC).expect("parses");
        assert_eq!(
            schedule.shortest_interval(monday, week),
            Some(expected),
            "{expr}"
        );
    }
    let last = Schedule::parse("@yearly", Tz::UTC).expect("parses");
    assert_eq!(
        last.shortest_interval(utc_at("2198-06-01T00:00:00Z"), week),
        None,
        "no interval after 2199-01-01"
    );
}

#[test]
fn interval_floor_is_never_above_the_shortest_interval() {
    let monday = utc_at("2026-03-02T10:00:00Z");
    let secs = std::time::Duration::from_secs;
    for (expr, floor) in [
        ("*/5 * * * * *", secs(1)),
        ("30 * * * * *", secs(60)),
        ("*/5 * * * *", secs(60)),
        ("0 9,10 * * *", secs(30 * 60)),
        ("0,30 9 * * *", secs(60)),
        ("15 * * * *", secs(30 * 60)),
        ("0 */2 * * *", secs(30 * 60)),
        ("@hourly", secs(30 * 60)),
        ("0 9 * * 1-5", secs(22 * 3600)),
        ("@daily", secs(22 * 3600)),
        ("@yearly", secs(22 * 3600)),
    ] {
        for tz in ["UTC", "America/New_York", "Australia/Lord_Howe"] {
            let schedule = Schedule::parse(expr, zone(tz)).expect("parses");
            assert_eq!(schedule.interval_floor(), floor, "{expr}");
            let shortest = schedule
                .shortest_interval(monday, SIXTY_TWO_DAYS)
                .expect("fires");
            assert!(floor <= shortest, "{expr} in {tz}: {shortest:?}");
        }
    }
}

/// `N/S` reads as `N-MAX/S`, as cronie, Quartz and Kubernetes read it
/// (docs/configuration.md, "Cron expressions"); croner alone refuses it.
#[test]
fn a_step_from_one_value_runs_to_the_end_of_the_field() {
    let after = utc_at("2026-12-07T00:00:00Z");
    for (open, closed) in [
        ("5/15 * * * *", "5-59/15 * * * *"),
        ("0 5/20 * * *", "0 5-23/20 * * *"),
        ("0 0 20/5 * *", "0 0 20-31/5 * *"),
        ("0 0 1 10/1 *", "0 0 1 10-12/1 *"),
        ("0 0 * * 1/2", "0 0 * * 1-7/2"),
        ("0 0 * * MON/2", "0 0 * * 1,3,5,0"),
        ("30 5/15 * * * *", "30 5-59/15 * * * *"),
    ] {
        let open_schedule = Schedule::parse(open, Tz::UTC).expect(open);
        let closed_schedule = Schedule::parse(closed, Tz::UTC).expect(closed);
        assert_eq!(
            open_schedule.occurrences_after(after, 12),
            closed_schedule.occurrences_after(after, 12),
            "{open}"
        );
    }
    let minutes: Vec<String> = Schedule::parse("5/15 * * * *", Tz::UTC)
        .expect("parses")
        .occurrences_after(after, 4)
        .iter()
        .map(|at| at.format("%H:%M").to_string())
        .collect();
    assert_eq!(minutes, ["00:05", "00:20", "00:35", "00:50"]);
    // Sunday is 7 in day-of-week, as in cronie: `1/2` is Mon, Wed, Fri, Sun.
    let days: Vec<String> = Schedule::parse("0 0 * * 1/2", Tz::UTC)
        .expect("parses")
        .occurrences_after(after, 4)
        .iter()
        .map(|at| at.format("%a").to_string())
        .collect();
    assert_eq!(days, ["Wed", "Fri", "Sun", "Mon"]);
}

/// Day of month and day of week as crontab(5) reads them:
/// either when both are restricted, both when one starts with `*`.
#[test]
fn the_day_fields_match_either_only_when_both_are_restricted() {
    let after = utc_at("2026-12-01T00:00:00Z");
    let days = |expr: &str| -> Vec<String> {
        Schedule::parse(expr, Tz::UTC)
            .expect(expr)
            .occurrences_after(after, 6)
            .iter()
            .map(|at| at.format("%d %a").to_string())
            .collect()
    };
    // The odd days that are Mondays (December 2026: the 7th and 21st).
    assert_eq!(
        days("0 0 */2 * 1")[..2],
        ["07 Mon".to_string(), "21 Mon".to_string()]
    );
    // The 1st to the 7th, and every Monday.
    assert_eq!(
        days("0 0 1-7 * 1"),
        ["02 Wed", "03 Thu", "04 Fri", "05 Sat", "06 Sun", "07 Mon"]
    );
    assert_eq!(
        days("0 0 10-31 * 1")[..2],
        ["07 Mon".to_string(), "10 Thu".to_string()]
    );
    // A plain `*` in one field: the other decides alone.
    assert_eq!(
        days("0 0 * * 1")[..2],
        ["07 Mon".to_string(), "14 Mon".to_string()]
    );
    assert_eq!(
        days("0 0 15 * *")[..2],
        ["15 Tue".to_string(), "15 Fri".to_string()]
    );
    // A step from `*` in day-of-week with a restricted day of month: both.
    assert_eq!(
        days("0 0 1-9 * */3")[..3],
        [
            "02 Wed".to_string(),
            "05 Sat".to_string(),
            "06 Sun".to_string()
        ]
    );
    assert!(
        Schedule::parse("0 0 1-7 * 1", Tz::UTC)
            .expect("parses")
            .days_match_either()
    );
    assert!(
        !Schedule::parse("0 0 */2 * 1", Tz::UTC)
            .expect("parses")
            .days_match_either()
    );
    assert!(
        !Schedule::parse("@weekly", Tz::UTC)
            .expect("parses")
            .days_match_either()
    );
}
