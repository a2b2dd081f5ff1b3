//! A Sentinel group: one master and two replicas (`--replicaof`), watched
//! by three sentinels with quorum 2, `down-after-milliseconds 1000` and
//! `failover-timeout 3000`, so a failure is noticed after about a second.
//!
//! The master is whatever the sentinels say it is ([`SentinelGroup::master_port`]
//! asks them), never a remembered index: after a failover, a kill or a
//! pause the group is only described by the servers' own reports. The
//! group is ready when every sentinel's `SENTINEL MASTER` shows two
//! replicas and two other sentinels and [`SentinelGroup::wait_settled`]
//! holds, because a sentinel that has not yet heard of its peers cannot
//! reach the quorum and a replica it has not yet seen cannot be promoted.
//!
//! With [`SentinelOptions`] the data nodes get `requirepass` (or an ACL
//! user, with `default` turned off) and `masterauth`, and the sentinels a
//! `requirepass` of their own, with `sentinel auth-pass`/`auth-user` for
//! the data nodes and `sentinel sentinel-pass` for each other. With
//! `tls`, every data node and sentinel is TLS-only (`port 0`, `tls-port`),
//! replication and the sentinels' own links run over TLS too, and every
//! harness connection is `rediss://` trusting the test CA.

use std::fs;
use std::time::{Duration, Instant};

use super::{
    Creds, RedisProcess, Switch, conn, is_master, is_replica_of, pairs, role, try_conn, wait_for,
};
use crate::common::free_port;
use crate::common::pki::TlsFiles;
use redis::Role;

/// How long a failover (graceful or after a kill) may take.
const FAILOVER_LIMIT: Duration = Duration::from_secs(20);

/// How long the group may take to become whole (start, restart). After a
/// failover the sentinels convert the old master only some 10 s after the
/// switch (Sentinel waits 4 × its 2 s publish period, then for an `INFO`).
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// Authentication and extra arguments of a [`SentinelGroup`].
#[derive(Debug, Clone, Default)]
pub struct SentinelOptions {
    /// `requirepass` and `masterauth` on the data nodes; with `data_user`,
    /// that user's password.
    pub data_password: Option<String>,
    /// An ACL user with every right on the data nodes (`default` is turned
    /// off); replicas (`masteruser`) and sentinels (`auth-user`) log in as
    /// it. Needs `data_password`.
    pub data_user: Option<String>,
    /// `requirepass` on the sentinels (and `sentinel-pass` among them).
    pub sentinel_password: Option<String>,
    /// Extra `redis-server` arguments for every data node, one word each,
    /// e.g. `["--user", "solocron", "on", ">pw", "~{solocron*", "+@all"]`.
    pub data_args: Vec<String>,
    /// Every server TLS-only with these files (see the module doc).
    pub tls: Option<TlsFiles>,
}

/// Three data nodes and three sentinels; see the module doc.
pub struct SentinelGroup {
    name: String,
    options: SentinelOptions,
    sentinels: Vec<RedisProcess>,
    data: Vec<RedisProcess>,
}

impl SentinelGroup {
    /// Starts a group whose master is called `name`, without passwords.
    pub fn start(name: &str) -> SentinelGroup {
        SentinelGroup::start_with(name, SentinelOptions::default())
    }

    /// Starts a group with `options`; returns once it is ready.
    pub fn start_with(name: &str, options: SentinelOptions) -> SentinelGroup {
        assert!(
            options.data_user.is_none() || options.data_password.is_some(),
            "an ACL user needs `data_password`"
        );
        let mut group = SentinelGroup {
            name: name.to_string(),
            options,
            sentinels: Vec::new(),
            data: Vec::new(),
        };
        for index in 0..3 {
            let mut node = RedisProcess::new(free_port());
            let replicaof = (index > 0).then(|| group.data[0].port());
            node.start(node.data_args(&group.data_node_args(node.port(), replicaof)));
            node.wait_ready(&group.data_creds());
            group.data.push(node);
        }
        let master = group.data[0].port();
        for _ in 0..3 {
            let mut sentinel = RedisProcess::new(free_port());
            let config = sentinel.dir().join("sentinel.conf");
            fs::write(&config, group.sentinel_config(&sentinel, master))
                .expect("write sentinel.conf");
            sentinel.start(vec![config.display().to_string(), "--sentinel".to_string()]);
            sentinel.wait_ready(&group.sentinel_creds());
            group.sentinels.push(sentinel);
        }
        group.wait_known();
        group.wait_settled();
        group
    }

