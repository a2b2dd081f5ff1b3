//! Test harness: a real `redis-server` per test on a free loopback port,
//! real `solocron` daemon processes, and waiting on conditions with deadlines;
//! [`ha`] has the Sentinel, Cluster and Redlock topologies of the HA tests,
//! [`http`] a local HTTP server for hooks, [`page`] an HTTP client and
//! headless Chromium for the status page.
#![allow(dead_code)]

pub mod audit;
pub mod cluster;
pub mod fleet;
pub mod ha;
pub mod http;
pub mod notify;
pub mod page;
pub mod pki;
pub mod proxy;

use std::fs;
use std::io::Read as _;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use solocron::config::RedisConfig;
use solocron::lock::Locker;
use tempfile::TempDir;

/// How long a wait loop sleeps before it looks at its condition again.
pub const POLL: Duration = Duration::from_millis(20);

/// The server program every test starts (data nodes and sentinels):
/// `redis-server`, or the program `SOLOCRON_TEST_SERVER` names (a
/// `valkey-server`, which takes the same arguments), so that the same
/// tests run on Valkey (`scripts/test` runs the core, fault and HA topics
/// on both).
pub fn server_program() -> String {
    std::env::var("SOLOCRON_TEST_SERVER")
        .ok()
        .filter(|program| !program.is_empty())
        .unwrap_or_else(|| "redis-server".to_string())
}

/// A `Command` for [`server_program`].
pub fn server_command() -> Command {
    Command::new(server_program())
}

/// What to say when [`server_program`] cannot be started.
pub fn server_missing() -> String {
    format!(
        "`{}` must be installed to run these tests (scripts/need-deps --tests)",
        server_program()
    )
}

/// A throwaway `redis-server` on a free loopback port, killed on drop.
pub struct RedisServer {
    child: Child,
    pub port: u16,
    dir: TempDir,
    persistence: Persistence,
    extra: Vec<String>,
}

/// What a [`RedisServer`] keeps across a [`RedisServer::restart`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// `--save "" --appendonly no`: a restart loses everything.
    None,
    /// `--appendonly yes --appendfsync always`: every acknowledged write survives.
    AppendOnly,
}

/// A free loopback port (bound then released), never one this test process
/// handed out before: the tests of one binary run at once, and the kernel
/// may give a port just released to the next `bind(0)`. Two tests then got
/// the same port: the second `redis-server` could not bind it, and that
/// test's daemons ran against the first test's server (CI, 2026-12-02:
/// `fault_redis`, "another daemon uses node id `n1`").
pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .expect("bind a loopback port");
        let mut handed_out = HANDED_OUT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if handed_out.insert(port) {
            return port;
        }
    }
}

impl RedisServer {
    /// Starts a server and waits until it accepts connections.
    pub fn start() -> RedisServer {
        RedisServer::start_on(free_port())
    }

    /// Starts a server on `port` (e.g. one a daemon is already retrying).
    pub fn start_on(port: u16) -> RedisServer {
        RedisServer::start_with(port, Persistence::None)
    }

    /// Starts a server on a free port that persists with `persistence`.
    pub fn start_persistent(persistence: Persistence) -> RedisServer {
        RedisServer::start_with(free_port(), persistence)
    }

    /// Starts a server with extra `redis-server` arguments (e.g.
    /// `--requirepass`).
    pub fn start_with_args(args: &[&str]) -> RedisServer {
        RedisServer::start_full(free_port(), Persistence::None, args)
    }

    fn start_with(port: u16, persistence: Persistence) -> RedisServer {
        RedisServer::start_full(port, persistence, &[])
    }

    fn start_full(port: u16, persistence: Persistence, args: &[&str]) -> RedisServer {
        let dir = tempfile::tempdir().expect("create temp dir");
        let extra: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
        let child = spawn_redis(port, dir.path(), persistence, &extra);
        let mut server = RedisServer {
            child,
            port,
            dir,
            persistence,
            extra,
        };
        server.wait_accepting();
        server
    }

    /// SIGKILLs the server, then starts it again on the same port with the
    /// same directory and persistence (without persistence: empty).
    pub fn restart(&mut self) {
        self.kill();
        self.child = spawn_redis(self.port, self.dir.path(), self.persistence, &self.extra);
        self.wait_accepting();
    }

