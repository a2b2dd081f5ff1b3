//! SIGHUP: reload `jobs.toml` without losing the running schedule.
//!
//! The new file is loaded and validated completely before anything changes;
//! a broken or missing file is logged (file:line:col) and the old schedule
//! keeps running. Otherwise the timetable compares jobs by fingerprint:
//! added jobs start, removed jobs stop being scheduled (a run in progress
//! finishes, under its lease), a removed and an added job that run the
//! same are a rename that keeps the two from overlapping (`rename.rs`),
//! changed jobs are rescheduled with the new settings, which apply from
//! their next occurrence; unchanged jobs are not touched. A changed
//! job catches up like a starting node, and the claim script refuses what
//! was already decided; but a job the reload adds, or whose schedule or
//! zone it changes, starts afresh: its occurrences before the reload were
//! not due under the old file, so they are neither caught up nor recorded
//! `missed` by this node (`Shared::gap_floor`). Pending retries follow the new file
//! too: dropped when the job is gone or has fewer retries, else run under
//! its new definition (`retry.rs`). `[redis]`, `history_max`, `metrics_listen`
//! and `status_listen` need a restart: a reload that changes them keeps the old values and
//! names the changed keys in a warning; every other setting applies.

use std::sync::Arc;

use tokio::sync::watch;
use tracing::{error, info, warn};

use super::timetable::Timetable;
use super::{Options, Shared};
use crate::config::{self, Config, RedisConfig, RedisMode};
use crate::{metrics, systemd};

/// Reloads the file named by the current config; see the module doc.
pub fn reload(
    shared: &Arc<Shared>,
    timetable: &mut Timetable,
    config_tx: &watch::Sender<Arc<Config>>,
    options: &Options,
) {
    systemd::reloading();
    let current = Arc::clone(&config_tx.borrow());
    let path = current.path.clone();
    info!(node = %options.node, config = %path.display(), "reloading");
    match config::load(&path) {
        Err(err) => {
            let first_line = err
                .to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .to_string();
            let errors = err.errors().len();
            error!(node = %options.node, config = %path.display(), error = %first_line, errors,
                "reload failed: the old schedule keeps running; fix the file (`solocron check` lists every error) and reload again");
        }
        Ok(mut new) => {
            if let Some(url) = &options.redis_override {
                new.redis.use_url(url);
            }
            keep_restart_only_settings(&current, &mut new, &options.node);
            super::log_warnings(&new, &options.node);
            shared.set_env_file(&new);
            shared.slots.set_cap(new.daemon.max_running);
            shared.set_retry_jobs(&new.jobs);
            shared.clock.set_source(new.daemon.clock);
            // The occurrences of an added job, or of a new schedule, before
            // now were not due under the config in force here: this node
            // neither catches them up nor records them `missed` (a job
            // commented out and back, an hourly job made every 15 minutes).
            // Set before the timetable spawns the catch-ups.
            let now = shared.clock.now();
            let before: std::collections::HashMap<&str, &config::Job> = current
                .jobs
                .iter()
                .map(|old| (old.name.as_str(), old.as_ref()))
                .collect();
            for job in &new.jobs {
                let rescheduled = before.get(job.name.as_str()).is_none_or(|old| {
                    old.schedule.expression() != job.schedule.expression()
                        || old.schedule.timezone() != job.schedule.timezone()
                });
                if rescheduled {
                    shared.set_gap_floor(&job.name, job.unsplayed(now).timestamp_millis());
                }
            }
            super::rename::reloaded(shared, &current.jobs, &new.jobs);
            let diff = timetable.apply(shared, &new.jobs);
            info!(node = %options.node, added = ?diff.added, removed = ?diff.removed, changed = ?diff.changed,
                unchanged = diff.unchanged, "config reloaded");
            shared.audit(
                "reload",
                &options.node,
                &format!(
                    "added [{}], removed [{}], changed [{}], {} unchanged",
                    diff.added.join(", "),
                    diff.removed.join(", "),
                    diff.changed.join(", "),
                    diff.unchanged
                ),
            );
            metrics::jobs_loaded(new.jobs.len());
            config_tx.send_replace(Arc::new(new));
            crate::memory::release_freed();
        }
    }
    systemd::ready();
}

