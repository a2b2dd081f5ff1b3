//! The monitoring under `contrib/`: the alerting rules pass `promtool check
//! rules` and their unit tests (`promtool test rules` on the synthetic
//! series of `solocron.rules.test.yml`, where every alert has cases that
//! fire and cases that must not), and neither the rules nor the Grafana
//! dashboard name a metric that a real daemon does not serve: a daemon is
//! started against a real redis-server, made to serve every series (a run,
//! a reload-free schedule, a Redis outage), and scraped.
//!
//! promtool comes with Debian's `prometheus` package, which `scripts/need-deps
//! --tests` installs; without it these tests fail, naming the package.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{Node, RedisServer, Workdir, free_port, scrape_metrics, wait_until};

fn contrib(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("contrib")
        .join(path)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|err| panic!("read {}: {err}", path.display()))
}

/// Runs `promtool ARGS` in `dir`; a missing promtool fails the test.
fn promtool(dir: &Path, args: &[&str]) -> Output {
    match Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
    {
        Ok(output) => output,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => panic!(
            "promtool is not installed: `apt-get install prometheus` (Debian's package ships it; \
             scripts/need-deps --tests installs it)"
        ),
        Err(err) => panic!("cannot run promtool: {err}"),
    }
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// One rule of a rules file: `alert` or `record`, its name and expression.
#[derive(Debug)]
struct Rule {
    alert: bool,
    name: String,
    expr: String,
}

/// The rules of a Prometheus rules file in the layout ours uses: `- alert:`
/// or `- record:` opens a rule; `expr:` is inline or a block (`|`, `>`)
/// of the lines indented deeper than it. promtool's own count of the rules
/// is checked against this one, so a rule this misses fails the test.
fn rules(text: &str) -> Vec<Rule> {
    let mut rules: Vec<Rule> = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        i += 1;
        if trimmed.starts_with('#') {
            continue;
        }
        for (key, alert) in [("- alert:", true), ("- record:", false)] {
            if let Some(name) = trimmed.strip_prefix(key) {
                rules.push(Rule {
                    alert,
                    name: name.trim().to_string(),
                    expr: String::new(),
                });
            }
        }
        let Some(value) = trimmed.strip_prefix("expr:") else {
            continue;
        };
        let rule = rules.last_mut().expect("an expr inside a rule");
        let value = value.trim();
        if ["|", "|-", ">", ">-"].contains(&value) {
            while i < lines.len() {
                let next = lines[i];
                let deeper = next.len() - next.trim_start().len() > indent;
                if !(deeper || next.trim().is_empty()) {
                    break;
                }
                rule.expr.push_str(next.trim());
                rule.expr.push('\n');
                i += 1;
            }
        } else {
            rule.expr = value.trim_matches(|c| c == '"' || c == '\'').to_string();
        }
    }
    rules
}

const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
];
const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];
/// The PromQL functions these files may call; another name followed by
/// `(` is a typo (Prometheus would refuse it only at load).
const FUNCTIONS: &[&str] = &[
    "abs",
    "absent",
    "clamp_min",
    "histogram_quantile",
    "increase",
    "label_replace",
    "last_over_time",
    "max_over_time",
    "min_over_time",
    "rate",
    "time",
    "timestamp",
    "vector",
];

