//! Property tests for the config loader ([`config::parse`]).
//!
//! Three sources of input: arbitrary strings; the example `jobs.toml` with
//! random edits (a range deleted, text inserted, a line duplicated); and
//! generated near-valid documents: the real sections and keys (the key lists
//! below mirror the loader's) plus typos and keys of other sections, each
//! with a plausible value for that key (durations, zones, cron expressions,
//! URLs, `${VAR}` templates, ...) or a value of any TOML type.
//!
//! For every input `parse` returns without panicking, and:
//! - `Err` is `Syntax` or `Invalid` (never `Read`, which `parse` cannot
//!   cause) and its message starts with `PATH:LINE:COL: `, LINE and COL
//!   inside the text, with the line shown under it;
//! - no message contains the value of `${SECRET}`;
//! - `Ok` holds only what docs/configuration.md allows: a Redis server and at least one
//!   job, valid job names, `lock_ttl` and `timeout` at least 1 s, exactly
//!   one action (by construction), a schedule that fires, `history_max` at
//!   least 1, a non-empty key prefix without braces;
//! - several errors are each whole (position, snippet) and all shown.

use std::path::Path;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use solocron::config::{self, Action, Config, ConfigError};

const PATH: &str = "/etc/solocron/jobs.toml";
const SECRET: &str = "s3cret-from-env";
const CASES: u32 = 2048;
const EXAMPLE: &str = include_str!("../../../jobs.toml");

// The loader's own key lists: generated documents use every key it knows.
use solocron::config::keys::{
    DAEMON as DAEMON_KEYS, HTTP as HTTP_KEYS, JOB as JOB_KEYS, REDIS as REDIS_KEYS, REDIS_SERVER,
    SENTINEL as SENTINEL_KEYS, TOP as TOP_KEYS,
};
use solocron::config::{DEFAULT_WAIT_TIMEOUT, RedisMode};

fn env(name: &str) -> Option<String> {
    match name {
        "SECRET" => Some(SECRET.to_string()),
        "HOST" => Some("hooks.internal".to_string()),
        "EMPTY" => Some(String::new()),
        _ => None,
    }
}

/// A TOML basic string holding `text`.
fn quoted(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn one_of(items: &'static [&'static str]) -> BoxedStrategy<String> {
    prop::sample::select(items).prop_map(str::to_string).boxed()
}

fn text() -> BoxedStrategy<String> {
    prop_oneof![
        "[a-zA-Z0-9 _./:@${}*,-]{0,24}",
        any::<String>().prop_map(|s| s.chars().take(24).collect()),
    ]
    .boxed()
}

fn duration() -> BoxedStrategy<String> {
    prop_oneof![
        one_of(&[
            "500ms",
            "1s",
            "30s",
            "5m",
            "1h30m",
            "0s",
            "999ms",
            "-1s",
            "1 h",
            "abc",
            "",
            "100y",
            "101y",
            "300000y",
            "1000000000000h",
            "99999999999999999999s",
            "1.5s",
            "1e3s",
            " 2s ",
        ]),
        (
            0u64..100_000,
            prop::sample::select(&["ns", "ms", "s", "m", "h", "d", "w", "y", ""][..])
        )
            .prop_map(|(n, unit)| format!("{n}{unit}")),
    ]
    .boxed()
}

fn zone() -> BoxedStrategy<String> {
    one_of(&[
        "UTC",
        "Asia/Tashkent",
        "Europe/Berlin",
        "America/New_York",
        "Australia/Lord_Howe",
        "Europe/Berln",
        "Mars/Olympus",
        "",
        "utc",
        "Etc/GMT+5",
        "EST5EDT",
        "../../etc/passwd",
    ])
}

fn cron_field() -> BoxedStrategy<String> {
    prop_oneof![
        one_of(&[
            "*", "*/5", "0", "59", "60", "1-5", "5-1", "MON", "mon-fri", "L", "5L", "15W", "1#2",
            "?", "1,2", "*/0", "0-59/61", "JAN", "31", "30", "29", "2", "-1", "", "**", "1/5",
        ]),
        (0u32..100).prop_map(|n| n.to_string()),
    ]
    .boxed()
}

