//! Scenario p: the status page (`[daemon] status_listen`) of a fleet of
//! 1,000 jobs. One release daemon serves it; each job's history holds
//! `HISTORY` entries with a full 4 KiB output tail (the worst case: every
//! run printed at least that much; written straight into Redis, as the
//! release script writes them), every job has a last outcome. Measured from the client (a plain HTTP/1.1 GET on loopback,
//! connect to last byte): `/` (the target: under 1 s), `/status.json`
//! and one job's page, `ROUNDS` times each after a warm-up, and the size
//! of each answer.
//!
//! Failure model: a daemon or server that cannot start, or a page that
//! does not answer 200, panics (the scenario could not run).

use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::page::{fill_history, get};
use crate::common::{Node, RedisServer, Workdir, free_port, toml_path, wait_until};
use crate::report::{Report, Stats};

const JOBS: usize = 1000;
const HISTORY: usize = 20;
const TAIL: usize = 4096;
const TARGET_MS: f64 = 1000.0;

pub fn run(report: &mut Report, quick: bool) {
    let scenario = "p status page";
    let rounds = if quick { 10 } else { 30 };
    let redis = RedisServer::start();
    let work = Workdir::new();
    let port = free_port();
    let names: Vec<String> = (0..JOBS).map(|i| format!("job-{i:04}")).collect();
    let schedules = ["*/5 * * * *", "0 * * * *", "30 2 * * *", "@daily"];
    let zones = ["UTC", "Europe/Berlin", "Asia/Tashkent", "America/New_York"];
    let mut text =
        format!("[daemon]\nstatus_listen = \"127.0.0.1:{port}\"\n\n[groups.db]\nmax_running = 2\n");
    for (i, name) in names.iter().enumerate() {
        text.push_str(&format!(
            "[jobs.{name}]\nschedule = \"{}\"\ntimezone = \"{}\"\ncommand = \"true\"\n{}",
            schedules[i % schedules.len()],
            zones[i % zones.len()],
            if i % 10 == 0 { "group = \"db\"\n" } else { "" },
        ));
    }
    work.write_config(&text);
    fill_history(&redis, &names, HISTORY, TAIL);
    let args = [
        "--config",
        &toml_path(&work.path("jobs.toml")),
        "--redis",
        &redis.url(),
    ];
    let _node = Node::start_with_args(&work, "n1", &args, &[]);
    wait_until(Duration::from_secs(30), "n1 is live on the page", || {
        get(port, "/").body.contains(r#"data-label="Node">n1<"#)
    });
    let measure = |path: &str| -> (Stats, usize) {
        for _ in 0..2 {
            get(port, path);
        }
        let mut times = Vec::with_capacity(rounds);
        let mut size = 0;
        for _ in 0..rounds {
            let started = Instant::now();
            let answer = get(port, path);
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(answer.status, 200, "{path}: {}", answer.body);
            size = answer.body.len();
        }
        (Stats::of(&times), size)
    };
    let (index, index_bytes) = measure("/");
    let rows = get(port, "/").body.matches(r#"<tr class="job">"#).count();
    assert_eq!(rows, JOBS, "every job listed");
    let (json_stats, json_bytes) = measure("/status.json");
    let (job, job_bytes) = measure("/jobs/job-0500");
    let (recent, recent_bytes) = measure("/history.json?limit=20");
    let kib = |bytes: usize| bytes as f64 / 1024.0;
    report.check(
        scenario,
        &format!(
            "`/` with {JOBS} jobs ({HISTORY} history entries each, 4 KiB output tails), load time"
        ),
        "< 1 s",
        format!(
            "p50 {:.0} ms / max {:.0} ms (n={rounds}); {:.0} KiB",
            index.p50,
            index.max,
            kib(index_bytes)
        ),
        index.max < TARGET_MS,
    );
    report.info(
        scenario,
        &format!("`/status.json` with {JOBS} jobs"),
        format!(
            "p50 {:.0} ms / max {:.0} ms; {:.0} KiB",
            json_stats.p50,
            json_stats.max,
            kib(json_bytes)
        ),
    );
    report.info(
        scenario,
        "`/jobs/NAME` (20 entries with output tails)",
        format!(
            "p50 {:.0} ms / max {:.0} ms; {:.0} KiB",
            job.p50,
            job.max,
            kib(job_bytes)
        ),
    );
    report.info(
        scenario,
        "`/history.json?limit=20` (every job's newest 20 entries)",
        format!(
            "p50 {:.0} ms / max {:.0} ms; {:.0} KiB",
            recent.p50,
            recent.max,
            kib(recent_bytes)
        ),
    );
    report.raw.insert(
        "p".to_string(),
        json!({
            "jobs": JOBS, "history_per_job": HISTORY, "tail_bytes": TAIL, "rounds": rounds,
            "index_ms": {"p50": index.p50, "p99": index.p99, "max": index.max}, "index_bytes": index_bytes,
            "status_json_ms": {"p50": json_stats.p50, "max": json_stats.max}, "status_json_bytes": json_bytes,
            "job_page_ms": {"p50": job.p50, "max": job.max}, "job_page_bytes": job_bytes,
            "history_json_ms": {"p50": recent.p50, "max": recent.max}, "history_json_bytes": recent_bytes,
        }),
    );
}
