//! The audit of a cluster run: pure functions over what the jobs recorded
//! (START / END lines) and what Redis's history says, checked against the
//! occurrences the schedule says were due.
//!
//! Every check works on the real clock: jobs take their timestamps with
//! `date` run *without* libfaketime, so runs on skewed nodes compare
//! honestly. A run whose END is missing (killed) has an unknown end: it is
//! listed in `unfinished` and left out of the overlap check until the test
//! supplies the instant it saw the process gone ([`Run::ended_at`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use chrono::{DateTime, Utc};
use solocron::schedule::Schedule;

/// One run of a job, from its START line and, if it got there, its END line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub job: String,
    /// `SOLOCRON_OCCURRENCE` as the run saw it.
    pub occurrence: String,
    pub node: String,
    pub fence: u64,
    /// The job's process id (the same from START to END: the job `exec`s).
    pub pid: i32,
    /// Real (unfaked) wall clock, ns since the epoch.
    pub start_ns: i128,
    /// Real wall clock of END; `None` if the run was killed before it.
    pub end_ns: Option<i128>,
}

impl Run {
    /// The occurrence as an instant (`None` for a manual run).
    pub fn at(&self) -> Option<DateTime<Utc>> {
        DateTime::parse_from_rfc3339(&self.occurrence)
            .ok()
            .map(|at| at.with_timezone(&Utc))
    }

    /// Whether this run is of `job`'s occurrence `at`.
    pub fn is(&self, job: &str, at: DateTime<Utc>) -> bool {
        self.job == job && self.at() == Some(at)
    }

    /// Gives a killed run the instant (real clock, ns) it was seen gone,
    /// so the overlap check covers it.
    pub fn ended_at(&mut self, ns: i128) {
        if self.end_ns.is_none() {
            self.end_ns = Some(ns);
        }
    }
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let end = match self.end_ns {
            Some(end) => format!("+{}ms", (end - self.start_ns) / 1_000_000),
            None => "unfinished".to_string(),
        };
        write!(
            f,
            "{} {} on {} fence {} pid {} start {} ({end})",
            self.job,
            self.occurrence,
            self.node,
            self.fence,
            self.pid,
            ns_to_string(self.start_ns)
        )
    }
}

/// Real clock now, ns since the epoch (the harness itself is never faked).
pub fn now_ns() -> i128 {
    Utc::now()
        .timestamp_nanos_opt()
        .map(i128::from)
        .unwrap_or(0)
}

fn ns_to_string(ns: i128) -> String {
    DateTime::from_timestamp_nanos(ns as i64)
        .format("%H:%M:%S%.3f")
        .to_string()
}

/// Parses record lines `START|END JOB OCCURRENCE NODE FENCE PID NS` and
/// pairs each END with its START (same job, occurrence, node and fence).
/// Lines that do not parse are ignored; runs come in START order.
pub fn parse_runs(lines: &[String]) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    let mut ends = Vec::new();
    for line in lines {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [kind, job, occurrence, node, fence, pid, ns] = fields[..] else {
            continue;
        };
        let (Ok(fence), Ok(pid), Ok(ns)) = (fence.parse(), pid.parse(), ns.parse()) else {
            continue;
        };
        let run = Run {
            job: job.to_string(),
            occurrence: occurrence.to_string(),
            node: node.to_string(),
            fence,
            pid,
            start_ns: ns,
            end_ns: None,
        };
        match kind {
            "START" => runs.push(run),
            "END" => ends.push(run),
            _ => {}
        }
    }
    for end in ends {
        if let Some(run) = runs.iter_mut().find(|run| {
            run.job == end.job
                && run.occurrence == end.occurrence
                && run.node == end.node
                && run.fence == end.fence
                && run.end_ns.is_none()
        }) {
            run.end_ns = Some(end.start_ns);
        }
    }
    runs.sort_by_key(|run| run.start_ns);
    runs
}

/// One entry of a job's Redis history (a decision).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub job: String,
    pub occurrence: String,
    pub node: String,
    pub fence: u64,
    /// `succeeded`, `failed`, `skipped`, `missed`, `lock_lost`, `interrupted`, …
    pub outcome: String,
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} by {} (fence {})",
            self.job, self.occurrence, self.outcome, self.node, self.fence
        )
    }
}

