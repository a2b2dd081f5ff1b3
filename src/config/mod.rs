//! `jobs.toml` -> validated [`Config`] (docs/configuration.md).
//!
//! [`load`] reads the file and [`parse`] checks every rule at once, so a bad
//! file is refused whole at start or on reload (the old schedule keeps
//! running) and never half-applied. Every error a user can cause names the
//! file, line, column and key, and shows the line (see [`ConfigError`]);
//! every error of a file is reported, not only the first (a TOML syntax
//! error stops the reading there). `${VAR}` values are filled in here, from
//! `[daemon] env_file` and then the environment the caller passes, which
//! keeps [`parse`] pure for tests.
//!
//! A file without `[redis]` naming a server, or without a job, is refused:
//! an empty or truncated file must not quietly stop a node's schedule.
//!
//! Files: `error` (the error type and span -> line/column/snippet),
//! `context` (what one load carries: `${VAR}` sources, errors, warnings),
//! `table` (reading one TOML table), `redis` (`[redis]`: the four
//! coordinator modes, their URLs, `sentinel`), `sections` (`[daemon]`),
//! `envfile` (`env_file`), `tls` (the `[redis]` certificate files), `job`
//! (`[defaults]`, `[jobs.NAME]`), `http`, `interpolate`, `warnings`,
//! `access` (whether the service user can read the files the config
//! names); the validated types live in `model`.

pub mod access;
mod calendars;
mod context;
mod envfile;
mod error;
mod fingerprint;
mod groups;
mod http;
mod interpolate;
mod job;
pub mod keys;
mod model;
mod notifier;
mod redis;
mod sections;
mod table;
mod tls;
mod warnings;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono_tz::Tz;
use toml::de::{DeTable, DeValue};

pub use error::{ConfigError, Position, StartRefused, locate};
pub use fingerprint::FingerprintCache;
pub use interpolate::{escape as escape_interpolation, is_env_name};
pub use job::time_zone;
pub use model::*;
pub use redis::DEFAULT_KEY_PREFIX;
pub use warnings::Warning;

use context::Context;
use error::Source;
use job::JobFields;
use table::{Table, display_key};

use keys::TOP as TOP_KEYS;

/// Where `jobs.toml` is read from unless `--config` / `SOLOCRON_CONFIG` says
/// otherwise: `/etc/solocron/jobs.toml`.
pub fn default_path() -> PathBuf {
    PathBuf::from("/etc/solocron/jobs.toml")
}

/// Reads and validates `path`, filling in `${VAR}` from its `env_file` and
/// the process environment. `Err` names the file (and line, column, key
/// when the content is at fault); nothing is applied on error. This is
/// what start-up, `check` and every reload call.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = read(path)?;
    parse(&text, path, &|name| std::env::var(name).ok())
}

/// Reads `path` for the read-only commands (`status`, `history`), which
/// must work for on-call staff who do not have the jobs' secrets
/// (docs/operations.md): see [`parse_for_inspection`].
pub fn load_for_inspection(path: &Path) -> Result<Config, ConfigError> {
    let text = read(path)?;
    parse_for_inspection(&text, path, &|name| std::env::var(name).ok())
}

fn read(path: &Path) -> Result<String, ConfigError> {
    read_text_file(path).map_err(|error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    })
}

/// The largest `jobs.toml`, env file or password file read (far above a
/// file of 10,000 jobs).
const MAX_FILE_BYTES: u64 = 64 << 20;

/// Reads a file of the config (`jobs.toml`, `env_file`, `password_file`)
/// of at most [`MAX_FILE_BYTES`]: a path naming a device that never ends
/// (`/dev/zero`, `/dev/urandom`) was read until the host ran out of
/// memory. `/dev/null` is an empty file, a pipe is read
/// (`check --config <(...)`).
pub(crate) fn read_text_file(path: &Path) -> std::io::Result<String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("larger than {} MiB", MAX_FILE_BYTES >> 20),
        ));
    }
    String::from_utf8(bytes).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )
    })
}

/// Validates `text`, read from `path` (used in messages and to find a
/// relative `password_file` or `env_file`), with `env` answering `${VAR}`
/// look-ups the env file does not. Jobs come out in file order. `Err`
/// holds every error found (a [`ConfigError::Several`] when there are
/// more than one).
pub fn parse(
    text: &str,
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    parse_with(text, path, &Context::new(env, false))
}

