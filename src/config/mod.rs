//! `jobs.toml` -> validated [`Config`] (SPEC §4).
//!
//! [`load`] reads the file and [`parse`] checks every rule at once, so a bad
//! file is refused whole at start or on reload (the old schedule keeps
//! running) and never half-applied. Every error a user can cause names the
//! file, line, column and key, and shows the line (see [`ConfigError`]).
//! `${VAR}` values are filled in here, from the environment the caller
//! passes, which keeps [`parse`] pure for tests.
//!
//! Files: `error` (the error type and span -> line/column/snippet),
//! `table` (reading one TOML table), `sections` (`[redis]`, `[daemon]`),
//! `tls` (the `[redis]` certificate files), `job` (`[defaults]`,
//! `[jobs.NAME]`), `http`, `interpolate`; the validated
//! types live in `model`.

mod error;
mod fingerprint;
mod http;
mod interpolate;
mod job;
pub mod keys;
mod model;
mod sections;
mod table;
mod tls;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use toml::de::{DeTable, DeValue};

pub use error::{ConfigError, Position, locate};
pub use model::*;
pub use sections::{DEFAULT_KEY_PREFIX, DEFAULT_REDIS_URL};

use error::Source;
use job::JobFields;
use table::{Table, display_key};

use keys::TOP as TOP_KEYS;

/// Where `jobs.toml` is read from unless `--config` / `SOLOCRON_CONFIG` says
/// otherwise: `/etc/solocron/jobs.toml`.
pub fn default_path() -> PathBuf {
    PathBuf::from("/etc/solocron/jobs.toml")
}

/// Reads and validates `path`, filling in `${VAR}` from the process
/// environment. `Err` names the file (and line, column, key when the
/// content is at fault); nothing is applied on error.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    parse(&text, path, &|name| std::env::var(name).ok())
}

/// Reads `path` for the read-only commands (`status`, `history`): `${VAR}`
/// values that are not set do not matter there (on-call staff may not have
/// the jobs' secrets), so they are not an error.
pub fn load_for_inspection(path: &Path) -> Result<Config, ConfigError> {
    load(path)
}

/// Validates `text`, read from `path` (used in messages and to find a
/// relative `password_file`), with `env` answering `${VAR}` look-ups.
/// Jobs come out in file order; zero jobs is a valid config.
pub fn parse(
    text: &str,
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let src = Source { path, text };
    let document = DeTable::parse(text).map_err(|err| src.syntax(&err))?;
    let root = Table {
        src: &src,
        entries: document.get_ref(),
        span: 0..0,
        name: "the top level".to_string(),
        owner: String::new(),
        prefix: String::new(),
        path: String::new(),
    };
    root.check_keys(TOP_KEYS)?;
    let redis = section(&root, "redis")?;
    let daemon = section(&root, "daemon")?;
    let defaults = match section(&root, "defaults")? {
        Some(defaults) => JobFields::read(&defaults, env)?,
        None => JobFields::default(),
    };
    Ok(Config {
        path: path.to_path_buf(),
        redis: sections::redis(redis.as_ref(), path)?,
        daemon: sections::daemon(daemon.as_ref())?,
        jobs: jobs(&root, &defaults, env)?,
        env: Default::default(),
        warnings: Vec::new(),
    })
}

/// The top-level table `key`, which must be a table if present.
fn section<'a, 'i>(root: &Table<'a, 'i>, key: &str) -> Result<Option<Table<'a, 'i>>, ConfigError> {
    let Some(value) = root.get(key) else {
        return Ok(None);
    };
    match value.get_ref() {
        DeValue::Table(entries) => Ok(Some(Table::section(
            root.src,
            entries,
            value.span(),
            key.to_string(),
        ))),
        _ => Err(root.expected(key, value, &format!("a [{key}] table"))),
    }
}

fn jobs(
    root: &Table<'_, '_>,
    defaults: &JobFields,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Arc<Job>>, ConfigError> {
    let Some(all) = section(root, "jobs")? else {
        return Ok(Vec::new());
    };
    let schedules = all
        .entries
        .values()
        .filter_map(|value| match value.get_ref() {
            DeValue::Table(job) => match job.get("schedule").map(|expr| expr.get_ref()) {
                Some(DeValue::String(expr)) => Some(expr.as_ref()),
                _ => None,
            },
            _ => None,
        });
    let _parsed = crate::schedule::parse_in_parallel(schedules);
    let mut jobs = Vec::with_capacity(all.entries.len());
    for (key, value) in all.in_file_order() {
        let name: &str = key.get_ref();
        let path = format!("jobs.{}", display_key(name));
        if !is_job_name(name) {
            let message = format!(
                "invalid job name `{name}` in [{path}]: use 1 to 64 of `A-Z a-z 0-9 _ . -`"
            );
            return Err(root.src.invalid(key.span(), path, message));
        }
        let DeValue::Table(entries) = value.get_ref() else {
            let message = format!(
                "[{path}] must be a table, found {}",
                value.get_ref().type_str()
            );
            return Err(root.src.invalid(value.span(), path, message));
        };
        let table = Table::section(root.src, entries, value.span(), path);
        let fields = JobFields::read(&table, env)?;
        jobs.push(Arc::new(fields.into_job(name, &table, defaults)?));
    }
    Ok(jobs)
}

/// `[A-Za-z0-9_.-]{1,64}`.
fn is_job_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

#[cfg(test)]
mod tests;
