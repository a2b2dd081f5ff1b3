//! `[redis]`: the four coordinator modes (`url`, `sentinel`, `cluster`,
//! `redlock`), `wait_replicas`, `wait_timeout`, `username`, the password
//! files and the URLs of every mode, with the exact text of
//! what people read.

use std::path::Path;
use std::time::Duration;

use super::*;

/// A `[redis]` holding `lines`, and a job.
fn redis(lines: &str) -> String {
    complete(&format!("[redis]\n{lines}\n"))
}

/// The `[redis]` of a valid file whose `[redis]` holds `lines`.
fn loaded(lines: &str) -> RedisConfig {
    config(&format!("[redis]\n{lines}\n")).redis
}

/// The first line of every error of the file whose `[redis]` holds
/// `lines`, in file order.
fn errors(lines: &str) -> Vec<String> {
    let err = parse(&redis(lines), Path::new(PATH), &env).expect_err("config must be refused");
    err.errors()
        .iter()
        .map(|err| {
            let text = err.to_string();
            text.lines().next().unwrap_or_default().to_string()
        })
        .collect()
}

/// The warnings of the valid file whose `[redis]` holds `lines`.
fn warnings(lines: &str) -> Vec<String> {
    let text = redis(lines);
    let config = parse(&text, Path::new(PATH), &env).unwrap_or_else(|err| panic!("{err}"));
    config.warnings.iter().map(ToString::to_string).collect()
}

const SENTINELS: &str =
    "[\"redis://10.0.0.1:26379\", \"redis://10.0.0.2:26379\", \"redis://10.0.0.3:26379\"]";
const NODES: &str =
    "[\"redis://10.0.0.1:6379\", \"redis://10.0.0.2:6379\", \"redis://10.0.0.3:6379\"]";

fn strings(urls: &[&str]) -> Vec<String> {
    urls.iter().map(ToString::to_string).collect()
}

#[test]
fn url_mode_and_its_defaults() {
    let redis = loaded("url = \"redis://db:6379\"\nkey_prefix = \"app\"");
    assert_eq!(redis.mode, RedisMode::Single);
    assert_eq!(
        (redis.url.as_str(), redis.key_prefix.as_str()),
        ("redis://db:6379", "app")
    );
    assert_eq!(redis.wait_replicas, 0);
    assert_eq!(redis.wait_timeout, DEFAULT_WAIT_TIMEOUT);
    assert_eq!(redis.wait_timeout, Duration::from_millis(250));
    assert_eq!(redis.username, None);
    assert_eq!(redis.redacted_url(), "redis://db:6379");
    // A socket is fine for one server.
    let unix = loaded("url = \"redis+unix:///run/redis.sock\"");
    assert_eq!(unix.url, "redis+unix:///run/redis.sock");
    // One server with replicas may ask for acknowledgements too.
    let waited = loaded("url = \"redis://db\"\nwait_replicas = 2\nwait_timeout = \"1s\"");
    assert_eq!(
        (waited.wait_replicas, waited.wait_timeout),
        (2, Duration::from_secs(1))
    );
}

#[test]
fn sentinel_mode_reads_master_urls_and_its_password_file() {
    let redis = loaded(&format!(
        "sentinel = {{ master = \"solocron\", urls = {SENTINELS} }}\nusername = \"solocron\""
    ));
    assert_eq!(
        redis.mode,
        RedisMode::Sentinel {
            master: "solocron".to_string(),
            urls: strings(&[
                "redis://10.0.0.1:26379",
                "redis://10.0.0.2:26379",
                "redis://10.0.0.3:26379"
            ]),
            password: None,
        }
    );
    assert_eq!(redis.url, "");
    assert_eq!(
        (redis.wait_replicas, redis.wait_timeout),
        (1, DEFAULT_WAIT_TIMEOUT)
    );
    assert_eq!(redis.username.as_deref(), Some("solocron"));
    assert_eq!(
        redis.redacted_url(),
        "sentinel `solocron` via redis://10.0.0.1:26379, redis://10.0.0.2:26379, redis://10.0.0.3:26379"
    );
    // A `[redis.sentinel]` table reads the same, and both password files
    // are read relative to the config's directory.
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("sentinel.pass"), "sentinel-pw\n").expect("write");
    std::fs::write(dir.path().join("redis.pass"), "data-pw\r\n").expect("write");
    let text = format!(
        "[redis]\npassword_file = \"redis.pass\"\n\n[redis.sentinel]\nmaster = \"solocron\"\n\
         urls = {SENTINELS}\npassword_file = \"sentinel.pass\"\n\n\
         [jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n"
    );
    let config =
        parse(&text, &dir.path().join("jobs.toml"), &env).unwrap_or_else(|e| panic!("{e}"));
    let RedisMode::Sentinel { password, .. } = &config.redis.mode else {
        panic!("sentinel mode: {:?}", config.redis);
    };
    assert_eq!(password.as_deref(), Some("sentinel-pw"));
    assert_eq!(config.redis.password.as_deref(), Some("data-pw"));
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
}

