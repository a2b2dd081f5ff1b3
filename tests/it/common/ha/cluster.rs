//! A Redis Cluster: `masters × (1 + replicas_per_master)` servers with
//! `--cluster-enabled yes --cluster-node-timeout 2000
//! --cluster-require-full-coverage no`, joined by
//! `redis-cli --cluster create … --cluster-replicas R --cluster-yes`.
//!
//! Ports come from 20000–22767, so each node's bus port (port + 10000)
//! is free as well and both stay below the kernel's ephemeral range
//! (32768 up), where a client's outgoing connection could take them
//! between the check and the start. The cluster is described only by what
//! its nodes report (`CLUSTER NODES`, `CLUSTER INFO`, `ROLE`), parsed into
//! [`ClusterNode`]s: after a kill the shard map is whatever the survivors
//! agree on. Healthy means every running node says `cluster_state:ok` with
//! all 16384 slots ok, and all of them agree on the master of every slot.
//!
//! With [`ClusterOptions`] every node gets `requirepass` and `masterauth`
//! (the `default` user's password, which the harness then presents), extra
//! arguments (e.g. an ACL user for the daemons), and/or TLS only: `port 0`,
//! `tls-port`, replication and the cluster bus (`tls-cluster yes`) over
//! TLS, `redis-cli --tls --cacert` for the create, `rediss://` for every
//! harness connection.

use std::collections::HashSet;
use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use redis::Role;

pub use super::nodes::{ClusterNode, slot_of};
use super::nodes::{parse_node_line, shows_replicas, slot_map, slot_owner};
use super::{Creds, RedisProcess, Switch, conn, info_fields, role, try_conn, wait_for};
use crate::common::pki::TlsFiles;

/// How long the cluster may take to form, or to heal after a change.
const HEAL_LIMIT: Duration = Duration::from_secs(30);

/// Passwords, TLS and extra arguments of a [`RedisCluster`].
#[derive(Debug, Clone, Default)]
pub struct ClusterOptions {
    /// `requirepass` and `masterauth` on every node.
    pub password: Option<String>,
    /// Every node TLS-only with these files, the bus included.
    pub tls: Option<TlsFiles>,
    /// Extra `redis-server` arguments for every node, one word each.
    pub data_args: Vec<String>,
}

/// The cluster's servers; see the module doc.
pub struct RedisCluster {
    nodes: Vec<RedisProcess>,
    replicas_per_master: usize,
    creds: Creds,
}

impl RedisCluster {
    /// Starts and joins the cluster; returns once it is healthy and every
    /// master has `replicas_per_master` connected replicas.
    pub fn start(masters: usize, replicas_per_master: usize) -> RedisCluster {
        RedisCluster::start_with(masters, replicas_per_master, ClusterOptions::default())
    }

    /// Like [`RedisCluster::start`], with `options`.
    pub fn start_with(
        masters: usize,
        replicas_per_master: usize,
        options: ClusterOptions,
    ) -> RedisCluster {
        assert!(masters >= 3, "redis-cli --cluster create needs 3 masters");
        let mut cluster = RedisCluster {
            nodes: Vec::new(),
            replicas_per_master,
            creds: Creds {
                user: None,
                password: options.password.clone(),
                tls: options.tls.clone(),
            },
        };
        let mut taken = HashSet::new();
        for _ in 0..masters * (1 + replicas_per_master) {
            let mut node = RedisProcess::new(cluster_port(&mut taken));
            let config = node.dir().join("nodes.conf").display().to_string();
            let extra: Vec<String> = [
                "--cluster-enabled",
                "yes",
                "--cluster-node-timeout",
                "2000",
                // As docs/HA.md says to: a failed master's slots must not
                // stop the other shards (the default answers CLUSTERDOWN
                // everywhere until a replica took over).
                "--cluster-require-full-coverage",
                "no",
                "--cluster-config-file",
                &config,
            ]
            .iter()
            .map(|arg| arg.to_string())
            .collect();
            let mut extra = extra;
            if let Some(password) = &options.password {
                extra.extend(
                    ["--requirepass", password, "--masterauth", password].map(String::from),
                );
            }
            if let Some(tls) = &options.tls {
                extra.extend(tls.server_args(node.port(), true));
            }
            extra.extend(options.data_args.iter().cloned());
            node.start(node.data_args(&extra));
            node.wait_ready(&cluster.creds);
            cluster.nodes.push(node);
        }
        cluster.create();
        cluster.wait_healthy();
        cluster.wait_replicas_linked();
        cluster
    }

