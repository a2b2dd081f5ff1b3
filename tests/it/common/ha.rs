//! High-availability Redis topologies for the HA tests (guarantees 8
//! and 9, docs/guarantees.md): a Sentinel group ([`SentinelGroup`]), a Redis Cluster
//! ([`RedisCluster`]) and N independent masters for Redlock ([`Masters`]),
//! all real `redis-server` processes on loopback. Each can run TLS-only
//! with certificates from the test's CA ([`super::pki`]): then every
//! harness connection is `rediss://` ([`Creds::tls`]).
//!
//! Every process is a [`RedisProcess`]: its own temp dir (data, config
//! file, `redis.log`), SIGKILLed by its pid (after a SIGCONT, in case it
//! was paused) when it is dropped, also while a test unwinds from a panic.
//! A topology is only a list of them, built up in locals, so one that
//! panics half-way (a node never became ready) is cleaned up the same way.
//! Each process remembers every pid it ever had ([`RedisProcess::pids`]),
//! so a test can check that none survived the drop.
//!
//! Nothing sleeps and hopes: every step waits, with a deadline, on what the
//! servers themselves report (`ROLE`, `INFO replication`, `SENTINEL
//! MASTER`, `CLUSTER INFO`), and a timeout panics naming the condition and
//! showing the tails of the logs involved. Every connection the harness
//! opens has a 1 s connect, read and write timeout, so polling a paused or
//! killed node fails fast instead of hanging the test.
//!
//! The waits block the calling thread: from an async test, call them
//! through `tokio::task::spawn_blocking` or on a multi-thread runtime.

mod cluster;
mod masters;
mod nodes;
mod sentinel;

// Every test file compiles `common`; most use none of these.
#[allow(unused_imports)]
pub use cluster::{ClusterNode, ClusterOptions, RedisCluster};
#[allow(unused_imports)]
pub use masters::Masters;
#[allow(unused_imports)]
pub use sentinel::{SentinelGroup, SentinelOptions};

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::pki::TlsFiles;
use super::{POLL, signal};

/// Connect, read and write timeout of every harness connection.
const IO_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a node may take to answer `PING` after it was started.
const START_LIMIT: Duration = Duration::from_secs(10);

/// A change of master: which port was master, which one is now, and how
/// long the harness waited for it (from the kill or the `FAILOVER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switch {
    pub from: u16,
    pub to: u16,
    pub took: Duration,
}

/// Credentials a harness connection presents (none: the `default` user
/// without a password), and with `tls`, the server's TLS files: the
/// connection is `rediss://` and trusts their CA.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Creds {
    pub user: Option<String>,
    pub password: Option<String>,
    pub tls: Option<TlsFiles>,
}

impl Creds {
    /// Only TLS, no user or password.
    pub fn tls_only(tls: Option<&TlsFiles>) -> Creds {
        Creds {
            tls: tls.cloned(),
            ..Creds::default()
        }
    }

    /// `redis[s]://[user:password@]127.0.0.1:PORT/`. The harness's
    /// passwords are plain words, so nothing needs percent-encoding.
    pub fn url(&self, port: u16) -> String {
        let auth = match (&self.user, &self.password) {
            (Some(user), Some(password)) => format!("{user}:{password}@"),
            (None, Some(password)) => format!(":{password}@"),
            (Some(user), None) => format!("{user}@"),
            (None, None) => String::new(),
        };
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://{auth}127.0.0.1:{port}/")
    }

    /// `redis-cli` arguments for these credentials (TLS, user, password).
    pub fn cli_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(tls) = &self.tls {
            args.extend(["--tls".to_string(), "--cacert".to_string()]);
            args.push(tls.ca.display().to_string());
        }
        if let Some(user) = &self.user {
            args.extend(["--user".to_string(), user.clone()]);
        }
        if let Some(password) = &self.password {
            args.extend([
                "-a".to_string(),
                password.clone(),
                "--no-auth-warning".to_string(),
            ]);
        }
        args
    }
}

/// One `redis-server` process (data node or sentinel) in its own temp dir,
/// killed on drop; see the module doc.
pub struct RedisProcess {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
    args: Vec<String>,
    pids: Vec<i32>,
}

impl RedisProcess {
    /// A process slot on `port` with a fresh temp dir; nothing runs yet.
    pub fn new(port: u16) -> RedisProcess {
        RedisProcess {
            child: None,
            port,
            dir: tempfile::tempdir().expect("create temp dir"),
            args: Vec::new(),
            pids: Vec::new(),
        }
    }

    /// The usual arguments of a data node: loopback, `port`, this dir, no
    /// persistence unless `extra` says otherwise (later arguments win).
    pub fn data_args(&self, extra: &[String]) -> Vec<String> {
        let mut args: Vec<String> = [
            "--bind",
            "127.0.0.1",
            "--port",
            &self.port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            &self.dir().display().to_string(),
            // A replica that needs a full sync gets it at once, not after
            // the default 5 s wait for more replicas.
            "--repl-diskless-sync-delay",
            "0",
        ]
        .iter()
        .map(|arg| arg.to_string())
        .collect();
        args.extend(extra.iter().cloned());
        args
    }

    /// Starts `redis-server ARGS` (remembered for [`RedisProcess::start_again`])
    /// with the temp dir as working directory and stdout appended to its
    /// `redis.log`. Does not wait for it to be ready.
    pub fn start(&mut self, args: Vec<String>) {
        self.args = args;
        self.start_again();
    }

