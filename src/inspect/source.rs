//! Where `status` and `history` read from: a Redis server, and the jobs of
//! a config file when one can be read.
//!
//! On-call staff often have no readable `jobs.toml` (it is `0640
//! root:solocron` and its `${VAR}` values are the service's secrets), but
//! they know the Redis URL. So the file is optional for these two commands:
//! it is read without its `${VAR}` values ([`config::load_for_inspection`]),
//! and if it cannot be read at all while `--redis` is given, the commands
//! go on without it, with a note on stderr, and take the job list from the
//! live nodes' registry entries instead. A file that is there but broken is
//! still an error: it is what the operator pointed at, and guessing past it
//! would hide the mistake.

use std::path::Path;

use crate::config::{self, Config, ConfigError, RedisConfig};
use crate::registry::NodeInfo;

/// The key prefix without a config (the default of `[redis] key_prefix`).
pub const DEFAULT_KEY_PREFIX: &str = "solocron";

/// What `status` and `history` read.
#[derive(Debug, Clone)]
pub struct Source {
    /// The server and key prefix to read, `--redis` and `--key-prefix`
    /// applied.
    pub redis: RedisConfig,
    /// The config, if one was read; `None`: the jobs come from the live
    /// nodes.
    pub config: Option<Config>,
}

impl Source {
    /// Reads the config at `path` (without `${VAR}` values) and applies
    /// `redis` (a URL) and `key_prefix` over it. If the file cannot be
    /// read and `redis` is given, the source has no config (a note says so
    /// on stderr). `Err`: the file is invalid, or unreadable without
    /// `--redis`, or `--key-prefix` is empty.
    pub fn resolve(
        path: &Path,
        redis: Option<&str>,
        key_prefix: Option<&str>,
    ) -> anyhow::Result<Source> {
        if key_prefix.is_some_and(|prefix| prefix.trim().is_empty()) {
            anyhow::bail!(
                "`--key-prefix` is empty; leave it out to use the config's (or `solocron`)"
            );
        }
        match config::load_for_inspection(path) {
            Ok(mut config) => {
                if let Some(url) = redis {
                    config.redis.use_url(url);
                }
                if let Some(prefix) = key_prefix {
                    config.redis.key_prefix = prefix.to_string();
                }
                Ok(Source {
                    redis: config.redis.clone(),
                    config: Some(config),
                })
            }
            Err(ConfigError::Read { path, error }) => {
                let Some(url) = redis else {
                    anyhow::bail!(
                        "cannot read `{}`: {error}; pass `--config PATH`, or `--redis URL` \
                         to read Redis without a config",
                        path.display()
                    );
                };
                let prefix = key_prefix.unwrap_or(DEFAULT_KEY_PREFIX);
                note(&format!(
                    "cannot read `{}` ({error}); without a config, the jobs are those \
                     the live nodes publish under key prefix `{prefix}`",
                    path.display()
                ));
                Ok(Source::without_config(url, prefix))
            }
            Err(err) => Err(err.into()),
        }
    }

    /// Redis at `url` under `key_prefix`, without a config.
    pub fn without_config(url: &str, key_prefix: &str) -> Source {
        Source {
            redis: RedisConfig {
                mode: crate::config::RedisMode::Single,
                wait_replicas: 0,
                wait_timeout: crate::config::DEFAULT_WAIT_TIMEOUT,
                username: None,
                url: url.to_string(),
                password: None,
                key_prefix: key_prefix.to_string(),
                tls: Default::default(),
            },
            config: None,
        }
    }

    /// Whether the config lists a job of this name.
    pub fn has_job(&self, name: &str) -> bool {
        self.config
            .as_ref()
            .is_some_and(|config| config.jobs.iter().any(|job| job.name == name))
    }

    /// "not in `PATH`" or "no config was read", for messages.
    pub fn config_words(&self) -> String {
        match &self.config {
            Some(config) => format!("not in `{}`", config.path.display()),
            None => "no config was read".to_string(),
        }
    }
}

/// Every job the live `nodes` run, by name, once each.
pub fn node_jobs(nodes: &[NodeInfo]) -> Vec<String> {
    let mut names: Vec<String> = nodes
        .iter()
        .flat_map(|node| node.jobs.keys().cloned())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The candidate closest to `typed`, if any is close enough to be a typo
/// (the same measure as the config's "did you mean").
pub fn closest<'c>(typed: &str, candidates: impl Iterator<Item = &'c str>) -> Option<&'c str> {
    candidates
        .map(|candidate| (strsim::jaro_winkler(typed, candidate), candidate))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate)
}

/// "did you mean `NAME`?" for the job name closest to `typed` ([`closest`]),
/// else `otherwise`: the end of every "unknown job" error.
pub fn job_hint<'c>(
    typed: &str,
    known: impl Iterator<Item = &'c str>,
    otherwise: impl FnOnce() -> String,
) -> String {
    match closest(typed, known) {
        Some(near) => format!("did you mean `{near}`?"),
        None => otherwise(),
    }
}

/// `note: TEXT` on stderr (a JSON object with `--log-format json`,
/// [`crate::logging::tell`]); a closed stderr is not worth failing for.
pub fn note(text: &str) {
    crate::logging::to_stderr(&format!("note: {text}\n"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_is_fine_with_redis_and_an_error_without() {
        let missing = Path::new("/nonexistent/solocron/jobs.toml");
        let source = Source::resolve(missing, Some("redis://127.0.0.1:1/"), None)
            .expect("no config needed with --redis");
        assert!(source.config.is_none());
        assert_eq!(source.redis.key_prefix, "solocron");
        let source = Source::resolve(missing, Some("redis://127.0.0.1:1/"), Some("other"))
            .expect("no config needed with --redis");
        assert_eq!(source.redis.key_prefix, "other");
        let err = Source::resolve(missing, None, None).expect_err("nothing to read");
        let text = format!("{err:#}");
        assert!(text.contains("/nonexistent/solocron/jobs.toml"), "{text}");
        assert!(text.contains("--redis URL"), "{text}");
        assert!(Source::resolve(missing, Some("redis://x/"), Some(" ")).is_err());
    }

    #[test]
    fn suggestions_only_for_near_misses() {
        let jobs = ["nightly-report", "rotate", "warm-cache"];
        assert_eq!(
            closest("nightly-reprot", jobs.iter().copied()),
            Some("nightly-report")
        );
        assert_eq!(closest("backup", jobs.iter().copied()), None);
    }
}