#[test]
fn cluster_and_redlock_modes_and_their_defaults() {
    let cluster = loaded(&format!("cluster = {NODES}"));
    let nodes = strings(&[
        "redis://10.0.0.1:6379",
        "redis://10.0.0.2:6379",
        "redis://10.0.0.3:6379",
    ]);
    assert_eq!(
        cluster.mode,
        RedisMode::Cluster {
            urls: nodes.clone()
        }
    );
    assert_eq!((cluster.url.as_str(), cluster.wait_replicas), ("", 1));
    assert_eq!(
        cluster.redacted_url(),
        "cluster redis://10.0.0.1:6379, redis://10.0.0.2:6379, redis://10.0.0.3:6379"
    );
    // One seed is enough: the cluster names the others.
    let one = loaded("cluster = [\"rediss://u:pw@10.0.0.1:6380\"]\nwait_replicas = 2");
    assert_eq!(
        one.mode,
        RedisMode::Cluster {
            urls: strings(&["rediss://u:pw@10.0.0.1:6380"])
        }
    );
    assert_eq!(one.wait_replicas, 2);
    let redlock = loaded(&format!("redlock = {NODES}"));
    assert_eq!(redlock.mode, RedisMode::Redlock { urls: nodes });
    assert_eq!((redlock.url.as_str(), redlock.wait_replicas), ("", 0));
    assert_eq!(redlock.wait_timeout, DEFAULT_WAIT_TIMEOUT);
    assert!(
        redlock
            .redacted_url()
            .starts_with("redlock redis://10.0.0.1:6379, ")
    );
    let five = loaded(
        "redlock = [\"redis://a\", \"redis://b\", \"redis://c\", \"redis://d\", \"redis://e\"]",
    );
    assert!(matches!(five.mode, RedisMode::Redlock { ref urls } if urls.len() == 5));
}

#[test]
fn exactly_one_server_key() {
    assert_eq!(
        errors("key_prefix = \"app\""),
        [
            "/etc/solocron/jobs.toml:1:1: [redis]: no Redis server: set one of `url`, `sentinel`, \
          `cluster` or `redlock`, like `url = \"redis://10.0.0.5:6379\"` (if the file used to have \
          it, it may have been truncated)"
        ]
    );
    assert_eq!(
        errors(&format!(
            "url = \"redis://db\"\nkey_prefix = \"app\"\ncluster = {NODES}"
        )),
        [
            "/etc/solocron/jobs.toml:4:1: [redis] `cluster`: `url` (line 2) and `cluster` (line 4) \
          both name the Redis server; keep exactly one of `url`, `sentinel`, `cluster` or \
          `redlock` and remove the other"
        ]
    );
    // Three: the later two each name the first; what is wrong inside
    // them is reported too.
    assert_eq!(
        errors(&format!(
            "redlock = {NODES}\nsentinel = {{ master = \"\", urls = {SENTINELS} }}\nurl = \"redis://\""
        )),
        [
            "/etc/solocron/jobs.toml:3:1: [redis] `sentinel`: `redlock` (line 2) and `sentinel` \
             (line 3) both name the Redis server; keep exactly one of `url`, `sentinel`, `cluster` \
             or `redlock` and remove the other",
            "/etc/solocron/jobs.toml:3:23: [redis] `sentinel.master`: must not be empty: write the \
             name the sentinels monitor the master under (`sentinel monitor NAME …` in sentinel.conf)",
            "/etc/solocron/jobs.toml:4:1: [redis] `url`: `redlock` (line 2) and `url` (line 4) both \
             name the Redis server; keep exactly one of `url`, `sentinel`, `cluster` or `redlock` \
             and remove the other",
            "/etc/solocron/jobs.toml:4:7: [redis] `url`: no host in Redis URL `redis://`; write it \
             like `redis://127.0.0.1:6379` or `rediss://user@host:6380/0`",
        ]
    );
}

