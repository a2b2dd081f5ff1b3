//! The daemon's allocator set-up as a process: glibc's malloc arenas are
//! capped at `memory::DAEMON_ARENAS` unless the operator's `MALLOC_ARENA_MAX`
//! says otherwise (`src/memory.rs`).
//!
//! An arena other than the main one is a heap glibc maps on its own: an
//! anonymous region reserved as 64 MiB at a 64 MiB boundary (the part in
//! use read-write, the rest `---p`), so `/proc/PID/maps` shows how many
//! there are.

use crate::common;

use std::fs;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{RedisServer, Workdir, history, solocron_bin, toml_path, wait_until};

/// glibc's `HEAP_MAX_SIZE` on 64-bit: every non-main arena's reservation.
const ARENA_HEAP: u64 = 64 << 20;

/// Non-main arenas of process `pid`: anonymous mappings that start on a
/// 64 MiB boundary and, with the mappings that follow them without a gap,
/// span exactly 64 MiB.
fn arenas(pid: u32) -> usize {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).expect("read /proc/PID/maps");
    let regions: Vec<(u64, u64, bool)> = maps
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let range = fields.next()?;
            let anonymous = fields.nth(4).is_none();
            let (start, end) = range.split_once('-')?;
            let start = u64::from_str_radix(start, 16).ok()?;
            let end = u64::from_str_radix(end, 16).ok()?;
            Some((start, end, anonymous))
        })
        .collect();
    let mut count = 0;
    for (i, &(start, _, anonymous)) in regions.iter().enumerate() {
        if !anonymous || start % ARENA_HEAP != 0 {
            continue;
        }
        let mut end = start;
        for &(next_start, next_end, next_anonymous) in &regions[i..] {
            if next_start != end || !next_anonymous || next_end > start + ARENA_HEAP {
                break;
            }
            end = next_end;
        }
        if end == start + ARENA_HEAP {
            count += 1;
        }
    }
    count
}

/// Runs a daemon with an every-second job (so the runtime's workers and
/// spawning threads all allocate) until it has run twice, with
/// `MALLOC_ARENA_MAX` as given; returns its non-main arenas.
fn arenas_of_a_busy_daemon(arena_max: Option<&str>) -> usize {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config(
        r#"
[daemon]
shutdown_grace = "2s"

[jobs.tick]
schedule = "* * * * * *"
argv = ["/bin/true"]
"#,
    );
    let log = fs::File::create(work.path("n1.log")).expect("create log");
    let mut command = Command::new(solocron_bin());
    command
        .args(["run", "--node-id", "n1"])
        .args(["--config", &toml_path(&work.path("jobs.toml"))])
        .args(["--redis", &redis.url()])
        .env_remove("MALLOC_ARENA_MAX")
        .env_remove("SOLOCRON_CONFIG")
        .env_remove("SOLOCRON_REDIS_URL")
        .env("SOLOCRON_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    if let Some(max) = arena_max {
        command.env("MALLOC_ARENA_MAX", max);
    }
    let mut child = command.spawn().expect("start solocron");
    let pid = child.id();
    let ran = std::panic::catch_unwind(|| {
        wait_until(Duration::from_secs(15), "the job ran 3 times", || {
            history(&redis, "tick").len() >= 3
        })
    });
    let found = arenas(pid);
    common::signal(pid as i32, "TERM");
    let status = child.wait().expect("wait for solocron");
    let log = fs::read_to_string(work.path("n1.log")).unwrap_or_default();
    assert!(ran.is_ok(), "the job did not run; log:\n{log}");
    assert!(status.success(), "exit {status:?}; log:\n{log}");
    found
}

#[test]
fn the_daemon_caps_its_malloc_arenas() {
    let found = arenas_of_a_busy_daemon(None);
    assert!(
        found < solocron::memory::DAEMON_ARENAS as usize,
        "{found} arenas besides the main one, at most {} wanted",
        solocron::memory::DAEMON_ARENAS - 1
    );
}

#[test]
fn malloc_arena_max_in_the_environment_wins() {
    // The daemon's threads that allocate get an arena each when allowed:
    // the count this test reads is not stuck at the cap.
    let found = arenas_of_a_busy_daemon(Some("8"));
    assert!(
        found >= solocron::memory::DAEMON_ARENAS as usize,
        "only {found} arenas besides the main one with MALLOC_ARENA_MAX=8"
    );
}
