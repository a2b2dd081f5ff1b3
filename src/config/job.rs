//! `[defaults]` and `[jobs.NAME]`: the keys of one job, and how a job and
//! the defaults become a validated [`Job`].
//!
//! Each table is read on its own into [`JobFields`] (every key optional),
//! so a bad value in `[defaults]` is reported once, at its own line. A job
//! then takes each key from its own table, else from `[defaults]`, else
//! the built-in default; `env` maps merge key by key (the job's value wins)
//! and `http` is taken whole, never merged field by field. Exactly one of
//! `command`, `argv`, `http` must be set after that merge.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use chrono_tz::Tz;
use toml::de::DeValue;

use super::error::ConfigError;
use super::http::http_action;
use super::interpolate::{interpolate, is_env_name};
use super::model::{Action, HttpAction, Job, OnLockLost, Overlap};
use super::table::{Table, closest};
use crate::schedule::{Schedule, ScheduleError};

pub(super) use super::keys::JOB as JOB_KEYS;

const ACTIONS: [&str; 3] = ["command", "argv", "http"];
const ONE_SECOND: Duration = Duration::from_secs(1);

/// The keys of one table, parsed and checked one by one.
#[derive(Default)]
pub(super) struct JobFields {
    /// Parsed in UTC; the job moves it to its own zone.
    schedule: Option<Schedule>,
    timezone: Option<Tz>,
    lock_ttl: Option<Duration>,
    timeout: Option<Duration>,
    starting_deadline: Option<Duration>,
    on_lock_lost: Option<OnLockLost>,
    overlap: Option<Overlap>,
    command: Option<String>,
    argv: Option<Vec<String>>,
    http: Option<HttpAction>,
    env: BTreeMap<String, String>,
    working_dir: Option<PathBuf>,
}

