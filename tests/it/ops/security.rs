//! Security basics, against real `redis-server` and
//! `solocron` processes:
//!
//! - planted secrets (the Redis password in the URL, on the command line, in
//!   `SOLOCRON_REDIS_URL`, in a `password_file`; a `${TOKEN}` in a command,
//!   an env value, an HTTP header, URL query and body) appear nowhere in
//!   stdout, stderr, logs or the Redis keyspace, through runs, failures,
//!   reloads, broken reloads, every subcommand, a wrong password and Redis
//!   down; and a job's environment does not carry the Redis password;
//! - `rediss://` against a server with a certificate from the test's own CA
//!   (made with `openssl`): works with `tls_ca_file`, fails closed without
//!   it or with another CA; mutual TLS with `tls_cert_file`/`tls_key_file`;
//! - the ACL line of docs/operations.md is enough for two daemons, `status`, `history`,
//!   `trigger` (also `--fleet`), `pause`, `resume`, `drain` and `undrain`
//!   (the server's `ACL LOG` stays empty), and refuses anything else.
//! - `HTTP_PROXY` in the daemon's environment carries hooks to other hosts
//!   but never one to 127.0.0.1, and is named at start without its password.

use crate::common;

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::pki::Pki;
use common::{Node, Workdir, free_port, readme_acl, records, toml_path, wait_until};
use redis::Value;

const PASSWORD: &str = "PLANTED-PW-1";
const TOKEN: &str = "PLANTED-TOKEN-2";
const WRONG_PASSWORD: &str = "PLANTED-WRONG-3";
const PLANTED: [&str; 3] = [PASSWORD, TOKEN, WRONG_PASSWORD];
const ADMIN: &str = "redis://admin:admin-pw@127.0.0.1";

/// A `redis-server` with extra arguments (ACL users, TLS), killed on drop.
/// Its default user is off; `admin` (password `admin-pw`) may do anything.
struct Server {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(args: &[String]) -> Server {
        Server::start_on(free_port(), args, false)
    }

