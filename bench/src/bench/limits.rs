//! Scenario l: what a group's limits cost Redis per occurrence. The probe
//! fleet of scenario n on 3 nodes, side by side in one run: no group, a
//! group with `max_running` only, and one with `max_running` and
//! `max_starts` whose window holds about 200 starts (100 jobs a second,
//! a 2 s window). Per occurrence: the occurrences' own Redis CPU (due
//! less quiet seconds), commands and round trips, and each against the
//! run without a group. The limits never fill here: this is the cost of
//! asking, not of waiting.
//!
//! Failure model: as scenario n (set-up and Redis errors panic).

use serde_json::json;

use crate::fleet::Env;
use crate::fleet_size::{Size, measure_with};
use crate::report::Report;

const NODES: usize = 3;

pub fn run(env: &Env, report: &mut Report) {
    let scenario = "l group limits";
    let (cpu_s, monitor_s) = (env.secs(5, 15) as i64, env.secs(2, 3) as i64);
    let variants: [(&str, Option<&str>); 3] = [
        ("no group", None),
        ("max_running = 1000", Some("max_running = 1000")),
        (
            "max_running = 1000, max_starts = \"100000/2s\"",
            Some("max_running = 1000\nmax_starts = \"100000/2s\""),
        ),
    ];
    let measured: Vec<(&str, Size)> = variants
        .iter()
        .map(|(name, group)| {
            let size = measure_with(env, NODES, cpu_s, monitor_s, *group);
            eprintln!(
                "  [{scenario}] {name}: {:.1} µs own Redis CPU, {:.1} commands, {:.2} round trips per occurrence; runs {} dup {} miss {}",
                size.occurrence_cpu_us(),
                size.cost.commands(),
                size.cost.round_trips(),
                size.runs,
                size.duplicates,
                size.misses
            );
            (*name, size)
        })
        .collect();
    let Some((_, base)) = measured.first() else {
        return;
    };
    let mut text = format!(
        "\nGroup limits ({NODES} nodes, 100 every-second probe jobs, all in the group; per occurrence):\n\n| group | own Redis CPU µs | × no group | commands | + on no group | round trips | + on no group | runs / dup / miss |\n|---|---|---|---|---|---|---|---|\n"
    );
    for (name, s) in &measured {
        text.push_str(&format!(
            "| {name} | {:.1} | ×{:.2} | {:.1} | {:+.1} | {:.2} | {:+.2} | {} / {} / {} |\n",
            s.occurrence_cpu_us(),
            s.occurrence_cpu_us() / base.occurrence_cpu_us().max(1e-9),
            s.cost.commands(),
            s.cost.commands() - base.cost.commands(),
            s.cost.round_trips(),
            s.cost.round_trips() - base.cost.round_trips(),
            s.runs,
            s.duplicates,
            s.misses
        ));
        report.info(
            scenario,
            &format!("{name}, per occurrence"),
            format!(
                "own Redis CPU {:.1} µs (×{:.2} of no group), {:.1} commands ({:+.1}), {:.2} round trips ({:+.2})",
                s.occurrence_cpu_us(),
                s.occurrence_cpu_us() / base.occurrence_cpu_us().max(1e-9),
                s.cost.commands(),
                s.cost.commands() - base.cost.commands(),
                s.cost.round_trips(),
                s.cost.round_trips() - base.cost.round_trips()
            ),
        );
    }
    report.check(
        scenario,
        "duplicate runs with each group",
        "0",
        measured
            .iter()
            .map(|(name, s)| format!("{name}: {}", s.duplicates))
            .collect::<Vec<_>>()
            .join(", "),
        measured.iter().all(|(_, s)| s.duplicates == 0),
    );
    report.extra.push(text);
    report.raw(
        "l_group_limits",
        json!(
            measured
                .iter()
                .map(|(name, s)| json!({
                    "group": name,
                    "occurrence_redis_cpu_us": s.occurrence_cpu_us(),
                    "commands": s.cost.commands(),
                    "round_trips": s.cost.round_trips(),
                    "runs": s.runs, "duplicates": s.duplicates, "misses": s.misses,
                }))
                .collect::<Vec<_>>()
        ),
    );
}