#[test]
fn list_urls_are_checked_like_url_and_against_each_other() {
    let list = "cluster = [\"redis://a\", \"rediss://b\", 3, \"unix:///x.sock\", \"redis://\", \
                \"http://u:pw@x\", \"redis://a:6379/2\", \"redis://c/#insecure\"]";
    let p = "/etc/solocron/jobs.toml:2";
    assert_eq!(
        errors(list),
        [
            format!(
                "{p}:25: [redis] `cluster`: item 2: `rediss://b` is `rediss://` but item 1 is \
                 `redis://`; write every seed node with `rediss://` (TLS) or every one with `redis://`"
            ),
            format!("{p}:39: [redis] `cluster`: item 3: expected a URL string, found integer"),
            format!(
                "{p}:42: [redis] `cluster`: item 4: `unix://` is a socket on this machine, only \
                 for `url`; the servers of `cluster` are reached over the network: use `redis://` \
                 or `rediss://`"
            ),
            format!(
                "{p}:60: [redis] `cluster`: item 5: no host in Redis URL `redis://`; write it like \
                 `redis://127.0.0.1:6379` or `rediss://user@host:6380/0`"
            ),
            format!(
                "{p}:72: [redis] `cluster`: item 6: unsupported scheme `http` in `http://u:***@x`; \
                 use `redis://` or `rediss://`"
            ),
            format!(
                "{p}:89: [redis] `cluster`: item 7: `redis://a:6379/2` is the same server as item 1 \
                 (a:6379); list each seed node once"
            ),
            format!(
                "{p}:109: [redis] `cluster`: item 8: `#insecure` in `redis://c/#insecure` is not \
                 supported: certificate checks stay on; trust a private CA with `tls_ca_file`"
            ),
        ]
    );
    // The same rules in every list.
    let unix = errors("redlock = [\"redis://a\", \"redis://b\", \"redis+unix:///run/r.sock\"]");
    assert_eq!(unix.len(), 1, "{unix:?}");
    assert!(
        unix[0].contains(
            "`redlock`: item 3: `redis+unix://` is a socket on this machine, only for `url`"
        ),
        "{unix:?}"
    );
    let twice =
        errors("sentinel = { master = \"m\", urls = [\"redis://A:26379\", \"redis://a:26379\"] }");
    assert_eq!(
        twice,
        [
            "/etc/solocron/jobs.toml:2:55: [redis] `sentinel.urls`: item 2: `redis://a:26379` is the \
          same server as item 1 (a:26379); list each sentinel once"
        ]
    );
    assert_eq!(
        errors("cluster = \"redis://a\""),
        [
            "/etc/solocron/jobs.toml:2:11: [redis] `cluster`: expected an array of seed node URLs \
          like `[\"redis://10.0.0.1:6379\", …]`, found string"
        ]
    );
    // Another port is another server.
    let two = loaded("cluster = [\"redis://a\", \"redis://a:6380\"]");
    assert!(matches!(two.mode, RedisMode::Cluster { ref urls } if urls.len() == 2));
}

