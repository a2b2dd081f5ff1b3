//! N independent `redis-server` masters for Redlock (guarantee 9, docs/guarantees.md), indexed
//! 0..N in start order; each keeps its port and dir across restarts, so a
//! daemon's connection to "master `i`" finds it again.
//!
//! [`Masters::restart`] keeps what the server persisted: everything with
//! [`Masters::start_persistent`] (`--appendonly yes --appendfsync always`),
//! nothing without it (no RDB, no AOF), which is then the same as
//! [`Masters::restart_empty`]; the latter also deletes the files, so even a
//! persistent master comes back empty, as after a disk loss.
//! [`Masters::start_tls`] makes every master TLS-only (`port 0`,
//! `tls-port`) with the test CA's certificate; the harness's connections
//! and [`Masters::urls`] are then `rediss://`.

use super::{Creds, RedisProcess, conn};
use crate::common::free_port;
use crate::common::pki::TlsFiles;

/// N independent masters; see the module doc.
pub struct Masters {
    nodes: Vec<RedisProcess>,
    creds: Creds,
}

impl Masters {
    /// `n` masters without persistence.
    pub fn start(n: usize) -> Masters {
        Masters::start_with(n, &[])
    }

    /// `n` masters with `--appendonly yes --appendfsync always`.
    pub fn start_persistent(n: usize) -> Masters {
        Masters::start_with(n, &["--appendonly", "yes", "--appendfsync", "always"])
    }

    /// `n` masters with extra `redis-server` arguments each.
    pub fn start_with(n: usize, extra: &[&str]) -> Masters {
        Masters::start_all(n, extra, None)
    }

    /// `n` TLS-only masters without persistence (see the module doc).
    pub fn start_tls(n: usize, tls: &TlsFiles) -> Masters {
        Masters::start_all(n, &[], Some(tls))
    }

    /// `n` masters that ask for `password` (`--requirepass`); the
    /// harness's connections present it, [`Masters::urls`] carry it.
    pub fn start_with_password(n: usize, password: &str) -> Masters {
        let creds = Creds {
            password: Some(password.to_string()),
            ..Creds::default()
        };
        Masters::start_as(n, &["--requirepass", password], creds)
    }

    fn start_all(n: usize, extra: &[&str], tls: Option<&TlsFiles>) -> Masters {
        Masters::start_as(n, extra, Creds::tls_only(tls))
    }

    fn start_as(n: usize, extra: &[&str], creds: Creds) -> Masters {
        let tls = creds.tls.clone();
        let tls = tls.as_ref();
        let mut masters = Masters {
            nodes: Vec::new(),
            creds,
        };
        for _ in 0..n {
            let mut node = RedisProcess::new(free_port());
            let mut args: Vec<String> = extra.iter().map(|arg| arg.to_string()).collect();
            if let Some(tls) = tls {
                args.extend(tls.server_args(node.port(), false));
            }
            node.start(node.data_args(&args));
            node.wait_ready(&masters.creds);
            masters.nodes.push(node);
        }
        masters
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// `redis[s]://127.0.0.1:PORT/` of each master, in index order.
    pub fn urls(&self) -> Vec<String> {
        self.ports()
            .into_iter()
            .map(|port| self.creds.url(port))
            .collect()
    }

    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisProcess::port).collect()
    }

    /// A sync connection to master `i` (1 s timeouts).
    pub fn conn(&self, i: usize) -> redis::Connection {
        conn(self.nodes[i].port(), &self.creds)
    }

    /// SIGKILLs master `i`; it stays down until a restart.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// SIGSTOP of master `i`.
    pub fn pause(&self, i: usize) {
        self.nodes[i].pause();
    }

    /// SIGCONT of master `i`.
    pub fn resume(&self, i: usize) {
        self.nodes[i].resume();
    }

    /// SIGKILLs master `i` (if running) and starts it again on the same
    /// port and dir with what it persisted; waits until it answers `PING`
    /// (so an AOF is loaded).
    pub fn restart(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        node.start_again();
        node.wait_ready(&self.creds);
    }

    /// Like [`Masters::restart`], with its data files deleted first.
    pub fn restart_empty(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        node.kill();
        node.wipe();
        node.start_again();
        node.wait_ready(&self.creds);
    }

    /// Whether master `i` is running (not killed).
    pub fn is_running(&self, i: usize) -> bool {
        self.nodes[i].is_running()
    }

    /// Each master's `redis.log`, named `master-I-PORT`.
    pub fn logs(&self) -> Vec<(String, std::path::PathBuf)> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, node)| (format!("master-{i}-{}", node.port()), node.log_path()))
            .collect()
    }

    /// Every pid the masters ever had.
    pub fn pids(&self) -> Vec<i32> {
        self.nodes
            .iter()
            .flat_map(|node| node.pids().to_vec())
            .collect()
    }
}
