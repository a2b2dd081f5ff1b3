//! The fleet the status page's tests look at ([`Scene::start`]): a Redis
//! with a password (in the file's `[redis] url`), an `env_file` secret
//! that one job prints and one hook's header holds, two nodes with tags
//! and pages of their own (`n2` drained), a succeeded job, a failed one
//! printing `<script>`, a paused one, one in a group and one run by hand;
//! and [`stable`], `status --json` without what moves between two reads.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::page::{Answer, get};
use crate::common::{self, Node, RedisServer, Workdir, free_port, toml_path, wait_until};
use serde_json::Value;

pub const REDIS_PASSWORD: &str = "s3cret-redis-pw-71";
pub const TOKEN: &str = "s3cret-token-82";

pub struct Scene {
    /// Kept for the scene's life: the server, the files, the daemons.
    _redis: RedisServer,
    _work: Workdir,
    _nodes: Vec<Node>,
    /// The page ports of `n1` and `n2`.
    pub ports: [u16; 2],
    config: PathBuf,
}

fn jobs_toml(url: &str, port: u16) -> String {
    format!(
        r#"[redis]
url = "{url}"

[daemon]
env_file = "env"
status_listen = "127.0.0.1:{port}"

[groups.db]
max_running = 1

[jobs.ok]
schedule = "*/2 * * * * *"
command = "echo hello"

[jobs.bad]
schedule = "1-59/2 * * * * *"
command = "echo '<script>alert(1)</script>'; exit 3"

[jobs.paused-job]
schedule = "* * * * * *"
command = "true"

[jobs."db.backup"]
schedule = "*/3 * * * * *"
group = "db"
command = "sleep 1"

[jobs.leaky]
schedule = "*/2 * * * * *"
command = "echo token=${{API_TOKEN}}"

[jobs.hook]
schedule = "0 0 1 1 *"
http = {{ url = "http://127.0.0.1:1/", headers = {{ Authorization = "Bearer ${{API_TOKEN}}" }} }}

[jobs.manual]
schedule = "0 0 1 1 *"
command = "echo by hand"
"#
    )
}

impl Scene {
    pub fn start() -> Scene {
        let redis = RedisServer::start_with_args(&["--requirepass", REDIS_PASSWORD]);
        let work = Workdir::new();
        fs::write(work.path("env"), format!("API_TOKEN={TOKEN}\n")).expect("write env");
        let url = format!("redis://:{REDIS_PASSWORD}@127.0.0.1:{}/", redis.port);
        let ports = [free_port(), free_port()];
        let config = work.write_config(&jobs_toml(&url, ports[0]));
        let other = work.path("jobs-n2.toml");
        fs::write(&other, jobs_toml(&url, ports[1])).expect("write jobs-n2.toml");
        let node = |id: &str, path: &PathBuf, tags: &str| {
            Node::start_with_args(
                &work,
                id,
                &["--config", &toml_path(path), "--tags", tags],
                &[],
            )
        };
        let nodes = vec![
            node("n1", &config, "role=web,zone=a"),
            node("n2", &other, "role=db"),
        ];
        let scene = Scene {
            _redis: redis,
            _work: work,
            _nodes: nodes,
            ports,
            config,
        };
        scene.ok(&["pause", "paused-job", "--reason", "<b>db</b> migration"]);
        scene.ok(&["drain", "--node", "n2", "--reason", "kernel update"]);
        scene.ok(&["trigger", "manual", "--node-id", "ops"]);
        wait_until(
            Duration::from_secs(30),
            "each job's first outcome, both nodes live, n2 drained",
            || scene.settled(),
        );
        scene
    }

    /// `solocron ARGS --config jobs.toml`.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(common::solocron_bin())
            .args(args)
            .args(["--config", &toml_path(&self.config)])
            .env_remove("SOLOCRON_CONFIG")
            .env_remove("SOLOCRON_REDIS_URL")
            .env_remove("SOLOCRON_LOG_FORMAT")
            .output()
            .expect("run solocron")
    }

    pub fn ok(&self, args: &[&str]) -> Output {
        let output = self.cli(args);
        assert!(output.status.success(), "solocron {args:?}: {output:?}");
        output
    }

    pub fn json(&self, args: &[&str]) -> Value {
        serde_json::from_slice(&self.ok(args).stdout).expect("JSON")
    }

    fn settled(&self) -> bool {
        let outcomes = |job: &str| -> Vec<String> {
            let entries = self.json(&["history", job, "--json"]);
            let entries = entries.as_array().cloned().unwrap_or_default();
            entries
                .iter()
                .filter_map(|e| e["outcome"].as_str().map(str::to_string))
                .collect()
        };
        let status = self.json(&["status", "--json"]);
        let tagged = status["nodes"].as_array().is_some_and(|nodes| {
            nodes.len() == 2 && nodes.iter().all(|n| n["tags"]["role"].is_string())
        });
        let drained = status["drains"][0]["state"] == "drained";
        tagged
            && drained
            && outcomes("ok").iter().filter(|o| *o == "succeeded").count() >= 2
            && outcomes("bad").iter().any(|o| o == "failed")
            && outcomes("paused-job").iter().any(|o| o == "paused")
            && !outcomes("leaky").is_empty()
            && !outcomes("db.backup").is_empty()
    }

    pub fn get(&self, path: &str) -> Answer {
        get(self.ports[0], path)
    }
}

/// `status --json` without what moves between two reads a moment apart.
pub fn stable(status: &Value) -> Value {
    let mut status = status.clone();
    let mut clear = |list: &str, keys: &[&str]| {
        for item in status[list].as_array_mut().into_iter().flatten() {
            for key in keys {
                assert!(item.get(*key).is_some(), "{list} has `{key}`: {item}");
                item[*key] = Value::Null;
            }
        }
    };
    clear(
        "jobs",
        &["lock", "last", "next", "next_local", "next_start"],
    );
    clear(
        "nodes",
        &["last_seen", "clock_offset_ms", "running", "redis_warning"],
    );
    clear("drains", &["state", "running", "running_jobs"]);
    clear(
        "groups",
        &["running", "holders", "starts_in_window", "waiting"],
    );
    status
}