/// What to audit for one job: the occurrences its schedule has due in
/// `[from, to]`, and which of them the scenario allows to go unrun.
pub struct Window {
    pub job: String,
    pub schedule: Schedule,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// Occurrences the fault may legitimately cost (e.g. due while Redis was
    /// paused); reported as `excused`, not as misses.
    pub may_miss: BTreeSet<DateTime<Utc>>,
}

impl Window {
    /// A window for `job` with cron `expr` (UTC), nothing excused.
    pub fn new(job: &str, expr: &str, from: DateTime<Utc>, to: DateTime<Utc>) -> Window {
        Window {
            job: job.to_string(),
            schedule: Schedule::parse(expr, chrono_tz::UTC).expect("a valid schedule"),
            from,
            to,
            may_miss: BTreeSet::new(),
        }
    }

    /// The occurrences due in `[from, to]`.
    pub fn occurrences(&self) -> Vec<DateTime<Utc>> {
        let mut due = Vec::new();
        let mut cursor = self
            .schedule
            .next_after(self.from - chrono::TimeDelta::milliseconds(1));
        while let Some(at) = cursor.filter(|at| *at <= self.to) {
            due.push(at);
            cursor = self.schedule.next_after(at);
        }
        due
    }

    /// Whether `at` is inside the window.
    pub fn contains(&self, at: DateTime<Utc>) -> bool {
        self.from <= at && at <= self.to
    }
}

/// What the audit found. `is_clean` ignores `skipped` (an explicit overlap
/// skip is allowed by guarantee 3) and `excused`; tests assert on them.
#[derive(Debug, Default)]
pub struct Report {
    /// Occurrences the schedules had due in the windows.
    pub expected: usize,
    /// Runs whose occurrence is inside a window.
    pub runs: usize,
    /// Occurrences with more than one START.
    pub duplicates: Vec<Vec<Run>>,
    /// Due occurrences with no START, no recorded skip, not excused.
    pub misses: Vec<(String, DateTime<Utc>)>,
    /// Due occurrences with no START that the history records as skipped.
    pub skipped: Vec<Decision>,
    /// Due occurrences with no START that the window excused, with what the
    /// history says of them (if anything).
    pub excused: Vec<(String, DateTime<Utc>, Option<String>)>,
    /// Two runs of one job whose [start, end] intervals intersect.
    pub overlaps: Vec<(Run, Run)>,
    /// Consecutive runs (START order) whose fences do not strictly grow.
    pub fence_inversions: Vec<(Run, Run)>,
    /// Runs with a START and no END, and no observed end.
    pub unfinished: Vec<Run>,
}

impl Report {
    /// No duplicate, miss, overlap, fence inversion or unexplained unfinished run.
    pub fn is_clean(&self) -> bool {
        self.duplicates.is_empty()
            && self.misses.is_empty()
            && self.overlaps.is_empty()
            && self.fence_inversions.is_empty()
            && self.unfinished.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "audit: {} occurrences due, {} runs, {} duplicates, {} misses, {} skipped, {} excused, {} overlaps, {} fence inversions, {} unfinished",
            self.expected,
            self.runs,
            self.duplicates.len(),
            self.misses.len(),
            self.skipped.len(),
            self.excused.len(),
            self.overlaps.len(),
            self.fence_inversions.len(),
            self.unfinished.len()
        )?;
        for runs in &self.duplicates {
            writeln!(f, "  duplicate:")?;
            for run in runs {
                writeln!(f, "    {run}")?;
            }
        }
        for (job, at) in &self.misses {
            writeln!(f, "  miss: {job} {}", at.to_rfc3339())?;
        }
        for decision in &self.skipped {
            writeln!(f, "  skipped: {decision}")?;
        }
        for (job, at, outcome) in &self.excused {
            writeln!(
                f,
                "  excused: {job} {} (history: {outcome:?})",
                at.to_rfc3339()
            )?;
        }
        for (a, b) in &self.overlaps {
            writeln!(f, "  overlap:\n    {a}\n    {b}")?;
        }
        for (a, b) in &self.fence_inversions {
            writeln!(f, "  fence inversion:\n    {a}\n    {b}")?;
        }
        for run in &self.unfinished {
            writeln!(f, "  unfinished: {run}")?;
        }
        Ok(())
    }
}