#[test]
fn sentinel_table_rules() {
    assert_eq!(
        errors("sentinel = { master = \"my m\", urls = [], mastr = 1 }"),
        [
            "/etc/solocron/jobs.toml:2:23: [redis] `sentinel.master`: `my m` cannot be a master \
             name, it has a blank in it: write the name the sentinels monitor the master under \
             (`sentinel monitor NAME …` in sentinel.conf)",
            "/etc/solocron/jobs.toml:2:38: [redis] `sentinel.urls`: has 0 sentinels; list the \
             sentinels that watch the master, like `urls = [\"redis://10.0.0.1:26379\", \
             \"redis://10.0.0.2:26379\", \"redis://10.0.0.3:26379\"]`",
            "/etc/solocron/jobs.toml:2:42: unknown key `mastr` in redis.sentinel, did you mean `master`?",
        ]
    );
    assert_eq!(
        errors("sentinel = { urls = [\"redis://a\"] }"),
        [
            "/etc/solocron/jobs.toml:2:12: [redis] `sentinel`: needs `master`: the name the sentinels \
          monitor the master under (`sentinel monitor NAME …` in sentinel.conf), like \
          `master = \"solocron\"`"
        ]
    );
    assert_eq!(
        errors("sentinel = { master = \"m\" }"),
        [
            "/etc/solocron/jobs.toml:2:12: [redis] `sentinel`: needs `urls`: the sentinels' \
          addresses, like `urls = [\"redis://10.0.0.1:26379\", \"redis://10.0.0.2:26379\", \
          \"redis://10.0.0.3:26379\"]`"
        ]
    );
    assert_eq!(
        errors("sentinel = [\"redis://a\"]"),
        [
            "/etc/solocron/jobs.toml:2:12: [redis] `sentinel`: expected a table like `{ master = \
          \"solocron\", urls = [\"redis://10.0.0.1:26379\", …] }`, found array"
        ]
    );
    assert_eq!(
        errors(&format!(
            "sentinel = {{ master = \"m\", urls = {SENTINELS}, password = \"x\" }}"
        )),
        [
            "/etc/solocron/jobs.toml:2:115: unknown key `password` in redis.sentinel, did you mean \
          `password_file`?"
        ]
    );
    assert_eq!(
        errors(&format!(
            "sentinel = {{ master = \"m\", urls = {SENTINELS}, password_file = \"/nonexistent/s.pass\" }}"
        )),
        [
            "/etc/solocron/jobs.toml:2:131: [redis] `sentinel.password_file`: cannot read password \
          file `/nonexistent/s.pass`: No such file or directory (os error 2)"
        ]
    );
    assert_eq!(
        errors(&format!(
            "sentinel = {{ master = \"m\", urls = {SENTINELS}, password_file = \"/dev/null\" }}"
        )),
        [
            "/etc/solocron/jobs.toml:2:131: [redis] `sentinel.password_file`: password file \
          `/dev/null` is empty"
        ]
    );
}

#[test]
fn cluster_and_redlock_need_enough_servers() {
    assert_eq!(
        errors("cluster = []"),
        [
            "/etc/solocron/jobs.toml:2:11: [redis] `cluster`: has 0 seed nodes; list at least one \
          node of the cluster, like `cluster = [\"redis://10.0.0.1:6379\", \"redis://10.0.0.2:6379\", \
          \"redis://10.0.0.3:6379\"]` (it finds the others from them)"
        ]
    );
    let redlock = "/etc/solocron/jobs.toml:2:11: [redis] `redlock`: has 2 masters; Redlock needs \
                   at least 3 independent masters: with 2, a majority is both, so either one down \
                   stops every job; list 3 or 5, on different machines";
    assert_eq!(
        errors("redlock = [\"redis://a\", \"redis://b\"]"),
        [redlock]
    );
    // A duplicate does not count as a master.
    assert_eq!(
        errors("redlock = [\"redis://a\", \"redis://b\", \"redis://b:6379\"]"),
        [
            redlock,
            "/etc/solocron/jobs.toml:2:38: [redis] `redlock`: item 3: `redis://b:6379` is the same \
             server as item 2 (b:6379); list each master once",
        ]
    );
}

