//! The Redis side of a scenario in one of the `[redis]` modes, built from
//! the HA test harness (`tests/it/common/ha`): one `url` server, one `url`
//! server with a replica (`wait_replicas = 1`), a Sentinel group (1 master,
//! 2 replicas, 3 sentinels, each sentinel behind a [`CountingProxy`] since
//! a sentinel has no `MONITOR`), a Redis Cluster (3 masters, with or
//! without a replica each) or N independent Redlock masters.
//!
//! A [`Topology`] answers what the scenarios ask of it: the `[redis]`
//! section (or the [`RedisConfig`]) that points daemons at it, which
//! servers are masters (their `INFO commandstats` are summed), which are
//! data nodes (each gets a `MONITOR`), and the pid of every server process
//! for CPU figures. The bench never restarts a server, so each process has
//! exactly one pid. Failure model: building one panics (with the harness's
//! message and log tails) if a server does not come up or the topology
//! does not form within the harness's deadlines; the scenario that asked
//! for it then shows "could not run". Everything is killed on drop, also
//! while a panic unwinds.

use std::time::Duration;

use solocron::config::{RedisConfig, RedisMode};

use crate::common::RedisServer;
use crate::common::ha::{Creds, Masters, RedisCluster, SentinelGroup};
use crate::counting_proxy::CountingProxy;
use crate::monitor::MonLine;

/// How long a replica may take to show up in sync.
const SYNC_LIMIT: Duration = Duration::from_secs(15);

/// Running servers of one mode; everything is killed on drop.
pub enum Topology {
    Single(RedisServer),
    /// One master and one replica (`--replicaof`); daemons use the master's
    /// `url` with `wait_replicas = 1`.
    SingleWait {
        master: RedisServer,
        replica: RedisServer,
    },
    Sentinel {
        group: SentinelGroup,
        /// One per sentinel, in the group's order.
        proxies: Vec<CountingProxy>,
    },
    /// `wait_replicas` is 1 with replicas (the mode's default), 0 without.
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

