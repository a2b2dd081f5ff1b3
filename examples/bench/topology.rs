//! The Redis side of a scenario in one of the `[redis]` modes, built from
//! the HA test harness (`tests/common/ha`): one `url` server, a Sentinel
//! group (1 master, 2 replicas, 3 sentinels, each sentinel behind a
//! [`CountingProxy`] since a sentinel has no `MONITOR`), a Redis Cluster
//! (3 masters, 1 replica each) or N independent Redlock masters.
//!
//! A [`Topology`] answers what the scenarios ask of it: the `[redis]`
//! section that points daemons at it (the modes' defaults otherwise:
//! `wait_replicas` 1 with Sentinel and Cluster, none with `url` and
//! Redlock), which servers are masters (their `INFO commandstats` are
//! summed), which are data nodes (each gets a `MONITOR`), and the pid of
//! every server process for CPU figures. The bench never restarts a
//! server, so each harness process has exactly one pid.

use crate::common::RedisServer;
use crate::common::ha::{Creds, Masters, RedisCluster, SentinelGroup};
use crate::counting_proxy::CountingProxy;
use crate::monitor::MonLine;

/// Running servers of one mode; everything is killed on drop.
pub enum Topology {
    Single(RedisServer),
    Sentinel {
        group: SentinelGroup,
        /// One per sentinel, in the group's order.
        proxies: Vec<CountingProxy>,
    },
    Cluster(RedisCluster),
    Redlock(Masters),
}

/// What a server process is, for CPU figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Master,
    Replica,
    Sentinel,
}

impl Topology {
    pub fn single() -> Topology {
        Topology::Single(RedisServer::start())
    }

    /// A Sentinel group whose master is called `solocron`, ready (every
    /// sentinel knows both replicas and its two peers).
    pub fn sentinel() -> Topology {
        let group = SentinelGroup::start("solocron");
        let proxies = group
            .sentinel_ports()
            .into_iter()
            .map(CountingProxy::start)
            .collect();
        Topology::Sentinel { group, proxies }
    }

    /// 3 masters with a replica each, healthy and linked.
    pub fn cluster() -> Topology {
        Topology::Cluster(RedisCluster::start(3, 1))
    }

    /// `n` independent masters.
    pub fn redlock(n: usize) -> Topology {
        Topology::Redlock(Masters::start(n))
    }

    /// The `[redis]` key of the mode: `url`, `sentinel`, `cluster`, `redlock`.
    pub fn mode(&self) -> &'static str {
        match self {
            Topology::Single(_) => "url",
            Topology::Sentinel { .. } => "sentinel",
            Topology::Cluster(_) => "cluster",
            Topology::Redlock(_) => "redlock",
        }
    }

    /// The mode and its shape, for the table: "`sentinel` (1 master + 2
    /// replicas, 3 sentinels; WAIT 1)".
    pub fn describe(&self) -> String {
        match self {
            Topology::Single(_) => "`url` (one server)".to_string(),
            Topology::Sentinel { .. } => {
                "`sentinel` (1 master + 2 replicas, 3 sentinels; WAIT 1)".to_string()
            }
            Topology::Cluster(cluster) => format!(
                "`cluster` ({} masters + {} replicas; WAIT 1)",
                cluster.master_ports().len(),
                cluster.ports().len() - cluster.master_ports().len()
            ),
            Topology::Redlock(masters) => format!("`redlock` ({} masters)", masters.len()),
        }
    }

    /// The body of the `[redis]` section (with `key_prefix`).
    pub fn redis_section(&self, key_prefix: &str) -> String {
        let list = |urls: Vec<String>| {
            urls.iter()
                .map(|url| format!("\"{url}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let server = match self {
            Topology::Single(server) => format!("url = \"{}\"", server.url()),
            Topology::Sentinel { proxies, .. } => format!(
                "sentinel = {{ master = \"solocron\", urls = [{}] }}",
                list(proxies.iter().map(CountingProxy::url).collect())
            ),
            Topology::Cluster(cluster) => format!("cluster = [{}]", list(cluster.seed_urls())),
            Topology::Redlock(masters) => format!("redlock = [{}]", list(masters.urls())),
        };
        format!("{server}\nkey_prefix = \"{key_prefix}\"")
    }

    /// The servers that execute the daemons' writes.
    pub fn masters(&self) -> Vec<u16> {
        match self {
            Topology::Single(server) => vec![server.port],
            Topology::Sentinel { group, .. } => vec![group.master_port()],
            Topology::Cluster(cluster) => cluster.master_ports(),
            Topology::Redlock(masters) => masters.ports(),
        }
    }

    /// Every data node (masters and replicas), the masters first.
    pub fn data_ports(&self) -> Vec<u16> {
        let masters = self.masters();
        let mut ports = masters.clone();
        let all = match self {
            Topology::Single(_) | Topology::Redlock(_) => Vec::new(),
            Topology::Sentinel { group, .. } => group.data_ports(),
            Topology::Cluster(cluster) => cluster.ports(),
        };
        ports.extend(all.into_iter().filter(|port| !masters.contains(port)));
        ports
    }

    /// Every server process: (name, pid, role); names say role and port.
    pub fn procs(&self) -> Vec<(String, i32, Role)> {
        let masters = self.masters();
        let data_role = |port: u16| {
            if masters.contains(&port) {
                Role::Master
            } else {
                Role::Replica
            }
        };
        let (ports, pids, sentinels) = match self {
            Topology::Single(server) => return vec![name_of(server.port, server.pid(), Role::Master)],
            Topology::Sentinel { group, .. } => {
                (group.data_ports(), group.pids(), group.sentinel_ports())
            }
            Topology::Cluster(cluster) => (cluster.ports(), cluster.pids(), Vec::new()),
            Topology::Redlock(masters) => (masters.ports(), masters.pids(), Vec::new()),
        };
        let roles: Vec<(u16, Role)> = ports
            .iter()
            .map(|&port| (port, data_role(port)))
            .chain(sentinels.iter().map(|&port| (port, Role::Sentinel)))
            .collect();
        assert_eq!(
            roles.len(),
            pids.len(),
            "every server of the {} topology started exactly once",
            self.mode()
        );
        roles
            .into_iter()
            .zip(pids)
            .map(|((port, role), pid)| name_of(port, pid, role))
            .collect()
    }

    /// A plain connection (1 s timeouts) to the server on `port`.
    pub fn conn(&self, port: u16) -> redis::Connection {
        crate::common::ha::conn(port, &Creds::default())
    }

    /// What the daemons sent to each sentinel so far, by proxy port
    /// (Sentinel only; empty otherwise).
    pub fn sentinel_sides(&self) -> Vec<(u16, Vec<MonLine>)> {
        match self {
            Topology::Sentinel { proxies, .. } => proxies
                .iter()
                .map(|proxy| (proxy.port, proxy.lines()))
                .collect(),
            _ => Vec::new(),
        }
    }
}

fn name_of(port: u16, pid: i32, role: Role) -> (String, i32, Role) {
    let kind = match role {
        Role::Master => "master",
        Role::Replica => "replica",
        Role::Sentinel => "sentinel",
    };
    (format!("{kind} :{port}"), pid, role)
}
