//! Measurements behind the HA design, not assertions: how redis-rs
//! 1.8's Sentinel and async Cluster clients behave across a failover, and
//! how long failovers take on the machine at hand. Every probe is
//! `#[ignore]`d (they take minutes and print rather than check); run one
//! with
//!
//! ```text
//! cargo test --test it -- --ignored --nocapture --test-threads 1 ha::probe::PROBE
//! ```
//!
//! and read the `PROBE` lines. The numbers quoted in the issue came from
//! these probes.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::ha::{Creds, RedisCluster, SentinelGroup, SentinelOptions, try_conn};
use redis::Commands as _;

/// A claim-shaped script: three keys of one job, a fence, one round trip.
const CLAIM: &str = r#"
redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000)
local fence = redis.call('HINCRBY', KEYS[2], 'fence', 1)
redis.call('XADD', KEYS[3], '*', 'token', ARGV[1])
return fence
"#;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn ms(since: Instant) -> u128 {
    since.elapsed().as_millis()
}

/// What one attempt of a write returned, compressed to a word.
fn outcome<T: std::fmt::Debug>(result: &redis::RedisResult<T>) -> String {
    match result {
        Ok(value) => format!("ok {value:?}"),
        Err(err) => match err.code() {
            Some(code) => format!("err {code}"),
            None => format!("err {:?}: {err}", err.kind()),
        },
    }
}

/// Prints the moments a sequence of `(ms, outcome)` changed outcome.
fn print_changes(label: &str, log: &[(u128, String)]) {
    let mut last: Option<&str> = None;
    for (at, what) in log {
        if last != Some(what.as_str()) {
            println!("PROBE {label}: from {at} ms: {what}");
            last = Some(what);
        }
    }
    if let Some((at, _)) = log.last() {
        println!("PROBE {label}: last attempt at {at} ms");
    }
}

fn passwords() -> SentinelOptions {
    SentinelOptions {
        data_password: Some("datapw".to_string()),
        sentinel_password: Some("sentinelpw".to_string()),
        ..SentinelOptions::default()
    }
}

/// One failover of a fresh group, graceful (`SENTINEL FAILOVER`) or by
/// SIGKILL of the master: when a replica first accepts a write, when the
/// first and the last sentinel name it, and (graceful only) what writes
/// with `WAIT 1 10` on the old master return until it turns `READONLY`.
fn failover_run(graceful: bool) {
    let mut group = SentinelGroup::start_with("solocron", passwords());
    let old = group.master_port();
    let replicas: Vec<u16> = group
        .data_ports()
        .into_iter()
        .filter(|&p| p != old)
        .collect();
    let mut old_conn = group.conn(old);
    let started = Instant::now();
    if graceful {
        let _: String = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(group.name())
            .query(&mut group.sentinel_conn(0))
            .expect("SENTINEL FAILOVER");
    } else {
        group.kill(old);
    }
    let (mut promoted, mut first_view, mut all_views) = (None, None, None);
    let mut old_log = Vec::new();
    let (mut attempt, mut acked, mut acked_by_both) = (0, Vec::new(), Vec::new());
    let mut conns: Vec<Option<redis::Connection>> = replicas.iter().map(|_| None).collect();
    while started.elapsed() < Duration::from_secs(20) {
        for (index, &port) in replicas.iter().enumerate() {
            if promoted.is_none() {
                // The sentinels' reconfiguration ends with `CLIENT KILL
                // TYPE normal`: reconnect after a dropped connection.
                let conn = conns[index].get_or_insert_with(|| group.conn(port));
                match conn.set::<_, _, ()>("probe", 1) {
                    Ok(()) => promoted = Some((port, ms(started))),
                    Err(err) if err.code().is_none() => conns[index] = None,
                    Err(_) => {}
                }
            }
        }
        let views: Vec<Option<u16>> = (0..3).map(|i| group.sentinel_view(i)).collect();
        if first_view.is_none() && views.iter().any(|v| v.is_some_and(|p| p != old)) {
            first_view = Some(ms(started));
        }
        if all_views.is_none() && views.iter().all(|v| v.is_some_and(|p| p != old)) {
            all_views = Some(ms(started));
        }
        if graceful {
            attempt += 1;
            let reply: redis::RedisResult<(String, i64, i64)> = redis::pipe()
                .cmd("SET")
                .arg(format!("w:{attempt}"))
                .arg(1)
                .cmd("WAIT")
                .arg(1)
                .arg(10)
                .cmd("WAIT")
                .arg(2)
                .arg(10)
                .query(&mut old_conn);
            if let Ok((_, one, all)) = &reply {
                if *one >= 1 {
                    acked.push((ms(started), attempt));
                }
                if *all >= 2 {
                    acked_by_both.push(attempt);
                }
            }
            let readonly = reply.as_ref().is_err_and(|e| e.code() == Some("READONLY"));
            old_log.push((ms(started), outcome(&reply)));
            if readonly && all_views.is_some() {
                break;
            }
        } else if promoted.is_some() && all_views.is_some() {
            break;
        }
        // The probe's resolution: one look every 10 ms.
        std::thread::sleep(Duration::from_millis(10));
    }
    let kind = if graceful {
        "SENTINEL FAILOVER"
    } else {
        "kill -9"
    };
    println!(
        "PROBE {kind}: promoted replica {:?} accepts writes at {:?} ms; first sentinel names it at {:?} ms, all three at {:?} ms",
        promoted.map(|p| p.0),
        promoted.map(|p| p.1),
        first_view,
        all_views
    );
    if graceful {
        print_changes("old master SET w:N + WAIT 1 10 + WAIT 2 10", &old_log);
        // Which writes a replica acknowledged on the old master are not on
        // the new one once the group is whole again?
        group.wait_settled();
        let mut new_master = group.conn(group.master_port());
        let lost: Vec<(u128, u32)> = acked
            .iter()
            .copied()
            .filter(|(_, n)| {
                !new_master
                    .exists::<_, bool>(format!("w:{n}"))
                    .unwrap_or(false)
            })
            .collect();
        println!(
            "PROBE old master: {} writes acknowledged by >= 1 replica, {} of them absent on the new master, from {:?} to {:?}",
            acked.len(),
            lost.len(),
            lost.first(),
            lost.last()
        );
        let lost_both = acked_by_both
            .iter()
            .filter(|n| {
                !new_master
                    .exists::<_, bool>(format!("w:{n}"))
                    .unwrap_or(false)
            })
            .count();
        println!(
            "PROBE old master: {} writes acknowledged by both replicas (WAIT 2), {lost_both} of them absent on the new master; the last one was write {:?}",
            acked_by_both.len(),
            acked_by_both.last()
        );
    }
}