    /// SIGKILLs the server (it stays down until [`RedisServer::start_again`]).
    pub fn kill(&mut self) {
        signal(self.pid(), "CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts a killed server again on the same port and directory.
    pub fn start_again(&mut self) {
        self.child = spawn_redis(self.port, self.dir.path(), self.persistence, &self.extra);
        self.wait_accepting();
    }

    /// Waits until the port accepts connections; panics at once if our
    /// `redis-server` exited meanwhile (it could not bind the port), rather
    /// than let the test talk to whatever else listens there.
    fn wait_accepting(&mut self) {
        let port = self.port;
        let child = &mut self.child;
        wait_until(
            Duration::from_secs(10),
            "redis-server accepts connections",
            || {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!(
                        "redis-server on port {port} exited before accepting ({status}): the port was taken"
                    );
                }
                TcpStream::connect(("127.0.0.1", port)).is_ok()
            },
        );
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("redis-server on port {port} exited ({status}): the port was taken");
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// A plain synchronous connection for assertions.
    /// A connection that sends no `CLIENT SETINFO` (Valkey and Redis 7.2+
    /// would count it among the commands tests count).
    pub fn conn(&self) -> redis::Connection {
        use redis::IntoConnectionInfo as _;
        self.url()
            .into_connection_info()
            .and_then(|info| {
                let settings = info.redis_settings().clone().set_skip_set_lib_name();
                redis::Client::open(info.set_redis_settings(settings))
            })
            .and_then(|client| client.get_connection())
            .expect("connect to the test redis")
    }

    /// SIGSTOP: the server stops answering but keeps its connections.
    pub fn pause(&self) {
        signal(self.pid(), "STOP");
    }

    /// Waits for a PTTL reading of `lock` taken just after a renewal (more
    /// than `ttl_ms - 60` left), then pauses the server at once, so no
    /// renewal can slip in between. Returns the earliest instant the lock
    /// could expire in Redis.
    pub fn pause_right_after_a_renewal(&self, lock: &str, ttl_ms: i64) -> Instant {
        self.right_after_a_renewal(lock, ttl_ms, || self.pause())
    }

    /// Waits for a PTTL reading of `lock` taken just after a renewal (more
    /// than `ttl_ms - 60` left), then runs `fault` at once (a pause, a cut
    /// link). Returns the earliest instant the lock could expire in Redis.
    pub fn right_after_a_renewal(&self, lock: &str, ttl_ms: i64, fault: impl FnOnce()) -> Instant {
        use redis::Commands as _;
        let mut conn = self.conn();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let before = Instant::now();
            let left: i64 = conn.pttl(lock).expect("PTTL");
            if left > ttl_ms - 60 {
                fault();
                return before + Duration::from_millis(left as u64);
            }
            assert!(Instant::now() < deadline, "no renewal seen (PTTL {left})");
            // Finer than POLL: the pause must follow the renewal closely.
            thread::sleep(Duration::from_millis(2));
        }
    }

    /// SIGCONT.
    pub fn resume(&self) {
        signal(self.pid(), "CONT");
    }
}

fn spawn_redis(port: u16, dir: &Path, persistence: Persistence, extra: &[String]) -> Child {
    let mut command = server_command();
    command
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", ""]);
    match persistence {
        Persistence::None => command.args(["--appendonly", "no"]),
        Persistence::AppendOnly => command.args(["--appendonly", "yes", "--appendfsync", "always"]),
    };
    command
        .arg("--dir")
        .arg(dir)
        .args(extra)
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|err| panic!("{}: {err}", server_missing()))
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        signal(self.pid(), "CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends signal `sig` (`"STOP"`, `"CONT"`, `"TERM"`, `"HUP"`, …) to `pid`;
/// a process that is already gone is not an error.
pub fn signal(pid: i32, sig: &str) {
    use nix::sys::signal::{Signal, kill};
    let signal: Signal = format!("SIG{sig}").parse().expect("a signal name");
    match kill(nix::unistd::Pid::from_raw(pid), signal) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
        Err(err) => panic!("cannot send SIG{sig} to {pid}: {err}"),
    }
}

/// The state letter of a process (`R`, `S`, `T` stopped, `Z`...) from
/// `/proc/PID/stat`; `None` once it is gone.
pub fn state_letter(pid: i32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// `State:` of a process, for failure messages.
pub fn process_state(pid: i32) -> String {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("State:"))
                .map(str::to_string)
        })
        .unwrap_or_else(|| "gone".to_string())
}

/// Whether a process with this pid exists (and is not a zombie).
pub fn is_alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// Polls `condition` every [`POLL`] until it holds; panics naming `what` after `limit`.
pub fn wait_until(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting until {what}"
        );
        thread::sleep(POLL);
    }
}

