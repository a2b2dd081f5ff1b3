//! The status page (`[daemon] status_listen`) of real daemons on a real
//! redis-server, over real HTTP and in headless Chromium: what it shows,
//! that its JSON is the CLI's, its 400/404/405 answers, escaping, secrets,
//! 1,000 jobs, a Redis outage, a port in use and a reload. The fleet most
//! of them look at is [`scene::Scene`].

mod scene;

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use crate::common::page::{self, get, request};
use crate::common::{self, Node, RedisServer, Workdir, free_port, toml_path, wait_until};
use scene::{REDIS_PASSWORD, Scene, TOKEN, stable};
use serde_json::Value;

#[test]
fn the_page_shows_the_fleet_and_its_json_is_the_clis() {
    let scene = Scene::start();
    let index = scene.get("/");
    assert_eq!(index.status, 200, "{}", index.body);
    assert_eq!(
        index.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(index.header("cache-control"), Some("no-store"));
    let page = &index.body;
    for shown in [
        r#"<meta name="viewport" content="width=device-width, initial-scale=1">"#,
        r#"href="./jobs/ok">ok</a>"#,
        r#"href="./jobs/db.backup">db.backup</a>"#,
        ">succeeded</span>",
        ">failed</span>",
        "paused by ",
        "&lt;b&gt;db&lt;/b&gt; migration",
        r#"<tr class="group"><td data-label="Group">db</td><td data-label="Slots in use">"#,
        " of 1</td>",
        r#"<td class="mono" data-label="Node">n1</td>"#,
        r#"<td class="mono" data-label="Node">n2</td>"#,
        r#"<span class="chip">role=web</span>"#,
        r#"<span class="chip">zone=a</span>"#,
        r#"<span class="chip">role=db</span>"#,
        "Drained nodes",
        "kernel update",
        ">trigger<",
    ] {
        assert!(page.contains(shown), "`/` shows {shown}:\n{page}");
    }
    assert_eq!(page.matches(r#"<tr class="job">"#).count(), 7, "{page}");

    // The JSON is the CLI's, from the same reads.
    let from_page = scene.get("/status.json");
    assert_eq!(from_page.status, 200);
    assert_eq!(from_page.header("content-type"), Some("application/json"));
    let cli = scene.json(&["status", "--json"]);
    assert_eq!(stable(&from_page.json()), stable(&cli));
    let manual = scene.get("/history.json?job=manual");
    let cli_manual = scene.ok(&["history", "manual", "--json"]);
    assert_eq!(manual.body, String::from_utf8_lossy(&cli_manual.stdout));
    assert!(manual.json()[0]["by"].is_string(), "{}", manual.body);
    let recent = scene.get("/history.json?job=ok&limit=2").json();
    let cli_recent = scene.json(&["history", "ok", "--limit", "2", "--json"]);
    assert_eq!(recent.as_array().map(Vec::len), Some(2));
    let keys = |value: &Value| -> Vec<String> {
        value[0]
            .as_object()
            .expect("an entry")
            .keys()
            .cloned()
            .collect()
    };
    assert_eq!(keys(&recent), keys(&cli_recent));
    // Every daemon serves the fleet.
    let other = get(scene.ports[1], "/status.json").json();
    assert_eq!(stable(&other), stable(&cli));

    // One job's page: its history, the output tails escaped.
    let bad = scene.get("/jobs/bad");
    assert_eq!(bad.status, 200);
    assert!(
        bad.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{}",
        bad.body
    );
    assert!(bad.body.contains(r#"<pre class="tail">"#), "{}", bad.body);
    assert!(bad.body.contains("exit 3"), "{}", bad.body);
    let by_hand = scene.get("/jobs/manual");
    assert!(by_hand.body.contains("Run by hand by"), "{}", by_hand.body);
    assert!(by_hand.body.contains("by hand\n</pre>"), "{}", by_hand.body);
    assert_eq!(scene.get("/jobs/db.backup").status, 200);

    // Nothing a job printed or the config holds as a secret shows.
    let leaky = scene.get("/jobs/leaky");
    assert!(leaky.body.contains("token=***"), "{}", leaky.body);
    let mut everything = String::new();
    for path in [
        "/",
        "/jobs/leaky",
        "/jobs/hook",
        "/jobs/bad",
        "/status.json",
        "/history.json",
        "/history.json?job=leaky",
        "/history.json?job=hook",
        "/nowhere",
    ] {
        let answer = scene.get(path);
        // The JSON keeps the text as printed, as the CLI's does (served as
        // `application/json` with `nosniff`, never read as HTML).
        if answer.header("content-type") == Some("text/html; charset=utf-8") {
            assert!(
                !answer.body.contains("<script>"),
                "{path}:\n{}",
                answer.body
            );
        }
        everything.push_str(&answer.body);
    }
    for secret in [REDIS_PASSWORD, TOKEN] {
        assert!(
            !everything.contains(secret),
            "{secret} shows:\n{everything}"
        );
    }
}

#[test]
fn wrong_requests_get_400_404_and_405_and_head_gets_headers() {
    let scene = Scene::start();
    let unknown = scene.get("/history.json?job=okk");
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    let cli = scene.cli(&["history", "okk"]);
    let said = String::from_utf8_lossy(&cli.stderr);
    let error = unknown.json()["error"]
        .as_str()
        .expect("an error")
        .to_string();
    assert!(error.contains("did you mean `ok`?"), "{error}");
    assert!(
        said.contains(&error),
        "the CLI's words: {said}\npage: {error}"
    );
    assert_eq!(unknown.json()["job"], "okk");
    assert_eq!(unknown.json()["did_you_mean"], "ok");
    for (query, parameter) in [
        ("limit=0", "limit"),
        ("limit=lots", "limit"),
        ("limit=1000000", "limit"),
        ("job=", "job"),
        ("jbo=ok", "jbo"),
    ] {
        let bad = scene.get(&format!("/history.json?{query}"));
        assert_eq!(bad.status, 400, "{query}: {}", bad.body);
        assert_eq!(bad.json()["parameter"], parameter, "{query}");
        assert!(
            bad.json()["error"]
                .as_str()
                .is_some_and(|e| e.contains(parameter))
        );
    }
    let no_job = scene.get("/jobs/nope");
    assert_eq!(no_job.status, 404);
    assert!(
        no_job.body.contains("unknown job `nope`"),
        "{}",
        no_job.body
    );
    assert!(
        no_job.body.contains(r#"href="../""#),
        "a link back: {}",
        no_job.body
    );
    let typo = scene.get("/jobs/manua");
    assert!(
        typo.body
            .contains(r#"Did you mean <a href="manual">manual</a>?"#),
        "{}",
        typo.body
    );
    let nowhere = scene.get("/a/b");
    assert_eq!(nowhere.status, 404);
    assert!(nowhere.body.contains(r#"href="../""#), "{}", nowhere.body);
    assert_eq!(scene.get("/jobs/ok?limit=0").status, 400);
    for (method, path) in [
        ("POST", "/"),
        ("DELETE", "/status.json"),
        ("PUT", "/jobs/ok"),
        ("POST", "/nowhere"),
    ] {
        let refused = request(scene.ports[0], method, path);
        assert_eq!(refused.status, 405, "{method} {path}");
        assert_eq!(refused.header("allow"), Some("GET, HEAD"));
    }
    let head = request(scene.ports[0], "HEAD", "/");
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty(), "{}", head.body);
    assert!(head.header("content-length").is_some_and(|n| n != "0"));
}

#[test]
fn chromium_shows_jobs_outcomes_and_nodes_on_a_desktop_and_a_phone() {
    let scene = Scene::start();
    let url = format!("http://127.0.0.1:{}/", scene.ports[0]);
    let dom = page::dump_dom(&url);
    for seen in [
        "ok",
        "db.backup",
        "paused-job",
        "succeeded",
        "failed",
        "n1",
        "n2",
        "role=web",
    ] {
        assert!(
            dom.contains(&format!(">{seen}<")),
            "Chromium shows {seen}:\n{dom}"
        );
    }
    assert!(!dom.contains("<script>alert"), "{dom}");
    let job = page::dump_dom(&format!("{url}jobs/bad"));
    assert!(
        job.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{job}"
    );
    let keep = std::env::var_os("SOLOCRON_SCREENSHOTS").map(PathBuf::from);
    let dir = tempfile::tempdir().expect("a directory");
    for (name, width, height) in [
        ("status-page-desktop.png", 1280, 900),
        ("status-page-phone.png", 390, 844),
    ] {
        let png = dir.path().join(name);
        page::screenshot(&url, width, height, &png);
        assert_eq!(page::png_size(&png), (width, height), "{name}");
        if let Some(keep) = &keep {
            fs::copy(&png, keep.join(name)).expect("keep the screenshot");
        }
    }
}

#[test]
fn a_thousand_jobs_are_all_listed() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let port = free_port();
    let names: Vec<String> = (0..1000).map(|i| format!("job-{i:04}")).collect();
    let mut text = format!("[daemon]\nstatus_listen = \"127.0.0.1:{port}\"\n");
    for name in &names {
        text.push_str(&format!(
            "[jobs.{name}]\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n"
        ));
    }
    work.write_config(&text);
    page::fill_history(&redis, &names, 3, 100);
    let _node = Node::start(&work, &redis, "n1", &[]);
    let mut index = get(port, "/");
    wait_until(Duration::from_secs(20), "n1 is live on the page", || {
        index = get(port, "/");
        index.body.contains(r#"data-label="Node">n1<"#)
    });
    assert_eq!(index.status, 200);
    assert_eq!(index.body.matches(r#"<tr class="job">"#).count(), 1000);
    for name in [&names[0], &names[999]] {
        assert!(index.body.contains(&format!(">{name}</a>")), "{name}");
    }
    assert_eq!(index.body.matches(r#"<tr class="history">"#).count(), 20);
    let status = get(port, "/status.json").json();
    assert_eq!(status["jobs"].as_array().map(Vec::len), Some(1000));
    assert_eq!(
        get(port, "/history.json?limit=1000")
            .json()
            .as_array()
            .map(Vec::len),
        Some(1000)
    );
}

#[test]
fn with_redis_down_the_page_says_so_and_the_daemon_goes_on() {
    let mut redis = RedisServer::start_with_args(&["--requirepass", REDIS_PASSWORD]);
    let work = Workdir::new();
    let port = free_port();
    let url = format!("redis://:{REDIS_PASSWORD}@127.0.0.1:{}/", redis.port);
    let config = work.write_config(&format!(
        "[redis]\nurl = \"{url}\"\n[daemon]\nstatus_listen = \"127.0.0.1:{port}\"\n\
         [jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n"
    ));
    let node = Node::start_with_args(&work, "n1", &["--config", &toml_path(&config)], &[]);
    wait_until(Duration::from_secs(10), "the page answers", || {
        get(port, "/").status == 200
    });
    redis.kill();
    let down = get(port, "/");
    assert_eq!(down.status, 503, "{}", down.body);
    assert!(
        down.body.contains("Redis is unreachable</strong> since "),
        "{}",
        down.body
    );
    assert!(down.body.contains("No job runs meanwhile"), "{}", down.body);
    assert_eq!(down.header("retry-after"), Some("10"));
    for path in ["/status.json", "/history.json?job=tick"] {
        let json = get(port, path);
        assert_eq!(json.status, 503, "{path}: {}", json.body);
        assert!(
            json.json()["redis_unreachable_since"].is_string(),
            "{}",
            json.body
        );
        assert!(!json.body.contains(REDIS_PASSWORD), "{}", json.body);
    }
    assert_eq!(get(port, "/jobs/tick").status, 503);
    assert!(!down.body.contains(REDIS_PASSWORD), "{}", down.body);
    assert!(common::is_alive(node.pid()), "{}", node.log());
    redis.start_again();
    wait_until(Duration::from_secs(15), "the page answers again", || {
        get(port, "/").status == 200
    });
    assert!(!node.log().contains("panicked"), "{}", node.log());
}

/// A `status_listen` port in use stops `run` at start (exit 78, one error
/// naming it), as `metrics_listen` does; a reload that changes it keeps
/// the page where it was and names the key.
#[test]
fn a_port_in_use_stops_the_daemon_and_a_reload_keeps_the_address() {
    let redis = RedisServer::start();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port");
    let addr = busy.local_addr().expect("local addr").to_string();
    let work = Workdir::new();
    let job = "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n";
    work.write_config(&format!("[daemon]\nstatus_listen = \"{addr}\"\n{job}"));
    let config = toml_path(&work.path("jobs.toml"));
    let args = ["--config", &config, "--redis", &redis.url()];
    let mut refused = Node::spawn_with_args(&work, "n1", &args, &[]);
    assert_eq!(
        refused.wait_exit(Duration::from_secs(10)).code(),
        Some(78),
        "{}",
        refused.log()
    );
    let log = refused.log();
    assert_eq!(
        log.matches("cannot serve the status page").count(),
        1,
        "{log}"
    );
    for told in [
        format!("error: cannot serve the status page on `{addr}`"),
        "`status_listen` in `[daemon]`".to_string(),
        "Address already in use".to_string(),
        "choose a free port".to_string(),
    ] {
        assert!(log.contains(&told), "says {told}:\n{log}");
    }
    drop(busy);

    let (port, other) = (free_port(), free_port());
    work.write_config(&format!(
        "[daemon]\nstatus_listen = \"127.0.0.1:{port}\"\n{job}"
    ));
    let node = Node::start_with_args(&work, "n2", &args, &[]);
    wait_until(Duration::from_secs(10), "the page answers", || {
        get(port, "/").status == 200
    });
    work.write_config(&format!(
        "[daemon]\nstatus_listen = \"127.0.0.1:{other}\"\n{job}"
    ));
    node.signal("HUP");
    node.wait_for_log(Duration::from_secs(10), "config reloaded");
    assert!(
        node.log().contains(r#"keys=["daemon.status_listen"]"#),
        "{}",
        node.log()
    );
    assert_eq!(get(port, "/").status, 200);
    assert!(std::net::TcpStream::connect(("127.0.0.1", other)).is_err());
}