#[test]
#[ignore = "a measurement; minutes"]
fn probe_sentinel_failover_timings() {
    for run in 1..=3 {
        println!("PROBE run {run}");
        failover_run(true);
        failover_run(false);
    }
}

#[test]
#[ignore = "a measurement"]
fn probe_sentinel_client_async() {
    use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
    let group = Arc::new(SentinelGroup::start_with("solocron", passwords()));
    let rt = runtime();
    let addrs: Vec<redis::ConnectionAddr> = group
        .sentinel_ports()
        .into_iter()
        .map(|port| redis::ConnectionAddr::Tcp("127.0.0.1".to_string(), port))
        .collect();
    let mut sentinel = SentinelClientBuilder::new(addrs, group.name(), SentinelServerType::Master)
        .expect("builder")
        .set_client_to_sentinel_password("sentinelpw")
        .set_client_to_redis_password("datapw")
        .build()
        .expect("SentinelClient");
    let old = group.master_port();
    let (mut multiplexed, mut manager, addr) = rt.block_on(async {
        let multiplexed = sentinel
            .get_async_connection()
            .await
            .expect("MultiplexedConnection");
        let client = sentinel.async_get_client().await.expect("master Client");
        let addr = client.get_connection_info().addr().to_string();
        let manager = redis::aio::ConnectionManager::new(client)
            .await
            .expect("ConnectionManager");
        (multiplexed, manager, addr)
    });
    println!("PROBE SentinelClient master address {addr} (sentinels say {old})");
    let started = Instant::now();
    let failover = {
        let group = Arc::clone(&group);
        std::thread::spawn(move || group.failover())
    };
    let (mut log_a, mut log_b) = (Vec::new(), Vec::new());
    rt.block_on(async {
        while started.elapsed() < Duration::from_secs(20) {
            let mut pipe = redis::pipe();
            pipe.cmd("SET")
                .arg("probe")
                .arg(1)
                .cmd("WAIT")
                .arg(1)
                .arg(10);
            let a: redis::RedisResult<(String, i64)> = pipe.query_async(&mut multiplexed).await;
            let b: redis::RedisResult<(String, i64)> = pipe.query_async(&mut manager).await;
            let done = a.as_ref().is_err_and(|e| e.code() == Some("READONLY"))
                && b.as_ref().is_err_and(|e| e.code() == Some("READONLY"));
            log_a.push((ms(started), outcome(&a)));
            log_b.push((ms(started), outcome(&b)));
            if done {
                break;
            }
            // The probe's resolution: one write every 20 ms.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let switch = failover.join().expect("failover");
    println!("PROBE harness failover: {switch:?}");
    print_changes("MultiplexedConnection to the old master", &log_a);
    print_changes("ConnectionManager to the old master", &log_b);
    rt.block_on(async {
        let mut again = sentinel.get_async_connection().await.expect("reconnect");
        let role: redis::Role = redis::cmd("ROLE")
            .query_async(&mut again)
            .await
            .expect("ROLE");
        let client = sentinel.async_get_client().await.expect("client");
        println!(
            "PROBE a new SentinelClient lookup after READONLY: {} ({role:?})",
            client.get_connection_info().addr()
        );
    });
}

/// `cmdstat_NAME:calls=N` of `INFO commandstats` on `port`.
fn calls(port: u16, name: &str) -> u64 {
    let mut conn = try_conn(port, &Creds::default()).expect("connect");
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut conn)
        .expect("INFO");
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{name}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn claim_pipe(sha: &str, job: &str, token: &str) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.cmd("EVALSHA")
        .arg(sha)
        .arg(3)
        .arg(format!("{{p:{job}}}:lock"))
        .arg(format!("{{p:{job}}}:state"))
        .arg(format!("{{p:{job}}}:history"))
        .arg(token)
        .cmd("WAIT")
        .arg(1)
        .arg(250);
    pipe
}

#[test]
#[ignore = "a measurement"]
fn probe_cluster_pipeline() {
    let mut cluster = RedisCluster::start(3, 1);
    let rt = runtime();
    let client = redis::cluster::ClusterClient::new(cluster.seed_urls()).expect("ClusterClient");
    let mut conn = rt
        .block_on(client.get_async_connection())
        .expect("cluster connection");
    let script = redis::Script::new(CLAIM);
    let sha: String = rt
        .block_on(script.load_async(&mut conn))
        .expect("SCRIPT LOAD");
    for port in cluster.ports() {
        let mut plain = cluster.conn(port);
        let exists: Vec<bool> = redis::cmd("SCRIPT")
            .arg("EXISTS")
            .arg(&sha)
            .query(&mut plain)
            .expect("SCRIPT EXISTS");
        let role: redis::Role = redis::cmd("ROLE").query(&mut plain).expect("ROLE");
        let kind = if matches!(role, redis::Role::Primary { .. }) {
            "master"
        } else {
            "replica"
        };
        println!("PROBE load_async: {port} ({kind}) SCRIPT EXISTS {exists:?}");
    }

    let job = "j";
    let slot = RedisCluster::slot_of(&format!("{{p:{job}}}"));
    let owner = cluster.master_of_slot(slot);
    let before: Vec<(u16, u64)> = cluster
        .master_ports()
        .iter()
        .map(|&p| (p, calls(p, "evalsha")))
        .collect();
    let reply: redis::RedisResult<(i64, i64)> =
        rt.block_on(claim_pipe(&sha, job, "t1").query_async(&mut conn));
    let after: Vec<(u16, u64)> = cluster
        .master_ports()
        .iter()
        .map(|&p| (p, calls(p, "evalsha")))
        .collect();
    println!("PROBE pipeline [EVALSHA, WAIT 1 250] on slot {slot} (master {owner}): {reply:?}");
    println!("PROBE evalsha calls per master before {before:?} after {after:?}");

    let missing = "0000000000000000000000000000000000000000";
    let noscript: redis::RedisResult<(i64, i64)> =
        rt.block_on(claim_pipe(missing, job, "t2").query_async(&mut conn));
    match &noscript {
        Err(err) => println!(
            "PROBE NOSCRIPT in a pipeline: Err kind {:?} code {:?} display `{err}`",
            err.kind(),
            err.code()
        ),
        Ok(value) => println!("PROBE NOSCRIPT in a pipeline: Ok {value:?}"),
    }
    let values: redis::RedisResult<Vec<redis::Value>> =
        rt.block_on(claim_pipe(missing, job, "t2").query_async(&mut conn));
    println!("PROBE NOSCRIPT in a pipeline as Vec<Value>: {values:?}");

    let default_client = pipeline_across_kill(&mut cluster, &rt, conn, &sha, "default client");
    cluster.restart(default_client.from);
    let strict = redis::cluster::ClusterClient::builder(cluster.seed_urls())
        .retries(0)
        .response_timeout(Duration::from_secs(1))
        .build()
        .expect("ClusterClient");
    let conn = rt
        .block_on(strict.get_async_connection())
        .expect("cluster connection");
    let _: String = rt
        .block_on(script.load_async(&mut conn.clone()))
        .expect("SCRIPT LOAD");
    let switch = pipeline_across_kill(
        &mut cluster,
        &rt,
        conn.clone(),
        &sha,
        "retries(0), response_timeout(1s)",
    );
    let mut conn = conn;
    let _: String = rt
        .block_on(script.load_async(&mut conn))
        .expect("SCRIPT LOAD again");
    let reply: redis::RedisResult<(i64, i64)> =
        rt.block_on(claim_pipe(&sha, "j", "reloaded").query_async(&mut conn));
    println!("PROBE after SCRIPT LOAD on the promoted master (no replica yet): {reply:?}");
    cluster.restart(switch.from);
    let reply: redis::RedisResult<(i64, i64)> =
        rt.block_on(claim_pipe(&sha, "j", "rejoined").query_async(&mut conn));
    println!("PROBE after the killed master rejoined as its replica: {reply:?}");
}

/// Runs the claim pipeline every 20 ms on `conn` while the master of
/// `{p:j}` is SIGKILLed, and prints how each attempt went.
fn pipeline_across_kill(
    cluster: &mut RedisCluster,
    rt: &tokio::runtime::Runtime,
    conn: redis::cluster_async::ClusterConnection,
    sha: &str,
    label: &str,
) -> common::ha::Switch {
    let owner = cluster.master_of_slot(RedisCluster::slot_of("{p:j}"));
    let log = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = Instant::now();
    let writer = {
        let (log, stop, sha) = (Arc::clone(&log), Arc::clone(&stop), sha.to_string());
        let mut conn = conn;
        rt.spawn(async move {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let sent = Instant::now();
                let reply: redis::RedisResult<(i64, i64)> = claim_pipe(&sha, "j", &format!("t{n}"))
                    .query_async(&mut conn)
                    .await;
                let took = sent.elapsed().as_millis();
                let at = sent.duration_since(started).as_millis();
                let mut what = outcome(&reply);
                if reply.is_err_and(|err| err.code() == Some("NOSCRIPT")) {
                    // What the daemon would do: load it again, retry.
                    let load = redis::Script::new(CLAIM).load_async(&mut conn).await;
                    what.push_str(&format!(" (SCRIPT LOAD again: {})", outcome(&load)));
                }
                log.lock().expect("log").push((at, took, what));
                // The probe's resolution: one pipeline every 20 ms.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    common::wait_until(
        Duration::from_secs(5),
        "the writer's pipelines are answered before the kill",
        || log.lock().expect("log").len() >= 5,
    );
    let kill_at = ms(started);
    let switch = cluster.kill_master(owner);
    println!("PROBE {label}: kill -9 of {owner} at {kill_at} ms: {switch:?}");
    // The measurement window: two more seconds of pipelines after the switch.
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    rt.block_on(writer).expect("writer");
    let mut last = String::new();
    for (at, took, what) in log.lock().expect("log").iter() {
        let word: String = what.chars().take(12).collect();
        if *took > 100 || word != last {
            println!("PROBE {label}: pipeline sent at {at} ms took {took} ms: {what}");
            last = word;
        }
    }
    let mut promoted = cluster.conn(switch.to);
    let exists: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(sha)
        .query(&mut promoted)
        .expect("SCRIPT EXISTS");
    println!(
        "PROBE {label}: promoted replica {} has the script: {exists:?}",
        switch.to
    );
    switch
}

#[test]
#[ignore = "a measurement; minutes"]
fn probe_cluster_kill_timings() {
    for run in 1..=3 {
        let mut cluster = RedisCluster::start(3, 1);
        let master = cluster.master_ports()[0];
        let replica = cluster.replicas_of(master)[0];
        let slot = cluster
            .view(master)
            .expect("view")
            .iter()
            .find(|n| n.port == master)
            .expect("self")
            .slots[0]
            .0;
        let key = (0..)
            .map(|i| format!("{{k{i}}}"))
            .find(|key| RedisCluster::slot_of(key) == slot)
            .expect("a key in the slot");
        let mut conn = cluster.conn(replica);
        let started = Instant::now();
        cluster.kill(master);
        let mut log = Vec::new();
        while started.elapsed() < Duration::from_secs(30) {
            let reply: redis::RedisResult<()> = conn.set(&key, 1);
            let ok = reply.is_ok();
            log.push((ms(started), outcome(&reply)));
            if ok {
                break;
            }
            // The probe's resolution: one look every 10 ms.
            std::thread::sleep(Duration::from_millis(10));
        }
        print_changes(
            &format!("run {run}: SET on the replica {replica} after kill -9 of {master}"),
            &log,
        );
        cluster.wait_healthy();
        println!(
            "PROBE run {run}: cluster_state ok everywhere at {} ms",
            ms(started)
        );
    }
}
