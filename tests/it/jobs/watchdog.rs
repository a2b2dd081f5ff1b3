//! The watchdog keeps a long run's lease, and stops the run before the lock
//! could expire in Redis when renewals cannot be confirmed (Redis paused).
//!
//! Jobs here are due once an hour at the minute the test starts, with
//! `starting_deadline = "1h"` ([`common::caught_up_at_once`], which also
//! marks the job as decided before): the node catches that occurrence up
//! as soon as it starts, and no later occurrence
//! (skipped while the run holds the lock) comes within the test.

use crate::common;

use std::time::{Duration, Instant};

use common::{Node, RedisServer, Workdir, history, is_alive, read_pid, toml_path, wait_until};
use redis::Commands as _;

const LOCK: &str = "{solocron:long}:lock";

fn config(work: &Workdir, redis: &RedisServer, lock_ttl: &str, on_lock_lost: &str, command: &str) {
    work.write_config(&format!(
        r#"
[jobs.long]
{schedule}
lock_ttl = "{lock_ttl}"
on_lock_lost = "{on_lock_lost}"
command = '{command}'
"#,
        schedule = common::caught_up_at_once(redis, "long")
    ));
}

#[test]
fn a_run_three_times_longer_than_lock_ttl_keeps_the_lock() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let pid_file = toml_path(&work.path("pid"));
    config(
        &work,
        &redis,
        "1s",
        "kill",
        &format!("echo $$ > {pid_file}; sleep 3.5"),
    );
    let node = Node::start(&work, &redis, "n1", &[]);
    wait_until(Duration::from_secs(10), "the job started", || {
        read_pid(&work, "pid").is_some()
    });
    let mut conn = redis.conn();
    let mut samples = 0;
    let started = Instant::now();
    wait_until(Duration::from_secs(10), "the run finished", || {
        let finished = !history(&redis, "long").is_empty();
        if !finished && started.elapsed() < Duration::from_millis(3300) {
            let holder: Option<String> = conn.get(LOCK).expect("GET");
            let holder = holder.expect("the lock must be held for the whole run");
            assert!(holder.ends_with(" n1"), "{holder}");
            samples += 1;
        }
        finished
    });
    // Enough samples to cover every renewal period (1 s TTL, renewed every 333 ms).
    assert!(samples >= 20, "sampled the lock {samples} times");
    let entries = history(&redis, "long");
    assert_eq!(entries[0]["outcome"], "succeeded", "{entries:?}");
    assert!(!node.log().contains("lock lost"), "{}", node.log());
    let lock: Option<String> = conn.get(LOCK).expect("GET");
    assert_eq!(lock, None, "released after the run");
}

#[test]
fn redis_paused_longer_than_lock_ttl_kills_the_run_before_the_lock_expires() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let pid_file = toml_path(&work.path("pid"));
    config(
        &work,
        &redis,
        "2s",
        "kill",
        &format!("echo $$ > {pid_file}; exec sleep 30"),
    );
    let node = Node::start(&work, &redis, "n1", &[]);
    wait_until(Duration::from_secs(10), "the job started", || {
        read_pid(&work, "pid").is_some()
    });
    let pid = read_pid(&work, "pid").expect("pid");
    let expires_at = redis.pause_right_after_a_renewal(LOCK, 2000);
    let dead = {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if !is_alive(pid) {
                break Instant::now();
            }
            assert!(Instant::now() < deadline, "the job survived the lost lease");
            // Finer than POLL: the instant it is gone is compared.
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    redis.resume();
    assert!(
        dead < expires_at,
        "the job must be gone before its lock could expire in redis ({:?} too late)",
        dead - expires_at
    );
    node.wait_for_log(Duration::from_secs(5), "lock lost: stopping the run");
    wait_until(Duration::from_secs(15), "the outcome is recorded", || {
        !history(&redis, "long").is_empty()
    });
    assert_eq!(history(&redis, "long")[0]["outcome"], "lock_lost");
}

#[test]
fn with_on_lock_lost_continue_the_run_goes_on_and_the_loss_is_logged() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let pid_file = toml_path(&work.path("pid"));
    config(
        &work,
        &redis,
        "1s",
        "continue",
        &format!("echo $$ > {pid_file}; exec sleep 4"),
    );
    let node = Node::start(&work, &redis, "n1", &[]);
    wait_until(Duration::from_secs(10), "the job started", || {
        read_pid(&work, "pid").is_some()
    });
    let pid = read_pid(&work, "pid").expect("pid");
    let expires_at = redis.pause_right_after_a_renewal(LOCK, 1000);
    node.wait_for_log(Duration::from_secs(5), "lock lost: the run continues");
    // Time itself is the input: the lock's TTL passes in paused Redis.
    std::thread::sleep(
        (expires_at + Duration::from_millis(300)).saturating_duration_since(Instant::now()),
    );
    assert!(
        is_alive(pid),
        "the run must go on with on_lock_lost = continue"
    );
    redis.resume();
    wait_until(Duration::from_secs(15), "the outcome is recorded", || {
        history(&redis, "long")
            .iter()
            .any(|entry| entry["outcome"] == "succeeded")
    });
    let entries = history(&redis, "long");
    assert_eq!(entries.len(), 1, "one entry for the run: {entries:?}");
}