#[test]
fn wait_replicas_and_wait_timeout_are_bounded() {
    assert_eq!(
        errors(&format!("redlock = {NODES}\nwait_replicas = 1")),
        [
            "/etc/solocron/jobs.toml:3:17: [redis] `wait_replicas`: does not apply to `redlock`: its \
          masters are independent, not replicas of one another, and a claim holds because a \
          majority of them took it; remove `wait_replicas`"
        ]
    );
    // Even 0: it says nothing with `redlock`.
    assert_eq!(
        errors(&format!("redlock = {NODES}\nwait_replicas = 0")).len(),
        1
    );
    assert_eq!(
        errors("url = \"redis://a\"\nwait_replicas = 17\nwait_timeout = \"5ms\""),
        [
            "/etc/solocron/jobs.toml:3:17: [redis] `wait_replicas`: must be from 0 to 16, found 17: \
             how many replicas must acknowledge a claim before its run starts",
            "/etc/solocron/jobs.toml:4:16: [redis] `wait_timeout`: must be at least 10ms, found \
             `5ms`: a replica on another machine rarely acknowledges sooner, and a claim that is \
             not acknowledged in time does not run",
        ]
    );
    assert_eq!(
        errors("cluster = [\"redis://a\"]\nwait_replicas = -1\nwait_timeout = \"11s\""),
        [
            "/etc/solocron/jobs.toml:3:17: [redis] `wait_replicas`: must be from 0 to 16, found -1: \
             how many replicas must acknowledge a claim before its run starts",
            "/etc/solocron/jobs.toml:4:16: [redis] `wait_timeout`: must be at most 10s, found \
             `11s`: every claim, renewal and release waits up to this long for its replicas, so it \
             adds to every claim before its run starts",
        ]
    );
    assert!(
        errors("url = \"redis://a\"\nwait_replicas = \"1\"")[0]
            .ends_with("[redis] `wait_replicas`: expected an integer, found string")
    );
    assert!(
        errors("url = \"redis://a\"\nwait_timeout = \"soon\"")[0]
            .contains("[redis] `wait_timeout`: invalid duration `soon`")
    );
    let edges = loaded("cluster = [\"redis://a\"]\nwait_replicas = 16\nwait_timeout = \"10s\"");
    assert_eq!(
        (edges.wait_replicas, edges.wait_timeout),
        (16, Duration::from_secs(10))
    );
    let low = loaded("cluster = [\"redis://a\"]\nwait_timeout = \"10ms\"");
    assert_eq!(low.wait_timeout, Duration::from_millis(10));
}

#[test]
fn weaker_setups_are_warnings_not_errors() {
    assert_eq!(
        warnings("sentinel = { master = \"m\", urls = [\"redis://a:26379\"] }"),
        [
            "/etc/solocron/jobs.toml:2:35: [redis] `sentinel.urls`: a single sentinel is a single \
          point of failure; run 3, on different machines"
        ]
    );
    assert_eq!(
        warnings("[redis.sentinel]\nmaster = \"m\"\nurls = [\"redis://a\", \"redis://b\"]"),
        [
            "/etc/solocron/jobs.toml:4:8: [redis] `sentinel.urls`: 2 sentinels cannot agree on a \
          failover while one of them is down (a majority of 2 is 2); run 3, on different machines"
        ]
    );
    assert_eq!(
        warnings("redlock = [\"redis://a\", \"redis://b\", \"redis://c\", \"redis://d\"]"),
        [
            "/etc/solocron/jobs.toml:2:11: [redis] `redlock`: 4 masters survive 1 down, no more than \
          3 would (a majority of 4 is 3); use an odd number, such as 3 or 5"
        ]
    );
    assert_eq!(
        warnings("cluster = [\"redis://a\"]\nwait_replicas = 0\nwait_timeout = \"1s\""),
        [
            "/etc/solocron/jobs.toml:3:17: [redis] `wait_replicas`: 0 with `cluster`: a run may \
             start before any replica has its claim, so after a failover the same occurrence can \
             run again; keep the default 1",
            "/etc/solocron/jobs.toml:4:16: [redis] `wait_timeout`: has no effect while \
             `wait_replicas` is 0",
        ]
    );
    assert_eq!(
        warnings(&format!("redlock = {NODES}\nwait_timeout = \"1s\"")),
        [
            "/etc/solocron/jobs.toml:3:16: [redis] `wait_timeout`: has no effect with `redlock`: no \
          replica is waited for"
        ]
    );
    assert!(
        warnings(&format!(
            "sentinel = {{ master = \"m\", urls = {SENTINELS} }}"
        ))
        .is_empty()
    );
    assert!(warnings(&format!("redlock = {NODES}")).is_empty());
    // Loading for `status` and `history` computes no warnings.
    let text = redis("redlock = [\"redis://a\", \"redis://b\", \"redis://c\", \"redis://d\"]");
    let inspected = parse_for_inspection(&text, Path::new(PATH), &env).expect("valid");
    assert!(inspected.warnings.is_empty());
}