fn cron() -> BoxedStrategy<String> {
    let plain = one_of(&["*", "*/5", "0", "1-5", "1,2", "30", "*/15"]);
    prop_oneof![
        3 => prop::collection::vec(plain, 5..=6).prop_map(|fields| fields.join(" ")),
        3 => prop::collection::vec(cron_field(), 4..=7).prop_map(|fields| fields.join(" ")),
        1 => one_of(&[
            "@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually",
            "@reboot", "@every 5m", "@DAILY", "", "0 0 30 2 *", "0 0 31 4 *", "0 0 29 2 *",
            "0 0 0 31 11 *", "0 0 29 2 1",
        ]),
    ]
    .boxed()
}

fn template() -> BoxedStrategy<String> {
    one_of(&[
        "echo ${HOST}",
        "Bearer ${SECRET}",
        "${SECRET}",
        "${MISSING}",
        "${",
        "${1X}",
        "$${SECRET}",
        "$${",
        "a$b",
        "${EMPTY}",
        "${SECRET",
        "x\r\ny",
        "",
        "   ",
    ])
}

fn url() -> BoxedStrategy<String> {
    one_of(&[
        "redis://127.0.0.1:6379",
        "rediss://u:pw@db:6380/0",
        "redis://u:p/w@db",
        "redis://",
        "redis+unix:///run/redis.sock",
        "unix:///run/redis.sock",
        "http://127.0.0.1:8080/hooks",
        "https://${HOST}/x",
        "http://${SECRET}/",
        "${SECRET}",
        "ftp://x/",
        "http://:80/",
        "not a url",
        "",
        "redis://db:notaport",
    ])
}

/// A list of Redis servers: mostly `min` to 5 distinct ones of one
/// scheme (valid for a key that needs `min`), sometimes fewer, or any URLs
/// (duplicates, sockets, mixed schemes, garbage).
fn server_list(min: usize) -> BoxedStrategy<String> {
    let distinct = |n: std::ops::RangeInclusive<usize>| {
        (n, prop::sample::select(&["redis", "rediss"][..])).prop_map(|(n, scheme)| {
            let urls: Vec<String> = (1..=n)
                .map(|i| quoted(&format!("{scheme}://10.0.0.{i}:6379")))
                .collect();
            format!("[{}]", urls.join(", "))
        })
    };
    let any = prop::collection::vec(url().prop_map(|u| quoted(&u)), 0..4)
        .prop_map(|urls| format!("[{}]", urls.join(", ")));
    prop_oneof![
        8 => distinct(min..=5),
        1 => distinct(0..=min.saturating_sub(1)),
        1 => any,
    ]
    .boxed()
}

/// `sentinel = { master, urls, password_file }`, mostly valid.
fn sentinel_table() -> BoxedStrategy<String> {
    let master = prop::option::weighted(
        0.97,
        prop_oneof![
            4 => Just("solocron".to_string()),
            1 => one_of(&["mymaster", "", "my master"]),
        ]
        .prop_map(|m| quoted(&m)),
    );
    let urls = prop::option::weighted(0.97, server_list(1));
    let more = prop::option::weighted(0.1, entry(SENTINEL_KEYS));
    (master, urls, more)
        .prop_map(|(master, urls, more)| {
            let master = master.map(|m| ("master".to_string(), m));
            let urls = urls.map(|u| ("urls".to_string(), u));
            inline(master.into_iter().chain(urls).chain(more).collect())
        })
        .boxed()
}

/// A TOML value of any type.
fn any_value() -> BoxedStrategy<String> {
    let leaf = prop_oneof![
        text().prop_map(|t| quoted(&t)),
        any::<i64>().prop_map(|n| n.to_string()),
        Just("99999999999999999999".to_string()),
        any::<f64>().prop_map(|f| {
            if f.is_finite() {
                format!("{f:?}")
            } else {
                "nan".to_string()
            }
        }),
        any::<bool>().prop_map(|b| b.to_string()),
        Just("1979-05-27T07:32:00Z".to_string()),
        Just("'literal ${SECRET}'".to_string()),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(", "))),
            prop::collection::vec(("[a-zA-Z_-]{1,8}", inner), 0..3).prop_map(|kv| {
                let body: Vec<String> = kv.iter().map(|(k, v)| format!("{k} = {v}")).collect();
                format!("{{ {} }}", body.join(", "))
            }),
        ]
    })
    .boxed()
}

