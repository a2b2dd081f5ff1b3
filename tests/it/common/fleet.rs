//! Daemons on any coordinator (`[redis]` `url`, `sentinel`, `cluster` or
//! `redlock`) with the fault harness's record-keeping jobs, for the HA
//! tests: like [`super::cluster::Cluster`], but the Redis side is whatever
//! the test started (`super::ha`), written into `jobs.toml`, and the
//! history is read back through `solocron history --json`, which reads
//! every mode (and merges the Redlock masters) the way operators do.

use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::audit::{self, Decision, Run};
use super::cluster::{JOB_SCRIPT, JobSpec};
use super::{Node, Workdir, solocron_bin, toml_path};

/// A work dir with `jobs.toml` (the given `[redis]` section), the job
/// script, the records file and the nodes.
pub struct Fleet {
    pub work: Workdir,
    pub nodes: Vec<Node>,
    redis: String,
    daemon: String,
    /// Extra environment of every node and `solocron` command.
    env: Vec<(String, String)>,
}

impl Fleet {
    /// A fleet whose `jobs.toml` has `redis` as its `[redis]` section body,
    /// `daemon` as `[daemon]`, and `jobs`; no node runs yet.
    pub fn new(redis: &str, daemon: &str, jobs: &[JobSpec]) -> Fleet {
        let work = Workdir::new();
        fs::write(work.path("job.sh"), JOB_SCRIPT).expect("write job.sh");
        let fleet = Fleet {
            work,
            nodes: Vec::new(),
            redis: redis.to_string(),
            daemon: daemon.to_string(),
            env: Vec::new(),
        };
        fleet.write_jobs(jobs);
        fleet
    }

    /// (Re)writes `jobs.toml` for `jobs`.
    pub fn write_jobs(&self, jobs: &[JobSpec]) -> PathBuf {
        let script = toml_path(&self.work.path("job.sh"));
        let records = toml_path(&self.work.path("records"));
        let mut text = format!("[redis]\n{}\n\n[daemon]\n{}\n", self.redis, self.daemon);
        for job in jobs {
            let ignore = if job.ignore_term { " ignore-term" } else { "" };
            text.push_str(&format!(
                "\n[jobs.{}]\nschedule = \"{}\"\ncommand = \"exec /bin/sh {script} {records} {}{ignore}\"\n",
                job.name, job.schedule, job.seconds
            ));
            for line in &job.extra {
                text.push_str(line);
                text.push('\n');
            }
        }
        self.work.write_config(&text)
    }

    fn config(&self) -> String {
        toml_path(&self.work.path("jobs.toml"))
    }

    /// The fleet with extra environment variables for every node started
    /// and every `solocron` command run from now on.
    pub fn with_env(mut self, env: &[(String, String)]) -> Fleet {
        self.env.extend(env.iter().cloned());
        self
    }

    fn env(&self) -> Vec<(&str, &str)> {
        self.env
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
            .collect()
    }

    /// Starts node `id` on the file's coordinator.
    pub fn start_node(&mut self, id: &str) {
        let config = self.config();
        let node = Node::start_with_args(&self.work, id, &["--config", &config], &self.env());
        self.nodes.push(node);
    }

    /// The node called `id`.
    pub fn node(&self, id: &str) -> &Node {
        self.nodes
            .iter()
            .find(|node| node.id == id)
            .unwrap_or_else(|| panic!("no node `{id}`"))
    }