#[test]
fn username_is_for_sentinel() {
    assert_eq!(
        warnings("url = \"redis://db\"\nusername = \"solocron\""),
        [
            "/etc/solocron/jobs.toml:3:12: [redis] `username`: is ignored with `url`: it is for \
          `sentinel`, whose data nodes have no URL of their own; write the user into the URL \
          instead, like `redis://solocron@10.0.0.5:6379`"
        ]
    );
    assert_eq!(
        loaded("url = \"redis://db\"\nusername = \"solocron\"").username,
        None
    );
    let cluster = warnings(&format!("cluster = {NODES}\nusername = \"solocron\""));
    assert!(
        cluster[0].contains(
            "is ignored with `cluster`: it is for `sentinel`, whose data nodes have \
                             no URL of their own; write the user into each URL instead"
        ),
        "{cluster:?}"
    );
    assert_eq!(
        errors(&format!(
            "sentinel = {{ master = \"m\", urls = {SENTINELS} }}\nusername = \"\""
        )),
        [
            "/etc/solocron/jobs.toml:3:12: [redis] `username`: must not be empty; leave it out to log \
          in as the `default` user"
        ]
    );
}

#[test]
fn tls_files_need_rediss_for_every_url_of_the_mode() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cert = "-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n";
    std::fs::write(dir.path().join("ca.pem"), cert).expect("write");
    let load = |lines: &str| {
        parse(
            &redis(&format!("{lines}\ntls_ca_file = \"ca.pem\"")),
            &dir.path().join("jobs.toml"),
            &env,
        )
    };
    for (lines, key) in [
        ("cluster = [\"redis://a\"]", "cluster"),
        (
            "redlock = [\"redis://a\", \"redis://b\", \"redis://c\"]",
            "redlock",
        ),
        (
            "sentinel = { master = \"m\", urls = [\"redis://a\"] }",
            "sentinel.urls",
        ),
    ] {
        let err = load(lines).expect_err(lines).to_string();
        assert!(
            err.starts_with(&format!(
                "{}:3:15: [redis] `tls_ca_file`: needs `rediss://` for every URL of `{key}`; TLS \
                 settings on plain connections would be ignored",
                dir.path().join("jobs.toml").display()
            )),
            "{err}"
        );
        let tls = load(&lines.replace("redis://", "rediss://")).unwrap_or_else(|e| panic!("{e}"));
        assert!(tls.redis.tls.ca.is_some());
    }
    let err = load("url = \"redis://a\"")
        .expect_err("plain url")
        .to_string();
    assert!(err.contains("needs a `rediss://` url"), "{err}");
}

