//! The audit itself, on synthetic records: each kind of violation is
//! reported, and a clean run is clean. (If the audit could not see a
//! duplicate, every fault test asserting `is_clean()` would be hollow.)

use crate::common;

use chrono::{DateTime, Utc};
use common::audit::{Decision, Run, Window, audit, instants, parse_runs};

const T0: i64 = 1_800_000_000; // a whole second, 2027-01-15

fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(T0 + secs, 0).expect("valid")
}

fn name(secs: i64) -> String {
    at(secs).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// START/END lines of a run of `tick` at `occ` s, from `start_ms` for `len_ms`
/// (no END if `len_ms` is `None`).
fn lines(occ: i64, node: &str, fence: u64, start_ms: i64, len_ms: Option<i64>) -> Vec<String> {
    let ns = |ms: i64| i128::from(T0 * 1000 + ms) * 1_000_000;
    let mut out = vec![format!(
        "START tick {} {node} {fence} 100 {}",
        name(occ),
        ns(start_ms)
    )];
    if let Some(len) = len_ms {
        out.push(format!(
            "END tick {} {node} {fence} 100 {}",
            name(occ),
            ns(start_ms + len)
        ));
    }
    out
}

fn window() -> Window {
    Window::new("tick", "* * * * * *", at(0), at(4))
}

/// Five clean every-second runs, 5 ms each, fences 10..14.
fn clean_lines() -> Vec<String> {
    (0..5)
        .flat_map(|i| lines(i, "n1", 10 + i as u64, i * 1000, Some(5)))
        .collect()
}

#[test]
fn a_clean_run_is_clean() {
    let report = audit(&parse_runs(&clean_lines()), &[], &[window()]);
    assert!(report.is_clean(), "{report}");
    assert_eq!((report.expected, report.runs), (5, 5), "{report}");
}

#[test]
fn a_duplicate_is_reported() {
    let mut records = clean_lines();
    records.extend(lines(2, "n2", 20, 2500, Some(5)));
    let report = audit(&parse_runs(&records), &[], &[window()]);
    assert_eq!(report.duplicates.len(), 1, "{report}");
    assert_eq!(report.duplicates[0].len(), 2, "{report}");
    assert!(!report.is_clean());
}

#[test]
fn a_miss_is_reported_unless_skipped_in_history_or_excused() {
    let records: Vec<String> = clean_lines()
        .into_iter()
        .filter(|line| !line.contains(&name(3)))
        .collect();
    let runs = parse_runs(&records);
    let report = audit(&runs, &[], &[window()]);
    assert_eq!(report.misses, vec![("tick".to_string(), at(3))], "{report}");
    assert!(!report.is_clean());

    let skip = Decision {
        job: "tick".to_string(),
        occurrence: name(3),
        node: "n2".to_string(),
        fence: 12,
        outcome: "skipped".to_string(),
    };
    let report = audit(&runs, &[skip], &[window()]);
    assert!(
        report.misses.is_empty() && report.skipped.len() == 1,
        "{report}"
    );
    assert!(report.is_clean(), "{report}");

    let mut excusing = window();
    excusing.may_miss = instants([at(3)]);
    let report = audit(&runs, &[], &[excusing]);
    assert!(
        report.misses.is_empty() && report.excused.len() == 1,
        "{report}"
    );
}

#[test]
fn an_overlap_is_reported() {
    let mut records: Vec<String> = clean_lines()
        .into_iter()
        .filter(|line| !line.contains(&name(1)))
        .collect();
    // occurrence 1 runs from 1.0 s to 2.2 s: into occurrence 2's run at 2.0 s.
    records.extend(lines(1, "n2", 11, 1000, Some(1200)));
    let report = audit(&parse_runs(&records), &[], &[window()]);
    assert_eq!(report.overlaps.len(), 1, "{report}");
    assert_eq!(report.overlaps[0].0.node, "n2");
    assert!(!report.is_clean());
}

#[test]
fn an_unfinished_run_is_reported_and_overlap_checked_once_its_end_is_known() {
    let mut records: Vec<String> = clean_lines()
        .into_iter()
        .filter(|line| !line.contains(&name(1)))
        .collect();
    records.extend(lines(1, "n2", 11, 1000, None));
    let mut runs = parse_runs(&records);
    let report = audit(&runs, &[], &[window()]);
    assert_eq!(report.unfinished.len(), 1, "{report}");
    assert!(report.overlaps.is_empty(), "{report}");
    let killed = runs
        .iter_mut()
        .find(|run| run.is("tick", at(1)))
        .expect("the run");
    killed.ended_at(i128::from(T0 * 1000 + 2100) * 1_000_000);
    let report = audit(&runs, &[], &[window()]);
    assert!(report.unfinished.is_empty(), "{report}");
    assert_eq!(report.overlaps.len(), 1, "{report}");
}

#[test]
fn a_fence_inversion_is_reported() {
    let mut records: Vec<String> = clean_lines()
        .into_iter()
        .filter(|line| !line.contains(&name(4)))
        .collect();
    records.extend(lines(4, "n3", 12, 4000, Some(5)));
    let report = audit(&parse_runs(&records), &[], &[window()]);
    assert_eq!(report.fence_inversions.len(), 1, "{report}");
    assert_eq!(report.fence_inversions[0].1.fence, 12);
    assert!(!report.is_clean());
}

#[test]
fn runs_outside_the_window_and_other_jobs_are_not_audited() {
    let mut records = clean_lines();
    records.extend(lines(9, "n1", 1, 9000, Some(5)));
    records.push(format!("START other {} n1 1 100 5", name(2)));
    let runs: Vec<Run> = parse_runs(&records);
    let report = audit(&runs, &[], &[window()]);
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.runs, 5);
}