fn env_table() -> BoxedStrategy<String> {
    let name = prop_oneof![
        one_of(&[
            "A",
            "REPORT_TO",
            "_x1",
            "SOLOCRON_JOB",
            "\"1BAD\"",
            "\"A-B\"",
            "\"\""
        ]),
        "[A-Z_]{1,6}",
    ];
    let value = prop_oneof![3 => template().prop_map(|t| quoted(&t)), 1 => any_value()];
    prop::collection::vec((name, value), 0..3)
        .prop_map(inline)
        .boxed()
}

fn http_url() -> BoxedStrategy<String> {
    prop_oneof![
        3 => one_of(&["http://127.0.0.1:8080/hooks", "https://${HOST}/x", "http://h/?a=b@c"]),
        1 => url(),
    ]
    .boxed()
}

/// An inline table of `key = value` pairs, each key once.
fn inline(entries: Vec<(String, String)>) -> String {
    let mut seen = std::collections::HashSet::new();
    let body: Vec<String> = entries
        .into_iter()
        .filter(|(k, _)| seen.insert(k.clone()))
        .map(|(k, v)| format!("{k} = {v}"))
        .collect();
    format!("{{ {} }}", body.join(", "))
}

fn http_table() -> BoxedStrategy<String> {
    let headers = prop::collection::vec(
        (
            one_of(&[
                "Authorization",
                "X-A",
                "\"Bad Name\"",
                "\"\"",
                "Content-Type",
            ]),
            template().prop_map(|t| quoted(&t)),
        ),
        0..3,
    )
    .prop_map(inline);
    let pair = |k: &'static str, v: BoxedStrategy<String>| v.prop_map(move |v| (k.to_string(), v));
    let entry = prop_oneof![
        1 => pair("method", one_of(&["GET", "post", "GE T", "", "DELETE"]).prop_map(|m| quoted(&m)).boxed()),
        1 => pair("timeout", duration().prop_map(|d| quoted(&d)).boxed()),
        1 => pair("headers", headers.boxed()),
        1 => pair("body", template().prop_map(|t| quoted(&t)).boxed()),
        1 => (key(HTTP_KEYS), any_value()),
    ];
    let url = prop::option::weighted(
        0.9,
        http_url().prop_map(|u| ("url".to_string(), quoted(&u))),
    );
    (url, prop::collection::vec(entry, 0..3))
        .prop_map(|(url, more)| inline(url.into_iter().chain(more).collect()))
        .boxed()
}

/// A value that suits `key` (often valid), or any value.
fn value_for(key: &str) -> BoxedStrategy<String> {
    let suited: BoxedStrategy<String> = match key {
        "schedule" => cron().prop_map(|c| quoted(&c)).boxed(),
        "timezone" => zone().prop_map(|z| quoted(&z)).boxed(),
        "lock_ttl" | "timeout" | "starting_deadline" | "shutdown_grace" | "max_silence" => {
            duration().prop_map(|d| quoted(&d)).boxed()
        }
        "command" | "working_dir" | "key_prefix" => template().prop_map(|t| quoted(&t)).boxed(),
        "argv" => prop::collection::vec(template().prop_map(|t| quoted(&t)), 0..3)
            .prop_map(|v| format!("[{}]", v.join(", ")))
            .boxed(),
        "http" => http_table(),
        "env" => env_table(),
        "on_lock_lost" => one_of(&["kill", "continue", "ignore", ""])
            .prop_map(|v| quoted(&v))
            .boxed(),
        "overlap" => one_of(&["skip", "queue"]).prop_map(|v| quoted(&v)).boxed(),
        "url" => url().prop_map(|u| quoted(&u)).boxed(),
        "cluster" | "urls" => server_list(1),
        "redlock" => server_list(3),
        "sentinel" => sentinel_table(),
        "master" => one_of(&["solocron", "", "a b"])
            .prop_map(|m| quoted(&m))
            .boxed(),
        "wait_replicas" => prop_oneof![
            (-2i64..20).prop_map(|n| n.to_string()),
            Just("4294967296".to_string()),
        ]
        .boxed(),
        "wait_timeout" => prop_oneof![
            one_of(&["250ms", "10ms", "9ms", "10s", "11s", "1s"]).prop_map(|d| quoted(&d)),
            duration().prop_map(|d| quoted(&d)),
        ]
        .boxed(),
        "username" => one_of(&["solocron", "", "default"])
            .prop_map(|v| quoted(&v))
            .boxed(),
        "password_file" => one_of(&["/dev/null", "/", "/nonexistent/pass", "relative.pass", ""])
            .prop_map(|v| quoted(&v))
            .boxed(),
        "env_file" => one_of(&["/dev/null", "/", "/nonexistent/env", "relative.env", ""])
            .prop_map(|v| quoted(&v))
            .boxed(),
        "output_log_max" => one_of(&[
            "64KiB",
            "1MiB",
            "500B",
            "65536",
            "0",
            "64 KiB",
            "2kb",
            "1.5MiB",
            "-1",
            "lots",
            "",
            "KiB",
            "99999999999999999999",
            "1e3",
            "18446744073709551615",
            "99999EiB",
        ])
        .prop_map(|v| quoted(&v))
        .boxed(),
        "history_max" => prop_oneof![
            (-3i64..20_000).prop_map(|n| n.to_string()),
            Just("9223372036854775807".to_string()),
        ]
        .boxed(),
        "metrics_listen" | "status_listen" => one_of(&[
            "127.0.0.1:9464",
            "127.0.0.1:9465",
            "[::1]:9464",
            "localhost",
            ":9464",
            "",
        ])
        .prop_map(|v| quoted(&v))
        .boxed(),
        "splay" | "retry_backoff" => duration().prop_map(|d| quoted(&d)).boxed(),
        "retries" => (-2i64..13).prop_map(|n| n.to_string()).boxed(),
        "clock" => one_of(&["redis", "local", "utc", ""])
            .prop_map(|v| quoted(&v))
            .boxed(),
        "on_failure" | "on_success" => prop_oneof![
            template().prop_map(|t| format!("{{ command = {} }}", quoted(&t))),
            template().prop_map(|t| format!("{{ argv = [{}], timeout = \"5s\" }}", quoted(&t))),
            Just("{ timeout = \"5s\" }".to_string()),
            Just("{ command = \"a\", argv = [\"b\"] }".to_string()),
            http_table().prop_map(|h| format!("{{ http = {h} }}")),
        ]
        .boxed(),
        _ => any_value(),
    };
    prop_oneof![6 => suited, 1 => any_value()].boxed()
}

