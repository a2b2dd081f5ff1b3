//! Self-tests of the HA harness (`common::ha`): each topology starts with
//! the roles, slots and sentinel view it promises, survives the one
//! failure it exists for (a failover, a master kill, a restart), and
//! leaves no process it started alive once it is dropped.

use crate::common;

use std::time::{Duration, Instant};

use common::ha::{Masters, RedisCluster, SentinelGroup, SentinelOptions, role};
use common::is_alive;
use redis::{Commands as _, Role};

/// Drops `topology` and asserts that none of `pids` is still alive.
fn assert_all_gone(pids: Vec<i32>, topology: impl Sized) {
    assert!(!pids.is_empty(), "the harness reports the pids it started");
    drop(topology);
    let alive: Vec<i32> = pids.into_iter().filter(|&pid| is_alive(pid)).collect();
    assert!(alive.is_empty(), "still alive after drop: {alive:?}");
}

fn replicas_of(role: Option<Role>) -> Vec<u16> {
    match role {
        Some(Role::Primary { replicas, .. }) => replicas
            .iter()
            .map(|replica| replica.port)
            .collect::<Vec<_>>(),
        other => panic!("not a master: {other:?}"),
    }
}

/// `WAIT replicas 1000` after a write on `conn`: how many replicas acknowledged.
fn write_and_wait(conn: &mut redis::Connection, key: &str, replicas: i64) -> i64 {
    let _: () = conn.set(key, "x").expect("SET on the master");
    redis::cmd("WAIT")
        .arg(replicas)
        .arg(1000)
        .query(conn)
        .expect("WAIT")
}

#[test]
fn sentinel_group_with_passwords_reports_its_roles_and_fails_over() {
    let options = SentinelOptions {
        data_password: Some("datapw".to_string()),
        sentinel_password: Some("sentinelpw".to_string()),
        ..SentinelOptions::default()
    };
    let group = SentinelGroup::start_with("solocron", options);
    let creds = group.data_creds();
    let master = group.master_port();
    assert_eq!(
        master,
        group.data_ports()[0],
        "the first node starts as master"
    );
    let mut replicas = replicas_of(role(master, &creds));
    replicas.sort();
    let mut others = group.data_ports()[1..].to_vec();
    others.sort();
    assert_eq!(replicas, others, "the two others replicate the master");
    for index in 0..3 {
        let view = group.sentinel_master(index).expect("SENTINEL MASTER");
        assert_eq!(view["num-slaves"], "2", "{view:?}");
        assert_eq!(view["num-other-sentinels"], "2", "{view:?}");
        assert_eq!(view["quorum"], "2", "{view:?}");
    }
    assert!(
        redis::Client::open(group.sentinel_urls()[0].as_str())
            .and_then(|client| client.get_connection())
            .and_then(|mut conn| redis::cmd("PING").query::<String>(&mut conn))
            .is_err(),
        "the sentinels require their password"
    );
    assert!(write_and_wait(&mut group.conn(master), "before", 2) == 2);

    let switch = group.failover();
    assert_eq!(switch.from, master);
    assert_ne!(switch.to, master);
    assert_eq!(group.master_port(), switch.to);
    group.wait_settled();
    assert!(
        common::ha::is_replica_of(master, switch.to, &creds),
        "the old master replicates the new one"
    );
    let mut new_master = group.conn(switch.to);
    let before: Option<String> = new_master.get("before").expect("GET");
    assert_eq!(
        before.as_deref(),
        Some("x"),
        "the acknowledged write survived"
    );
    assert_eq!(write_and_wait(&mut new_master, "after", 2), 2);
    assert_all_gone(group.pids(), group);
}

#[test]
fn sentinel_group_with_an_acl_user_survives_a_master_kill_and_a_restart() {
    let options = SentinelOptions {
        data_user: Some("admin".to_string()),
        data_password: Some("adminpw".to_string()),
        ..SentinelOptions::default()
    };
    let mut group = SentinelGroup::start_with("acl", options);
    let default_user = common::ha::Creds::default();
    assert!(
        common::ha::try_conn(group.master_port(), &default_user)
            .and_then(|mut conn| redis::cmd("PING").query::<String>(&mut conn))
            .is_err(),
        "`default` is off on the data nodes"
    );
    let switch = group.kill_master();
    assert_ne!(switch.to, switch.from);
    group.restart(switch.from);
    group.wait_settled();
    let mut replicas = replicas_of(role(switch.to, &group.data_creds()));
    replicas.sort();
    let mut others: Vec<u16> = group
        .data_ports()
        .into_iter()
        .filter(|&port| port != switch.to)
        .collect();
    others.sort();
    assert_eq!(replicas, others, "both others replicate the promoted one");

    let replica = others[0];
    group.pause(replica);
    let started = Instant::now();
    assert!(
        role(replica, &group.data_creds()).is_none(),
        "a paused node answers nothing"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the harness timeouts are short"
    );
    group.resume(replica);
    assert!(role(replica, &group.data_creds()).is_some());
    assert_all_gone(group.pids(), group);
}