/// What a running daemon set up once and keeps (its Redis connection, the
/// history cap its releases use, the metrics and status page listeners): a reload that
/// changes any of it keeps the old values and says which keys changed (by
/// name: URLs and password files hold secrets). The other `[daemon]` keys
/// apply on reload: `env_file` (read again), `clock`, `shutdown_grace`.
fn keep_restart_only_settings(current: &Config, new: &mut Config, node: &str) {
    let mut keys = redis_changes(&current.redis, &new.redis);
    if !keys.is_empty() {
        new.redis = current.redis.clone();
    }
    if new.daemon.history_max != current.daemon.history_max {
        keys.push("daemon.history_max");
        new.daemon.history_max = current.daemon.history_max;
    }
    if new.daemon.metrics_listen != current.daemon.metrics_listen {
        keys.push("daemon.metrics_listen");
        new.daemon.metrics_listen = current.daemon.metrics_listen.clone();
    }
    if new.daemon.status_listen != current.daemon.status_listen {
        keys.push("daemon.status_listen");
        new.daemon.status_listen = current.daemon.status_listen.clone();
    }
    if !keys.is_empty() {
        warn!(node = %node, keys = ?keys,
            "settings changed that take effect at the next restart, not on reload: this daemon keeps the values it started with (`systemctl restart solocron` applies them)");
    }
}

/// The keys of `[redis]` (dotted, as `check` names them) whose values
/// differ between `old` and `new`. A change of mode names both server
/// keys; a password or certificate file whose content changed is named too.
fn redis_changes(old: &RedisConfig, new: &RedisConfig) -> Vec<&'static str> {
    let mut keys = Vec::new();
    match (&old.mode, &new.mode) {
        (RedisMode::Single, RedisMode::Single) => {
            if old.url != new.url {
                keys.push("redis.url");
            }
        }
        (
            RedisMode::Sentinel {
                master,
                urls,
                password,
            },
            RedisMode::Sentinel {
                master: new_master,
                urls: new_urls,
                password: new_password,
            },
        ) => {
            if master != new_master {
                keys.push("redis.sentinel.master");
            }
            if urls != new_urls {
                keys.push("redis.sentinel.urls");
            }
            if password != new_password {
                keys.push("redis.sentinel.password_file");
            }
        }
        (RedisMode::Cluster { urls }, RedisMode::Cluster { urls: new_urls }) => {
            if urls != new_urls {
                keys.push("redis.cluster");
            }
        }
        (RedisMode::Redlock { urls }, RedisMode::Redlock { urls: new_urls }) => {
            if urls != new_urls {
                keys.push("redis.redlock");
            }
        }
        (old_mode, new_mode) => {
            keys.push(server_key(old_mode));
            keys.push(server_key(new_mode));
        }
    }
    let changed = [
        (
            "redis.wait_replicas",
            old.wait_replicas != new.wait_replicas,
        ),
        ("redis.wait_timeout", old.wait_timeout != new.wait_timeout),
        ("redis.username", old.username != new.username),
        ("redis.password_file", old.password != new.password),
        ("redis.key_prefix", old.key_prefix != new.key_prefix),
        ("redis.tls_ca_file", old.tls.ca != new.tls.ca),
        ("redis.tls_cert_file", client_cert(old) != client_cert(new)),
        ("redis.tls_key_file", client_key(old) != client_key(new)),
    ];
    keys.extend(
        changed
            .iter()
            .filter(|(_, differs)| *differs)
            .map(|(key, _)| *key),
    );
    keys
}

fn client_cert(redis: &RedisConfig) -> Option<&[u8]> {
    redis
        .tls
        .client
        .as_ref()
        .map(|client| client.cert.as_slice())
}

fn client_key(redis: &RedisConfig) -> Option<&[u8]> {
    redis
        .tls
        .client
        .as_ref()
        .map(|client| client.key.as_slice())
}