    /// Starts the process again with its last arguments (after
    /// [`RedisProcess::kill`]); a running one is killed first.
    pub fn start_again(&mut self) {
        self.kill();
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open redis.log");
        let child = super::server_command()
            .args(&self.args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("{}: {err}", super::server_missing()));
        self.pids.push(child.id() as i32);
        self.child = Some(child);
    }

    /// SIGCONT then SIGKILL, and reaps the process; a stopped one is a no-op.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id() as i32, "CONT");
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP: the process keeps its sockets but answers nothing.
    pub fn pause(&self) {
        signal(self.pid().expect("pause a running process"), "STOP");
    }

    /// SIGCONT.
    pub fn resume(&self) {
        signal(self.pid().expect("resume a running process"), "CONT");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process's temp dir (its `--dir`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The current pid, `None` while killed.
    pub fn pid(&self) -> Option<i32> {
        self.child.as_ref().map(|child| child.id() as i32)
    }

    /// Every pid this slot has had, oldest first.
    pub fn pids(&self) -> &[i32] {
        &self.pids
    }

    /// Whether it was started and not killed since.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Deletes everything in the temp dir except the log (for a restart
    /// without data); the process must be killed.
    pub fn wipe(&self) {
        assert!(!self.is_running(), "wipe a running server on {}", self.port);
        for entry in fs::read_dir(self.dir()).expect("read temp dir").flatten() {
            if entry.file_name() != "redis.log" {
                let path = entry.path();
                let _ = fs::remove_dir_all(&path).or_else(|_| fs::remove_file(&path));
            }
        }
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// The last `lines` lines of `redis.log`, headed by the port.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(self.log_path()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        let tail = all[all.len().saturating_sub(lines)..].join("\n");
        format!("----- redis on {} -----\n{tail}\n", self.port)
    }

    /// Waits until the process answers `PING` with `creds`.
    pub fn wait_ready(&self, creds: &Creds) {
        let port = self.port;
        wait_for(
            START_LIMIT,
            &format!("{port} answers PING"),
            &[self],
            || {
                try_conn(port, creds)
                    .and_then(|mut conn| redis::cmd("PING").query::<String>(&mut conn))
                    .is_ok()
            },
        );
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A connection to 127.0.0.1:`port` with [`IO_TIMEOUT`]s, or the error.
pub fn try_conn(port: u16, creds: &Creds) -> redis::RedisResult<redis::Connection> {
    use redis::IntoConnectionInfo as _;
    // Without `CLIENT SETINFO` the handshake is at most one `AUTH`, so a
    // paused node costs one timeout there and one on the command.
    let info = creds.url(port).into_connection_info()?;
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    let info = info.set_redis_settings(settings);
    let client = match &creds.tls {
        Some(tls) => {
            // Err: a provider is installed already, which is all we need.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let ca = fs::read(&tls.ca)
                .unwrap_or_else(|err| panic!("read the test CA {}: {err}", tls.ca.display()));
            let certs = redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(ca),
            };
            redis::Client::build_with_tls(info, certs)?
        }
        None => redis::Client::open(info)?,
    };
    let conn = client.get_connection_with_timeout(IO_TIMEOUT)?;
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    conn.set_write_timeout(Some(IO_TIMEOUT))?;
    Ok(conn)
}

/// A connection to 127.0.0.1:`port`; panics if there is none.
pub fn conn(port: u16, creds: &Creds) -> redis::Connection {
    try_conn(port, creds).unwrap_or_else(|err| panic!("connect to 127.0.0.1:{port}: {err}"))
}

/// `ROLE` of the node on `port`, `None` if it does not answer.
pub fn role(port: u16, creds: &Creds) -> Option<redis::Role> {
    let mut conn = try_conn(port, creds).ok()?;
    redis::cmd("ROLE").query(&mut conn).ok()
}

/// Whether the node on `port` answers `ROLE` as a master.
pub fn is_master(port: u16, creds: &Creds) -> bool {
    matches!(role(port, creds), Some(redis::Role::Primary { .. }))
}

/// Whether the node on `port` answers `ROLE` as a connected replica of `master`.
pub fn is_replica_of(port: u16, master: u16, creds: &Creds) -> bool {
    matches!(
        role(port, creds),
        Some(redis::Role::Replica { primary_port, replication_state, .. })
            if primary_port == master && replication_state == "connected"
    )
}

/// The `name:value` fields of an `INFO`/`CLUSTER INFO` reply.
pub fn info_fields(text: &str) -> std::collections::HashMap<String, String> {
    text.lines()
        .filter_map(|line| line.trim().split_once(':'))
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

/// A flat `[field, value, ...]` reply (e.g. `SENTINEL MASTER`) as a map.
pub fn pairs(flat: Vec<String>) -> std::collections::HashMap<String, String> {
    flat.chunks(2)
        .filter(|pair| pair.len() == 2)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect()
}

/// Polls `condition` every [`POLL`] until it holds; after `limit`, panics
/// naming `what` with the log tails of `procs`.
pub fn wait_for(
    limit: Duration,
    what: &str,
    procs: &[&RedisProcess],
    mut condition: impl FnMut() -> bool,
) {
    let deadline = Instant::now() + limit;
    while !condition() {
        if Instant::now() >= deadline {
            let logs: String = procs.iter().map(|proc| proc.log_tail(15)).collect();
            panic!("timed out after {limit:?} waiting until {what}\n{logs}");
        }
        thread::sleep(POLL);
    }
}