/// `keys` with one character dropped, doubled or changed.
fn typo(keys: &'static [&'static str]) -> BoxedStrategy<String> {
    (
        prop::sample::select(keys),
        any::<prop::sample::Index>(),
        0..3u8,
        "[a-z_]",
    )
        .prop_map(|(key, at, how, c)| {
            let mut chars: Vec<char> = key.chars().collect();
            let i = at.index(chars.len());
            match how {
                0 => {
                    chars.remove(i);
                }
                1 => chars.insert(i, chars[i]),
                _ => chars[i] = c.chars().next().unwrap_or('x'),
            }
            chars.into_iter().collect()
        })
        .boxed()
}

/// A key for a table whose real keys are `keys`.
fn key(keys: &'static [&'static str]) -> BoxedStrategy<String> {
    prop_oneof![
        12 => prop::sample::select(keys).prop_map(str::to_string),
        1 => typo(keys),
        1 => prop::sample::select([JOB_KEYS, REDIS_KEYS, DAEMON_KEYS, HTTP_KEYS, SENTINEL_KEYS].concat())
            .prop_map(str::to_string),
        1 => "[a-z_]{1,10}",
    ]
    .boxed()
}

/// `key = value` for a key of `keys`.
fn entry(keys: &'static [&'static str]) -> BoxedStrategy<(String, String)> {
    key(keys)
        .prop_flat_map(|k| value_for(&k).prop_map(move |v| (k.clone(), v)))
        .boxed()
}

/// `key = value` for `[redis]` besides its server: rarely a second server
/// key (an error each time), mostly one of the others.
fn redis_entry() -> BoxedStrategy<(String, String)> {
    let others: Vec<&'static str> = REDIS_KEYS
        .iter()
        .copied()
        .filter(|key| !REDIS_SERVER.contains(key))
        .collect();
    prop_oneof![
        6 => entry(others.leak()),
        1 => entry(REDIS_KEYS),
    ]
    .boxed()
}

/// A table body: the entries, each key once (a repeated key is a TOML
/// syntax error, which the other properties already produce plenty of).
fn table(entries: Vec<(String, String)>) -> String {
    let mut seen = std::collections::HashSet::new();
    let lines: Vec<String> = entries
        .into_iter()
        .filter(|(k, _)| seen.insert(k.clone()))
        .map(|(k, v)| format!("{k} = {v}"))
        .collect();
    lines.join("\n")
}