/// The metric names a PromQL expression selects: every identifier that is
/// not a keyword, an aggregation or a function call, once strings, label
/// matchers (`{…}`), ranges (`[…]`), grouping lists (`by (…)`) and Grafana
/// variables (`$job`) are taken out.
fn metric_names(expr: &str) -> BTreeSet<String> {
    // Strings, `{…}` and `[…]` out.
    let mut kept = String::new();
    let mut chars = expr.chars().peekable();
    let (mut braces, mut brackets) = (0usize, 0usize);
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' | '`' => {
                while let Some(inner) = chars.next() {
                    if inner == '\\' {
                        chars.next();
                    } else if inner == c {
                        break;
                    }
                }
                kept.push(' ');
            }
            '{' => braces += 1,
            '}' => braces = braces.saturating_sub(1),
            '[' => brackets += 1,
            ']' => brackets = brackets.saturating_sub(1),
            _ if braces > 0 || brackets > 0 => {}
            _ => kept.push(c),
        }
    }
    let chars: Vec<char> = kept.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let starts_word = c.is_ascii_alphabetic() || c == '_' || c == ':' || c == '$';
        if !starts_word {
            if c.is_ascii_digit() || c == '.' {
                // A number or a duration (`offset 15m`): skip it whole.
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            } else {
                i += 1;
            }
            continue;
        }
        let start = i;
        while i < chars.len()
            && (chars[i].is_ascii_alphanumeric() || matches!(chars[i], '_' | ':' | '$'))
        {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let mut next = i;
        while next < chars.len() && chars[next].is_whitespace() {
            next += 1;
        }
        let called = chars.get(next) == Some(&'(');
        let lower = word.to_ascii_lowercase();
        if word.starts_with('$') {
            continue;
        }
        if [
            "by",
            "without",
            "on",
            "ignoring",
            "group_left",
            "group_right",
        ]
        .contains(&lower.as_str())
        {
            if called {
                // The label list: up to its `)`.
                while next < chars.len() && chars[next] != ')' {
                    next += 1;
                }
                i = next + 1;
            }
            continue;
        }
        if KEYWORDS.contains(&lower.as_str()) || AGGREGATIONS.contains(&word.as_str()) {
            continue;
        }
        if called {
            assert!(
                FUNCTIONS.contains(&word.as_str()),
                "`{word}(` in `{expr}` is not a PromQL function these files use (a typo?)"
            );
            continue;
        }
        names.insert(word);
    }
    names
}

#[test]
fn metric_names_are_found_in_expressions() {
    let expr = r#"sum by (job, le) (rate(solocron_x_bucket{job=~"$job", a="b{c}"}[$__rate_interval]))
        > on (job) group_left max_over_time(solocron:y:max[1h:5m] offset 15m) * 2.5e3 and up == 0
        or absent(solocron_z{job="a"}) unless bool time() - vector(1)"#;
    let found: Vec<String> = metric_names(expr).into_iter().collect();
    assert_eq!(
        found,
        ["solocron:y:max", "solocron_x_bucket", "solocron_z", "up"]
    );
}

#[test]
fn promtool_checks_every_rule() {
    let dir = contrib("prometheus");
    let file = dir.join("solocron.rules.yml");
    let parsed = rules(&read(&file));
    let output = promtool(&dir, &["check", "rules", "solocron.rules.yml"]);
    let said = text(&output);
    assert!(
        output.status.success(),
        "promtool check rules failed:\n{said}"
    );
    assert!(
        said.contains(&format!("SUCCESS: {} rules found", parsed.len())),
        "promtool counts other rules than {parsed:#?}:\n{said}"
    );
    assert!(
        parsed.iter().all(|rule| !rule.expr.trim().is_empty()),
        "{parsed:#?}"
    );
}

#[test]
fn promtool_unit_tests_fire_and_hold_every_alert() {
    let dir = contrib("prometheus");
    let output = promtool(&dir, &["test", "rules", "solocron.rules.test.yml"]);
    let said = text(&output);
    assert!(
        output.status.success(),
        "promtool test rules failed:\n{said}"
    );
    assert!(said.contains("SUCCESS"), "{said}");
    // Each alert has a case where it fires and one where it must not.
    let tests = read(&dir.join("solocron.rules.test.yml"));
    let lines: Vec<&str> = tests.lines().map(str::trim).collect();
    let mut fires = BTreeSet::new();
    let mut holds = BTreeSet::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = line.strip_prefix("alertname:") else {
            continue;
        };
        match lines.get(i + 1) {
            Some(&"exp_alerts: []") => holds.insert(name.trim().to_string()),
            Some(&"exp_alerts:") => fires.insert(name.trim().to_string()),
            other => panic!("alertname {name} not followed by exp_alerts: {other:?}"),
        };
    }
    for rule in rules(&read(&dir.join("solocron.rules.yml"))) {
        if rule.alert {
            assert!(fires.contains(&rule.name), "no case fires {}", rule.name);
            assert!(holds.contains(&rule.name), "no case holds {}", rule.name);
        }
    }
}

/// The PromQL expressions of the dashboard: every `expr` of a panel's
/// targets and the metric of every `label_values(…)` variable query.
fn dashboard_exprs(dashboard: &serde_json::Value) -> Vec<String> {
    fn walk(value: &serde_json::Value, found: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, inner) in map {
                    match (key.as_str(), inner) {
                        ("expr", serde_json::Value::String(expr)) => found.push(expr.clone()),
                        ("query" | "definition", serde_json::Value::String(query)) => {
                            if let Some(args) = query.strip_prefix("label_values(") {
                                let metric = args.split(',').next().unwrap_or_default();
                                found.push(metric.to_string());
                            }
                        }
                        _ => walk(inner, found),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|item| walk(item, found)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    walk(dashboard, &mut found);
    found
}

/// `/metrics`, or `None` while the endpoint does not answer.
fn try_scrape(port: u16) -> Option<String> {
    std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    Some(scrape_metrics(port))
}

/// The metric names in a scrape: every sample's and every `# TYPE`'s.
fn served_names(body: &str) -> BTreeSet<String> {
    body.lines()
        .filter_map(|line| match line.strip_prefix("# TYPE ") {
            Some(declared) => declared.split(' ').next(),
            None if line.starts_with('#') || line.is_empty() => None,
            None => line.split(['{', ' ']).next(),
        })
        .map(str::to_string)
        .collect()
}

/// A real daemon's `/metrics` once it serves every series: a job that ran,
/// the registry and clock read, and a Redis outage (`redis_up` 0, an error).
fn scrape_a_real_daemon() -> String {
    let mut redis = RedisServer::start();
    let work = Workdir::new();
    let port = free_port();
    work.write_config(&format!(
        "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\
         [groups.nightlies]\nmax_running = 1\n\
         [calendars.always]\nweekly = [\"Mon-Sun 00:00-24:00\"]\n\
         [jobs.held]\nschedule = \"* * * * * *\"\ncommand = \"true\"\nskip_during = [\"always\"]\n\
         [jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n\
         [jobs.nightly]\nschedule = \"0 3 * * *\"\ncommand = \"true\"\nmax_silence = \"2d\"\n\
         group = \"nightlies\"\n"
    ));
    let _node = Node::start(&work, &redis, "n1", &[]);
    let mut body = String::new();
    wait_until(
        Duration::from_secs(30),
        "tick ran and every gauge is set",
        || {
            body = try_scrape(port).unwrap_or_default();
            [
                r#"solocron_runs_total{job="tick",outcome="succeeded"} "#,
                // Recorded once the run's outcome is: before the outage.
                r#"solocron_fire_to_start_seconds_count{job="tick"} "#,
                r#"solocron_job_period_seconds{job="nightly"} "#,
                r#"solocron_last_excluded_timestamp_seconds{job="held"} "#,
                "solocron_live_nodes ",
                "solocron_clock_offset_seconds ",
                "solocron_redis_up 1",
            ]
            .iter()
            .all(|prefix| body.lines().any(|line| line.starts_with(prefix)))
                && !body.contains(r#"solocron_runs_total{job="tick",outcome="succeeded"} 0"#)
        },
    );
    redis.kill();
    wait_until(Duration::from_secs(30), "the outage is served", || {
        body = try_scrape(port).unwrap_or_default();
        body.lines().any(|line| line == "solocron_redis_up 0")
            && body.contains("solocron_redis_errors_total{")
    });
    body
}

#[test]
fn rules_and_dashboard_name_only_metrics_a_real_daemon_serves() {
    let body = scrape_a_real_daemon();
    let served = served_names(&body);
    // What the daemon declares is what it serves (so the list below is real).
    for name in solocron::metrics::NAMES {
        assert!(served.contains(*name), "`{name}` is not served:\n{body}");
    }
    let rules = rules(&read(&contrib("prometheus/solocron.rules.yml")));
    let recorded: BTreeSet<String> = rules
        .iter()
        .filter(|rule| !rule.alert)
        .map(|rule| rule.name.clone())
        .collect();
    // `up` is Prometheus' own, per scrape target.
    let known = |name: &str| name == "up" || served.contains(name);
    let mut used = BTreeSet::new();
    for rule in &rules {
        for name in metric_names(&rule.expr) {
            assert!(
                known(&name) || recorded.contains(&name),
                "rule {} uses `{name}`, which the daemon does not serve:\n{}",
                rule.name,
                rule.expr
            );
            used.insert(name);
        }
    }
    let dashboard: serde_json::Value =
        serde_json::from_str(&read(&contrib("grafana/solocron.json")))
            .expect("contrib/grafana/solocron.json is valid JSON");
    let exprs = dashboard_exprs(&dashboard);
    assert!(exprs.len() >= 20, "{exprs:#?}");
    for expr in &exprs {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "`{expr}` selects no metric");
        for name in names {
            assert!(
                known(&name),
                "the dashboard uses `{name}`, which the daemon does not serve:\n{expr}"
            );
            used.insert(name);
        }
    }
    // Between them, the rules and the dashboard show every metric.
    for name in solocron::metrics::NAMES {
        assert!(
            used.iter().any(|used| used.starts_with(name)),
            "`{name}` is in neither the rules nor the dashboard"
        );
    }
}

#[test]
fn dashboard_is_a_grafana_dashboard_over_its_datasource_variable() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&read(&contrib("grafana/solocron.json")))
            .expect("contrib/grafana/solocron.json is valid JSON");
    for key in ["title", "uid", "schemaVersion", "panels", "templating"] {
        assert!(dashboard.get(key).is_some(), "no `{key}`");
    }
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list");
    let names: Vec<&str> = variables
        .iter()
        .filter_map(|variable| variable["name"].as_str())
        .collect();
    assert_eq!(names, ["datasource", "job", "instance"]);
    assert_eq!(variables[0]["type"], "datasource");
    assert_eq!(variables[0]["query"], "prometheus");
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    for panel in panels {
        let title = panel["title"].as_str().unwrap_or_default();
        assert!(
            ids.insert(panel["id"].as_u64().expect("a numeric id")),
            "id of {title} repeats"
        );
        for key in ["x", "y", "w", "h"] {
            assert!(panel["gridPos"][key].is_u64(), "{title}: gridPos.{key}");
        }
        if panel["type"] == "row" {
            continue;
        }
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title} has no query");
        let mut refs = BTreeSet::new();
        for target in targets {
            assert!(
                refs.insert(target["refId"].as_str().expect("refId")),
                "{title}: refId repeats"
            );
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{title}");
            assert!(
                target["expr"].as_str().is_some_and(|expr| !expr.is_empty()),
                "{title}"
            );
        }
    }
}