/// A password planted in every form a URL can carry it, in every mode,
/// and in both password files: no error, warning or `Debug` shows it.
#[test]
fn planted_passwords_never_show() {
    const PLANTED: &str = "pl4nted-pw";
    let forms = [
        format!("redis://u:{PLANTED}@db-a:6379/0"),
        format!("rediss://:{PLANTED}@db-b:6380"),
        format!("redis://u:p/{PLANTED}@db-c"),
        format!("redis://db-d/?password={PLANTED}"),
        format!("redis://u:{PLANTED}@db-e:notaport"),
        format!("redis://u:{PLANTED}@db-f/#insecure"),
    ];
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("redis.pass"), format!("{PLANTED}\n")).expect("write");
    std::fs::write(dir.path().join("sentinel.pass"), PLANTED).expect("write");
    let path = dir.path().join("jobs.toml");
    let files = "password_file = \"redis.pass\"";
    let quoted = |urls: &[String]| {
        let items: Vec<String> = urls.iter().map(|url| format!("\"{url}\"")).collect();
        format!("[{}]", items.join(", "))
    };
    let mut shown = Vec::new();
    for url in &forms {
        // Each form on its own (valid or not), then twice in every list:
        // a duplicate, so the message quotes it.
        let twice = quoted(&[url.clone(), url.clone(), url.clone()]);
        for lines in [
            format!("url = \"{url}\"\n{files}"),
            format!("url = \"redis+unix:///run/r.sock?pass={PLANTED}\"\nurl2 = \"{url}\""),
            format!("cluster = {twice}\n{files}"),
            format!("redlock = {twice}\n{files}\nwait_replicas = 1"),
            format!(
                "sentinel = {{ master = \"m\", urls = {twice}, password_file = \"sentinel.pass\" }}\n{files}"
            ),
            format!("cluster = [\"{url}\", \"redis://db-z\"]\nusername = \"u\""),
        ] {
            match parse(&redis(&lines), &path, &env) {
                Ok(config) => {
                    shown.push(format!("{config:?}"));
                    shown.push(config.redis.redacted_url());
                    shown.extend(config.warnings.iter().map(ToString::to_string));
                }
                Err(err) => shown.push(err.to_string()),
            }
        }
    }
    // Valid configs of every mode, with the password in each place.
    for lines in [
        format!("url = \"redis+unix:///run/r.sock?pass={PLANTED}\""),
        format!(
            "sentinel = {{ master = \"m\", urls = [\"redis://:{PLANTED}@s:26379\"], password_file = \"sentinel.pass\" }}\n{files}"
        ),
        format!("cluster = [\"redis://u:{PLANTED}@a\"]\n{files}"),
        format!("redlock = [\"redis://u:{PLANTED}@a\", \"redis://b\", \"redis://c\"]\n{files}"),
    ] {
        let config = parse(&redis(&lines), &path, &env).unwrap_or_else(|e| panic!("{e}"));
        shown.push(format!("{config:?}"));
        shown.push(config.redis.redacted_url());
        shown.extend(config.warnings.iter().map(ToString::to_string));
    }
    assert!(shown.len() > 40);
    for text in &shown {
        assert!(!text.contains(PLANTED), "password shown: {text}");
    }
    assert!(shown.iter().any(|text| text.contains("***")));
}

#[test]
fn inspection_takes_an_unreadable_sentinel_password_file_as_absent() {
    let text = redis(&format!(
        "sentinel = {{ master = \"m\", urls = {SENTINELS}, password_file = \"/nonexistent/s.pass\" }}"
    ));
    assert!(parse(&text, Path::new(PATH), &env).is_err());
    let config =
        parse_for_inspection(&text, Path::new(PATH), &env).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(
        config.redis.mode,
        RedisMode::Sentinel { password: None, .. }
    ));
    // Not a way around the rules that need no secret.
    let bad = redis("sentinel = { master = \"\", urls = [\"redis://a\"] }");
    assert!(parse_for_inspection(&bad, Path::new(PATH), &env).is_err());
}

#[test]
fn fingerprints_ignore_redis() {
    let job = "[jobs.a]\nschedule = \"@hourly\"\ncommand = \"true\"\n";
    let with = |lines: &str| {
        let config = config(&format!("[redis]\n{lines}\n{job}"));
        (config.fingerprint(), config.jobs[0].fingerprint())
    };
    let url = with("url = \"redis://db\"");
    for other in [
        format!("sentinel = {{ master = \"m\", urls = {SENTINELS} }}\nwait_timeout = \"1s\""),
        format!("cluster = {NODES}\nwait_replicas = 2"),
        format!("redlock = {NODES}\nkey_prefix = \"other\""),
    ] {
        assert_eq!(with(&other), url, "{other}");
    }
}

/// `--redis URL` (`cli::load`, `status`, `history`) turns any mode into
/// one server.
#[test]
fn use_url_selects_one_server() {
    let mut redis = loaded(&format!(
        "sentinel = {{ master = \"m\", urls = {SENTINELS} }}\nwait_replicas = 2"
    ));
    redis.use_url("redis://u:pw@other:6379");
    assert_eq!(redis.mode, RedisMode::Single);
    assert_eq!(
        (redis.url.as_str(), redis.wait_replicas),
        ("redis://u:pw@other:6379", 0)
    );
    assert_eq!(redis.redacted_url(), "redis://u:***@other:6379");
}