    fn create(&self) {
        let addrs: Vec<String> = self
            .ports()
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        let output = Command::new("redis-cli")
            .args(self.creds.cli_args())
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &self.replicas_per_master.to_string()])
            .arg("--cluster-yes")
            .output()
            .expect("`redis-cli` must be on PATH (apt-get install redis-server)");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Every node's port, in start order (running or not).
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisProcess::port).collect()
    }

    /// `redis[s]://[:PASSWORD@]127.0.0.1:PORT/` of every running node.
    pub fn seed_urls(&self) -> Vec<String> {
        self.running().map(|node| self.url(node.port())).collect()
    }

    pub fn url(&self, port: u16) -> String {
        self.creds.url(port)
    }

    /// What every harness connection presents.
    pub fn creds(&self) -> &Creds {
        &self.creds
    }

    /// A sync connection to the node on `port` (plain, not cluster-aware).
    pub fn conn(&self, port: u16) -> redis::Connection {
        conn(port, &self.creds)
    }

    /// `CLUSTER NODES` as the node on `port` sees it; `None` if it does not answer.
    pub fn view(&self, port: u16) -> Option<Vec<ClusterNode>> {
        let mut conn = try_conn(port, &self.creds).ok()?;
        let text: String = redis::cmd("CLUSTER").arg("NODES").query(&mut conn).ok()?;
        Some(text.lines().filter_map(parse_node_line).collect())
    }

    /// The masters serving slots, ordered by their first slot, as the first
    /// running node that answers sees them.
    pub fn master_ports(&self) -> Vec<u16> {
        let mut masters: Vec<(u16, u16)> = self
            .any_view()
            .into_iter()
            .filter(|node| node.is_master() && !node.is_failing() && !node.slots.is_empty())
            .map(|node| (node.slots[0].0, node.port))
            .collect();
        masters.sort();
        masters.into_iter().map(|(_, port)| port).collect()
    }

    /// The replicas of the master on `port`, as the first running node sees them.
    pub fn replicas_of(&self, port: u16) -> Vec<u16> {
        let view = self.any_view();
        let Some(master) = view.iter().find(|node| node.port == port) else {
            return Vec::new();
        };
        view.iter()
            .filter(|node| node.master_id.as_deref() == Some(master.id.as_str()))
            .map(|node| node.port)
            .collect()
    }

    /// The port of the master serving `slot`.
    pub fn master_of_slot(&self, slot: u16) -> u16 {
        slot_owner(&self.any_view(), slot).unwrap_or_else(|| panic!("no master serves {slot}"))
    }

    /// The slot of `key` (CRC16 of its hash tag, as Redis computes it).
    pub fn slot_of(key: &str) -> u16 {
        slot_of(key)
    }

    /// For each master of [`RedisCluster::master_ports`], `n` job names
    /// (`job0`, `job1`, …) whose keys `{prefix:job}` live on it.
    pub fn job_names_per_shard(&self, prefix: &str, n: usize) -> Vec<Vec<String>> {
        let masters = self.master_ports();
        let view = self.any_view();
        let mut shards: Vec<Vec<String>> = vec![Vec::new(); masters.len()];
        let mut index = 0;
        while shards.iter().any(|names| names.len() < n) {
            let name = format!("job{index}");
            index += 1;
            let owner = slot_owner(&view, slot_of(&format!("{{{prefix}:{name}}}")));
            if let Some(shard) = masters.iter().position(|port| Some(*port) == owner)
                && shards[shard].len() < n
            {
                shards[shard].push(name);
            }
            assert!(index < 100_000, "no job names for every shard");
        }
        shards
    }

    /// SIGKILLs the master on `port`, then waits until one of its replicas
    /// serves its slots and the cluster is healthy again.
    pub fn kill_master(&mut self, port: u16) -> Switch {
        let replicas = self.replicas_of(port);
        assert!(!replicas.is_empty(), "{port} is not a master with replicas");
        let slot = self
            .any_view()
            .into_iter()
            .find(|node| node.port == port)
            .and_then(|node| node.slots.first().map(|range| range.0))
            .expect("the master serves slots");
        let started = Instant::now();
        self.node_mut(port).kill();
        let mut to = 0;
        wait_for(
            HEAL_LIMIT,
            &format!("a replica of {port} serves slot {slot} and the cluster is ok"),
            &self.procs(),
            || {
                let owner = self.agreed_owner(slot);
                to = owner.unwrap_or(0);
                owner.is_some_and(|owner| replicas.contains(&owner))
                    && matches!(role(to, &self.creds), Some(Role::Primary { .. }))
                    && self.is_healthy()
            },
        );
        Switch {
            from: port,
            to,
            took: started.elapsed(),
        }
    }

    /// SIGKILLs the node on `port` (no wait).
    pub fn kill(&mut self, port: u16) {
        self.node_mut(port).kill();
    }

    /// Starts the killed node on `port` again with its dir (and so its
    /// `nodes.conf`, without data); it rejoins, as a replica if its slots
    /// were taken over. Waits until the cluster is healthy, every running
    /// node sees it healthy as a replica (or a master with slots), and its
    /// replication link is up.
    pub fn restart(&mut self, port: u16) {
        let creds = self.creds.clone();
        let node = self.node_mut(port);
        assert!(!node.is_running(), "restart a killed node, not {port}");
        node.start_again();
        node.wait_ready(&creds);
        wait_for(
            HEAL_LIMIT,
            &format!("{port} rejoined and the cluster is ok"),
            &self.procs(),
            || {
                let settled = |n: &ClusterNode| {
                    n.port == port
                        && !n.is_failing()
                        && (n.master_id.is_some() || !n.slots.is_empty())
                };
                self.is_healthy()
                    && self.running().all(|other| {
                        self.view(other.port())
                            .is_some_and(|view| view.iter().any(settled))
                    })
                    && match role(port, &self.creds) {
                        Some(Role::Replica {
                            replication_state, ..
                        }) => replication_state == "connected",
                        Some(Role::Primary { .. }) => true,
                        _ => false,
                    }
            },
        );
    }

    /// SIGSTOP of the node on `port`.
    pub fn pause(&self, port: u16) {
        self.node(port).pause();
    }

    /// SIGCONT of the node on `port`.
    pub fn resume(&self, port: u16) {
        self.node(port).resume();
    }

    /// Waits until [`RedisCluster::is_healthy`].
    pub fn wait_healthy(&self) {
        wait_for(HEAL_LIMIT, "the cluster is healthy", &self.procs(), || {
            self.is_healthy()
        });
    }

    /// Every running node reports `cluster_state:ok` with 16384 slots ok,
    /// and all of them name the same master for every slot.
    pub fn is_healthy(&self) -> bool {
        let mut maps = Vec::new();
        for node in self.running() {
            let Ok(mut conn) = try_conn(node.port(), &self.creds) else {
                return false;
            };
            let Ok(text) = redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut conn) else {
                return false;
            };
            let info = info_fields(&text);
            if info.get("cluster_state").map(String::as_str) != Some("ok")
                || info.get("cluster_slots_ok").map(String::as_str) != Some("16384")
            {
                return false;
            }
            let Some(view) = self.view(node.port()) else {
                return false;
            };
            maps.push(slot_map(&view));
        }
        maps.windows(2).all(|pair| pair[0] == pair[1])
    }

    /// Waits until every master's `ROLE` lists its connected replicas and
    /// every running node's `CLUSTER NODES` shows them (gossip lags the
    /// replication link): after a paused master was failed over, until it
    /// came back as its successor's replica.
    pub fn wait_replicas_linked(&self) {
        let want = self.replicas_per_master;
        wait_for(
            HEAL_LIMIT,
            &format!("every master has {want} connected replica(s), seen by every node"),
            &self.procs(),
            || {
                let masters = self.master_ports();
                !masters.is_empty()
                    && masters.iter().all(|&port| {
                        matches!(role(port, &self.creds),
                            Some(Role::Primary { replicas, .. }) if replicas.len() >= want)
                    })
                    && self.running().all(|node| {
                        self.view(node.port())
                            .is_some_and(|view| shows_replicas(&view, &masters, want))
                    })
            },
        );
    }

    /// The master every running node names for `slot`, if they agree.
    fn agreed_owner(&self, slot: u16) -> Option<u16> {
        let owners: Vec<Option<u16>> = self
            .running()
            .map(|node| {
                self.view(node.port())
                    .and_then(|view| slot_owner(&view, slot))
            })
            .collect();
        let first = *owners.first()?;
        owners
            .iter()
            .all(|owner| *owner == first)
            .then_some(first)?
    }

    fn any_view(&self) -> Vec<ClusterNode> {
        self.running()
            .find_map(|node| self.view(node.port()))
            .expect("no cluster node answers CLUSTER NODES")
    }

    /// Each node's `redis.log`, named `node-PORT`.
    pub fn logs(&self) -> Vec<(String, std::path::PathBuf)> {
        self.nodes
            .iter()
            .map(|node| (format!("node-{}", node.port()), node.log_path()))
            .collect()
    }

    /// Every pid the cluster ever started.
    pub fn pids(&self) -> Vec<i32> {
        self.nodes
            .iter()
            .flat_map(|node| node.pids().to_vec())
            .collect()
    }

    fn running(&self) -> impl Iterator<Item = &RedisProcess> {
        self.nodes.iter().filter(|node| node.is_running())
    }

    fn procs(&self) -> Vec<&RedisProcess> {
        self.nodes.iter().collect()
    }

    fn node(&self, port: u16) -> &RedisProcess {
        self.nodes
            .iter()
            .find(|node| node.port() == port)
            .unwrap_or_else(|| panic!("no cluster node on {port}"))
    }

    fn node_mut(&mut self, port: u16) -> &mut RedisProcess {
        self.nodes
            .iter_mut()
            .find(|node| node.port() == port)
            .unwrap_or_else(|| panic!("no cluster node on {port}"))
    }
}

/// A port in 20000–22767 whose bus port is free too, not in `taken`.
fn cluster_port(taken: &mut HashSet<u16>) -> u16 {
    for _ in 0..1000 {
        let port: u16 = rand::random_range(20000..22768);
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if !taken.contains(&port) && free(port) && free(port + 10000) {
            taken.insert(port);
            return port;
        }
    }
    panic!("no free port pair for a cluster node");
}