    /// `tls`: `port` is the TLS port and plain TCP is off.
    fn start_on(port: u16, args: &[String], tls: bool) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut command = crate::common::server_command();
        command.args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]);
        if tls {
            command.args(["--port", "0", "--tls-port", &port.to_string()]);
        } else {
            command.args(["--port", &port.to_string()]);
        }
        let child = command
            .args(["--user", "default", "off"])
            .args(["--user", "admin", "on", ">admin-pw", "~*", "&*", "+@all"])
            .args(args)
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("{}: {err}", crate::common::server_missing()));
        wait_until(Duration::from_secs(10), "redis-server listens", || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        Server {
            child,
            port,
            _dir: dir,
        }
    }

    /// A connection as `admin` (plain TCP servers only).
    fn admin(&self) -> redis::Connection {
        redis::Client::open(format!("{ADMIN}:{}/", self.port))
            .and_then(|client| client.get_connection())
            .expect("connect as admin")
    }

    /// `redis://solocron:PASSWORD@127.0.0.1:PORT/`.
    fn url_with(&self, password: &str) -> String {
        format!("redis://solocron:{password}@127.0.0.1:{}/", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `solocron ARGS` to completion with `env` (and nothing from the
/// test's own `SOLOCRON_*` environment).
fn solocron(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_solocron"));
    command
        .args(args)
        .env_remove("SOLOCRON_REDIS_URL")
        .env_remove("SOLOCRON_CONFIG")
        .env_remove("SOLOCRON_LOG_FORMAT")
        .env_remove("SOLOCRON_NODE_ID")
        .env("SOLOCRON_LOG", "debug");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("run solocron")
}

/// Runs `solocron trigger …` like [`solocron`], again while it answers
/// exit 3 (the lock is held: the daemons of these tests run the same job
/// every second), for up to 30 s. Every busy answer goes to `busy`.
fn trigger_when_free(args: &[&str], env: &[(&str, &str)], mut busy: impl FnMut(&Output)) -> Output {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let output = solocron(args, env);
        if output.status.code() != Some(3) || Instant::now() >= deadline {
            return output;
        }
        busy(&output);
        // Each attempt starts a process: try again a little later, not at once.
        thread::sleep(Duration::from_millis(100));
    }
}

/// Everything a run printed, for the record.
fn text(output: &Output) -> String {
    format!(
        "exit: {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Every key and every value in the server, as text.
fn dump_keyspace(conn: &mut redis::Connection) -> String {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(conn).expect("KEYS");
    let mut out = String::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE").arg(&key).query(conn).expect("TYPE");
        let value: Value = match kind.as_str() {
            "string" => redis::cmd("GET").arg(&key).query(conn),
            "hash" => redis::cmd("HGETALL").arg(&key).query(conn),
            "stream" => redis::cmd("XRANGE").arg(&key).arg("-").arg("+").query(conn),
            "zset" => redis::cmd("ZRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query(conn),
            "set" => redis::cmd("SMEMBERS").arg(&key).query(conn),
            "list" => redis::cmd("LRANGE").arg(&key).arg(0).arg(-1).query(conn),
            other => panic!("unexpected key type {other} for {key}"),
        }
        .expect("read a key");
        out.push_str(&format!("{key} ({kind}):"));
        flatten(&value, &mut out);
        out.push('\n');
    }
    out
}

fn flatten(value: &Value, out: &mut String) {
    match value {
        Value::BulkString(bytes) => {
            out.push(' ');
            out.push_str(&String::from_utf8_lossy(bytes));
        }
        Value::SimpleString(text) => {
            out.push(' ');
            out.push_str(text);
        }
        Value::Int(number) => out.push_str(&format!(" {number}")),
        Value::Array(items) | Value::Set(items) => items.iter().for_each(|v| flatten(v, out)),
        Value::Map(pairs) => pairs.iter().for_each(|(k, v)| {
            flatten(k, out);
            flatten(v, out);
        }),
        other => out.push_str(&format!(" {other:?}")),
    }
}

/// Panics naming every source (and line) that contains a planted value.
fn assert_no_planted(sources: &[(String, String)]) {
    let mut leaks = Vec::new();
    for (label, text) in sources {
        for line in text.lines() {
            if let Some(secret) = PLANTED.iter().find(|secret| line.contains(*secret)) {
                leaks.push(format!("{label}: `{secret}` in: {line}"));
            }
        }
    }
    assert!(leaks.is_empty(), "secrets leaked:\n{}", leaks.join("\n"));
}

/// A one-shot-per-connection HTTP server answering 200; keeps each request.
fn http_sink() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind http sink");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = Arc::clone(&seen);
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = [0u8; 8192];
            let n = stream.read(&mut buf).unwrap_or(0);
            keep.lock()
                .expect("lock")
                .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    (port, seen)
}

/// The jobs of the planted-secrets test, after a `[redis]` section.
fn planted_jobs(work: &Workdir, sink: u16, closed: u16) -> String {
    let dir = toml_path(work.dir.path());
    format!(
        r#"
[defaults]
lock_ttl = "5s"
starting_deadline = "3s"

[jobs.envdump]
schedule = "* * * * * *"
command = "test \"$SECRET_ENV\" = '${{TOKEN}}' && echo ok >> {dir}/token-ok; env > {dir}/jobenv-$SOLOCRON_NODE-$SOLOCRON_FENCE.txt; echo plain job output"
env = {{ SECRET_ENV = "${{TOKEN}}" }}

[jobs.fails]
schedule = "* * * * * *"
command = "echo ${{TOKEN}} > /dev/null; echo failing on purpose >&2; exit 3"

[jobs.hook-ok]
schedule = "*/2 * * * * *"
http = {{ url = "http://127.0.0.1:{sink}/hook?token=${{TOKEN}}", headers = {{ Authorization = "Bearer ${{TOKEN}}" }}, body = "${{TOKEN}}" }}

[jobs.hook-closed]
schedule = "* * * * * *"
http = {{ url = "http://127.0.0.1:{closed}/hook?token=${{TOKEN}}", timeout = "2s", headers = {{ Authorization = "Bearer ${{TOKEN}}" }}, body = "${{TOKEN}}" }}
"#
    )
}

#[test]
fn planted_secrets_appear_in_no_output_and_no_key() {
    let server = Server::start(&[
        "--user".into(),
        "solocron".into(),
        "on".into(),
        format!(">{PASSWORD}"),
        "~*".into(),
        "&*".into(),
        "+@all".into(),
    ]);
    let work = Workdir::new();
    let (sink, requests) = http_sink();
    let closed = free_port();
    let jobs = planted_jobs(&work, sink, closed);
    let url = server.url_with(PASSWORD);
    let in_url = work.path("in-url.toml");
    let with_url = format!("[redis]\nurl = \"{url}\"\n{jobs}");
    fs::write(&in_url, &with_url).expect("write config");
    fs::write(work.path("redis.pass"), format!("{PASSWORD}\n")).expect("write password");
    let in_file = work.path("in-file.toml");
    let with_file = format!(
        "[redis]\nurl = \"redis://solocron@127.0.0.1:{}/\"\npassword_file = \"redis.pass\"\n{jobs}",
        server.port
    );
    fs::write(&in_file, with_file).expect("write config");
    let wrong = work.path("wrong.toml");
    let wrong_url = server.url_with(WRONG_PASSWORD);
    fs::write(&wrong, format!("[redis]\nurl = \"{wrong_url}\"\n{jobs}")).expect("write config");
    let down_url = format!("redis://solocron:{PASSWORD}@127.0.0.1:{}/", free_port());
    let (url_path, file_path, wrong_path) =
        (toml_path(&in_url), toml_path(&in_file), toml_path(&wrong));
    let token = [("TOKEN", TOKEN)];
    let debug = [("TOKEN", TOKEN), ("SOLOCRON_LOG", "debug")];
    let env_url = [("TOKEN", TOKEN), ("SOLOCRON_REDIS_URL", url.as_str())];

    // Four ways to give the password, text and JSON logs, debug level.
    let mut nodes = vec![
        Node::start_with_args(&work, "in-url", &["--config", &url_path], &debug),
        Node::start_with_args(
            &work,
            "cli-flag",
            &[
                "--config",
                &file_path,
                "--redis",
                &url,
                "--log-format",
                "json",
            ],
            &debug,
        ),
        Node::start_with_args(&work, "pw-file", &["--config", &file_path], &debug),
        Node::start_with_args(&work, "env-url", &["--config", &file_path], &env_url),
    ];
    let mut sources: Vec<(String, String)> = Vec::new();
    let mut conn = server.admin();
    wait_until(Duration::from_secs(20), "every kind of job ran", || {
        let failed_hooks = common::history_via(&mut conn, "hook-closed")
            .iter()
            .filter(|entry| entry.get("outcome").map(String::as_str) == Some("failed"))
            .count();
        failed_hooks >= 2
            && !requests.lock().expect("lock").is_empty()
            && !work.lines("token-ok").is_empty()
            && common::history_via(&mut conn, "fails").len() >= 2
    });

    // Reload, a broken reload (a syntax error on the line holding the
    // password, so the snippet shows that line), and back.
    nodes[0].signal("HUP");
    nodes[0].wait_for_log(Duration::from_secs(10), "reload");
    let broken = with_url.replacen(
        &format!("url = \"{url}\""),
        &format!("url = \"{url}\" oops"),
        1,
    );
    assert_ne!(broken, with_url);
    fs::write(&in_url, &broken).expect("write broken config");
    nodes[0].signal("HUP");
    wait_until(
        Duration::from_secs(10),
        "the broken reload is logged",
        || nodes[0].log().matches("in-url.toml:").count() >= 1,
    );
    let check_broken = solocron(&["check", "--config", &url_path], &token);
    assert_eq!(
        check_broken.status.code(),
        Some(1),
        "{}",
        text(&check_broken)
    );
    sources.push(("check (broken file)".into(), text(&check_broken)));
    let bad_url = with_url.replacen(
        &format!("url = \"{url}\""),
        &format!("url = \"redis://solocron:{PASSWORD}@127.0.0.1:notaport/\""),
        1,
    );
    fs::write(&in_url, &bad_url).expect("write config with a bad url");
    nodes[0].signal("HUP");
    let check_bad_url = solocron(&["check", "--config", &url_path], &token);
    assert_eq!(
        check_bad_url.status.code(),
        Some(1),
        "{}",
        text(&check_bad_url)
    );
    sources.push(("check (bad url)".into(), text(&check_bad_url)));
    fs::write(&in_url, &with_url).expect("restore config");
    nodes[0].signal("HUP");

    // Every subcommand, with the password in the file, on the command line,
    // in the environment and in a password file.
    // The daemons run these jobs every second, so a `trigger` may meet one
    // of their runs holding the lock (exit 3): it is tried again until the
    // lock is free, and every answer is kept for the leak check.
    let mut run = |label: &str, args: &[&str], env: &[(&str, &str)], code: i32| {
        let output = if args.first() == Some(&"trigger") {
            trigger_when_free(args, env, |busy| {
                sources.push((format!("{label} (busy)"), text(busy)));
            })
        } else {
            solocron(args, env)
        };
        assert_eq!(
            output.status.code(),
            Some(code),
            "{label}: {}",
            text(&output)
        );
        sources.push((label.to_string(), text(&output)));
    };
    for (label, config, env) in [
        ("in url", url_path.as_str(), &token[..]),
        ("password file", file_path.as_str(), &token[..]),
        ("SOLOCRON_REDIS_URL", file_path.as_str(), &env_url[..]),
    ] {
        let c = ["--config", config];
        run(
            &format!("check, {label}"),
            &[&["check"], &c[..]].concat(),
            env,
            0,
        );
        run(
            &format!("status, {label}"),
            &[&["status"], &c[..]].concat(),
            env,
            0,
        );
        let status_json = [&["status", "--json"], &c[..]].concat();
        run(&format!("status --json, {label}"), &status_json, env, 0);
        run(
            &format!("history, {label}"),
            &[&["history"], &c[..]].concat(),
            env,
            0,
        );
        let history_json = [&["history", "--json", "--limit", "500"], &c[..]].concat();
        run(&format!("history --json, {label}"), &history_json, env, 0);
        for (what, args) in [
            (
                "pause",
                &["pause", "fails", "--for", "1s", "--reason", "r"][..],
            ),
            ("resume", &["resume", "fails"]),
            ("drain", &["drain", "--node", "gone", "--force"]),
            ("undrain", &["undrain", "--node", "gone"]),
        ] {
            run(
                &format!("{what}, {label}"),
                &[args, &c[..]].concat(),
                env,
                0,
            );
        }
    }
    let flag = [
        "--config",
        file_path.as_str(),
        "--redis",
        url.as_str(),
        "--node-id",
        "t",
    ];
    run(
        "status --redis",
        &[&["status"], &flag[..4]].concat(),
        &token,
        0,
    );
    run(
        "trigger envdump",
        &[&["trigger", "envdump"], &flag[..]].concat(),
        &debug,
        0,
    );
    run(
        "trigger fails",
        &[&["trigger", "fails"], &flag[..]].concat(),
        &debug,
        1,
    );
    run(
        "trigger hook-closed",
        &[&["trigger", "hook-closed"], &flag[..]].concat(),
        &debug,
        1,
    );
    let env_trigger = [
        "trigger",
        "envdump",
        "--config",
        &file_path,
        "--node-id",
        "env-trigger",
    ];
    run(
        "trigger envdump, SOLOCRON_REDIS_URL",
        &env_trigger,
        &env_url,
        0,
    );
    let slash = format!("redis://solocron:{PASSWORD}/x@127.0.0.1:{}/", server.port);
    run(
        "status, `/` in the password",
        &["status", "--config", &file_path, "--redis", &slash],
        &token,
        1,
    );

    // A wrong password and Redis down: the error paths.
    let wrong_status = ["status", "--config", wrong_path.as_str()];
    run("status, wrong password", &wrong_status, &token, 1);
    run(
        "history, wrong password",
        &["history", "--config", &wrong_path],
        &token,
        1,
    );
    run(
        "pause, wrong password",
        &["pause", "fails", "--config", &wrong_path],
        &token,
        1,
    );
    run(
        "trigger, wrong password",
        &[
            "trigger",
            "fails",
            "--config",
            &wrong_path,
            "--node-id",
            "t",
        ],
        &token,
        1,
    );
    run(
        "status, redis down",
        &["status", "--config", &file_path, "--redis", &down_url],
        &token,
        1,
    );
    run(
        "trigger, redis down",
        &[
            "trigger",
            "fails",
            "--config",
            &file_path,
            "--redis",
            &down_url,
            "--node-id",
            "t",
        ],
        &token,
        1,
    );
    // A wrong password stops the daemon at once (exit 78); Redis down is waited for.
    let mut wrong_node =
        Node::start_with_args(&work, "wrong-pw", &["--config", &wrong_path], &debug);
    let down_node = Node::start_with_args(
        &work,
        "redis-down",
        &["--config", &file_path, "--redis", &down_url],
        &debug,
    );
    let wrong_exit = wrong_node.wait_exit(Duration::from_secs(15));
    assert_eq!(wrong_exit.code(), Some(78), "{}", wrong_node.log());
    down_node.wait_for_log(Duration::from_secs(15), "redis unreachable");
    nodes.extend([wrong_node, down_node]);

    for node in &mut nodes {
        node.signal("TERM");
        node.wait_exit(Duration::from_secs(30));
        sources.push((format!("log of {}", node.id), node.log()));
    }
    sources.push(("redis keyspace".into(), dump_keyspace(&mut conn)));

    // The planted values were really in play: the job got the token, the
    // hook sent it, the wrong password was refused, the secrets were masked.
    let sent = requests.lock().expect("lock").join("\n");
    assert!(sent.contains(&format!("Bearer {TOKEN}")) && sent.contains(&format!("token={TOKEN}")));
    let all: String = sources.iter().map(|(_, text)| text.as_str()).collect();
    assert!(all.contains("authentication failed"), "no auth error seen");
    assert!(all.contains("solocron:***@127.0.0.1"), "no masked url seen");
    assert!(all.contains("oops"), "the broken line was never shown");
    assert!(
        all.contains("http hook of job `hook-closed` failed"),
        "no hook error seen"
    );
    assert_no_planted(&sources);

    // Jobs see neither the Redis password nor SOLOCRON_REDIS_URL.
    let mut dumps = BTreeMap::new();
    for entry in fs::read_dir(work.dir.path()).expect("read work dir") {
        let path = entry.expect("dir entry").path();
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if name.starts_with("jobenv-") {
            dumps.insert(name, fs::read_to_string(&path).unwrap_or_default());
        }
    }
    let from_env_url = |name: &String| name.starts_with("jobenv-env-trigger-");
    assert!(dumps.keys().any(from_env_url), "{:?}", dumps.keys());
    assert!(
        dumps.values().all(|env| env.contains(TOKEN)),
        "the job got the token"
    );
    for (name, env) in &dumps {
        assert!(
            !env.contains(PASSWORD),
            "{name} holds the redis password:\n{env}"
        );
        assert!(!env.contains("SOLOCRON_REDIS_URL"), "{name}:\n{env}");
    }
}

/// What a job prints of a `${VAR}` value or an `env_file` value is masked
/// as `***` in the log, the history's `output_tail`, a notifier's
/// `SOLOCRON_OUTPUT_TAIL` and `trigger`'s output: from a `command` (also
/// a value printed in two writes, read in two reads) and from an `argv`
/// job reading it from its environment.
#[test]
fn secrets_a_job_prints_are_masked_in_log_history_notifier_and_trigger() {
    const FILE_SECRET: &str = "PRINTED-S3CRET-4";
    const DAEMON_SECRET: &str = "PRINTED-DAEMON-5";
    let redis = common::RedisServer::start();
    let work = Workdir::new();
    fs::write(work.path("env"), format!("TOKEN={FILE_SECRET}\n")).expect("write env");
    let notified = toml_path(&work.path("notified"));
    let config = work.write_config(&format!(
        "[redis]\nurl = \"{}\"\n[daemon]\nenv_file = \"env\"\n\
         [jobs.cmd]\nschedule = \"* * * * * *\"\n\
         command = '''echo token=${{TOKEN}} daemon=${{DAEMON_TOKEN}}; t='${{TOKEN}}'; \
         printf 'split=%s' \"$${{t%-*}}\"; sleep 0.3; printf -- '-%s\\n' \"$${{t##*-}}\"'''\n\
         [jobs.argv]\nschedule = \"* * * * * *\"\n\
         argv = [\"/bin/sh\", \"-c\", \"echo argv=$TOKEN >&2; exit 3\"]\n\
         on_failure = {{ command = 'printf %s \"$SOLOCRON_OUTPUT_TAIL\" > {notified}' }}\n",
        redis.url()
    ));
    let env = [("DAEMON_TOKEN", DAEMON_SECRET)];
    let mut node = Node::start_with_args(&work, "n1", &["--config", &toml_path(&config)], &env);
    let tails = |job: &str| -> Vec<String> {
        let history = cli_with(&config, &["history", "--json", job]);
        let entries: serde_json::Value =
            serde_json::from_slice(&history.stdout).unwrap_or_default();
        let entries = entries.as_array().cloned().unwrap_or_default();
        entries
            .iter()
            .filter_map(|entry| entry["output_tail"].as_str().map(str::to_string))
            .collect()
    };
    wait_until(
        Duration::from_secs(20),
        "both jobs ran and notified",
        || {
            !tails("cmd").is_empty()
                && !tails("argv").is_empty()
                && !work.lines("notified").is_empty()
        },
    );
    node.signal("TERM");
    node.wait_exit(Duration::from_secs(30));
    let log = node.log();
    for told in ["token=*** daemon=***", "split=***", "argv=***"] {
        assert!(log.contains(told), "`{told}` in the log:\n{log}");
    }
    let (cmd, argv) = (tails("cmd"), tails("argv"));
    assert!(
        cmd[0].contains("token=*** daemon=***\nsplit=***\n"),
        "{cmd:?}"
    );
    assert!(argv[0].contains("argv=***"), "{argv:?}");
    let notified = work.lines("notified").join("\n");
    assert!(notified.contains("argv=***"), "{notified}");

    let trigger = solocron(
        &[
            "trigger",
            "cmd",
            "--config",
            &toml_path(&config),
            "--node-id",
            "t",
        ],
        &env,
    );
    assert!(trigger.status.success(), "{}", text(&trigger));
    let printed = text(&trigger);
    assert!(printed.contains("token=*** daemon=***"), "{printed}");
    assert!(printed.contains("split=***"), "{printed}");

    let everything = format!("{log}\n{cmd:?}\n{argv:?}\n{notified}\n{printed}");
    for secret in [FILE_SECRET, DAEMON_SECRET] {
        assert!(
            !everything.contains(secret),
            "{secret} shows:\n{everything}"
        );
    }
}

/// The URL's user name is not a secret: a wrong password in a
/// `password_file` stops the daemon naming `redis://solocron@HOST`, and
/// `status` names it so too; the password shows nowhere.
#[test]
fn a_refusal_names_the_redis_user_and_masks_only_the_password() {
    let server = Server::start(&[]);
    let work = Workdir::new();
    fs::write(work.path("redis.pass"), format!("{WRONG_PASSWORD}\n")).expect("write");
    let url = format!("redis://solocron@127.0.0.1:{}/", server.port);
    let config = work.write_config(&format!(
        "[redis]\nurl = \"{url}\"\npassword_file = \"redis.pass\"\n\
         [jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n"
    ));
    let mut node = Node::start_with_args(&work, "n1", &["--config", &toml_path(&config)], &[]);
    let exit = node.wait_exit(Duration::from_secs(15));
    let log = node.log();
    assert_eq!(exit.code(), Some(78), "{log}");
    assert!(log.contains(&format!("redis at `{url}` refused")), "{log}");
    let status = cli_with(&config, &["status"]);
    assert_eq!(status.status.code(), Some(1), "{}", text(&status));
    let stderr = String::from_utf8_lossy(&status.stderr);
    assert!(stderr.contains(&url), "{stderr}");
    for shown in [&log, &stderr.to_string()] {
        assert!(!shown.contains("***@"), "the user is masked:\n{shown}");
        assert!(!shown.contains(WRONG_PASSWORD), "{shown}");
    }
}

/// A TLS-only server with `pki`'s `server` certificate, trusting `ca` for
/// client certificates; `auth_clients`: `yes` or `no`.
fn tls_server(pki: &Pki, auth_clients: &str) -> Server {
    tls_server_on(pki, free_port(), "server", auth_clients)
}

/// [`tls_server`] on `port` with the certificate `cert` of `pki`.
fn tls_server_on(pki: &Pki, port: u16, cert: &str, auth_clients: &str) -> Server {
    let arg = |name: &str| toml_path(&pki.path(name));
    Server::start_on(
        port,
        &[
            "--tls-cert-file".into(),
            arg(&format!("{cert}.pem")),
            "--tls-key-file".into(),
            arg(&format!("{cert}.key")),
            "--tls-ca-cert-file".into(),
            arg("ca.pem"),
            "--tls-auth-clients".into(),
            auth_clients.into(),
            "--user".into(),
            "solocron".into(),
            "on".into(),
            format!(">{PASSWORD}"),
            "~*".into(),
            "&*".into(),
            "+@all".into(),
        ],
        true,
    )
}

/// A `jobs.toml` for `rediss://` on `port` with extra `[redis]` lines and a
/// job appending `OCCURRENCE NODE FENCE` to `runs`.
fn tls_config(work: &Workdir, port: u16, redis_lines: &str) -> PathBuf {
    let runs = toml_path(&work.path("runs"));
    work.write_config(&format!(
        "[redis]\nurl = \"rediss://solocron:{PASSWORD}@127.0.0.1:{port}/\"\n{redis_lines}\n\
         [jobs.tick]\nschedule = \"* * * * * *\"\n\
         command = \"echo $SOLOCRON_OCCURRENCE $SOLOCRON_NODE $SOLOCRON_FENCE >> {runs}\"\n"
    ))
}

fn cli_with(config: &Path, args: &[&str]) -> Output {
    let config = toml_path(config);
    solocron(&[args, &["--config", &config]].concat(), &[])
}

#[test]
fn rediss_with_the_test_ca_runs_jobs_and_fails_closed_without_it() {
    let pki = Pki::new();
    pki.ca("ca");
    pki.ca("other-ca");
    pki.leaf("ca", "server");
    pki.leaf("other-ca", "other-server");
    pki.leaf_for("ca", "elsewhere", "DNS:elsewhere.invalid");
    let server = tls_server(&pki, "no");
    let port = server.port;
    let ca_line = |ca: &str| format!("tls_ca_file = \"{}\"", toml_path(&pki.path(ca)));

    let work = Workdir::new();
    let config = tls_config(&work, port, &ca_line("ca.pem"));
    let node = Node::start_with_args(
        &work,
        "tls-a",
        &["--config", &toml_path(&config)],
        &[("SOLOCRON_LOG", "debug")],
    );
    wait_until(Duration::from_secs(15), "a job ran over TLS", || {
        records(&work.lines("runs")).len() >= 2
    });
    let history = cli_with(&config, &["history", "--json", "tick"]);
    assert!(history.status.success(), "{}", text(&history));
    let entries: serde_json::Value = serde_json::from_slice(&history.stdout).expect("json");
    let ran = records(&work.lines("runs"));
    let recorded = entries.as_array().expect("array");
    assert!(
        recorded
            .iter()
            .any(|e| e["occurrence"] == ran[0].occurrence.as_str()
                && e["node"] == "tls-a"
                && e["outcome"] == "succeeded"),
        "{recorded:?} vs {ran:?}"
    );

    // Once running, a server back with a certificate the node does not
    // trust is an outage: nothing runs, the daemon waits (not exit 78).
    drop(server);
    let other = tls_server_on(&pki, port, "other-server", "no");
    wait_until(Duration::from_secs(15), "the claims fail", || {
        node.log().contains("invalid peer certificate")
    });
    let ran = work.lines("runs").len();
    wait_until(Duration::from_secs(15), "a later failed claim", || {
        node.log().matches("invalid peer certificate").count() >= 3
    });
    assert!(common::is_alive(node.pid()), "{}", node.log());
    assert_eq!(
        work.lines("runs").len(),
        ran,
        "ran without a trusted server"
    );
    assert!(node.log().contains("redis unreachable"), "{}", node.log());
    drop(node);
    drop(other);
    let server = tls_server_on(&pki, port, "server", "no");
    let elsewhere = tls_server_on(&pki, free_port(), "elsewhere", "no");

    // At start: no CA (the system roots do not know the test CA), another
    // CA, or a certificate for another name: nothing runs, and the daemon
    // exits 78 at once with one line saying why and what to do.
    for (case, port, lines, fix) in [
        ("no-ca", port, String::new(), "update-ca-certificates"),
        ("other-ca", port, ca_line("other-ca.pem"), "tls_ca_file"),
        ("name", elsewhere.port, ca_line("ca.pem"), "subjectAltName"),
    ] {
        let work = Workdir::new();
        let config = tls_config(&work, port, &lines);
        let status = cli_with(&config, &["status"]);
        assert_eq!(status.status.code(), Some(1), "{case}: {}", text(&status));
        let message = String::from_utf8_lossy(&status.stderr).to_lowercase();
        assert!(message.contains("certificate"), "{case}: {message}");
        let mut node = Node::start_with_args(&work, case, &["--config", &toml_path(&config)], &[]);
        let exit = node.wait_exit(Duration::from_secs(15));
        let log = node.log();
        assert_eq!(exit.code(), Some(78), "{case}: {log}");
        let told: Vec<&str> = log
            .lines()
            .filter(|line| line.contains("does not trust the TLS certificate"))
            .collect();
        assert_eq!(told.len(), 1, "{case}: one line:\n{log}");
        for part in [
            format!("rediss://solocron:***@127.0.0.1:{port}/"),
            "invalid peer certificate".to_string(),
            fix.to_string(),
            toml_path(&config),
        ] {
            assert!(told[0].contains(&part), "{case}: names {part}:\n{log}");
        }
        assert!(!log.contains("redis unreachable"), "{case}: {log}");
        assert!(
            work.lines("runs").is_empty(),
            "{case}: ran without a trusted server"
        );
        assert!(!log.contains(PASSWORD));
    }
    drop(server);
}

#[test]
fn mutual_tls_needs_the_client_certificate() {
    let pki = Pki::new();
    pki.ca("ca");
    pki.leaf("ca", "server");
    pki.leaf("ca", "client");
    let server = tls_server(&pki, "yes");
    let file = |name: &str| toml_path(&pki.path(name));
    let work = Workdir::new();
    let without = tls_config(
        &work,
        server.port,
        &format!("tls_ca_file = \"{}\"", file("ca.pem")),
    );
    let refused = cli_with(&without, &["status"]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let with = tls_config(
        &work,
        server.port,
        &format!(
            "tls_ca_file = \"{}\"\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"",
            file("ca.pem"),
            file("client.pem"),
            file("client.key")
        ),
    );
    let status = cli_with(&with, &["status"]);
    assert!(status.status.success(), "{}", text(&status));
    let node = Node::start_with_args(&work, "mtls", &["--config", &toml_path(&with)], &[]);
    wait_until(Duration::from_secs(15), "a job ran over mutual TLS", || {
        !records(&work.lines("runs")).is_empty()
    });
    drop(node);
}

#[test]
fn the_readme_acl_user_is_enough_and_restrictive() {
    let server = Server::start(&[]);
    let mut admin = server.admin();
    let mut setuser = redis::cmd("ACL");
    setuser.arg("SETUSER").arg(readme_acl(PASSWORD));
    let () = setuser
        .query(&mut admin)
        .expect("ACL SETUSER from docs/operations.md");
    let () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query(&mut admin)
        .expect("reset");

    let work = Workdir::new();
    let runs = toml_path(&work.path("runs"));
    let url = server.url_with(PASSWORD);
    let config = work.write_config(&format!(
        "[redis]\nurl = \"{url}\"\n[defaults]\nlock_ttl = \"3s\"\n\
         [jobs.tick]\nschedule = \"* * * * * *\"\n\
         command = \"echo $SOLOCRON_OCCURRENCE $SOLOCRON_NODE $SOLOCRON_FENCE >> {runs}\"\n\
         [jobs.slow]\nschedule = \"* * * * * *\"\ncommand = \"sleep 1.5\"\n"
    ));
    let config = toml_path(&config);
    let mut nodes: Vec<Node> = ["acl-a", "acl-b"]
        .iter()
        .map(|id| Node::start_with_args(&work, id, &["--config", &config], &[]))
        .collect();
    wait_until(
        Duration::from_secs(20),
        "both nodes publish, jobs run and skip",
        || {
            let history = common::history_via(&mut admin, "slow");
            records(&work.lines("runs")).len() >= 4
                && history
                    .iter()
                    .any(|e| e.get("outcome").map(String::as_str) == Some("skipped"))
                && nodes.iter().all(|node| node.log().contains("claim"))
        },
    );
    // A job removed from the config: only its stream says it exists.
    let _: String = redis::cmd("XADD")
        .arg("{solocron:removed-job}:history")
        .arg("*")
        .arg("occurrence")
        .arg("2026-11-30T21:00:00Z")
        .arg("outcome")
        .arg("succeeded")
        .query(&mut admin)
        .expect("XADD");
    let flags = ["--config", config.as_str()];
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["history"],
        &["history", "--json", "tick"],
        &["history", "--json", "removed-job"],
        &["trigger", "tick", "--node-id", "acl-cli"],
        &["pause", "tick", "--for", "1m", "--reason", "acl"],
        &["resume", "tick"],
        &["pause", "--all"],
        &["resume", "--all"],
        &["drain", "--node", "acl-gone", "--force"],
        &["undrain", "--node", "acl-gone"],
    ] {
        let args = [args, &flags[..]].concat();
        let output = if args[0] == "trigger" {
            trigger_when_free(&args, &[], |_| {})
        } else {
            solocron(&args, &[])
        };
        assert!(output.status.success(), "{args:?}: {}", text(&output));
    }
    // A daemon takes it (0), or finds the lock held by a scheduled run (3).
    let fleet = solocron(
        &[&["trigger", "tick", "--fleet"][..], &flags[..]].concat(),
        &[],
    );
    assert!(
        matches!(fleet.status.code(), Some(0 | 3)),
        "trigger --fleet: {}",
        text(&fleet)
    );
    for node in &mut nodes {
        node.signal("TERM");
        assert!(node.wait_exit(Duration::from_secs(20)).success());
        let log = node.log().to_lowercase();
        assert!(
            !log.contains("noperm") && !log.contains("no permissions"),
            "{log}"
        );
    }
    let ran = records(&work.lines("runs"));
    let mut occurrences: Vec<&str> = ran.iter().map(|r| r.occurrence.as_str()).collect();
    occurrences.dedup();
    assert_eq!(
        occurrences.len(),
        ran.len(),
        "an occurrence ran twice: {ran:?}"
    );
    // Redis logs every command (and key) an ACL refused: there were none.
    let denied: Value = redis::cmd("ACL")
        .arg("LOG")
        .query(&mut admin)
        .expect("ACL LOG");
    let mut log = String::new();
    flatten(&denied, &mut log);
    assert!(log.trim().is_empty(), "commands refused by the ACL: {log}");

    // The user can do nothing else.
    let mut user = redis::Client::open(url.as_str())
        .and_then(|client| client.get_connection())
        .expect("connect as solocron");
    for command in [
        redis::cmd("FLUSHALL"),
        redis::cmd("KEYS").arg("*").clone(),
        redis::cmd("CONFIG").arg("GET").arg("*").clone(),
        redis::cmd("GET").arg("other-app:secret").clone(),
        redis::cmd("EVAL").arg("return 1").arg(0).clone(),
    ] {
        let refused = command.query::<Value>(&mut user).expect_err("refused");
        assert!(refused.to_string().contains("no permissions"), "{refused}");
    }
}

/// The history's repair paths run as the documented ACL user too: a run found
/// `abandoned` (its lock expired unreleased), then the run's own late
/// release replacing that entry (`XDEL`), and a gap of occurrences nobody
/// decided recorded `missed`.
#[test]
fn the_readme_acl_user_can_record_abandoned_runs_gaps_and_late_releases() {
    use solocron::exec::{Outcome, Report};
    use solocron::history::Entry;
    use solocron::lock::{AbandonCheck, Claim, Locker, Target, new_token};

    let server = Server::start(&[]);
    let mut admin = server.admin();
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(readme_acl(PASSWORD))
        .query(&mut admin)
        .expect("ACL SETUSER from docs/operations.md");
    let url = server.url_with(PASSWORD);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let config = solocron::config::RedisConfig {
            mode: solocron::config::RedisMode::Single,
            wait_replicas: 0,
            wait_timeout: solocron::config::DEFAULT_WAIT_TIMEOUT,
            username: None,
            url: url.clone(),
            password: None,
            key_prefix: "solocron".to_string(),
            tls: Default::default(),
        };
        let locker = |node: &str| {
            Locker::new(
                solocron::daemon::connect(&config).expect("connection"),
                "solocron",
                node,
                100,
            )
        };
        let (runner, survivor) = (locker("runner"), locker("survivor"));
        runner
            .load_scripts()
            .await
            .expect("SCRIPT LOAD as the ACL user");
        let at = |ms: i64| Target::Scheduled {
            at: chrono::DateTime::from_timestamp_millis(ms).expect("an instant"),
            deadline_ms: i64::MAX,
        };
        let Claim::Won(lease) = runner
            .claim("job", &at(1_000), &new_token(), Duration::from_millis(200))
            .await
            .expect("claim")
        else {
            panic!("the first claim wins");
        };
        // The runner never renews: its lock expires unreleased.
        wait_until(Duration::from_secs(5), "the runner's lock expired", || {
            let left: i64 = redis::cmd("PTTL")
                .arg("{solocron:job}:lock")
                .query(&mut admin)
                .expect("PTTL");
            left == -2
        });
        let found = survivor
            .check_abandoned("job")
            .await
            .expect("abandon check");
        assert!(matches!(found, AbandonCheck::Abandoned(_)), "{found:?}");
        let now = chrono::Utc::now();
        let report = Report {
            outcome: Outcome::Succeeded,
            exit_code: Some(0),
            http_status: None,
            error: None,
            started_at: now,
            finished_at: now,
            duration: Duration::from_millis(5),
            output_tail: None,
        };
        let entry = Entry::from_report("occ-1000", "runner", lease.fence, &report);
        let released = runner.release(&lease, &entry).await.expect("late release");
        assert!(released.replaced_abandoned, "{released:?}");
        let recorded = survivor
            .record_gap(
                "job",
                "gap:test",
                &[solocron::lock::GapEntry {
                    occurrence: "occ-500".to_string(),
                    outcome: solocron::outcome::Outcome::Missed,
                    error: "test".to_string(),
                }],
            )
            .await
            .expect("gap");
        assert!(recorded);
    });
    let denied: Value = redis::cmd("ACL")
        .arg("LOG")
        .query(&mut admin)
        .expect("ACL LOG");
    let mut log = String::new();
    flatten(&denied, &mut log);
    assert!(log.trim().is_empty(), "commands refused by the ACL: {log}");
}

/// A failing HTTP hook's error reads as it was: only what `${VAR}`s filled
/// in and a URL's password are secrets, not the rest of the file's text. A
/// query `job=nightly-report&on=error` used to mask every `nightly-report`
/// and `error` of the message (``http hook of job `***` failed: ***
/// sending request: ...``), in the history and in `solocron history`.
#[test]
fn a_failing_hooks_error_masks_only_its_secrets() {
    let redis = common::RedisServer::start();
    let work = Workdir::new();
    let closed = free_port();
    let config = work.write_config(&format!(
        "[jobs.nightly-report]\n{}\n\
         http = {{ url = \"http://deploy:{PASSWORD}@127.0.0.1:{closed}/hooks/run?job=nightly-report&on=error&key=${{TOKEN}}\", \
         headers = {{ Authorization = \"Bearer ${{TOKEN}}\" }}, timeout = \"2s\" }}\n",
        common::caught_up_at_once(&redis, "nightly-report")
    ));
    let node = Node::start(&work, &redis, "n1", &[("TOKEN", TOKEN)]);
    let mut failed = Vec::new();
    wait_until(Duration::from_secs(20), "the hook failed", || {
        failed = common::history(&redis, "nightly-report");
        !failed.is_empty()
    });
    let expected = "http hook of job `nightly-report` failed: error sending request: \
                    client error (Connect): tcp connect error: Connection refused (os error 111)";
    assert_eq!(failed[0]["outcome"], "failed");
    assert_eq!(failed[0]["error"], expected);
    let shown = solocron(
        &[
            "history",
            "nightly-report",
            "--config",
            &toml_path(&config),
            "--redis",
            &redis.url(),
        ],
        &[],
    );
    assert!(shown.status.success(), "{}", text(&shown));
    assert!(
        String::from_utf8_lossy(&shown.stdout).contains(expected),
        "{}",
        text(&shown)
    );
    assert_no_planted(&[
        ("log".to_string(), node.log()),
        ("history".to_string(), format!("{failed:?}")),
        ("solocron history".to_string(), text(&shown)),
    ]);
}

/// `HTTP_PROXY` in the daemon's environment carries the hooks to other
/// hosts, never one to this machine: a hook to a port of 127.0.0.1 where
/// nothing listens was sent to the proxy, with its `Authorization: Bearer
/// ${TOKEN}`, and recorded `succeeded` with the proxy's 200. The start-up
/// line names the proxy without its password.
#[test]
fn a_hook_to_this_machine_never_goes_through_the_environments_proxy() {
    let redis = common::RedisServer::start();
    let work = Workdir::new();
    let proxy = common::http::HttpServer::start(Some(200));
    let closed = free_port();
    work.write_config(&format!(
        "[jobs.local]\n{}\n\
         http = {{ url = \"http://127.0.0.1:{closed}/hooks/run\", \
         headers = {{ Authorization = \"Bearer ${{TOKEN}}\" }}, timeout = \"2s\" }}\n\
         [jobs.remote]\n{}\nhttp = {{ url = \"http://hooks.invalid/warm\", timeout = \"2s\" }}\n",
        common::caught_up_at_once(&redis, "local"),
        common::caught_up_at_once(&redis, "remote"),
    ));
    let proxy_url = format!("http://proxy-user:{PASSWORD}@127.0.0.1:{}", proxy.port);
    let node = Node::start(
        &work,
        &redis,
        "n1",
        &[
            ("TOKEN", TOKEN),
            ("HTTP_PROXY", &proxy_url),
            ("NO_PROXY", ""),
            ("no_proxy", ""),
        ],
    );
    let mut local = Vec::new();
    let mut remote = Vec::new();
    wait_until(Duration::from_secs(20), "both hooks recorded", || {
        local = common::history(&redis, "local");
        remote = common::history(&redis, "remote");
        !local.is_empty() && !remote.is_empty()
    });
    assert_eq!(local[0]["outcome"], "failed", "{local:?}");
    assert!(
        local[0]["error"].ends_with("Connection refused (os error 111)"),
        "{local:?}"
    );
    // The proxy still carries the hook to another host: it answered 200.
    assert_eq!(remote[0]["outcome"], "succeeded", "{remote:?}");
    let request = proxy.received();
    assert_eq!(request.line(), "POST http://hooks.invalid/warm HTTP/1.1");
    assert!(
        proxy.received_within(Duration::from_millis(500)).is_none(),
        "the proxy got the hook to 127.0.0.1"
    );
    let log = node.log();
    let shown = format!("HTTP_PROXY=http://127.0.0.1:{}", proxy.port);
    assert!(
        log.contains("http hooks go through the proxy of the environment") && log.contains(&shown),
        "{log}"
    );
    assert_no_planted(&[("log".to_string(), log)]);
}

/// A hook redirected to its own URL with a slash added (as many servers
/// answer): the `${VAR}`s of its path and query are masked in the error as
/// the `Location` carries them, percent-encoded. A value holding a space
/// or a `{` was masked only as written or as a form encodes it (`+`), and
/// went to the log and the history as `Path%20Secret%7B9%7D`.
#[test]
fn a_redirects_error_masks_secrets_percent_encoded_as_a_url_carries_them() {
    let redis = common::RedisServer::start();
    let work = Workdir::new();
    let location = "/services/Path%20Secret%7B9%7D/?key=Query%20Secret%227";
    let server = common::http::HttpServer::answering(301, &[("Location", location)]);
    work.write_config(&format!(
        "[jobs.ping]\n{}\nhttp = {{ url = \"{}\", timeout = \"2s\" }}\n",
        common::caught_up_at_once(&redis, "ping"),
        server.url("/services/${PATH_SECRET}?key=${QUERY_SECRET}"),
    ));
    let node = Node::start(
        &work,
        &redis,
        "n1",
        &[
            ("PATH_SECRET", "Path Secret{9}"),
            ("QUERY_SECRET", "Query Secret\"7"),
        ],
    );
    let mut entries = Vec::new();
    wait_until(Duration::from_secs(20), "the hook recorded", || {
        entries = common::history(&redis, "ping");
        !entries.is_empty()
    });
    let expected = format!(
        "http hook of job `ping` was answered 301 Moved Permanently, a redirect to \
         `http://127.0.0.1:{}/services/***/?key=***`: redirects are not followed; \
         put the final URL in jobs.toml",
        server.port
    );
    assert_eq!(entries[0]["error"], expected);
    node.wait_for_log(Duration::from_secs(10), "run finished");
    let log = node.log();
    assert!(!log.contains("Secret"), "{log}");
}

/// The three roles of docs/operations.md, each created from its line: a
/// daemon runs jobs as `solocron`; the operator's user pauses, resumes,
/// drains, undrains, aborts, triggers through the fleet and reads; the
/// viewer's reads (`status`, `history`) and is refused every control
/// command with exit 1 and a message naming the operator role, never a
/// raw `NOPERM`, with nothing written. Redis's `ACL LOG` shows no refusal
/// but the viewer's. Breaks if a role's line misses a command its
/// commands send, or a refusal reaches the user raw.
#[test]
fn each_role_runs_its_commands_and_the_viewer_changes_nothing() {
    let server = Server::start(&[]);
    let mut admin = server.admin();
    for (start, password) in [
        ("ACL SETUSER solocron ", PASSWORD),
        ("ACL SETUSER solocron-operator ", "op-pw"),
        ("ACL SETUSER solocron-viewer ", "view-pw"),
    ] {
        let () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(common::readme_acl_line(start, password))
            .query(&mut admin)
            .unwrap_or_else(|err| panic!("{start}: {err}"));
    }
    let work = Workdir::new();
    let runs = toml_path(&work.path("runs"));
    let config = work.write_config(&format!(
        "[redis]\nurl = \"{}\"\n\
         [jobs.tick]\nschedule = \"*/2 * * * * *\"\n\
         command = \"echo $SOLOCRON_OCCURRENCE $SOLOCRON_NODE $SOLOCRON_FENCE >> {runs}\"\n",
        server.url_with(PASSWORD)
    ));
    let config = toml_path(&config);
    let node = Node::start_with_args(&work, "role-daemon", &["--config", &config], &[]);
    wait_until(Duration::from_secs(20), "the daemon ran the job", || {
        !records(&work.lines("runs")).is_empty()
    });
    let () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query(&mut admin)
        .expect("reset");
    let as_user = |user: &str, password: &str, args: &[&str]| {
        let url = format!("redis://{user}:{password}@127.0.0.1:{}/", server.port);
        solocron(
            &[args, &["--redis", &url, "--config", &config][..]].concat(),
            &[],
        )
    };
    let controls: [&[&str]; 7] = [
        &["pause", "tick", "--reason", "role"],
        &["resume", "tick"],
        &["drain", "--node", "role-daemon"],
        &["undrain", "--node", "role-daemon"],
        &["abort", "tick"],
        &["trigger", "tick", "--fleet"],
        &["pause", "--all"],
    ];
    // The viewer reads; every control command is refused, saying the role.
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["history", "tick"],
        &["audit"],
    ] {
        let out = as_user("solocron-viewer", "view-pw", args);
        assert!(out.status.success(), "viewer {args:?}: {}", text(&out));
    }
    for args in controls {
        let out = as_user("solocron-viewer", "view-pw", args);
        let said = text(&out);
        assert_eq!(out.status.code(), Some(1), "viewer {args:?}: {said}");
        assert!(
            said.contains("needs the operator role") && !said.to_lowercase().contains("noperm"),
            "viewer {args:?}: {said}"
        );
    }
    for key in [
        "{solocron}:pauses",
        "{solocron}:drains",
        "{solocron}:aborts",
        "{solocron}:requests",
    ] {
        let exists: i64 = redis::cmd("EXISTS")
            .arg(key)
            .query(&mut admin)
            .expect("EXISTS");
        assert_eq!(exists, 0, "the viewer wrote `{key}`");
    }
    let () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query(&mut admin)
        .expect("reset");
    // The operator does all of it (abort finds nothing running: 3;
    // trigger --fleet runs, or finds the lock held: 3).
    for args in [&["status"][..], &["history", "tick"]]
        .into_iter()
        .chain(controls)
    {
        let out = as_user("solocron-operator", "op-pw", args);
        assert!(
            matches!(out.status.code(), Some(0 | 3)),
            "operator {args:?}: {}",
            text(&out)
        );
    }
    let _ = as_user("solocron-operator", "op-pw", &["resume", "--all"]);
    let denied: Value = redis::cmd("ACL")
        .arg("LOG")
        .query(&mut admin)
        .expect("ACL LOG");
    let mut log = String::new();
    flatten(&denied, &mut log);
    assert!(log.trim().is_empty(), "the operator was refused: {log}");
    drop(node);
}