/// The `[redis]` key that selects `mode`.
fn server_key(mode: &RedisMode) -> &'static str {
    match mode {
        RedisMode::Single => "redis.url",
        RedisMode::Sentinel { .. } => "redis.sentinel",
        RedisMode::Cluster { .. } => "redis.cluster",
        RedisMode::Redlock { .. } => "redis.redlock",
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::{ClientIdentity, DEFAULT_WAIT_TIMEOUT};

    /// A change made to a config in a case of the tests.
    type Change = fn(&mut RedisConfig);

    fn single() -> RedisConfig {
        RedisConfig {
            url: "redis://:secret@10.0.0.5:6379".to_string(),
            mode: RedisMode::Single,
            wait_replicas: 0,
            wait_timeout: DEFAULT_WAIT_TIMEOUT,
            username: None,
            password: None,
            key_prefix: "solocron".to_string(),
            tls: Default::default(),
        }
    }

    fn sentinel(urls: &[&str]) -> RedisConfig {
        RedisConfig {
            url: String::new(),
            mode: RedisMode::Sentinel {
                master: "solocron".to_string(),
                urls: urls.iter().map(|url| url.to_string()).collect(),
                password: None,
            },
            wait_replicas: 1,
            ..single()
        }
    }

    #[test]
    fn every_key_of_redis_that_differs_is_named() {
        assert!(redis_changes(&single(), &single()).is_empty());
        let cases: Vec<(Change, &[&str])> = vec![
            (
                |r| r.url = "redis://:other@10.0.0.5:6379".into(),
                &["redis.url"],
            ),
            (|r| r.wait_replicas = 1, &["redis.wait_replicas"]),
            (
                |r| r.wait_timeout = Duration::from_secs(1),
                &["redis.wait_timeout"],
            ),
            (|r| r.username = Some("u".into()), &["redis.username"]),
            (
                |r| r.password = Some("new".into()),
                &["redis.password_file"],
            ),
            (|r| r.key_prefix = "other".into(), &["redis.key_prefix"]),
            (|r| r.tls.ca = Some(b"ca".to_vec()), &["redis.tls_ca_file"]),
            (
                |r| {
                    r.tls.client = Some(ClientIdentity {
                        cert: b"cert".to_vec(),
                        key: b"key".to_vec(),
                    })
                },
                &["redis.tls_cert_file", "redis.tls_key_file"],
            ),
            (
                |r| {
                    r.wait_replicas = 2;
                    r.wait_timeout = Duration::from_millis(500);
                },
                &["redis.wait_replicas", "redis.wait_timeout"],
            ),
        ];
        for (change, keys) in cases {
            let mut new = single();
            change(&mut new);
            assert_eq!(redis_changes(&single(), &new), keys);
        }
    }

    #[test]
    fn a_changed_mode_or_url_list_is_named_by_its_keys() {
        let three = sentinel(&["redis://a:26379", "redis://b:26379", "redis://c:26379"]);
        let two = sentinel(&["redis://a:26379", "redis://b:26379"]);
        assert_eq!(redis_changes(&three, &two), ["redis.sentinel.urls"]);
        let mut renamed = three.clone();
        if let RedisMode::Sentinel {
            master, password, ..
        } = &mut renamed.mode
        {
            *master = "other".to_string();
            *password = Some("x".to_string());
        }
        assert_eq!(
            redis_changes(&three, &renamed),
            ["redis.sentinel.master", "redis.sentinel.password_file"]
        );
        // Sentinel's default wait_replicas is 1, url mode's 0.
        assert_eq!(
            redis_changes(&single(), &three),
            ["redis.url", "redis.sentinel", "redis.wait_replicas"]
        );
        let cluster = |urls: &[&str]| RedisConfig {
            mode: RedisMode::Cluster {
                urls: urls.iter().map(|url| url.to_string()).collect(),
            },
            ..single()
        };
        let redlock = |urls: &[&str]| RedisConfig {
            mode: RedisMode::Redlock {
                urls: urls.iter().map(|url| url.to_string()).collect(),
            },
            ..single()
        };
        assert_eq!(
            redis_changes(&cluster(&["redis://a"]), &cluster(&["redis://b"])),
            ["redis.cluster"]
        );
        assert_eq!(
            redis_changes(&redlock(&["redis://a"]), &redlock(&["redis://b"])),
            ["redis.redlock"]
        );
        assert_eq!(
            redis_changes(&cluster(&["redis://a"]), &redlock(&["redis://a"])),
            ["redis.cluster", "redis.redlock"]
        );
    }
}
