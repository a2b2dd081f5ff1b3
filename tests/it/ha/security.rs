//! TLS and passwords in the HA modes (TLS, `rediss://`, and passwords work
//! in every mode), against real TLS-only `redis-server`
//! processes (`port 0`, certificates from the test's own CA, made with
//! `openssl`) and real `solocron` daemons:
//!
//! - Sentinel: data nodes and sentinels TLS-only, replication and the
//!   sentinels' links over TLS; the daemon reaches the sentinels and the
//!   master they name over `rediss://` with `tls_ca_file`;
//! - Cluster: TLS-only nodes, bus and replication over TLS (`tls-cluster
//!   yes`), `rediss://` seeds; a job on every shard runs;
//! - Redlock: three TLS-only masters; `history` merges their copies into
//!   one entry per occurrence;
//! - in each of the three, without `tls_ca_file` (the system roots, pinned
//!   to a CA that signed nothing, do not know the test CA) nothing runs,
//!   `status` exits 1 naming the certificate, and the daemon exits 78 at
//!   start with one line saying why;
//! - Cluster with passwords: `requirepass` + `masterauth` on every node and
//!   the daemons on `password_file`; the documented ACL user with the line a
//!   cluster adds (`+cluster|slots +ping +wait`), with Redis's `ACL LOG`
//!   empty afterwards on every node; `trigger` works; a wrong password
//!   stops the daemon at once (exit 78) with one clear line naming the
//!   cluster; no password shows anywhere;
//! - Sentinel with the documented ACL user and the line Sentinel adds
//!   (`+role +wait`) on every data node: jobs, `status`, `history` and
//!   `trigger` work and `ACL LOG` stays empty.
//!
//! Breaks if the TLS settings did not reach the sentinels, the data nodes
//! a sentinel names, the cluster client or a Redlock master (no run at
//! all: the servers speak only TLS), if a server were trusted without the
//! CA, or if the cluster client's credentials or its wrong-password error
//! were lost.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use common::cluster::JobSpec;
use common::fleet::Fleet;
use common::ha::{ClusterOptions, Masters, RedisCluster, SentinelGroup, SentinelOptions};
use common::pki::Pki;
use common::{toml_path, wait_until};

/// How long the first runs (and the failures) may take to show.
const LIMIT: Duration = Duration::from_secs(20);

