//! The results: rows of the final markdown table (scenario, figure, target,
//! measured, met), percentile helpers, and writing `results.md` /
//! `results.json` under `target/bench/`.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{Value, json};

/// Whether a row's target was met; `Info` rows only report a figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Met {
    Yes,
    No,
    Info,
}

/// One row of the table.
#[derive(Debug, Clone)]
pub struct Row {
    pub scenario: String,
    pub figure: String,
    pub target: String,
    pub measured: String,
    pub met: Met,
}

/// Every row plus raw figures per scenario (for the JSON file).
#[derive(Default)]
pub struct Report {
    pub rows: Vec<Row>,
    pub raw: serde_json::Map<String, Value>,
    pub timings: Vec<(String, f64)>,
    /// Further markdown printed after the table (e.g. the peers side by side).
    pub extra: Vec<String>,
    broken: bool,
}

impl Report {
    /// A row with a target; `met` decides yes/no.
    pub fn check(
        &mut self,
        scenario: &str,
        figure: &str,
        target: &str,
        measured: String,
        met: bool,
    ) {
        self.push(
            scenario,
            figure,
            target,
            measured,
            if met { Met::Yes } else { Met::No },
        );
    }

    /// A row that only reports a figure.
    pub fn info(&mut self, scenario: &str, figure: &str, measured: String) {
        self.push(scenario, figure, "report", measured, Met::Info);
    }

    fn push(&mut self, scenario: &str, figure: &str, target: &str, measured: String, met: Met) {
        let row = Row {
            scenario: scenario.to_string(),
            figure: figure.to_string(),
            target: target.to_string(),
            measured,
            met,
        };
        eprintln!(
            "  [{}] {}: {} (target {}) {}",
            row.scenario,
            row.figure,
            row.measured,
            row.target,
            met_text(row.met)
        );
        self.rows.push(row);
    }

    /// A scenario that could not run (it panicked): one row saying why.
    pub fn failed(&mut self, scenario: &str, why: &str) {
        let first = why.lines().next().unwrap_or(why);
        self.push(scenario, "could not run", "—", first.to_string(), Met::No);
        self.broken = true;
    }

    /// Whether any scenario could not run.
    pub fn could_not_run(&self) -> bool {
        self.broken
    }

    /// Raw figures of a scenario (merged into `results.json`).
    pub fn raw(&mut self, scenario: &str, value: Value) {
        self.raw.insert(scenario.to_string(), value);
    }

    /// The markdown table.
    pub fn markdown(&self) -> String {
        let mut text = String::from(
            "| scenario | figure | target | measured | met |\n|---|---|---|---|---|\n",
        );
        for row in &self.rows {
            let _ = writeln!(
                text,
                "| {} | {} | {} | {} | {} |",
                row.scenario,
                row.figure,
                row.target,
                row.measured.replace('|', "\\|"),
                met_text(row.met)
            );
        }
        for extra in &self.extra {
            text.push_str(extra);
        }
        if !self.timings.is_empty() {
            text.push_str("\nscenario wall time: ");
            let parts: Vec<String> = self
                .timings
                .iter()
                .map(|(name, secs)| format!("{name} {secs:.0} s"))
                .collect();
            text.push_str(&parts.join(", "));
            text.push('\n');
        }
        text
    }

    /// Writes `results.md` and `results.json` into `dir`.
    pub fn write(&self, dir: &Path, header: &str) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(
            dir.join("results.md"),
            format!("{header}\n\n{}", self.markdown()),
        )?;
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|row| {
                json!({
                    "scenario": row.scenario,
                    "figure": row.figure,
                    "target": row.target,
                    "measured": row.measured,
                    "met": met_text(row.met),
                })
            })
            .collect();
        let timings: serde_json::Map<String, Value> = self
            .timings
            .iter()
            .map(|(name, secs)| (name.clone(), json!(secs)))
            .collect();
        let all =
            json!({ "header": header, "rows": rows, "raw": self.raw, "scenario_seconds": timings });
        std::fs::write(
            dir.join("results.json"),
            serde_json::to_string_pretty(&all).unwrap_or_default(),
        )
    }
}

fn met_text(met: Met) -> &'static str {
    match met {
        Met::Yes => "yes",
        Met::No => "**no**",
        Met::Info => "—",
    }
}

/// Percentiles (nearest rank) of a sample, in its own unit.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    pub count: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    pub min: f64,
    pub mean: f64,
}

impl Stats {
    pub fn of(values: &[f64]) -> Stats {
        if values.is_empty() {
            return Stats::default();
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(|a, b| a.total_cmp(b));
        let rank = |p: f64| {
            let index = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
            sorted[index]
        };
        Stats {
            count: sorted.len(),
            p50: rank(0.50),
            p99: rank(0.99),
            max: sorted[sorted.len() - 1],
            min: sorted[0],
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
        }
    }

    /// `p50 X / p99 Y / max Z ms (n=N)`.
    pub fn ms(&self) -> String {
        format!(
            "p50 {:.2} / p99 {:.2} / max {:.2} ms (n={})",
            self.p50, self.p99, self.max, self.count
        )
    }

    pub fn json(&self) -> Value {
        json!({"count": self.count, "p50": self.p50, "p99": self.p99, "max": self.max, "min": self.min, "mean": self.mean})
    }
}