/// Audits `runs` against `windows`, using `decisions` (history) to tell a
/// recorded skip from a miss. Only runs whose occurrence lies inside their
/// job's window are looked at.
/// Waits until a run recorded in `work`'s `records` file matches `pred`
/// and returns the first one; after `limit` fails saying `what` and
/// `context()` (the runs, or the nodes' logs).
pub fn wait_for_run(
    work: &super::Workdir,
    limit: std::time::Duration,
    what: &str,
    pred: impl Fn(&Run) -> bool,
    context: impl Fn() -> String,
) -> Run {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(run) = parse_runs(&work.lines("records"))
            .into_iter()
            .find(|run| pred(run))
        {
            return run;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for a run: {what}{}",
            context()
        );
        std::thread::sleep(super::POLL);
    }
}

pub fn audit(runs: &[Run], decisions: &[Decision], windows: &[Window]) -> Report {
    let mut report = Report::default();
    for window in windows {
        let mut mine: Vec<&Run> = runs
            .iter()
            .filter(|run| run.job == window.job && run.at().is_some_and(|at| window.contains(at)))
            .collect();
        mine.sort_by_key(|run| run.start_ns);
        report.runs += mine.len();
        let mut by_occurrence: BTreeMap<DateTime<Utc>, Vec<Run>> = BTreeMap::new();
        for run in &mine {
            let at = run.at().expect("filtered on a parsable occurrence");
            by_occurrence.entry(at).or_default().push((*run).clone());
        }
        report.duplicates.extend(
            by_occurrence
                .values()
                .filter(|runs| runs.len() > 1)
                .cloned(),
        );
        for at in window.occurrences() {
            report.expected += 1;
            if by_occurrence.contains_key(&at) {
                continue;
            }
            let name = at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            let decided = decisions
                .iter()
                .find(|d| d.job == window.job && d.occurrence == name);
            match decided {
                Some(d) if d.outcome == "skipped" => report.skipped.push(d.clone()),
                _ if window.may_miss.contains(&at) => report.excused.push((
                    window.job.clone(),
                    at,
                    decided.map(|d| d.outcome.clone()),
                )),
                _ => report.misses.push((window.job.clone(), at)),
            }
        }
        check_overlaps(&mine, &mut report);
        for pair in mine.windows(2) {
            if pair[1].fence <= pair[0].fence {
                report
                    .fence_inversions
                    .push((pair[0].clone(), pair[1].clone()));
            }
        }
        report.unfinished.extend(
            mine.iter()
                .filter(|run| run.end_ns.is_none())
                .map(|run| (*run).clone()),
        );
    }
    report
}

/// Pairs of runs (sorted by start) whose intervals intersect; a run with an
/// unknown end is skipped here (it is reported as unfinished).
fn check_overlaps(sorted: &[&Run], report: &mut Report) {
    for (i, a) in sorted.iter().enumerate() {
        let Some(a_end) = a.end_ns else { continue };
        for b in &sorted[i + 1..] {
            if b.start_ns <= a_end {
                report.overlaps.push(((*a).clone(), (*b).clone()));
            }
        }
    }
}

/// The instants of a window's occurrences as a set, for `may_miss`.
pub fn instants(ats: impl IntoIterator<Item = DateTime<Utc>>) -> BTreeSet<DateTime<Utc>> {
    ats.into_iter().collect()
}

/// How the history covers the windows' occurrences: each must be there
/// exactly once (guarantee 3, docs/guarantees.md: run, skipped, paused, missed or abandoned).
#[derive(Debug, Default)]
pub struct HistoryReport {
    /// Occurrences due in a window with no entry at all.
    pub absent: Vec<(String, DateTime<Utc>)>,
    /// Occurrences with more than one entry, with their outcomes.
    pub repeated: Vec<(String, DateTime<Utc>, Vec<String>)>,
}

impl HistoryReport {
    /// Every due occurrence has exactly one entry.
    pub fn is_exact(&self) -> bool {
        self.absent.is_empty() && self.repeated.is_empty()
    }
}

/// Checks that every occurrence due in `windows` has exactly one entry in
/// `decisions`.
pub fn history_exactly_once(decisions: &[Decision], windows: &[Window]) -> HistoryReport {
    let mut report = HistoryReport::default();
    for window in windows {
        for at in window.occurrences() {
            let name = at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            let outcomes: Vec<String> = decisions
                .iter()
                .filter(|d| d.job == window.job && d.occurrence == name)
                .map(|d| d.outcome.clone())
                .collect();
            match outcomes.len() {
                0 => report.absent.push((window.job.clone(), at)),
                1 => {}
                _ => report.repeated.push((window.job.clone(), at, outcomes)),
            }
        }
    }
    report
}