fn quoted(urls: &[String]) -> String {
    urls.iter()
        .map(|url| format!("\"{url}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

fn ca_line(ca: &Path) -> String {
    format!("tls_ca_file = \"{}\"", toml_path(ca))
}

fn every_second(names: &[&str]) -> Vec<JobSpec> {
    names
        .iter()
        .map(|name| JobSpec::new(name, "* * * * * *", 0.005).with("lock_ttl = \"3s\""))
        .collect()
}

fn stderr(output: &std::process::Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The environment that makes the system's roots one CA of `pki` that
/// signed nothing (`SSL_CERT_FILE`, and `SSL_CERT_DIR` an empty dir).
///
/// So they are the same on every machine, and small: the redis crate
/// reads the system's roots again at every connection attempt, even with
/// `tls_ca_file` (which then replaces them); with the ~150 of a Debian
/// system that is some 300 ms per connection in a debug build on a busy
/// machine, and a Redlock master gets 300 ms to answer (docs/HA.md).
fn pinned_system_roots(pki: &Pki) -> Vec<(String, String)> {
    pki.ca("system-roots");
    let empty = pki.path("empty-dir");
    std::fs::create_dir_all(&empty).expect("create an empty dir");
    vec![
        (
            "SSL_CERT_FILE".to_string(),
            toml_path(&pki.path("system-roots.pem")),
        ),
        ("SSL_CERT_DIR".to_string(), toml_path(&empty)),
    ]
}

/// Which of an occurrence's history entries must be there only once.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Once {
    /// Every entry: one decision per occurrence.
    Every,
    /// The `succeeded` ones (Redlock: the run's entry, written on every
    /// master, is merged into one). A decision a single master made on its
    /// own (a `skipped` after a claim's answer timed out on a busy machine)
    /// can stay beside it: docs/RELIABILITY.md, "Redlock", an open bug.
    Succeeded,
}

/// Two daemons on `redis` (a `[redis]` body) with `env`: every job of
/// `jobs` runs, `status --json` lists every job and both nodes, and
/// `history` records each run's occurrence, by the node that ran it, as
/// succeeded, and (per `once`) only once.
fn runs_jobs_with_status_and_history(
    redis: &str,
    jobs: &[&str],
    env: &[(String, String)],
    once: Once,
) -> Fleet {
    let mut fleet = Fleet::new(redis, "", &every_second(jobs)).with_env(env);
    fleet.start_node("n1");
    fleet.start_node("n2");
    for job in jobs {
        fleet.wait_for_run(LIMIT, &format!("a run of {job}"), |run| {
            run.job == *job && run.end_ns.is_some()
        });
    }
    wait_until(LIMIT, "both nodes and every job in status", || {
        let status = fleet.cli(&["status", "--json"]);
        serde_json::from_slice::<serde_json::Value>(&status.stdout).is_ok_and(|status| {
            let listed: BTreeSet<&str> = status["jobs"]
                .as_array()
                .map(|all| all.iter().filter_map(|job| job["job"].as_str()).collect())
                .unwrap_or_default();
            status["nodes"].as_array().is_some_and(|n| n.len() == 2)
                && jobs.iter().all(|job| listed.contains(job))
        })
    });
    // A run's entry is written when it ends: wait for the first ones.
    let ran = fleet.runs();
    let ended: Vec<_> = ran.iter().filter(|run| run.end_ns.is_some()).collect();
    wait_until(LIMIT, "the ended runs are in the history", || {
        let decisions = fleet.decisions(jobs);
        ended.iter().all(|run| {
            decisions.iter().any(|d| {
                d.job == run.job
                    && d.occurrence == run.occurrence
                    && d.node == run.node
                    && d.outcome == "succeeded"
            })
        })
    });
    let history = fleet.history(jobs);
    let mut seen = BTreeMap::new();
    for entry in &history {
        if once == Once::Succeeded && entry["outcome"] != "succeeded" {
            continue;
        }
        *seen
            .entry((entry["job"].to_string(), entry["occurrence"].to_string()))
            .or_insert(0) += 1;
    }
    assert!(
        seen.values().all(|&count| count == 1),
        "an occurrence is in the history more than once: {seen:?}\n{history:#?}\n{}",
        fleet.logs()
    );
    fleet
}

/// A daemon on `redis` without `tls_ca_file` (`env`: the pinned system
/// roots): `status` exits 1 naming the certificate, the daemon exits 78
/// at start with one line saying why, and nothing runs.
fn fails_closed_without_the_ca(redis: &str, job: &str, env: &[(String, String)]) {
    let mut fleet = Fleet::new(redis, "", &every_second(&[job])).with_env(env);
    let status = fleet.cli(&["status"]);
    assert_eq!(status.status.code(), Some(1), "{}", stderr(&status));
    // The error line itself says why (not only the redis crate's own log).
    let message = String::from_utf8_lossy(&status.stderr).to_string();
    assert!(
        message
            .lines()
            .any(|line| line.starts_with("error: ") && line.contains("invalid peer certificate")),
        "{}",
        stderr(&status)
    );
    // At start no retry cures it: exit 78 with one line saying why and
    // what to do.
    fleet.start_node("no-ca");
    let exit = fleet.node_mut("no-ca").wait_exit(LIMIT);
    let log = fleet.node("no-ca").log();
    assert_eq!(exit.code(), Some(78), "{log}");
    let told: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("does not trust the TLS certificate"))
        .collect();
    assert_eq!(told.len(), 1, "one line:\n{log}");
    assert!(
        told[0].contains("invalid peer certificate") && told[0].contains("tls_ca_file"),
        "{log}"
    );
    assert!(fleet.runs().is_empty(), "ran without a trusted server");
}

#[test]
fn sentinel_over_tls_runs_jobs_and_fails_closed_without_the_ca() {
    let (pki, tls) = Pki::server_files();
    let env = pinned_system_roots(&pki);
    let group = SentinelGroup::start_with(
        "solocron",
        SentinelOptions {
            tls: Some(tls.clone()),
            ..SentinelOptions::default()
        },
    );
    let urls = group.sentinel_urls();
    assert!(urls.iter().all(|url| url.starts_with("rediss://")));
    let sentinel = format!(
        "sentinel = {{ master = \"solocron\", urls = [{}] }}",
        quoted(&urls)
    );
    let fleet = runs_jobs_with_status_and_history(
        &format!("{sentinel}\n{}", ca_line(&tls.ca)),
        &["tick"],
        &env,
        Once::Every,
    );
    drop(fleet);
    fails_closed_without_the_ca(&sentinel, "tick", &env);
}

#[test]
fn cluster_over_tls_runs_a_job_on_every_shard_and_fails_closed_without_the_ca() {
    let (pki, tls) = Pki::server_files();
    let env = pinned_system_roots(&pki);
    let cluster = RedisCluster::start_with(
        3,
        1,
        ClusterOptions {
            tls: Some(tls.clone()),
            ..ClusterOptions::default()
        },
    );
    let shards = cluster.job_names_per_shard("solocron", 1);
    let jobs: Vec<&str> = shards.iter().flatten().map(String::as_str).collect();
    assert_eq!(jobs.len(), 3, "one job on each shard: {shards:?}");
    let seeds = format!("cluster = [{}]", quoted(&cluster.seed_urls()));
    assert!(seeds.contains("rediss://"), "{seeds}");
    let fleet = runs_jobs_with_status_and_history(
        &format!("{seeds}\n{}", ca_line(&tls.ca)),
        &jobs,
        &env,
        Once::Every,
    );
    drop(fleet);
    fails_closed_without_the_ca(&seeds, jobs[0], &env);
}

#[test]
fn redlock_over_tls_runs_jobs_merges_history_and_fails_closed_without_the_ca() {
    let (pki, tls) = Pki::server_files();
    let env = pinned_system_roots(&pki);
    let masters = Masters::start_tls(3, &tls);
    let redlock = format!("redlock = [{}]", quoted(&masters.urls()));
    assert!(redlock.contains("rediss://"), "{redlock}");
    let fleet = runs_jobs_with_status_and_history(
        &format!("{redlock}\n{}", ca_line(&tls.ca)),
        &["tick", "tock"],
        &env,
        Once::Succeeded,
    );
    // Each master holds its own copy of the history, merged by `history`.
    for i in 0..masters.len() {
        let mut conn = masters.conn(i);
        let copy: usize = redis::cmd("XLEN")
            .arg("{solocron:tick}:history")
            .query(&mut conn)
            .unwrap_or(0);
        assert!(copy > 0, "master {i} holds no history");
    }
    drop(fleet);
    fails_closed_without_the_ca(&redlock, "tick", &env);
}

/// Redlock over masters that ask for a password (`password_file`, the
/// same on every master): jobs run, `status`/`history` read every master;
/// a wrong password stops the daemon at once (exit 78) with one line, and
/// no password shows anywhere.
#[test]
fn redlock_with_a_password_runs_jobs_and_a_wrong_password_exits_78_at_once() {
    const PASSWORD: &str = "redlock-s3cret";
    const WRONG: &str = "wr0ng-s3cret";
    let masters = Masters::start_with_password(3, PASSWORD);
    let plain = common::ha::Creds::default();
    let urls: Vec<String> = masters.ports().iter().map(|&p| plain.url(p)).collect();
    let redlock = format!("redlock = [{}]", quoted(&urls));
    let secrets = tempfile::tempdir().expect("temp dir");
    let pass_file = |name: &str, password: &str| {
        let path = secrets.path().join(name);
        std::fs::write(&path, format!("{password}\n")).expect("write password file");
        format!("password_file = \"{}\"", toml_path(&path))
    };
    let fleet = runs_jobs_with_status_and_history(
        &format!("{redlock}\n{}", pass_file("right.pass", PASSWORD)),
        &["tick", "tock"],
        &[],
        Once::Succeeded,
    );
    let mut logs = fleet.logs();
    drop(fleet);

    let wrong = Fleet::new(
        &format!("{redlock}\n{}", pass_file("wrong.pass", WRONG)),
        "",
        &every_second(&["tick"]),
    );
    let mut node = common::Node::start_with_args(
        &wrong.work,
        "wrong-pw",
        &["--config", &toml_path(&wrong.work.path("jobs.toml"))],
        &[],
    );
    let exit = node.wait_exit(Duration::from_secs(15));
    let log = node.log();
    assert_eq!(exit.code(), Some(78), "{log}");
    let refusals = log
        .lines()
        .filter(|line| line.contains("refused node"))
        .count();
    assert_eq!(refusals, 1, "one clear line, not a loop:\n{log}");
    let status = wrong.cli(&["status"]);
    assert_eq!(status.status.code(), Some(1), "{}", stderr(&status));
    logs.push_str(&log);
    logs.push_str(&stderr(&status));
    for secret in [PASSWORD, WRONG] {
        assert!(!logs.contains(secret), "a password shows:\n{logs}");
    }
    assert!(wrong.runs().is_empty());
}

/// The ACL user of docs/operations.md with what a cluster adds, set on every node.
fn set_readme_acl_user(cluster: &RedisCluster, password: &str) {
    for port in cluster.ports() {
        let mut conn = cluster.conn(port);
        let mut lines = vec![
            common::readme_acl(password),
            common::readme_acl_line("ACL SETUSER solocron +cluster|slots", password),
        ];
        // Redis 7.2+ and Valkey know `CLIENT SETINFO` (7.0 refuses the
        // rule), and the Cluster client sends it on each connection.
        let known: Vec<redis::Value> = redis::cmd("COMMAND")
            .arg("INFO")
            .arg("client|setinfo")
            .query(&mut conn)
            .unwrap_or_default();
        if known.iter().any(|info| *info != redis::Value::Nil) {
            lines.push(common::readme_acl_line(
                "ACL SETUSER solocron +client|setinfo",
                password,
            ));
        }
        for words in lines {
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg(&words)
                .exec(&mut conn)
                .unwrap_or_else(|err| panic!("ACL SETUSER {words:?} on {port}: {err}"));
        }
        redis::cmd("ACL")
            .arg("LOG")
            .arg("RESET")
            .exec(&mut conn)
            .expect("ACL LOG RESET");
    }
}

#[test]
fn cluster_with_passwords_runs_jobs_and_a_wrong_password_exits_78_at_once() {
    const ADMIN: &str = "admin-s3cret";
    const USER: &str = "user-s3cret";
    const WRONG: &str = "wr0ng-s3cret";
    let cluster = RedisCluster::start_with(
        3,
        1,
        ClusterOptions {
            password: Some(ADMIN.to_string()),
            ..ClusterOptions::default()
        },
    );
    set_readme_acl_user(&cluster, USER);
    let shards = cluster.job_names_per_shard("solocron", 1);
    let jobs: Vec<&str> = shards.iter().flatten().map(String::as_str).collect();
    // Seeds without a password (it comes from `password_file`); the ACL
    // user is written into each URL (`username` is for Sentinel only).
    let plain = common::ha::Creds::default();
    let user = common::ha::Creds {
        user: Some("solocron".to_string()),
        ..common::ha::Creds::default()
    };
    let seed_urls: Vec<String> = cluster.ports().iter().map(|&p| plain.url(p)).collect();
    let user_urls: Vec<String> = cluster.ports().iter().map(|&p| user.url(p)).collect();
    let seeds = format!("cluster = [{}]", quoted(&seed_urls));
    let user_seeds = format!("cluster = [{}]", quoted(&user_urls));
    let secrets = tempfile::tempdir().expect("temp dir");
    let pass_file = |name: &str, password: &str| {
        let path = secrets.path().join(name);
        std::fs::write(&path, format!("{password}\n")).expect("write password file");
        format!("password_file = \"{}\"", toml_path(&path))
    };

    // `requirepass` (the default user), then the documented ACL user.
    let mut logs = String::new();
    for redis in [
        format!("{seeds}\n{}", pass_file("admin.pass", ADMIN)),
        format!("{user_seeds}\n{}", pass_file("user.pass", USER)),
    ] {
        let fleet = runs_jobs_with_status_and_history(&redis, &jobs, &[], Once::Every);
        // Exit 3: the every-second job was running at that moment; again.
        let (trigger, printed) = fleet.trigger_when_free(jobs[1], LIMIT);
        assert_eq!(trigger.status.code(), Some(0), "{printed}");
        logs.push_str(&fleet.logs());
    }
    for port in cluster.ports() {
        let refused: Vec<Vec<String>> = redis::cmd("ACL")
            .arg("LOG")
            .query(&mut cluster.conn(port))
            .unwrap_or_default();
        assert!(
            refused.is_empty(),
            "node {port} refused the documented user: {refused:?}"
        );
    }

    // A wrong password: exit 78 at once, one line naming the server.
    let wrong = Fleet::new(
        &format!("{user_seeds}\n{}", pass_file("wrong.pass", WRONG)),
        "",
        &every_second(&jobs),
    );
    let mut node = common::Node::start_with_args(
        &wrong.work,
        "wrong-pw",
        &["--config", &toml_path(&wrong.work.path("jobs.toml"))],
        &[("SOLOCRON_LOG", "debug")],
    );
    let exit = node.wait_exit(Duration::from_secs(15));
    let log = node.log();
    assert_eq!(exit.code(), Some(78), "{log}");
    let refusals: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("refused node"))
        .collect();
    assert_eq!(refusals.len(), 1, "one clear line, not a loop:\n{log}");
    assert!(
        refusals[0].contains("cluster redis://solocron@127.0.0.1:"),
        "names the cluster:\n{log}"
    );
    let status = wrong.cli(&["status"]);
    assert_eq!(status.status.code(), Some(1), "{}", stderr(&status));
    logs.push_str(&log);
    logs.push_str(&stderr(&status));
    for secret in [ADMIN, USER, WRONG] {
        assert!(!logs.contains(secret), "a password shows:\n{logs}");
    }
    assert!(wrong.runs().is_empty());
}

#[test]
fn sentinel_with_the_readme_acl_user_runs_jobs_and_redis_refuses_nothing() {
    const ADMIN: &str = "admin-s3cret";
    const USER: &str = "user-s3cret";
    let group = SentinelGroup::start_with(
        "solocron",
        SentinelOptions {
            data_password: Some(ADMIN.to_string()),
            ..SentinelOptions::default()
        },
    );
    // ACLs are not replicated: the user goes on every data node.
    for port in group.data_ports() {
        let mut conn = group.conn(port);
        for words in [
            common::readme_acl(USER),
            common::readme_acl_line("ACL SETUSER solocron +role", USER),
        ] {
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg(&words)
                .exec(&mut conn)
                .unwrap_or_else(|err| panic!("ACL SETUSER {words:?} on {port}: {err}"));
        }
        redis::cmd("ACL")
            .arg("LOG")
            .arg("RESET")
            .exec(&mut conn)
            .expect("ACL LOG RESET");
    }
    let secrets = tempfile::tempdir().expect("temp dir");
    let pass = secrets.path().join("user.pass");
    std::fs::write(&pass, format!("{USER}\n")).expect("write password file");
    let redis = format!(
        "sentinel = {{ master = \"solocron\", urls = [{}] }}\n\
         username = \"solocron\"\npassword_file = \"{}\"",
        quoted(&group.sentinel_urls()),
        toml_path(&pass)
    );
    let fleet = runs_jobs_with_status_and_history(&redis, &["tick", "tock"], &[], Once::Every);
    let (trigger, printed) = fleet.trigger_when_free("tock", LIMIT);
    assert_eq!(trigger.status.code(), Some(0), "{printed}");
    for port in group.data_ports() {
        let refused: Vec<Vec<String>> = redis::cmd("ACL")
            .arg("LOG")
            .query(&mut group.conn(port))
            .unwrap_or_default();
        assert!(
            refused.is_empty(),
            "data node {port} refused the documented user: {refused:?}"
        );
    }
    let logs = fleet.logs();
    assert!(
        !logs.contains(USER) && !logs.contains(ADMIN),
        "a password shows:\n{logs}"
    );
}