    fn data_node_args(&self, port: u16, replicaof: Option<u16>) -> Vec<String> {
        let mut args: Vec<String> = Vec::new();
        let mut push = |words: &[&str]| args.extend(words.iter().map(|w| w.to_string()));
        match (&self.options.data_user, &self.options.data_password) {
            (Some(user), Some(password)) => {
                // One argv word per ACL word: redis-server quotes a single
                // argument with spaces, which then reads as one user name.
                let secret = format!(">{password}");
                push(&["--user", user, "on", &secret, "~*", "&*", "+@all"]);
                push(&["--user", "default", "off"]);
                push(&["--masteruser", user, "--masterauth", password]);
            }
            (None, Some(password)) => push(&["--requirepass", password, "--masterauth", password]),
            _ => {}
        }
        if let Some(master) = replicaof {
            push(&["--replicaof", "127.0.0.1", &master.to_string()]);
        }
        if let Some(tls) = &self.options.tls {
            args.extend(tls.server_args(port, false));
        }
        args.extend(self.options.data_args.iter().cloned());
        args
    }

    fn sentinel_config(&self, sentinel: &RedisProcess, master: u16) -> String {
        let name = &self.name;
        let listen = match &self.options.tls {
            Some(tls) => tls.config_lines(sentinel.port()),
            None => format!("port {}\n", sentinel.port()),
        };
        let mut text = format!(
            "{listen}bind 127.0.0.1\ndaemonize no\ndir {}\n\
             sentinel resolve-hostnames no\nsentinel announce-hostnames no\n\
             sentinel monitor {name} 127.0.0.1 {master} 2\n\
             sentinel down-after-milliseconds {name} 1000\n\
             sentinel failover-timeout {name} 3000\n\
             sentinel parallel-syncs {name} 1\n",
            sentinel.dir().display()
        );
        if let Some(password) = &self.options.data_password {
            text.push_str(&format!("sentinel auth-pass {name} {password}\n"));
        }
        if let Some(user) = &self.options.data_user {
            text.push_str(&format!("sentinel auth-user {name} {user}\n"));
        }
        if let Some(password) = &self.options.sentinel_password {
            text.push_str(&format!(
                "requirepass {password}\nsentinel sentinel-pass {password}\n"
            ));
        }
        text
    }

    /// Waits until every sentinel knows two replicas and two other
    /// sentinels, and sees the master as up.
    fn wait_known(&self) {
        wait_for(
            SETTLE_LIMIT,
            "every sentinel knows 2 replicas and 2 other sentinels",
            &self.all_procs(),
            || {
                (0..self.sentinels.len()).all(|index| {
                    self.sentinel_master(index).is_some_and(|master| {
                        master.get("num-slaves").map(String::as_str) == Some("2")
                            && master.get("num-other-sentinels").map(String::as_str) == Some("2")
                            && master.get("flags").map(String::as_str) == Some("master")
                    })
                })
            },
        );
    }

    /// The master's name (`sentinel monitor NAME`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The options it was started with.
    pub fn options(&self) -> &SentinelOptions {
        &self.options
    }

    /// `redis[s]://127.0.0.1:PORT/` of each sentinel, without credentials
    /// (see [`SentinelGroup::sentinel_creds`]).
    pub fn sentinel_urls(&self) -> Vec<String> {
        let plain = Creds::tls_only(self.options.tls.as_ref());
        self.sentinel_ports()
            .into_iter()
            .map(|port| plain.url(port))
            .collect()
    }