#[test]
fn cluster_spreads_jobs_over_its_shards_and_survives_a_master_kill() {
    let mut cluster = RedisCluster::start(3, 1);
    assert_eq!(cluster.ports().len(), 6);
    let masters = cluster.master_ports();
    assert_eq!(masters.len(), 3, "three shards");
    for &master in &masters {
        assert_eq!(
            cluster.replicas_of(master).len(),
            1,
            "{master} has a replica"
        );
    }
    let mut conn = cluster.conn(masters[0]);
    for key in [
        "{solocron:job0}:lock",
        "{solocron}:nodes",
        "plain",
        "{}x",
        "a{b}c",
    ] {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut conn)
            .expect("CLUSTER KEYSLOT");
        assert_eq!(RedisCluster::slot_of(key), slot, "slot of {key}");
    }
    let shards = cluster.job_names_per_shard("solocron", 7);
    assert_eq!(shards.iter().map(Vec::len).sum::<usize>(), 21);
    for (master, jobs) in masters.iter().zip(&shards) {
        for job in jobs {
            let slot = RedisCluster::slot_of(&format!("{{solocron:{job}}}:lock"));
            assert_eq!(cluster.master_of_slot(slot), *master, "{job}");
        }
    }
    let job = &shards[0][0];
    let key = format!("{{solocron:{job}}}:lock");
    let mut first = cluster.conn(masters[0]);
    assert!(
        write_and_wait(&mut first, &key, 1) == 1,
        "the shard's replica acks"
    );

    let switch = cluster.kill_master(masters[0]);
    assert_eq!(
        cluster.master_of_slot(RedisCluster::slot_of(&key)),
        switch.to
    );
    let value: Option<String> = cluster.conn(switch.to).get(&key).expect("GET");
    assert_eq!(
        value.as_deref(),
        Some("x"),
        "the acknowledged write survived"
    );
    cluster.restart(switch.from);
    assert_eq!(
        cluster.replicas_of(switch.to),
        vec![switch.from],
        "rejoined as replica"
    );
    assert_all_gone(cluster.pids(), cluster);
}

#[test]
fn masters_restart_with_or_without_their_data_and_pause() {
    let mut masters = Masters::start_persistent(3);
    assert_eq!(masters.urls().len(), 3);
    for i in 0..3 {
        let _: () = masters.conn(i).set("k", i).expect("SET");
    }
    masters.restart(0);
    masters.restart_empty(1);
    masters.kill(2);
    assert!(common::ha::try_conn(masters.ports()[2], &Default::default()).is_err());
    masters.restart(2);
    let get = |masters: &Masters, i| -> Option<i64> { masters.conn(i).get("k").expect("GET") };
    assert_eq!(get(&masters, 0), Some(0), "AOF kept master 0's key");
    assert_eq!(get(&masters, 1), None, "master 1 came back empty");
    assert_eq!(
        get(&masters, 2),
        Some(2),
        "a killed master restarts with its data"
    );
    masters.pause(1);
    assert!(role(masters.ports()[1], &Default::default()).is_none());
    masters.resume(1);
    assert!(role(masters.ports()[1], &Default::default()).is_some());
    assert_all_gone(masters.pids(), masters);
}

#[test]
fn a_test_that_panics_leaves_no_process_behind() {
    let pids = std::sync::Mutex::new(Vec::new());
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut masters = Masters::start(2);
        masters.pause(0);
        masters.kill(1);
        masters.restart(1);
        *pids.lock().expect("pids") = masters.pids();
        panic!("a failing test");
    }));
    assert!(result.is_err());
    let pids = pids.into_inner().expect("pids");
    assert_eq!(pids.len(), 3, "two starts and one restart");
    let alive: Vec<i32> = pids.into_iter().filter(|&pid| is_alive(pid)).collect();
    assert!(alive.is_empty(), "still alive after the panic: {alive:?}");
}