fn job_name() -> BoxedStrategy<String> {
    prop_oneof![
        8 => "[a-z][a-z0-9_-]{0,12}",
        1 => "[a-z][a-z0-9_.-]{0,12}".prop_map(|n| quoted(&n)),
        1 => one_of(&["\"a b\"", "\"\"", "a.b", "\"ä\""]),
        1 => Just("a".repeat(65)),
    ]
    .boxed()
}

/// A job: usually a schedule and an action, then a few more keys.
fn job() -> BoxedStrategy<String> {
    let schedule = value_for("schedule").prop_map(|v| ("schedule".to_string(), v));
    let action = prop::sample::select(&["command", "argv", "http"][..])
        .prop_flat_map(|k| value_for(k).prop_map(move |v| (k.to_string(), v)));
    (
        job_name(),
        prop::option::weighted(0.9, schedule),
        prop::option::weighted(0.85, action),
        prop::collection::vec(entry(JOB_KEYS), 0..3),
    )
        .prop_map(|(name, schedule, action, more)| {
            let entries = schedule.into_iter().chain(action).chain(more).collect();
            format!("[jobs.{name}]\n{}\n", table(entries))
        })
        .boxed()
}

/// `[redis]`, or nothing: it must name a server, and mostly it does, with
/// a valid URL or in one of the other modes with a value suited to it,
/// then a few more keys (rarely a second server key).
fn redis_section() -> BoxedStrategy<String> {
    let server = prop_oneof![
        6 => one_of(&["redis://127.0.0.1:6379", "rediss://db:6380/0"])
            .prop_map(|u| ("url".to_string(), quoted(&u))),
        1 => sentinel_table().prop_map(|t| ("sentinel".to_string(), t)),
        1 => server_list(1).prop_map(|l| ("cluster".to_string(), l)),
        1 => server_list(3).prop_map(|l| ("redlock".to_string(), l)),
    ];
    (
        prop::option::weighted(0.9, server),
        prop::option::weighted(0.3, prop::collection::vec(redis_entry(), 0..3)),
    )
        .prop_map(|(server, entries)| match (server, entries) {
            (None, None) => String::new(),
            (server, entries) => {
                let entries = server
                    .into_iter()
                    .chain(entries.unwrap_or_default())
                    .collect();
                format!("[redis]\n{}\n", table(entries))
            }
        })
        .boxed()
}

/// A near-valid document: a few top-level keys (rarely), the sections in
/// their usual order (each present or not), and one to three jobs.
fn document() -> BoxedStrategy<String> {
    let section = |name: &'static str, keys: &'static [&'static str], most: usize| {
        prop::option::of(prop::collection::vec(entry(keys), 0..most)).prop_map(move |entries| {
            match entries {
                Some(entries) => format!("[{name}]\n{}\n", table(entries)),
                None => String::new(),
            }
        })
    };
    (
        prop::option::weighted(0.1, (key(TOP_KEYS), any_value())),
        redis_section(),
        section("daemon", DAEMON_KEYS, 3),
        section("defaults", JOB_KEYS, 4),
        prop::collection::vec(job(), 1..4),
    )
        .prop_map(|(top, redis, daemon, defaults, jobs)| {
            let top = top.map(|(k, v)| format!("{k} = {v}\n")).unwrap_or_default();
            format!("{top}{redis}{daemon}{defaults}{}", jobs.join("\n"))
        })
        .boxed()
}

/// The example file with a few random edits.
fn mutated_example() -> BoxedStrategy<String> {
    let edit = (
        0..3u8,
        any::<prop::sample::Index>(),
        0..40usize,
        "[ -~\n]{0,6}",
    );
    prop::collection::vec(edit, 1..4)
        .prop_map(|edits| {
            let mut text = EXAMPLE.to_string();
            for (how, at, len, insert) in edits {
                let start = floor_boundary(&text, at.index(text.len() + 1));
                let end = floor_boundary(&text, (start + len).min(text.len()));
                match how {
                    0 => text.replace_range(start..end, ""),
                    1 => text.insert_str(start, &insert),
                    _ => {
                        let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
                        let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
                        let line = format!("{}\n", &text[line_start..line_end]);
                        text.insert_str(line_start, &line);
                    }
                }
            }
            text
        })
        .boxed()
}