    /// The `[redis]` body for daemons on this group (the master's name
    /// as `solocron`, the sentinels' URLs, a 200 ms `wait_timeout`).
    pub fn redis_section(&self) -> String {
        let urls: Vec<String> = self
            .sentinel_urls()
            .iter()
            .map(|url| format!("\"{url}\""))
            .collect();
        format!(
            "sentinel = {{ master = \"solocron\", urls = [{}] }}\nwait_timeout = \"200ms\"",
            urls.join(", ")
        )
    }

    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(RedisProcess::port).collect()
    }

    /// The ports of the three data nodes (running or not), in start order.
    pub fn data_ports(&self) -> Vec<u16> {
        self.data.iter().map(RedisProcess::port).collect()
    }

    /// What a sentinel connection presents.
    pub fn sentinel_creds(&self) -> Creds {
        Creds {
            user: None,
            password: self.options.sentinel_password.clone(),
            tls: self.options.tls.clone(),
        }
    }

    /// What a data-node connection presents.
    pub fn data_creds(&self) -> Creds {
        Creds {
            user: self.options.data_user.clone(),
            password: self.options.data_password.clone(),
            tls: self.options.tls.clone(),
        }
    }

    /// The URL of the data node on `port`, with the data credentials.
    pub fn url(&self, port: u16) -> String {
        self.data_creds().url(port)
    }

    /// A sync connection to the data node on `port` (1 s timeouts).
    pub fn conn(&self, port: u16) -> redis::Connection {
        conn(port, &self.data_creds())
    }

    /// A sync connection to sentinel `index`.
    pub fn sentinel_conn(&self, index: usize) -> redis::Connection {
        conn(self.sentinels[index].port(), &self.sentinel_creds())
    }

    /// Sentinel `index`'s `SENTINEL MASTER name`, `None` if it does not answer.
    pub fn sentinel_master(
        &self,
        index: usize,
    ) -> Option<std::collections::HashMap<String, String>> {
        let mut conn = try_conn(self.sentinels[index].port(), &self.sentinel_creds()).ok()?;
        let flat: Vec<String> = redis::cmd("SENTINEL")
            .arg("MASTER")
            .arg(&self.name)
            .query(&mut conn)
            .ok()?;
        Some(pairs(flat))
    }

    /// The master port sentinel `index` reports (`GET-MASTER-ADDR-BY-NAME`).
    pub fn sentinel_view(&self, index: usize) -> Option<u16> {
        let sentinel = &self.sentinels[index];
        if !sentinel.is_running() {
            return None;
        }
        let mut conn = try_conn(sentinel.port(), &self.sentinel_creds()).ok()?;
        let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.name)
            .query(&mut conn)
            .ok()?;
        addr.map(|(_, port)| port)
    }

    /// The current master's port, from the first sentinel that answers.
    pub fn master_port(&self) -> u16 {
        (0..self.sentinels.len())
            .find_map(|index| self.sentinel_view(index))
            .expect("no sentinel reports a master")
    }

    /// Waits until every running sentinel reports the same master, other
    /// than `from`, and that node answers `ROLE` as master.
    fn wait_switched(&self, from: u16, started: Instant) -> Switch {
        let mut to = 0;
        wait_for(
            FAILOVER_LIMIT,
            &format!("the sentinels agree on a master other than {from}"),
            &self.all_procs(),
            || {
                let views: Vec<Option<u16>> = (0..self.sentinels.len())
                    .filter(|&index| self.sentinels[index].is_running())
                    .map(|index| self.sentinel_view(index))
                    .collect();
                match views.first() {
                    Some(&Some(port)) if port != from && views.iter().all(|v| *v == Some(port)) => {
                        to = port;
                        is_master(port, &self.data_creds())
                    }
                    _ => false,
                }
            },
        );
        Switch {
            from,
            to,
            took: started.elapsed(),
        }
    }

    /// `SENTINEL FAILOVER name` (retried while the sentinel has no good
    /// replica yet), then waits as [`SentinelGroup::kill_master`] does. The
    /// old master is not a replica yet when this returns, and still takes
    /// writes: the sentinels convert it some 10 s after the switch
    /// ([`SentinelGroup::wait_settled`] waits for that).
    pub fn failover(&self) -> Switch {
        let from = self.master_port();
        let started = Instant::now();
        let mut sentinel = self.sentinel_conn(0);
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Err(err) = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(&self.name)
            .query::<String>(&mut sentinel)
        {
            assert!(
                Instant::now() < deadline,
                "SENTINEL FAILOVER {} refused for 10 s: {err}",
                self.name
            );
            // Refused while the sentinels still agree on the last switch: ask again.
            std::thread::sleep(Duration::from_millis(50));
        }
        self.wait_switched(from, started)
    }

    /// SIGKILLs the current master, then waits until every running sentinel
    /// reports a promoted replica that answers `ROLE` as master.
    pub fn kill_master(&mut self) -> Switch {
        let from = self.master_port();
        let started = Instant::now();
        self.node_mut(from).kill();
        self.wait_switched(from, started)
    }

    /// SIGKILLs the data node on `port` (no failover wait).
    pub fn kill(&mut self, port: u16) {
        self.node_mut(port).kill();
    }

    /// Starts the killed data node on `port` again (same dir, same port) as
    /// a replica of the current master; waits until its link is up.
    pub fn restart(&mut self, port: u16) {
        let master = self.master_port();
        let args = self.data_node_args(port, Some(master));
        let creds = self.data_creds();
        let node = self.node_mut(port);
        assert!(!node.is_running(), "restart a killed node, not {port}");
        node.start(node.data_args(&args));
        node.wait_ready(&creds);
        let node = self.node(port);
        wait_for(
            SETTLE_LIMIT,
            &format!("{port} replicates {master}"),
            &[node],
            || is_replica_of(port, master, &creds),
        );
    }

    /// SIGSTOP of the data node on `port` (a paused master gets failed over
    /// after about a second).
    pub fn pause(&self, port: u16) {
        self.node(port).pause();
    }

    /// SIGCONT of the data node on `port`.
    pub fn resume(&self, port: u16) {
        self.node(port).resume();
    }

    /// SIGKILLs sentinel `index`.
    pub fn kill_sentinel(&mut self, index: usize) {
        self.sentinels[index].kill();
    }

    /// Waits until the group is whole again: every running sentinel
    /// reports the same master, which answers `ROLE` as master; every
    /// other running data node is its replica with the link up, listed by
    /// the master's `ROLE` (so `WAIT` counts it); and each
    /// sentinel lists each running replica as healthy (flags `slave` only,
    /// so it may be promoted).
    pub fn wait_settled(&self) {
        wait_for(
            SETTLE_LIMIT,
            "the group is settled (one master, running replicas linked and seen)",
            &self.all_procs(),
            || self.is_settled(),
        );
    }

    fn is_settled(&self) -> bool {
        let creds = self.data_creds();
        let running: Vec<usize> = (0..self.sentinels.len())
            .filter(|&index| self.sentinels[index].is_running())
            .collect();
        let views: Vec<Option<u16>> = running.iter().map(|&i| self.sentinel_view(i)).collect();
        let Some(&Some(master)) = views.first() else {
            return false;
        };
        if views.iter().any(|view| *view != Some(master)) || !is_master(master, &creds) {
            return false;
        }
        let replicas: Vec<u16> = self
            .data
            .iter()
            .filter(|node| node.is_running() && node.port() != master)
            .map(RedisProcess::port)
            .collect();
        let online = match role(master, &creds) {
            // ROLE lists a replica only once it is online (after its first
            // ACK), a moment after the replica itself says `connected`.
            Some(Role::Primary { replicas, .. }) => replicas,
            _ => return false,
        };
        replicas.iter().all(|&port| {
            is_replica_of(port, master, &creds) && online.iter().any(|r| r.port == port)
        }) && running.iter().all(|&index| {
            let seen = self.sentinel_replicas(index);
            replicas.iter().all(|port| {
                seen.iter().any(|replica| {
                    // Not `master-port`: a sentinel refreshes a
                    // replica's INFO only every 10 s.
                    replica.get("port") == Some(&port.to_string())
                        && replica.get("flags").map(String::as_str) == Some("slave")
                })
            })
        })
    }

    /// Sentinel `index`'s `SENTINEL REPLICAS name` (empty if it does not answer).
    pub fn sentinel_replicas(
        &self,
        index: usize,
    ) -> Vec<std::collections::HashMap<String, String>> {
        let Ok(mut conn) = try_conn(self.sentinels[index].port(), &self.sentinel_creds()) else {
            return Vec::new();
        };
        let replicas: Vec<Vec<String>> = redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(&self.name)
            .query(&mut conn)
            .unwrap_or_default();
        replicas.into_iter().map(pairs).collect()
    }

    /// Each process's `redis.log`, named `data-PORT` or `sentinel-PORT`.
    pub fn logs(&self) -> Vec<(String, std::path::PathBuf)> {
        let data = self
            .data
            .iter()
            .map(|node| (format!("data-{}", node.port()), node.log_path()));
        let sentinels = self
            .sentinels
            .iter()
            .map(|node| (format!("sentinel-{}", node.port()), node.log_path()));
        data.chain(sentinels).collect()
    }

    /// Every pid the group ever started (data nodes and sentinels).
    pub fn pids(&self) -> Vec<i32> {
        self.all_procs()
            .iter()
            .flat_map(|proc| proc.pids().to_vec())
            .collect()
    }

    fn all_procs(&self) -> Vec<&RedisProcess> {
        self.data.iter().chain(&self.sentinels).collect()
    }

    fn node(&self, port: u16) -> &RedisProcess {
        self.data
            .iter()
            .find(|node| node.port() == port)
            .unwrap_or_else(|| panic!("no data node on {port}"))
    }

    fn node_mut(&mut self, port: u16) -> &mut RedisProcess {
        self.data
            .iter_mut()
            .find(|node| node.port() == port)
            .unwrap_or_else(|| panic!("no data node on {port}"))
    }
}