    /// A master and its replica, in sync.
    pub fn single_wait() -> Topology {
        let master = RedisServer::start();
        let port = master.port.to_string();
        let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]);
        crate::fleet::must(SYNC_LIMIT, "the replica is in sync", || {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut master.conn())
                .unwrap_or_default();
            info.contains("connected_slaves:1") && info.contains("state=online")
        });
        Topology::SingleWait { master, replica }
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

    /// 3 masters without replicas (`wait_replicas = 0`): shards only.
    pub fn cluster_bare() -> Topology {
        Topology::Cluster(RedisCluster::start(3, 0))
    }

    /// `n` independent masters.
    pub fn redlock(n: usize) -> Topology {
        Topology::Redlock(Masters::start(n))
    }

    /// A short name for logs and JSON: `url`, `url+wait`, `sentinel`,
    /// `cluster`, `cluster-bare`, `redlock`.
    pub fn name(&self) -> &'static str {
        match self {
            Topology::Single(_) => "url",
            Topology::SingleWait { .. } => "url+wait",
            Topology::Sentinel { .. } => "sentinel",
            Topology::Cluster(_) if self.replicas() == 0 => "cluster-bare",
            Topology::Cluster(_) => "cluster",
            Topology::Redlock(_) => "redlock",
        }
    }

    /// Replicas per master (Cluster), or of the one master.
    fn replicas(&self) -> usize {
        match self {
            Topology::Single(_) | Topology::Redlock(_) => 0,
            Topology::SingleWait { .. } => 1,
            Topology::Sentinel { group, .. } => group.data_ports().len() - 1,
            Topology::Cluster(cluster) => {
                (cluster.ports().len() - cluster.master_ports().len())
                    / cluster.master_ports().len().max(1)
            }
        }
    }

    /// The `wait_replicas` the daemons are given.
    pub fn wait_replicas(&self) -> u32 {
        match self {
            Topology::Single(_) | Topology::Redlock(_) => 0,
            Topology::SingleWait { .. } | Topology::Sentinel { .. } => 1,
            Topology::Cluster(_) => u32::from(self.replicas() > 0),
        }
    }

    /// The mode and its shape, for the table: "`sentinel` (1 master + 2
    /// replicas, 3 sentinels; WAIT 1)".
    pub fn describe(&self) -> String {
        let wait = match self.wait_replicas() {
            0 => String::new(),
            n => format!("; WAIT {n}"),
        };
        match self {
            Topology::Single(_) => "`url` (one server)".to_string(),
            Topology::SingleWait { .. } => format!("`url` (1 master + 1 replica{wait})"),
            Topology::Sentinel { group, .. } => format!(
                "`sentinel` (1 master + {} replicas, {} sentinels{wait})",
                group.data_ports().len() - 1,
                group.sentinel_ports().len()
            ),
            Topology::Cluster(cluster) => {
                let masters = cluster.master_ports().len();
                match cluster.ports().len() - masters {
                    0 => format!("`cluster` ({masters} masters, no replicas)"),
                    replicas => {
                        format!("`cluster` ({masters} masters + {replicas} replicas{wait})")
                    }
                }
            }
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
            Topology::SingleWait { master, .. } => format!("url = \"{}\"", master.url()),
            Topology::Sentinel { proxies, .. } => format!(
                "sentinel = {{ master = \"solocron\", urls = [{}] }}",
                list(proxies.iter().map(CountingProxy::url).collect())
            ),
            Topology::Cluster(cluster) => format!("cluster = [{}]", list(cluster.seed_urls())),
            Topology::Redlock(masters) => format!("redlock = [{}]", list(masters.urls())),
        };
        // Spelled out even where it is the mode's default, so the file says
        // what was measured.
        let wait = match self {
            Topology::Redlock(_) => String::new(),
            _ => format!("\nwait_replicas = {}", self.wait_replicas()),
        };
        format!("{server}{wait}\nkey_prefix = \"{key_prefix}\"")
    }

    /// The same coordinator as a [`RedisConfig`], for a client in this
    /// process (the claim load of scenario j).
    pub fn redis_config(&self, key_prefix: &str) -> RedisConfig {
        let mut config = RedisConfig {
            url: String::new(),
            mode: RedisMode::Single,
            wait_replicas: 0,
            wait_timeout: Duration::from_millis(250),
            username: None,
            password: None,
            key_prefix: key_prefix.to_string(),
            tls: Default::default(),
        };
        match self {
            Topology::Single(server) => config.use_url(&server.url()),
            Topology::SingleWait { master, .. } => config.use_url(&master.url()),
            Topology::Sentinel { proxies, .. } => {
                config.mode = RedisMode::Sentinel {
                    master: "solocron".to_string(),
                    urls: proxies.iter().map(CountingProxy::url).collect(),
                    password: None,
                }
            }
            Topology::Cluster(cluster) => {
                config.mode = RedisMode::Cluster {
                    urls: cluster.seed_urls(),
                }
            }
            Topology::Redlock(masters) => {
                config.mode = RedisMode::Redlock {
                    urls: masters.urls(),
                }
            }
        }
        config.wait_replicas = self.wait_replicas();
        config
    }

    /// The servers that execute the daemons' writes.
    pub fn masters(&self) -> Vec<u16> {
        match self {
            Topology::Single(server) => vec![server.port],
            Topology::SingleWait { master, .. } => vec![master.port],
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
            Topology::SingleWait { replica, .. } => vec![replica.port],
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
            Topology::Single(server) => {
                return vec![name_of(server.port, server.pid(), Role::Master)];
            }
            Topology::SingleWait { master, replica } => {
                return vec![
                    name_of(master.port, master.pid(), Role::Master),
                    name_of(replica.port, replica.pid(), Role::Replica),
                ];
            }
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
            self.name()
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