/// Like [`parse`], for `status` and `history`: a `${VAR}` that is not set
/// keeps its text as written instead of being an error, the checks of
/// values that depend on it (an `http.url` with an unset variable) are
/// skipped, and an `env_file` or `password_file` that cannot be read is
/// taken as absent (then there is no password). Everything else (syntax,
/// schedules, names, `[redis]` and a job present) is checked as usual; no
/// warnings are computed.
pub fn parse_for_inspection(
    text: &str,
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    parse_with(text, path, &Context::new(env, true))
}

fn parse_with(text: &str, path: &Path, ctx: &Context<'_>) -> Result<Config, ConfigError> {
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
    root.check_keys(TOP_KEYS, ctx);
    let redis_table = ctx.keep(section(&root, "redis")).flatten();
    let daemon_table = ctx.keep(section(&root, "daemon")).flatten();
    // The env file first: its values fill `${VAR}` everywhere else.
    let (daemon, pairs) = sections::daemon(daemon_table.as_ref(), path, ctx);
    ctx.set_file_env(pairs);
    let redis = redis_table
        .as_ref()
        .map(|table| redis::read(table, path, ctx));
    ctx.set_groups(groups::read(&root, ctx));
    ctx.set_calendars(calendars::read(&root, path, ctx));
    let defaults = match ctx.keep(section(&root, "defaults")).flatten() {
        Some(defaults) => JobFields::read(&defaults, ctx),
        None => JobFields::default(),
    };
    let jobs = jobs(&root, &defaults, ctx);
    let groups = ctx.take_groups().finish(&jobs, ctx);
    sections::warn_history_size(daemon_table.as_ref(), &root, &daemon, jobs.len(), ctx);
    require_redis_and_a_job(&root, ctx);
    if let Some(err) = ConfigError::combine(path, ctx.take_errors()) {
        return Err(err);
    }
    let Some(redis) = redis else {
        // A missing `[redis]` was recorded above; this only keeps the
        // compiler from trusting that.
        return Err(no_redis(root.src));
    };
    Ok(Config {
        path: path.to_path_buf(),
        redis,
        daemon,
        jobs,
        groups,
        env: ctx.take_file_env(),
        filled: ctx.take_filled(),
        warnings: ctx.take_warnings(),
        files: ctx.take_files(),
    })
}

/// A line of the template the Debian package installs as jobs.toml
/// (`packaging/jobs.toml`): a file that still has it is being filled in,
/// not truncated, and the errors below say what to add.
pub const TEMPLATE_MARKER: &str = "# As shipped this file is refused on purpose";

/// Records the errors of a file without `[redis]` or without a job: what
/// an empty or truncated file looks like, or the installed template before
/// it is edited.
fn require_redis_and_a_job(root: &Table<'_, '_>, ctx: &Context<'_>) {
    let src = root.src;
    let template = src.text.contains(TEMPLATE_MARKER);
    let jobs = root.get("jobs");
    let no_jobs = match jobs.map(|jobs| jobs.get_ref()) {
        None => true,
        Some(DeValue::Table(entries)) => entries.is_empty(),
        Some(_) => false, // not a table: already an error
    };
    if root.get("redis").is_none() && jobs.is_none() {
        let what = if root.entries.is_empty() {
            "the file is empty"
        } else {
            "the file has no `[redis]` section and no job"
        };
        let message = if template {
            format!(
                "the file is the installed template, which has no `[redis]` section and no job \
                 yet: add {REDIS_EXAMPLE} naming this fleet's Redis and at least one \
                 `[jobs.NAME]` table (its comments show both)"
            )
        } else {
            format!(
                "{what}: it may be truncated; restore it, or write {REDIS_EXAMPLE} and at least \
                 one `[jobs.NAME]` table"
            )
        };
        ctx.error(src.invalid(0..0, String::new(), message));
        return;
    }
    if root.get("redis").is_none() {
        ctx.error(no_redis(src));
    }
    if no_jobs {
        let message = if template {
            "no job: the file defines no `[jobs.NAME]` table, so this node would run nothing; \
             add one (the template's comments show examples)"
        } else {
            "no job: the file defines no `[jobs.NAME]` table, so this node would run nothing; \
             add a job, or restore the file if it was truncated"
        };
        let span = match jobs {
            Some(jobs) => jobs.span(),
            None => {
                let end = src.text.trim_end().len();
                end..end
            }
        };
        ctx.error(src.invalid(span, "jobs".to_string(), message.to_string()));
    }
}

fn no_redis(src: &Source<'_>) -> ConfigError {
    let truncated = if src.text.contains(TEMPLATE_MARKER) {
        ""
    } else {
        " (the file may be truncated)"
    };
    let message =
        format!("no `[redis]` section: add {REDIS_EXAMPLE} naming this fleet's Redis{truncated}");
    src.invalid(0..0, "redis".to_string(), message)
}