    /// The node called `id`, mutably (to kill it or wait for its exit).
    pub fn node_mut(&mut self, id: &str) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|node| node.id == id)
            .unwrap_or_else(|| panic!("no node `{id}`"))
    }

    /// Starts node `id` again in its place (it was killed or has exited);
    /// its log so far is kept as `ID.log.NS`. With `closed_log`, the new
    /// process's stdout and stderr are a pipe closed after its first line
    /// ([`Node::start_with_closed_log_args`]).
    pub fn restart_node(&mut self, id: &str, closed_log: bool) {
        let index = self
            .nodes
            .iter()
            .position(|node| node.id == id)
            .unwrap_or_else(|| panic!("no node `{id}`"));
        let log = self.work.path(&format!("{id}.log"));
        let _ = fs::rename(
            &log,
            self.work.path(&format!("{id}.log.{}", audit::now_ns())),
        );
        let config = self.config();
        let args = ["--config", config.as_str()];
        self.nodes[index] = if closed_log {
            Node::start_with_closed_log_args(&self.work, id, &args)
        } else {
            Node::start_with_args(&self.work, id, &args, &[])
        };
    }

    /// Every run recorded so far, in START order.
    pub fn runs(&self) -> Vec<Run> {
        audit::parse_runs(&self.work.lines("records"))
    }

    /// Waits until a recorded run matches `pred`.
    pub fn wait_for_run(&self, limit: Duration, what: &str, pred: impl Fn(&Run) -> bool) -> Run {
        audit::wait_for_run(&self.work, limit, what, pred, || {
            format!("\n{}", self.logs())
        })
    }

    /// `solocron ARGS --config jobs.toml`, its stdout.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new(solocron_bin())
            .args(args)
            .args(["--config", &self.config()])
            .env_remove("SOLOCRON_CONFIG")
            .env_remove("SOLOCRON_REDIS_URL")
            .envs(self.env())
            .output()
            .expect("run solocron")
    }

    /// `solocron trigger JOB --node-id ops`, again while it answers exit 3
    /// (the lock is held: a daemon's scheduled run of an every-second job
    /// had it at that moment, and `trigger` then starts nothing, as it
    /// must), for up to `limit`. Any other answer ends it. Returns the last
    /// answer and what every attempt printed (for checks that nothing leaks).
    pub fn trigger_when_free(&self, job: &str, limit: Duration) -> (std::process::Output, String) {
        let deadline = Instant::now() + limit;
        let mut printed = String::new();
        loop {
            let output = self.cli(&["trigger", job, "--node-id", "ops"]);
            printed.push_str(&String::from_utf8_lossy(&output.stdout));
            printed.push_str(&String::from_utf8_lossy(&output.stderr));
            if output.status.code() != Some(3) || Instant::now() >= deadline {
                return (output, printed);
            }
            // Each attempt starts a process: try again a little later, not at once.
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The history of `jobs` as decisions, read with `solocron history
    /// --json` (every mode; Redlock masters merged).
    pub fn decisions(&self, jobs: &[&str]) -> Vec<Decision> {
        self.history(jobs).iter().map(decision_of).collect()
    }

    /// The entries of `jobs`' history as `solocron history JOB --json`
    /// prints them (one call per job, every entry), newest first per job.
    pub fn history(&self, jobs: &[&str]) -> Vec<serde_json::Value> {
        let mut all = Vec::new();
        for job in jobs {
            let output = self.cli(&["history", job, "--json", "--limit", "100000"]);
            assert!(
                output.status.success(),
                "history {job}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let entries: serde_json::Value =
                serde_json::from_slice(&output.stdout).expect("history --json");
            if let serde_json::Value::Array(entries) = entries {
                all.extend(entries);
            }
        }
        all
    }

    /// Whether every node process is still running (none exited or restarted).
    pub fn all_alive(&self) -> bool {
        self.nodes.iter().all(|node| super::is_alive(node.pid()))
    }

    /// Kills every node; with `keep`, leaves the work dir (node logs, the
    /// records, `jobs.toml`) on disk and returns its path.
    pub fn stop(self, keep: bool) -> Option<PathBuf> {
        let Fleet { work, nodes, .. } = self;
        drop(nodes);
        keep.then(|| work.dir.keep())
    }

    /// All node logs, for failure messages.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|node| format!("===== {} =====\n{}", node.id, node.log()))
            .collect()
    }
}

/// One entry of `solocron history --json` as a [`Decision`].
pub fn decision_of(entry: &serde_json::Value) -> Decision {
    let text = |key: &str| entry[key].as_str().unwrap_or_default().to_string();
    Decision {
        job: text("job"),
        occurrence: text("occurrence"),
        node: text("node"),
        fence: entry["fence"].as_u64().unwrap_or(0),
        outcome: text("outcome"),
    }
}
