//! One node is first in line for each occurrence and claims it; the second
//! and the backstop read whether it was decided (plain reads, no claim
//! script), log who won, and claim only an occurrence left undecided;
//! every other node sends nothing for it (guarantee 12): Redis runs about
//! one claim script and under two peeks per occurrence whatever the number
//! of nodes, every occurrence still runs once, and a stopped node's share
//! is run by the others (real redis-server, five real daemons, `MONITOR`
//! through `redis-cli`).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use common::{Monitor, Node, RedisServer, Workdir, records, signal, toml_path, wait_until};

const JOBS: [&str; 4] = ["a", "b", "c", "d"];

fn config(runs: &Path) -> String {
    JOBS.iter()
        .map(|job| {
            format!(
                r#"
[jobs.{job}]
schedule = "* * * * * *"
command = 'echo "$SOLOCRON_OCCURRENCE $SOLOCRON_NODE $SOLOCRON_FENCE" >> {}'
"#,
                toml_path(&runs.with_extension(job))
            )
        })
        .collect()
}

/// Every job's run records so far: (job, occurrence) -> nodes that ran it.
fn runs(work: &Workdir) -> BTreeMap<(String, String), Vec<String>> {
    let mut all: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for job in JOBS {
        for record in records(&work.lines(&format!("runs.{job}"))) {
            all.entry((job.to_string(), record.occurrence))
                .or_default()
                .push(record.node);
        }
    }
    all
}

/// Top-level (not from a script) scheduled claims and peeks in `text`, and
/// the scheduled occurrences the claims named.
fn claims_and_peeks(text: &str) -> (usize, usize, BTreeSet<String>) {
    let (mut claims, mut peeks) = (0, 0);
    let mut occurrences = BTreeSet::new();
    for line in text.lines().filter(|line| !line.contains(" lua]")) {
        let args: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
        match args.first().map(|name| name.to_ascii_lowercase()) {
            Some(name) if name == "evalsha" || name == "eval" => {
                if let Some(at) = args.iter().position(|arg| *arg == "scheduled") {
                    claims += 1;
                    let job = args.get(3).copied().unwrap_or_default();
                    let occ = args.get(at + 1).copied().unwrap_or_default();
                    occurrences.insert(format!("{job} {occ}"));
                }
            }
            Some(name) if name == "hmget" && args.contains(&"last_occ") => peeks += 1,
            _ => {}
        }
    }
    (claims, peeks, occurrences)
}

fn n3_holds_a_lock(redis: &RedisServer) -> bool {
    let mut conn = redis.conn();
    JOBS.iter().any(|job| {
        let value: Option<String> = redis::cmd("GET")
            .arg(format!("{{solocron:{job}}}:lock"))
            .query(&mut conn)
            .unwrap_or(None);
        value.is_some_and(|value| value.ends_with(" n3"))
    })
}

fn wait_for_live_nodes(nodes: &[&Node], count: usize, limit: Duration) {
    let needle = format!("count={count}");
    for node in nodes {
        wait_until(limit, &format!("a node logged {count} live nodes"), || {
            node.log()
                .lines()
                .any(|line| line.contains("nodes in line changed") && line.contains(&needle))
        });
    }
}