fn floor_boundary(text: &str, mut index: usize) -> usize {
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

fn check(text: &str) -> Result<(), TestCaseError> {
    match config::parse(text, Path::new(PATH), &env) {
        Ok(config) => check_config(&config),
        Err(err) => check_error(text, &err),
    }
}

fn check_error(text: &str, err: &ConfigError) -> Result<(), TestCaseError> {
    let message = err.to_string();
    prop_assert!(!message.contains(SECRET), "secret in: {}", message);
    // Several errors: each one is whole, and the message is all of them.
    if let ConfigError::Several { errors, .. } = err {
        prop_assert!(errors.len() >= 2, "{}", message);
        prop_assert!(message.starts_with(&errors[0].to_string()), "{}", message);
        prop_assert!(
            message.ends_with(&format!("{} errors in {PATH}", errors.len())),
            "{}",
            message
        );
        for single in errors {
            prop_assert!(
                !matches!(single, ConfigError::Several { .. }),
                "{}",
                message
            );
            check_error(text, single)?;
        }
        return Ok(());
    }
    prop_assert!(!matches!(err, ConfigError::Read { .. }), "{}", message);
    let Some((line, column)) = err.position() else {
        return Err(TestCaseError::fail(format!("no position: {message}")));
    };
    let head = format!("{PATH}:{line}:{column}: ");
    prop_assert!(
        message.starts_with(&head),
        "{} does not start with {}",
        message,
        head
    );
    let lines = text.split('\n').count();
    prop_assert!(
        line >= 1 && line <= lines,
        "line {} of {}: {}",
        line,
        lines,
        message
    );
    let line_text = text.split('\n').nth(line - 1).unwrap_or_default();
    prop_assert!(
        column >= 1 && column <= line_text.chars().count() + 1,
        "column {} of {:?}: {}",
        column,
        line_text,
        message
    );
    prop_assert!(
        message.contains(&format!("\n{line} | ")),
        "no snippet: {}",
        message
    );
    Ok(())
}

fn check_config(config: &Config) -> Result<(), TestCaseError> {
    let from = Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).unwrap();
    prop_assert!(config.daemon.history_max >= 1);
    // A file that loads names its Redis server and has a job,
    // in a mode whose rules hold.
    check_redis(&config.redis)?;
    prop_assert!(!config.jobs.is_empty());
    let prefix = &config.redis.key_prefix;
    let braces = prefix.contains(['{', '}']);
    prop_assert!(!prefix.is_empty() && !braces, "key prefix {:?}", prefix);
    for job in &config.jobs {
        let name_ok = (1..=64).contains(&job.name.len())
            && job
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        prop_assert!(name_ok, "job name {:?}", job.name);
        prop_assert!(job.lock_ttl >= Duration::from_secs(1));
        prop_assert!(job.timeout.is_none_or(|t| t >= Duration::from_secs(1)));
        prop_assert!(
            job.schedule.next_after(from).is_some(),
            "{:?}",
            job.schedule
        );
        // No process could be given a NUL byte: every run would fail.
        let no_nul = |text: &str| !text.contains('\0');
        prop_assert!(job.extras.env.values().all(|value| no_nul(value)));
        prop_assert!(
            job.extras
                .working_dir
                .as_ref()
                .is_none_or(|dir| no_nul(&dir.to_string_lossy()))
        );
        match &job.action {
            Action::Command(command) => {
                prop_assert!(!command.trim().is_empty() && no_nul(command));
            }
            Action::Argv(argv) => {
                prop_assert!(argv.first().is_some_and(|p| !p.is_empty()));
                prop_assert!(argv.iter().all(|arg| no_nul(arg)), "{:?}", argv);
            }
            Action::Http(http) => {
                prop_assert!(http.url.starts_with("http://") || http.url.starts_with("https://"));
                for (_, value) in &http.headers {
                    prop_assert!(!value.contains(['\r', '\n', '\0']));
                }
            }
        }
    }
    Ok(())
}

