//! A fleet over time, with real daemons on a real Redis: what an operator
//! does on day 10 rather than at minute 1. Draining node after node until
//! none is left says that nothing runs any more (the command and
//! `status`), instead of "the other nodes take them".

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::{Node, RedisServer, Workdir, solocron_bin, toml_path, wait_until};

/// `solocron ARGS --config jobs.toml`.
fn cli(work: &Workdir, args: &[&str]) -> Output {
    Command::new(solocron_bin())
        .args(args)
        .args(["--config", &toml_path(&work.path("jobs.toml"))])
        .env_remove("SOLOCRON_CONFIG")
        .env_remove("SOLOCRON_REDIS_URL")
        .env_remove("SOLOCRON_NODE_ID")
        .env_remove("SOLOCRON_LOG")
        .env("USER", "tester")
        .output()
        .expect("run solocron")
}

/// Stdout and stderr of a command that must have exited 0.
fn ok(output: &Output) -> (String, String) {
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    );
    assert!(
        output.status.success(),
        "exit {:?}\nstdout: {stdout}\nstderr: {stderr}",
        output.status.code()
    );
    (stdout, stderr)
}

fn status_text(work: &Workdir) -> String {
    ok(&cli(work, &["status"])).0
}

#[test]
fn draining_every_live_node_says_that_no_job_runs_until_an_undrain() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config(&format!(
        "[redis]\nurl = \"{}\"\n\n[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n",
        redis.url()
    ));
    let _n1 = Node::start(&work, &redis, "n1", &[]);
    let _n2 = Node::start(&work, &redis, "n2", &[]);
    wait_until(Duration::from_secs(15), "status lists both nodes", || {
        status_text(&work).contains("NODES (2 live)")
    });

    // One of two: the other takes its occurrences, as the message says.
    let (said, warned) = ok(&cli(&work, &["drain", "--node", "n1"]));
    assert!(said.contains("(the other nodes take them)"), "{said}");
    assert!(!warned.contains("warning"), "{warned}");
    assert!(!status_text(&work).contains("NO JOB RUNS"));

    // The last one: nobody is left to take them, and both say so.
    let (said, warned) = ok(&cli(&work, &["drain", "--node", "n2"]));
    assert!(!said.contains("the other nodes take them"), "{said}");
    assert!(said.contains("no live node is left to take them"), "{said}");
    assert!(
        warned.contains("warning: every live node is drained now (n1, n2): no node claims")
            && warned.contains("`solocron undrain --node ID`"),
        "{warned}"
    );
    let status = status_text(&work);
    assert!(
        status.contains("NO JOB RUNS: every live node is drained"),
        "{status}"
    );

    // One undrained node runs the jobs again: the line goes away.
    ok(&cli(&work, &["undrain", "--node", "n1"]));
    let status = status_text(&work);
    assert!(!status.contains("NO JOB RUNS"), "{status}");
}