#[test]
fn redis_key_prefix_and_url_scheme() {
    let with = |line: &str| format!("[redis]\nurl = \"redis://db\"\n{line}\n");
    let redis = config("[redis]\nurl = \"rediss://u:pw@db.internal:6380/2\"\n").redis;
    assert_eq!(redis.redacted_url(), "rediss://u:***@db.internal:6380/2");
    assert_eq!(
        error(&with("key_prefix = \"\"")),
        "/etc/solocron/jobs.toml:3:14: [redis] `key_prefix`: `` is not a key prefix: it must be non-empty, without spaces and without `{` or `}`"
    );
    assert!(error(&with("key_prefix = \"a{b}\"")).contains("`a{b}` is not a key prefix"));
    assert_eq!(
        error("[redis]\nurl = \"http://u:hunter2@db\"\n"),
        "/etc/solocron/jobs.toml:2:7: [redis] `url`: unsupported scheme `http` in `http://u:***@db`; \
         use `redis://`, `rediss://` or `redis+unix://`"
    );
}

#[test]
fn redis_password_never_shows() {
    for url in [
        "redis://u:hunter2@db:notaport",
        "redis://u:hunter2@",
        "nonsense://:hunter2@x",
    ] {
        let text = complete(&format!("[redis]\nurl = \"{url}\"\n"));
        let err = parse(&text, Path::new(PATH), &env)
            .expect_err(url)
            .to_string();
        assert!(
            err.contains("[redis] `url`") && !err.contains("hunter2"),
            "{err}"
        );
    }
    let text = "[redis]\nurl = \"redis://u:hunter2@db\"\n[jobs.x]\nschedule = 1\n";
    let err = parse(text, Path::new(PATH), &env).expect_err("bad schedule");
    assert!(!format!("{err}").contains("hunter2"));
    let config = config("[redis]\nurl = \"redis://u:hunter2@db\"\n");
    assert!(!format!("{config:?}").contains("hunter2"));
}

#[test]
fn redact_url_masks_odd_passwords_and_query_passwords() {
    use crate::config::redact_url;
    assert_eq!(redact_url("redis://u:hun/ter2@db/0"), "redis://u:***@db/0");
    assert_eq!(redact_url("redis://u:a@b?c@db"), "redis://u:***@db");
    assert_eq!(redact_url("redis://:pw@db:6379"), "redis://:***@db:6379");
    assert_eq!(
        redact_url("redis+unix:///run/redis.sock?db=1&pass=hunter2#x"),
        "redis+unix:///run/redis.sock?db=1&pass=***#x"
    );
    assert_eq!(redact_url("redis://db:6379/0"), "redis://db:6379/0");
}

/// The user name is not a secret: shown, with or without a password.
#[test]
fn redact_url_shows_the_user_name() {
    use crate::config::redact_url;
    assert_eq!(
        redact_url("rediss://solocron@db:6380/0"),
        "rediss://solocron@db:6380/0"
    );
    assert_eq!(
        redact_url("redis://solocron:hunter2@db"),
        "redis://solocron:***@db"
    );
}

#[test]
fn redis_password_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("redis.pass"), "hunter2\n").expect("write password");
    let config_path = dir.path().join("jobs.toml");
    let with = |file: &str| {
        complete(&format!(
            "[redis]\nurl = \"redis://db\"\npassword_file = \"{file}\"\n"
        ))
    };
    let config =
        parse(&with("redis.pass"), &config_path, &env).expect("relative to the config file");
    assert_eq!(config.redis.password.as_deref(), Some("hunter2"));
    let missing = with("/nonexistent/redis.pass");
    let err = parse(&missing, Path::new(PATH), &env)
        .expect_err("missing file")
        .to_string();
    assert!(err.starts_with(
        "/etc/solocron/jobs.toml:3:17: [redis] `password_file`: cannot read password file `/nonexistent/redis.pass`: "
    ), "{err}");
    // `status` and `history` work for people who cannot read it.
    let inspected = parse_for_inspection(&missing, Path::new(PATH), &env)
        .expect("an unreadable password file is no error for inspection");
    assert_eq!(inspected.redis.password, None);
    std::fs::write(dir.path().join("empty.pass"), "\n").expect("write password");
    let err = parse(&with("empty.pass"), &config_path, &env).expect_err("empty");
    assert!(err.to_string().contains("is empty"));
}