/// How a message shows a minimal `[redis]`.
const REDIS_EXAMPLE: &str = "`[redis]` with `url = \"redis://10.0.0.5:6379\"`";

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

/// Every job in file order; a job with an error is left out (the error is
/// in `ctx`) and the next one is read all the same.
fn jobs(root: &Table<'_, '_>, defaults: &JobFields, ctx: &Context<'_>) -> Vec<Arc<Job>> {
    let Some(all) = ctx.keep(section(root, "jobs")).flatten() else {
        return Vec::new();
    };
    // Each job's expression with the zone it is read in (an unknown zone
    // is the loader's to report; its job is not built).
    let default_zone = defaults.timezone().unwrap_or(Tz::UTC);
    let schedules = all
        .entries
        .values()
        .filter_map(|value| match value.get_ref() {
            DeValue::Table(job) => {
                let DeValue::String(expr) = job.get("schedule")?.get_ref() else {
                    return None;
                };
                let zone = match job.get("timezone").map(|zone| zone.get_ref()) {
                    Some(DeValue::String(name)) => name.parse::<Tz>().ok()?,
                    _ => default_zone,
                };
                Some((expr.as_ref(), zone))
            }
            _ => None,
        });
    let _warm = crate::schedule::parse_in_parallel(schedules);
    let mut jobs = Vec::with_capacity(all.entries.len());
    for (key, value) in all.in_file_order() {
        let name: &str = key.get_ref();
        let path = format!("jobs.{}", display_key(name));
        if !is_job_name(name) {
            let message = format!(
                "invalid job name `{name}` in [{path}]: use 1 to 64 of `A-Z a-z 0-9 _ . -`"
            );
            ctx.error(root.src.invalid(key.span(), path, message));
            continue;
        }
        let DeValue::Table(entries) = value.get_ref() else {
            let message = format!(
                "[{path}] must be a table, found {}",
                value.get_ref().type_str()
            );
            ctx.error(root.src.invalid(value.span(), path, message));
            continue;
        };
        let table = Table::section(root.src, entries, value.span(), path);
        let fields = JobFields::read(&table, ctx);
        if let Some(job) = fields.into_job(name, &table, defaults, ctx) {
            jobs.push(Arc::new(job));
        }
    }
    jobs
}

/// One `[KIND.NAME]` table of [`named_tables`].
struct Named<'a, 'i> {
    name: String,
    /// Where the name is written (for warnings about the table).
    spot: warnings::Spot,
    table: Table<'a, 'i>,
}

/// The `[KIND.NAME]` tables under the top-level `kind` (`groups`,
/// `calendars`), in file order: each valid one, or (its error recorded in
/// `ctx`: a name that is not `[A-Za-z0-9_.-]{1,64}`, checked first, or a
/// value that is not a table) its name, so that what names it is not
/// reported again.
fn named_tables<'a, 'i>(
    root: &Table<'a, 'i>,
    kind: &str,
    what: &str,
    ctx: &Context<'_>,
) -> Vec<Result<Named<'a, 'i>, String>> {
    let Some(value) = root.get(kind) else {
        return Vec::new();
    };
    let DeValue::Table(entries) = value.get_ref() else {
        ctx.error(root.expected(kind, value, &format!("a [{kind}.NAME] table")));
        return Vec::new();
    };
    let all = Table::section(root.src, entries, value.span(), kind.to_string());
    let mut found = Vec::new();
    for (key, value) in all.in_file_order() {
        let name: &str = key.get_ref();
        let path = format!("{kind}.{}", display_key(name));
        if !is_job_name(name) {
            let message = format!(
                "invalid {what} name `{name}` in [{path}]: use 1 to 64 of `A-Z a-z 0-9 _ . -`"
            );
            ctx.error(root.src.invalid(key.span(), path, message));
            found.push(Err(name.to_string()));
            continue;
        }
        let DeValue::Table(entries) = value.get_ref() else {
            let message = format!(
                "[{path}] must be a table, found {}",
                value.get_ref().type_str()
            );
            ctx.error(root.src.invalid(value.span(), path, message));
            found.push(Err(name.to_string()));
            continue;
        };
        found.push(Ok(Named {
            name: name.to_string(),
            spot: all.spot(key.span(), name),
            table: Table::section(root.src, entries, value.span(), path),
        }));
    }
    found
}

/// Whether `name` may name a job (or a group, a calendar):
/// `[A-Za-z0-9_.-]{1,64}`.
pub fn is_job_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

#[cfg(test)]
mod tests;