/// A connected in-process [`Locker`] for `node`.
pub async fn locker(redis: &RedisServer, node: &str) -> Locker {
    let config = RedisConfig {
        mode: solocron::config::RedisMode::Single,
        wait_replicas: 0,
        wait_timeout: solocron::config::DEFAULT_WAIT_TIMEOUT,
        username: None,
        url: redis.url(),
        password: None,
        key_prefix: "test".to_string(),
        tls: Default::default(),
    };
    let conn = solocron::daemon::connect(&config).expect("connection manager");
    Locker::new(conn, "test", node, 1000)
}

/// `redis-cli monitor` into a file, stopped (by PID) on drop.
pub struct Monitor {
    child: Child,
    path: PathBuf,
}

impl Monitor {
    pub fn start(redis: &RedisServer, path: PathBuf) -> Monitor {
        let file = std::fs::File::create(&path).expect("monitor file");
        let child = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &redis.port.to_string()])
            .arg("monitor")
            .stdout(file)
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-cli monitor");
        let monitor = Monitor { child, path };
        wait_until(Duration::from_secs(5), "MONITOR answered OK", || {
            monitor.text().starts_with("OK")
        });
        monitor
    }

    pub fn text(&self) -> String {
        std::fs::read_to_string(&self.path).unwrap_or_default()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A scratch directory with a `jobs.toml` for daemon processes.
pub struct Workdir {
    pub dir: TempDir,
}

impl Workdir {
    pub fn new() -> Workdir {
        Workdir {
            dir: tempfile::tempdir().expect("create temp dir"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes `jobs.toml`. A file needs a `[redis]` section; when `toml`
    /// has none, one is added at the end (line numbers stay those of
    /// `toml`) whose `url` names a port nobody listens on: the nodes get
    /// their real server from `--redis`, and a test that forgot it fails to
    /// reach Redis instead of finding some other one. Tests of a file
    /// without `[redis]` write it with `fs::write`.
    pub fn write_config(&self, toml: &str) -> PathBuf {
        let path = self.path("jobs.toml");
        let text = if toml.lines().any(|line| line.trim() == "[redis]") {
            toml.to_string()
        } else {
            format!("{toml}\n[redis]\nurl = \"redis://127.0.0.1:1/\"\n")
        };
        fs::write(&path, text).expect("write jobs.toml");
        path
    }

    /// Lines of a file the jobs append to (empty if absent).
    pub fn lines(&self, name: &str) -> Vec<String> {
        fs::read_to_string(self.path(name))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// The `solocron` binary: Cargo's path for integration tests; from the
/// bench and soak programs (which Cargo gives no `CARGO_BIN_EXE_*`),
/// `$SOLOCRON_BIN` or the `solocron` next to them (`target/release/`).
pub fn solocron_bin() -> PathBuf {
    if let Some(path) = option_env!("CARGO_BIN_EXE_solocron") {
        return PathBuf::from(path);
    }
    if let Some(path) = std::env::var_os("SOLOCRON_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("current executable");
    exe.parent()
        .map(|dir| dir.join("solocron"))
        .expect("target directory")
}

/// A `solocron run` process; SIGKILLed on drop if still running.
pub struct Node {
    pub id: String,
    child: Child,
    log: PathBuf,
}

impl Node {
    /// Starts `solocron run` as `id` with stderr (the log) going to a file.
    pub fn start(
        work: &Workdir,
        redis: &RedisServer,
        id: &str,
        extra_env: &[(&str, &str)],
    ) -> Node {
        Node::start_with_url(work, &redis.url(), id, extra_env)
    }

    /// Like [`Node::start`], with any Redis URL (e.g. a port nobody listens on).
    pub fn start_with_url(work: &Workdir, url: &str, id: &str, extra_env: &[(&str, &str)]) -> Node {
        let config = work.path("jobs.toml");
        let args = ["--config", &toml_path(&config), "--redis", url];
        Node::start_with_args(work, id, &args, extra_env)
    }

    /// `solocron run --node-id ID ARGS` (no `--config` or `--redis` added:
    /// the caller passes what it wants), stdout and stderr to `ID.log`.
    pub fn start_with_args(
        work: &Workdir,
        id: &str,
        args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> Node {
        let node = Node::spawn_with_args(work, id, args, extra_env);
        node.wait_for_log(Duration::from_secs(10), "solocron started");
        node
    }

    /// Like [`Node::start_with_args`] without waiting for `solocron
    /// started` in the log (a node logging to the journal writes nothing
    /// there). The log file is created (or truncated) in place, so a test
    /// may create `ID.log` first to learn its device and inode.
    pub fn spawn_with_args(
        work: &Workdir,
        id: &str,
        args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> Node {
        Node::spawn(work, id, args, extra_env, false)
    }

    /// Like [`Node::start_with_args`], in a process group of its own whose
    /// parent (this test) is in another group of the same session: the
    /// group is not orphaned, so the kernel delivers job-control stops
    /// (SIGTSTP, SIGTTIN) to it rather than discarding them, as a terminal
    /// would see it.
    pub fn start_in_own_group(
        work: &Workdir,
        id: &str,
        args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> Node {
        let node = Node::spawn(work, id, args, extra_env, true);
        node.wait_for_log(Duration::from_secs(10), "solocron started");
        node
    }

    fn spawn(
        work: &Workdir,
        id: &str,
        args: &[&str],
        extra_env: &[(&str, &str)],
        own_group: bool,
    ) -> Node {
        use std::os::unix::process::CommandExt as _;
        let log = work.path(&format!("{id}.log"));
        let log_file = fs::File::create(&log).expect("create log file");
        let out_file = log_file.try_clone().expect("clone log file");
        let mut command = Command::new(solocron_bin());
        command
            .arg("run")
            .args(["--node-id", id])
            .args(args)
            .env_remove("SOLOCRON_REDIS_URL")
            .env_remove("SOLOCRON_CONFIG")
            .env("SOLOCRON_LOG", "info")
            .env_remove("SOLOCRON_LOG_FORMAT")
            // Journal logging only where a test asks for it.
            .env_remove("JOURNAL_STREAM")
            .env_remove("SOLOCRON_JOURNAL_SOCKET")
            .stdin(Stdio::null())
            .stdout(out_file)
            .stderr(log_file);
        for (key, value) in extra_env {
            command.env(key, value);
        }
        if own_group {
            command.process_group(0);
        }
        let child = command.spawn().expect("start solocron");
        Node {
            id: id.to_string(),
            child,
            log,
        }
    }

    /// Starts `solocron run` as `id` whose stdout and stderr are a pipe
    /// that is closed once the node has logged `solocron started` (what
    /// `solocron run | head -1` does): every later line fails with EPIPE.
    /// Its [`Node::log`] is empty.
    pub fn start_with_closed_log(work: &Workdir, url: &str, id: &str) -> Node {
        let config = toml_path(&work.path("jobs.toml"));
        Node::start_with_closed_log_args(work, id, &["--config", &config, "--redis", url])
    }

    /// Like [`Node::start_with_closed_log`], with the caller's arguments
    /// after `--node-id ID` (as [`Node::start_with_args`]).
    pub fn start_with_closed_log_args(work: &Workdir, id: &str, args: &[&str]) -> Node {
        use std::io::BufRead as _;
        let (read, write) = std::io::pipe().expect("pipe");
        let err = write.try_clone().expect("dup the pipe");
        let child = Command::new(solocron_bin())
            .arg("run")
            .args(["--node-id", id])
            .args(args)
            .env_remove("SOLOCRON_REDIS_URL")
            .env_remove("SOLOCRON_CONFIG")
            .env("SOLOCRON_LOG", "info")
            .env_remove("SOLOCRON_LOG_FORMAT")
            .stdin(Stdio::null())
            .stdout(Stdio::from(write))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("start solocron");
        let mut first = String::new();
        let _ = std::io::BufReader::new(read).read_line(&mut first);
        assert!(first.contains("solocron started"), "{first}");
        Node {
            id: id.to_string(),
            child,
            log: work.path(&format!("{id}.closed-log")),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The log so far.
    pub fn log(&self) -> String {
        read_text(&self.log)
    }

    /// Waits until the log contains `needle`.
    pub fn wait_for_log(&self, limit: Duration, needle: &str) {
        let deadline = Instant::now() + limit;
        while !self.log().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "node {} ({}) did not log `{needle}` within {limit:?}; log:\n{}",
                self.id,
                process_state(self.pid()),
                self.log()
            );
            thread::sleep(POLL);
        }
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn signal(&self, sig: &str) {
        signal(self.pid(), sig);
    }

    /// Waits for the process to exit.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let (id, log) = (&self.id, &self.log);
        wait_exit(&mut self.child, limit, || {
            format!("node {id}; log:\n{}", read_text(log))
        })
    }
}

/// The text of a file so far; empty if it cannot be read.
fn read_text(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut file) = fs::File::open(path) {
        let _ = file.read_to_string(&mut text);
    }
    text
}

/// Waits until `child` exits and returns its status; after `limit`, panics
/// with what `context` says (a log, the stderr so far).
pub fn wait_exit(child: &mut Child, limit: Duration, context: impl Fn() -> String) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the process did not exit within {limit:?}: {}",
            context()
        );
        thread::sleep(POLL);
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One line of a job's record file: `OCCURRENCE NODE FENCE [PID]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    pub occurrence: String,
    pub node: String,
    pub fence: u64,
    pub pid: Option<i32>,
}

/// Parses the record lines written by test jobs.
pub fn records(lines: &[String]) -> Vec<RunRecord> {
    lines
        .iter()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            Some(RunRecord {
                occurrence: parts.next()?.to_string(),
                node: parts.next()?.to_string(),
                fence: parts.next()?.parse().ok()?,
                pid: parts.next().and_then(|pid| pid.parse().ok()),
            })
        })
        .collect()
}

/// Shared handle type for tests spawning threads.
pub type Shared<T> = Arc<std::sync::Mutex<T>>;

/// A job's `schedule`, `timezone` and `starting_deadline` lines under which
/// a node starting now catches up this minute's occurrence at once and meets
/// no other for an hour. With `* * * * *` a test of one run's life (a few
/// seconds) fails whenever it crosses a minute boundary: the next occurrence
/// is recorded as skipped while the run still holds the lock. `job`'s state
/// on `redis` names the occurrence an hour before as decided: a node takes
/// a catch-up occurrence only of a job the fleet decided before (a new or
/// renamed job first runs at its next occurrence).
pub fn caught_up_at_once(redis: &RedisServer, job: &str) -> String {
    use chrono::Timelike as _;
    let now = chrono::Utc::now();
    let minute = now.minute();
    let _: () = redis::cmd("HSET")
        .arg(format!("{{solocron:{job}}}:state"))
        .arg("last_occ")
        .arg((now.timestamp() / 60 * 60 - 3600) * 1000)
        .arg("last_node")
        .arg("seed")
        .query(&mut redis.conn())
        .expect("HSET");
    format!("schedule = \"{minute} * * * *\"\ntimezone = \"UTC\"\nstarting_deadline = \"1h\"")
}

/// `path` as a string for TOML.
pub fn toml_path(path: &Path) -> String {
    path.display().to_string()
}

/// The entries of a job's history stream (prefix `solocron`), oldest first.
pub fn history(redis: &RedisServer, job: &str) -> Vec<std::collections::HashMap<String, String>> {
    history_via(&mut redis.conn(), job)
}

/// Like [`history`], through a given connection (e.g. as an ACL user).
pub fn history_via(
    conn: &mut redis::Connection,
    job: &str,
) -> Vec<std::collections::HashMap<String, String>> {
    use redis::Commands as _;
    let reply: redis::streams::StreamRangeReply = conn
        .xrange_all(format!("{{solocron:{job}}}:history"))
        .expect("XRANGE");
    reply
        .ids
        .into_iter()
        .map(|id| {
            id.map
                .into_iter()
                .map(|(k, v)| (k, redis::from_redis_value::<String>(v).unwrap_or_default()))
                .collect()
        })
        .collect()
}

/// The first line of a file holding a pid, once it is there.
pub fn read_pid(work: &Workdir, name: &str) -> Option<i32> {
    work.lines(name)
        .first()
        .and_then(|line| line.trim().parse().ok())
}

/// Environment that shifts a process's wall clock by `offset` seconds
/// (e.g. `"+0.3"`) with libfaketime, leaving the monotonic clock alone.
pub fn faketime_env(offset: &str) -> Vec<(String, String)> {
    let lib = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib",
    ]
    .iter()
    .map(|dir| PathBuf::from(dir).join("faketime/libfaketimeMT.so.1"))
    .find(|path| path.exists())
    .expect("libfaketime must be installed for the clock-skew tests (apt-get install faketime)");
    vec![
        ("LD_PRELOAD".to_string(), lib.display().to_string()),
        ("FAKETIME".to_string(), offset.to_string()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".to_string(), "1".to_string()),
        ("FAKETIME_NO_CACHE".to_string(), "1".to_string()),
    ]
}

/// Like [`faketime_env`], with the offset read from `file` at every clock
/// read, so a test can step the process's wall clock while it runs by
/// rewriting the file (e.g. `+2`, then `-1`).
pub fn faketime_file_env(file: &Path) -> Vec<(String, String)> {
    let mut env = faketime_env("+0");
    env.retain(|(name, _)| name != "FAKETIME");
    env.push((
        "FAKETIME_TIMESTAMP_FILE".to_string(),
        file.display().to_string(),
    ));
    env
}

/// The `offset_ms` a node logged at its first clock check against Redis.
pub fn logged_clock_offset(log: &str) -> Option<i64> {
    log.lines()
        .find(|line| line.contains("offset_ms="))
        .and_then(|line| line.split("offset_ms=").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|value| value.parse().ok())
}

/// `GET /metrics` on 127.0.0.1:`port` over plain HTTP/1.0; asserts a 200
/// and returns the body.
pub fn scrape_metrics(port: u16) -> String {
    let mut stream =
        std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to /metrics");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    std::io::Write::write_all(
        &mut stream,
        b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    )
    .expect("send request");
    let mut response = String::new();
    std::io::Read::read_to_string(&mut stream, &mut response).expect("read response");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"));
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    body.to_string()
}

/// The first `ACL SETUSER solocron ...` line of docs/operations.md (the
/// ACL user the docs give operators), split into the arguments of `ACL
/// SETUSER`, with `PASSWORD` filled in.
pub fn readme_acl(password: &str) -> Vec<String> {
    readme_acl_line("ACL SETUSER solocron ", password)
}

/// The first line of docs/operations.md starting with `start` (e.g. `ACL
/// SETUSER solocron +`), split into the arguments of `ACL SETUSER`, with
/// `PASSWORD` filled in.
pub fn readme_acl_line(start: &str, password: &str) -> Vec<String> {
    let doc = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .expect("read docs/operations.md");
    let line = doc
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with(start))
        .unwrap_or_else(|| panic!("docs/operations.md has a `{start}...` line"));
    line.split_whitespace()
        .skip(2)
        .map(|word| word.replace(">PASSWORD", &format!(">{password}")))
        .collect()
}

/// Calls per command since the last `CONFIG RESETSTAT` ([`reset_stats`]),
/// from `INFO commandstats`, without the test's own `INFO` and `CONFIG`.
pub fn command_calls(redis: &RedisServer) -> std::collections::BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut redis.conn())
        .expect("INFO commandstats");
    info.lines()
        .filter_map(|line| {
            let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = fields.split(',').find_map(|f| f.strip_prefix("calls="))?;
            Some((name.to_string(), calls.parse().ok()?))
        })
        .filter(|(name, _): &(String, u64)| {
            !name.starts_with("info") && !name.starts_with("config")
        })
        .collect()
}

/// `CONFIG RESETSTAT`: [`command_calls`] counts from now.
pub fn reset_stats(redis: &RedisServer) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut redis.conn())
        .expect("CONFIG RESETSTAT");
}