fn check_redis(redis: &config::RedisConfig) -> Result<(), TestCaseError> {
    let networked = |urls: &[String]| {
        let tls = urls.iter().filter(|u| u.starts_with("rediss://")).count();
        let plain = urls.iter().filter(|u| u.starts_with("redis://")).count();
        tls == urls.len() || plain == urls.len()
    };
    match &redis.mode {
        RedisMode::Single => prop_assert!(!redis.url.is_empty()),
        RedisMode::Sentinel { master, urls, .. } => {
            prop_assert!(!master.is_empty() && !master.contains(' '));
            prop_assert!(!urls.is_empty() && networked(urls), "{:?}", urls);
        }
        RedisMode::Cluster { urls } => {
            prop_assert!(!urls.is_empty() && networked(urls), "{:?}", urls);
        }
        RedisMode::Redlock { urls } => {
            prop_assert!(urls.len() >= 3 && networked(urls), "{:?}", urls);
            prop_assert_eq!(redis.wait_replicas, 0);
        }
    }
    if !matches!(redis.mode, RedisMode::Single) {
        prop_assert!(redis.url.is_empty());
    }
    if redis.tls.is_configured() {
        prop_assert!(
            !redis.redacted_url().contains("redis://"),
            "{}",
            redis.redacted_url()
        );
    }
    prop_assert!(redis.wait_replicas <= 16);
    let timeout = redis.wait_timeout;
    prop_assert!(
        timeout == DEFAULT_WAIT_TIMEOUT
            || (Duration::from_millis(10)..=Duration::from_secs(10)).contains(&timeout)
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        check(&text)?;
    }

    #[test]
    fn toml_looking_text_never_panics(text in "([\\[\\]a-z_.=\" {}0-9#@*/,:${}\\n-]|jobs|schedule|command){0,80}") {
        check(&text)?;
    }

    #[test]
    fn edited_example_never_panics(text in mutated_example()) {
        check(&text)?;
    }

    #[test]
    fn near_valid_documents_load_or_point_at_the_problem(text in document()) {
        check(&text)?;
    }
}

/// The generated documents reach the `Ok` side too: a `[redis]` with a
/// server and a job are usually there, so the properties of loaded configs
/// keep being exercised now that a file without them is refused. Most
/// documents are broken on purpose: about 0.4% load (measured over 40,000:
/// 0.45% with `url` only, 0.36% since `[redis]` has four modes, 0.39% since
/// jobs have `max_silence`; the bound of 0.5% on 1,000 held by the luck of
/// the seed, and so did 0.25% on 4,000 until `max_silence` moved the
/// sequence: 8 of the first 4,000 load, 33 of 10,000), so this counts
/// 10,000 and asks for 0.25%. The keys of notifiers, retries, splay and
/// `clock` have value generators of their own (drawn from "any value",
/// only 21 of 10,000 loaded). The runner is deterministic, so this cannot
/// flake.
#[test]
fn near_valid_documents_often_load() {
    use proptest::strategy::ValueTree as _;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = document();
    let total = 10_000;
    let loaded = (0..total)
        .filter(|_| {
            let text = strategy
                .new_tree(&mut runner)
                .expect("a document")
                .current();
            config::parse(&text, Path::new(PATH), &env).is_ok()
        })
        .count();
    assert!(
        loaded * 400 >= total,
        "only {loaded} of {total} documents loaded"
    );
}

/// The generated `[redis]` sections load in every mode: with
/// a valid job after them, at least a third of each mode's sections load,
/// and what loads keeps the rules of its mode ([`check_redis`]).
#[test]
fn generated_redis_sections_load_in_every_mode() {
    use proptest::strategy::ValueTree as _;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = redis_section();
    let mut seen = std::collections::BTreeMap::<&str, (usize, usize)>::new();
    for _ in 0..2000 {
        let section = strategy.new_tree(&mut runner).expect("a section").current();
        let Some(mode) = ["url", "sentinel", "cluster", "redlock"]
            .into_iter()
            .find(|mode| {
                section
                    .lines()
                    .nth(1)
                    .is_some_and(|l| l.starts_with(&format!("{mode} = ")))
            })
        else {
            continue;
        };
        let text = format!("{section}\n[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n");
        let counts = seen.entry(mode).or_default();
        counts.0 += 1;
        if let Ok(config) = config::parse(&text, Path::new(PATH), &env) {
            counts.1 += 1;
            assert_eq!(config.redis.mode.name(), mode, "{text}");
            if let Err(err) = check_redis(&config.redis) {
                panic!("{err}: {text}");
            }
        }
    }
    assert_eq!(seen.len(), 4, "{seen:?}");
    for (mode, (generated, loaded)) in &seen {
        assert!(
            loaded * 3 >= *generated,
            "{mode}: {loaded} of {generated} loaded"
        );
    }
}
