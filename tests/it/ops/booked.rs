//! `pause JOB --from T1 --until T2`: a pause booked
//! ahead changes nothing before T1, records the occurrences in [T1, T2)
//! `paused`, ends by itself at T2, and `status` shows it while booked.
//! Breaks if a booked pause took effect at once, or never.

use crate::common;

use std::time::Duration;

use chrono::TimeDelta;
use common::cluster::{Cluster, JobSpec, rfc3339, sleep_until, whole_second_after};
use common::{RedisServer, wait_until};

#[test]
fn a_booked_pause_covers_only_its_window_and_status_shows_it_ahead() {
    let tick = JobSpec::new("tick", "* * * * * *", 0.05);
    let mut cluster = Cluster::new(RedisServer::start(), "", std::slice::from_ref(&tick));
    cluster.start_node("n1", &[]);
    cluster.wait_for_run(Duration::from_secs(15), "a first run", |run| {
        run.job == "tick"
    });
    let from = whole_second_after(4, 1);
    let until = from + TimeDelta::seconds(3);
    let out = cluster.cli(&[
        "pause",
        "tick",
        "--from",
        &rfc3339(from),
        "--until",
        &rfc3339(until),
        "--reason",
        "freeze",
    ]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("booked: from"), "{said}");
    // Ahead of it: shown as booked, not as paused.
    let status = cluster.cli(&["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains("BOOKED PAUSES") && text.contains("freeze"),
        "{text}"
    );
    assert!(!text.contains("\nPAUSED"), "{text}");
    let json = cluster.cli(&["status", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(json["booked_pauses"][0]["job"], "tick", "{json:#}");
    sleep_until(until + TimeDelta::seconds(2));
    let names = ["tick"];
    let outcome = |at| -> String {
        cluster
            .decisions(&names)
            .iter()
            .find(|d| d.occurrence == rfc3339(at))
            .map(|d| d.outcome.clone())
            .unwrap_or_default()
    };
    wait_until(Duration::from_secs(5), "the window decided", || {
        !outcome(until + TimeDelta::seconds(1)).is_empty()
    });
    for (offset, want) in [
        (-2, "succeeded"),
        (-1, "succeeded"),
        (0, "paused"),
        (1, "paused"),
        (2, "paused"),
        (3, "succeeded"),
        (4, "succeeded"),
    ] {
        let at = from + TimeDelta::seconds(offset);
        assert_eq!(
            outcome(at),
            want,
            "{} (from {})\n{}",
            rfc3339(at),
            rfc3339(from),
            cluster.logs()
        );
    }
}
