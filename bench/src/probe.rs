//! The benchmark's measuring job (`scripts/bench`): reads CLOCK_REALTIME
//! first thing, then appends one line with a single `write(2)` to the
//! O_APPEND file named by `BENCH_OUT`:
//!
//! ```text
//! JOB OCCURRENCE NODE FENCE START_NS
//! ```
//!
//! from `SOLOCRON_JOB`, `SOLOCRON_OCCURRENCE`, `SOLOCRON_NODE` and
//! `SOLOCRON_FENCE` (`-` when unset). std only, so its own start-up stays
//! small; the bench measures that start-up separately and reports it next
//! to the lag.

use std::io::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    let start_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| "-".to_string());
    let line = format!(
        "{} {} {} {} {start_ns}\n",
        var("SOLOCRON_JOB"),
        var("SOLOCRON_OCCURRENCE"),
        var("SOLOCRON_NODE"),
        var("SOLOCRON_FENCE"),
    );
    let Some(out) = std::env::var_os("BENCH_OUT") else {
        eprintln!("probe: BENCH_OUT is not set");
        std::process::exit(2);
    };
    let written = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&out)
        .and_then(|mut file| file.write(line.as_bytes()));
    match written {
        Ok(n) if n == line.len() => {}
        Ok(n) => {
            eprintln!("probe: short write ({n} of {} bytes)", line.len());
            std::process::exit(1);
        }
        Err(err) => {
            eprintln!("probe: {}: {err}", out.to_string_lossy());
            std::process::exit(1);
        }
    }
}