/// The instant `at_ms` (epoch ms).
pub fn instant(at_ms: i64) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp_millis(at_ms).expect("an instant")
}

/// The scheduled occurrence at `at_ms`, claimable at any time.
pub fn scheduled(at_ms: i64) -> solocron::lock::Target {
    solocron::lock::Target::Scheduled {
        at: instant(at_ms),
        deadline_ms: i64::MAX,
    }
}

/// The history entry of `lease`'s succeeded 5 ms run of `occurrence` on `node`.
pub fn entry(
    node: &str,
    lease: &solocron::lock::Lease,
    occurrence: &str,
) -> solocron::history::Entry {
    let now = chrono::Utc::now();
    solocron::history::Entry::from_report(
        occurrence,
        node,
        lease.fence,
        &solocron::exec::Report {
            outcome: solocron::exec::Outcome::Succeeded,
            exit_code: Some(0),
            http_status: None,
            error: None,
            started_at: now,
            finished_at: now,
            duration: std::time::Duration::from_millis(5),
            output_tail: None,
        },
    )
}

/// The first job name `PREFIX-N` whose offset within `splay` lies in
/// `millis`.
pub fn name_with_offset(
    prefix: &str,
    splay: Duration,
    millis: std::ops::RangeInclusive<u64>,
) -> String {
    (0..1000)
        .map(|i| format!("{prefix}-{i}"))
        .find(|name| {
            let offset = solocron::config::splay_offset(name, splay).as_millis();
            millis.contains(&(offset as u64))
        })
        .unwrap_or_else(|| panic!("no name `{prefix}-N` with an offset in {millis:?} ms"))
}