impl JobFields {
    /// Reads and checks every key of `table`, interpolating from `env`.
    pub fn read(
        table: &Table<'_, '_>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<JobFields, ConfigError> {
        table.check_keys(JOB_KEYS)?;
        let mut fields = JobFields::default();
        if let Some(expr) = table.string("schedule")? {
            // Parsed here, in UTC, so the error points at this line; the
            // job then moves it to its own zone.
            let schedule = Schedule::parse(expr.get_ref(), Tz::UTC)
                .map_err(|err| table.error(expr.span(), "schedule", describe(&err)))?;
            fields.schedule = Some(schedule);
        }
        if let Some(name) = table.string("timezone")? {
            fields.timezone = Some(
                time_zone(name.get_ref())
                    .map_err(|message| table.error(name.span(), "timezone", message))?,
            );
        }
        fields.lock_ttl = table.duration("lock_ttl", ONE_SECOND)?;
        fields.timeout = table.duration("timeout", ONE_SECOND)?;
        fields.starting_deadline = table.duration("starting_deadline", Duration::from_millis(1))?;
        if let Some(value) = table.string("on_lock_lost")? {
            fields.on_lock_lost = Some(match *value.get_ref() {
                "kill" => OnLockLost::Kill,
                "continue" => OnLockLost::Continue,
                other => {
                    let message = format!("expected `kill` or `continue`, found `{other}`");
                    return Err(table.error(value.span(), "on_lock_lost", message));
                }
            });
        }
        if let Some(value) = table.string("overlap")? {
            if *value.get_ref() != "skip" {
                let message = format!("the only policy is `skip`, found `{}`", value.get_ref());
                return Err(table.error(value.span(), "overlap", message));
            }
            fields.overlap = Some(Overlap::Skip);
        }
        fields.read_actions(table, env)?;
        if let Some(env_table) = table.table("env")? {
            fields.env = read_env(&env_table, env)?;
        }
        if let Some(dir) = table.string("working_dir")? {
            if dir.get_ref().is_empty() {
                return Err(table.error(dir.span(), "working_dir", "must not be empty"));
            }
            fields.working_dir = Some(PathBuf::from(*dir.get_ref()));
        }
        Ok(fields)
    }

    fn read_actions(
        &mut self,
        table: &Table<'_, '_>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        if let Some(command) = table.string("command")? {
            if command.get_ref().trim().is_empty() {
                return Err(table.error(command.span(), "command", "must not be empty"));
            }
            let resolved = interpolate(command.get_ref(), env)
                .map_err(|err| table.error(command.span(), "command", err.describe()))?;
            if resolved.trim().is_empty() {
                // `sh -c ""` would "succeed" every time, hiding an unset value.
                let message = format!(
                    "`{}` is empty once its variables are filled in",
                    command.get_ref()
                );
                return Err(table.error(command.span(), "command", message));
            }
            self.command = Some(resolved);
        }
        if let Some(value) = table.get("argv") {
            self.argv = Some(read_argv(table, value)?);
        }
        if let Some(http) = table.table("http")? {
            self.http = Some(http_action(&http, env)?);
        }
        Ok(())
    }

    fn has_action(&self, action: &str) -> bool {
        match action {
            "command" => self.command.is_some(),
            "argv" => self.argv.is_some(),
            _ => self.http.is_some(),
        }
    }

    fn take_action(&mut self) -> Option<Action> {
        let http = self.http.take().map(|http| Action::Http(Box::new(http)));
        let argv = self.argv.take().map(Action::Argv);
        self.command.take().map(Action::Command).or(argv).or(http)
    }

    fn action(&self) -> Option<Action> {
        let http = self.http.clone().map(|http| Action::Http(Box::new(http)));
        let argv = self.argv.clone().map(Action::Argv);
        self.command.clone().map(Action::Command).or(argv).or(http)
    }

    /// The job `name` from its own `fields` over `defaults`; `table` is the
    /// job's section, where errors about the whole job point.
    pub fn into_job(
        mut self,
        name: &str,
        table: &Table<'_, '_>,
        defaults: &JobFields,
    ) -> Result<Job, ConfigError> {
        let set: Vec<String> = ACTIONS
            .iter()
            .filter_map(
                |action| match (self.has_action(action), defaults.has_action(action)) {
                    (true, _) => Some(format!("`{action}`")),
                    (false, true) => Some(format!("`{action}` (from [defaults])")),
                    (false, false) => None,
                },
            )
            .collect();
        if set.len() > 1 {
            let message = format!(
                "a job has exactly one of `command`, `argv` or `http`; found {}",
                set.join(" and ")
            );
            return Err(table.error_here(message));
        }
        let Some(utc) = self.schedule.as_ref().or(defaults.schedule.as_ref()) else {
            return Err(table.error_here("`schedule` is required"));
        };
        let schedule = utc.with_timezone(self.timezone.or(defaults.timezone).unwrap_or(Tz::UTC));
        let Some(action) = self.take_action().or_else(|| defaults.action()) else {
            let message = "no action: set one of `command`, `argv` or `http`";
            return Err(table.error_here(message));
        };
        let mut env = defaults.env.clone();
        env.extend(self.env);
        Ok(Job {
            name: name.to_string(),
            schedule,
            lock_ttl: self
                .lock_ttl
                .or(defaults.lock_ttl)
                .unwrap_or(Duration::from_secs(30)),
            timeout: Some(
                self.timeout
                    .or(defaults.timeout)
                    .unwrap_or(Duration::from_secs(3600)),
            ),
            starting_deadline: self
                .starting_deadline
                .or(defaults.starting_deadline)
                .unwrap_or(Duration::from_secs(60)),
            on_lock_lost: self
                .on_lock_lost
                .or(defaults.on_lock_lost)
                .unwrap_or(OnLockLost::Kill),
            overlap: self.overlap.or(defaults.overlap).unwrap_or(Overlap::Skip),
            action,
            env,
            working_dir: self.working_dir.or_else(|| defaults.working_dir.clone()),
            output_log_max: super::model::DEFAULT_OUTPUT_LOG_MAX,
        })
    }
}

/// A schedule error as the rest of a `[jobs.x] `schedule`: ` message.
fn describe(err: &ScheduleError) -> String {
    match err {
        ScheduleError::Invalid { .. } => err.to_string(),
        ScheduleError::NeverFires { expr } => {
            format!("`{expr}` never fires: no date matches it")
        }
    }
}

/// `Err` is the message for a name that is not an IANA time zone.
fn time_zone(name: &str) -> Result<Tz, String> {
    if let Ok(tz) = name.parse::<Tz>() {
        return Ok(tz);
    }
    let known = chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name());
    Err(match closest(name, known) {
        Some(close) => format!("unknown time zone `{name}`; did you mean `{close}`?"),
        None => format!("unknown time zone `{name}`; use an IANA name such as `Europe/Berlin`"),
    })
}

fn read_argv(
    table: &Table<'_, '_>,
    value: &super::table::Value<'_>,
) -> Result<Vec<String>, ConfigError> {
    let what = "an array of strings like [\"/usr/bin/logrotate\", \"/etc/logrotate.conf\"]";
    let DeValue::Array(items) = value.get_ref() else {
        return Err(table.expected("argv", value, what));
    };
    let mut argv = Vec::with_capacity(items.len());
    for item in items.iter() {
        let DeValue::String(arg) = item.get_ref() else {
            return Err(table.expected("argv", item, "a string"));
        };
        argv.push(arg.to_string());
    }
    match argv.first() {
        None => Err(table.error(value.span(), "argv", "must name a program; it is empty")),
        Some(program) if program.is_empty() => {
            Err(table.error(value.span(), "argv", "the program (first element) is empty"))
        }
        Some(_) => Ok(argv),
    }
}

fn read_env(
    table: &Table<'_, '_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for (key, value) in table.in_file_order() {
        let name: &str = key.get_ref();
        if !is_env_name(name) {
            let message =
                "not a variable name: use letters, digits and `_`, not starting with a digit";
            return Err(table.error(key.span(), name, message));
        }
        if name.starts_with("SOLOCRON_") {
            let message = "`SOLOCRON_` variables are set by solocron for each run";
            return Err(table.error(key.span(), name, message));
        }
        let DeValue::String(template) = value.get_ref() else {
            return Err(table.expected(name, value, "a string"));
        };
        let resolved = interpolate(template, env)
            .map_err(|err| table.error(value.span(), name, err.describe()))?;
        out.insert(name.to_string(), resolved);
    }
    Ok(out)
}