#[test]
fn one_claim_and_under_two_peeks_per_occurrence_on_five_nodes_and_a_stopped_nodes_share_still_runs()
{
    let redis = RedisServer::start();
    let work = Workdir::new();
    let runs_base = work.path("runs");
    work.write_config(&config(&runs_base));
    let n1 = Node::start(&work, &redis, "n1", &[]);
    let n2 = Node::start(&work, &redis, "n2", &[]);
    let n3 = Node::start(&work, &redis, "n3", &[]);
    let n4 = Node::start(&work, &redis, "n4", &[]);
    let n5 = Node::start(&work, &redis, "n5", &[]);
    let all_nodes = [&n1, &n2, &n3, &n4, &n5];
    wait_for_live_nodes(&all_nodes, 5, Duration::from_secs(40));

    // A window of traffic with every node knowing the other two.
    let monitor = Monitor::start(&redis, work.path("monitor.txt"));
    let before = runs(&work);
    wait_until(Duration::from_secs(40), "60 more occurrences ran", || {
        runs(&work).len() >= before.len() + 60
    });
    let text = monitor.text();
    drop(monitor);
    let (claims, peeks, occurrences) = claims_and_peeks(&text);
    println!(
        "window: {} occurrences claimed, {claims} claim scripts, {peeks} peeks",
        occurrences.len()
    );
    assert!(
        occurrences.len() >= 30,
        "{} occurrences in the window",
        occurrences.len()
    );
    // Without an order every node sends a claim script (5 per occurrence);
    // with every node but the first looking, 4 peeks per occurrence.
    assert!(
        claims <= occurrences.len() * 3 / 2,
        "{claims} claim scripts for {} occurrences (about 1 each expected; a node that \
         finds its first node late claims too)",
        occurrences.len()
    );
    // The second peeks at every occurrence, the backstop at those it is
    // neither first nor second for (3 in 5): about 1.6 each.
    assert!(
        peeks >= occurrences.len() && peeks <= occurrences.len() * 2,
        "{peeks} peeks for {} occurrences (about 1.6 each expected)",
        occurrences.len()
    );
    let all = runs(&work);
    let twice: Vec<_> = all.iter().filter(|(_, nodes)| nodes.len() > 1).collect();
    assert!(
        twice.is_empty(),
        "occurrences run more than once: {twice:?}"
    );
    // Each node is first for its share of the window's occurrences (1/5
    // each; at least 1/20 of 60 leaves no room for chance to fail it).
    let window: Vec<&Vec<String>> = all
        .iter()
        .filter(|(key, _)| !before.contains_key(*key))
        .map(|(_, nodes)| nodes)
        .collect();
    for node in ["n1", "n2", "n3", "n4", "n5"] {
        let won = window.iter().filter(|nodes| nodes[0] == node).count();
        assert!(
            won * 20 >= window.len(),
            "{node} ran {won} of the window's {} occurrences",
            window.len()
        );
    }
    // The nodes that peeked log the winner as a losing claim does.
    for node in all_nodes {
        assert!(
            node.log()
                .lines()
                .any(|line| line.contains("claim lost") && line.contains("winner=")),
            "no `claim lost` line naming the winner:\n{}",
            node.log()
        );
    }

    // n3 stops (in line until its beat is overdue): the occurrences it is
    // first for are claimed by their second node a moment late, then it
    // leaves the line.
    // Stopped mid-second, when no run of n3 is in progress (a run holds its
    // lock while stopped, and the job's next occurrences would be skipped
    // behind it): if n3 holds a lock anyway, it goes on and tries again.
    let mut stopped = false;
    for _ in 0..10 {
        wait_until(Duration::from_secs(2), "the middle of a second", || {
            (400..600).contains(&chrono::Utc::now().timestamp_subsec_millis())
        });
        signal(n3.pid(), "STOP");
        if !n3_holds_a_lock(&redis) {
            stopped = true;
            break;
        }
        signal(n3.pid(), "CONT");
        // Past this second's middle: the next attempt is in the next second.
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(
        stopped,
        "n3 held a lock at every attempt to stop it between runs"
    );
    let stopped_at = chrono::Utc::now() + chrono::TimeDelta::seconds(1);
    wait_until(
        Duration::from_secs(30),
        "8 seconds passed with n3 stopped",
        || chrono::Utc::now() > stopped_at + chrono::TimeDelta::seconds(8),
    );
    // Overdue for 8 s (3 s without a beat drop it), n3 is out of line on
    // every other node.
    wait_for_live_nodes(&[&n1, &n2, &n4, &n5], 4, Duration::from_secs(5));
    let all = runs(&work);
    signal(n3.pid(), "CONT");
    let window: Vec<_> = all
        .iter()
        .filter(|((_, occurrence), _)| {
            chrono::DateTime::parse_from_rfc3339(occurrence)
                .is_ok_and(|at| at > stopped_at && at <= stopped_at + chrono::TimeDelta::seconds(6))
        })
        .collect();
    assert_eq!(
        window.len(),
        JOBS.len() * 6,
        "every occurrence of the 6 s after n3 stopped ran: {window:?}"
    );
    for ((job, occurrence), nodes) in &window {
        assert_eq!(nodes.len(), 1, "{job} {occurrence} ran on {nodes:?}");
        assert_ne!(nodes[0], "n3", "{job} {occurrence} ran on the stopped node");
    }
}
