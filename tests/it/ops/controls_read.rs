//! The fleet controls' every-second read (`control::snapshot`) on a real
//! redis-server: plain reads, no script; the pauses are fetched only when
//! their version changed (the aborts, a small hash, every time); stale and broken `trigger --fleet` requests are
//! dropped from the list, fresh ones kept.

use crate::common;

use std::collections::BTreeMap;

use common::{RedisServer, command_calls, locker, reset_stats};
use redis::Commands as _;
use solocron::control;

fn mark(at_ms: i64) -> String {
    format!(r#"{{"at_ms":{at_ms},"active":true,"by":"ops@host","since_ms":{at_ms}}}"#)
}

#[tokio::test]
async fn the_every_second_read_runs_no_script_and_reads_the_pauses_only_when_they_changed() {
    let redis = RedisServer::start();
    let conn = locker(&redis, "n1").await.connection();
    let mut admin = redis.conn();

    reset_stats(&redis);
    let empty = control::snapshot(&conn, "solocron", "n1", "0", 0, None)
        .await
        .expect("snapshot");
    assert_eq!(
        (
            empty.version.as_str(),
            empty.pauses.is_none(),
            empty.drain.is_none()
        ),
        ("0", true, true),
        "{empty:?}"
    );
    assert_eq!(
        command_calls(&redis),
        // The pauses' version and the drain; the aborts (`solocron abort`).
        BTreeMap::from([("hget".to_string(), 2), ("hgetall".to_string(), 1)])
    );

    let _: () = admin
        .hset_multiple(
            "{solocron}:pauses",
            &[("~version", "3".to_string()), ("report", mark(1_000))],
        )
        .expect("HSET pauses");
    let _: () = admin
        .hset("{solocron}:drains", "n1", mark(2_000))
        .expect("HSET drains");
    let changed = control::snapshot(&conn, "solocron", "n1", "0", 0, None)
        .await
        .expect("snapshot");
    assert_eq!(changed.version, "3");
    let pauses = changed.pauses.expect("the pauses, their version changed");
    assert_eq!(pauses.keys().collect::<Vec<_>>(), ["report"]);
    assert_eq!(changed.drain.map(|d| d.at_ms), Some(2_000));

    reset_stats(&redis);
    let same = control::snapshot(&conn, "solocron", "n1", "3", 0, None)
        .await
        .expect("snapshot");
    assert!(same.pauses.is_none(), "unchanged version: no pauses read");
    assert_eq!(
        command_calls(&redis),
        BTreeMap::from([("hget".to_string(), 2), ("hgetall".to_string(), 1)]),
        "no script, no HGETALL of the pauses (the aborts' only)"
    );
}

#[tokio::test]
async fn stale_and_broken_requests_are_dropped_and_fresh_ones_kept_oldest_first() {
    let redis = RedisServer::start();
    let conn = locker(&redis, "n1").await.connection();
    let mut admin = redis.conn();
    let (secs, _): (i64, i64) = redis::cmd("TIME").query(&mut admin).expect("TIME");
    let now_ms = secs * 1000;
    let fresh_1 = format!(
        r#"{{"id":"r1","job":"report","deadline_ms":{}}}"#,
        now_ms + 30_000
    );
    let stale = format!(
        r#"{{"id":"r0","job":"report","deadline_ms":{}}}"#,
        now_ms - 120_000
    );
    let fresh_2 = format!(
        r#"{{"id":"r2","job":"report","deadline_ms":{}}}"#,
        now_ms + 30_000
    );
    for raw in [
        stale.as_str(),
        "not json",
        fresh_1.as_str(),
        fresh_2.as_str(),
    ] {
        // As `trigger --fleet` adds them: newest at the head.
        let _: i64 = admin.lpush("{solocron}:requests", raw).expect("LPUSH");
    }
    let snapshot = control::snapshot(&conn, "solocron", "n1", "0", 16, None)
        .await
        .expect("snapshot");
    assert_eq!(snapshot.pending, vec![fresh_1.clone(), fresh_2.clone()]);
    let left: Vec<String> = admin.lrange("{solocron}:requests", 0, -1).expect("LRANGE");
    assert_eq!(
        left,
        vec![fresh_2, fresh_1],
        "stale and broken ones removed"
    );
}
