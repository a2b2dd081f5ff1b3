//! `[defaults]` and `[jobs.NAME]`: the keys of one job, and how a job and
//! the defaults become a validated [`Job`].
//!
//! Each table is read on its own into [`JobFields`] (every key optional),
//! so a bad value in `[defaults]` is reported once, at its own line. A job
//! then takes each key from its own table, else from `[defaults]`, else
//! the built-in default; `env` maps merge key by key (the job's value wins)
//! and `http` is taken whole, never merged field by field. Exactly one of
//! `command`, `argv`, `http` must be set after that merge.
//!
//! Every key is checked even after another one failed, and the checks of
//! the job as a whole (a schedule, one action) run only when every key of
//! the job and of `[defaults]` was fine: "`schedule` is required" after a
//! refused `schedule` would only confuse. So does the warning about
//! retries that can never start before the next occurrence (a backoff not
//! shorter than the schedule's shortest interval).

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono_tz::Tz;
use toml::de::DeValue;

use super::context::Context;
use super::error::ConfigError;
use super::http::http_action;
use super::interpolate::{Place, is_env_name};
use super::model::{
    Action, DEFAULT_OUTPUT_LOG_MAX, DEFAULT_RETRY_BACKOFF, HttpAction, Job, JobExtras, Notifier,
    OnLockLost, Overlap, splay_offset,
};
use super::notifier::read_notifier;
use super::table::{Table, closest};
use super::warnings::{self, Spot};
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
    output_log_max: Option<u64>,
    splay: Option<Duration>,
    retries: Option<u32>,
    retry_backoff: Option<Duration>,
    on_failure: Option<Arc<Notifier>>,
    on_success: Option<Arc<Notifier>>,
    max_silence: Option<Duration>,
    run_on: Option<Arc<crate::tags::RunOn>>,
    group: Option<Arc<super::model::Group>>,
    skip_during: Option<Vec<Arc<super::model::Calendar>>>,
    only_during: Option<Vec<Arc<super::model::Calendar>>>,
    /// Where `retries` and `retry_backoff` are written in this table, for
    /// the warning about retries that cannot happen.
    retries_at: Option<Spot>,
    retry_backoff_at: Option<Spot>,
    /// Some key of the table was refused (the error is recorded): the
    /// checks of the job as a whole would only repeat it.
    failed: bool,
}

impl JobFields {
    /// The `timezone` key's zone, if it was set and valid.
    pub(super) fn timezone(&self) -> Option<Tz> {
        self.timezone
    }

    /// Reads and checks every key of `table`, each on its own: an error
    /// goes to `ctx` and the next key is read all the same.
    pub fn read(table: &Table<'_, '_>, ctx: &Context<'_>) -> JobFields {
        let before = ctx.error_count();
        table.check_keys(JOB_KEYS, ctx);
        let mut fields = JobFields::default();
        if let Some(expr) = ctx.keep(table.string("schedule")).flatten() {
            // Parsed here, in UTC, so the error points at this line; the
            // job then moves it to its own zone.
            match Schedule::parse(expr.get_ref(), Tz::UTC) {
                Ok(schedule) => {
                    if schedule.days_match_either() {
                        let warning = warnings::days_match_either(expr.get_ref());
                        ctx.warn(table.warning(expr.span(), "schedule", warning));
                    }
                    fields.schedule = Some(schedule);
                }
                Err(err) => ctx.error(table.error(expr.span(), "schedule", describe(&err))),
            }
        }
        if let Some(name) = ctx.keep(table.string("timezone")).flatten() {
            match time_zone(name.get_ref()) {
                Ok(zone) => {
                    if let Some(warning) = warnings::fixed_offset_zone(name.get_ref()) {
                        ctx.warn(table.warning(name.span(), "timezone", warning));
                    }
                    fields.timezone = Some(zone);
                }
                Err(message) => ctx.error(table.error(name.span(), "timezone", message)),
            }
        }
        fields.lock_ttl = ctx.keep(table.duration("lock_ttl", ONE_SECOND)).flatten();
        fields.timeout = ctx.keep(table.duration("timeout", ONE_SECOND)).flatten();
        fields.starting_deadline = ctx
            .keep(table.duration("starting_deadline", Duration::from_millis(1)))
            .flatten();
        fields.on_lock_lost = ctx.keep(on_lock_lost(table)).flatten();
        fields.overlap = ctx.keep(overlap(table)).flatten();
        fields.output_log_max = ctx.keep(table.size("output_log_max")).flatten();
        fields.splay = ctx.keep(table.duration("splay", Duration::ZERO)).flatten();
        fields.retries = ctx.keep(retries(table)).flatten();
        fields.retry_backoff = ctx
            .keep(table.duration("retry_backoff", ONE_SECOND))
            .flatten();
        let spot = |key: &str| table.get(key).map(|value| table.spot(value.span(), key));
        fields.retries_at = fields.retries.and_then(|_| spot("retries"));
        fields.retry_backoff_at = fields.retry_backoff.and_then(|_| spot("retry_backoff"));
        fields.on_failure = read_notifier(table, "on_failure", ctx).map(Arc::new);
        fields.on_success = read_notifier(table, "on_success", ctx).map(Arc::new);
        fields.max_silence = ctx
            .keep(table.duration("max_silence", ONE_SECOND))
            .flatten();
        if let Some(value) = table.get("run_on") {
            fields.run_on = ctx.keep(read_run_on(table, value)).map(Arc::new);
        }
        if let Ok(group) = ctx.group_of(table) {
            fields.group = group;
        }
        for key in ["skip_during", "only_during"] {
            if table.get(key).is_none() {
                continue;
            }
            if let Ok(calendars) = ctx.calendars_of(table, key) {
                if key == "skip_during" {
                    fields.skip_during = Some(calendars);
                } else {
                    fields.only_during = Some(calendars);
                }
            }
        }
        if let Some(env_table) = ctx.keep(table.table("env")).flatten() {
            fields.env = read_env(&env_table, ctx);
        }
        fields.read_actions(table, ctx);
        if let Some(dir) = ctx.keep(table.string("working_dir")).flatten() {
            if dir.get_ref().is_empty() {
                ctx.error(table.error(dir.span(), "working_dir", "must not be empty"));
            } else if dir.get_ref().contains('\0') {
                let message = nul_problem(dir.get_ref());
                ctx.error(table.error(dir.span(), "working_dir", message));
            } else {
                let path = PathBuf::from(*dir.get_ref());
                if !ctx.inspect
                    && let Some(warning) = warnings::working_dir(&path)
                {
                    ctx.warn(table.warning(dir.span(), "working_dir", warning));
                }
                fields.working_dir = Some(path);
            }
        }
        fields.failed = ctx.error_count() > before;
        fields
    }

    fn read_actions(&mut self, table: &Table<'_, '_>, ctx: &Context<'_>) {
        if let Some(command) = ctx.keep(table.string("command")).flatten() {
            self.command = read_command(table, command.get_ref(), command.span(), ctx);
        }
        if let Some(value) = table.get("argv") {
            self.argv = ctx.keep(read_argv(table, value));
            if let Some(program) = self.argv.as_ref().and_then(|argv| argv.first())
                && !ctx.inspect
            {
                let path = self
                    .env
                    .get("PATH")
                    .cloned()
                    .or_else(|| ctx.var("PATH"))
                    .unwrap_or_else(|| warnings::DEFAULT_PATH.to_string());
                if let Some(warning) = ctx.program_warning(program, &path) {
                    ctx.warn(table.warning(value.span(), "argv", warning));
                }
            }
        }
        if let Some(http) = ctx.keep(table.table("http")).flatten() {
            self.http = http_action(&http, ctx);
        }
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
    /// job's section, where errors about the whole job point. `None` when
    /// the job or `[defaults]` had an error (already recorded) or the job
    /// as a whole breaks a rule (recorded here).
    pub fn into_job(
        mut self,
        name: &str,
        table: &Table<'_, '_>,
        defaults: &JobFields,
        ctx: &Context<'_>,
    ) -> Option<Job> {
        if self.failed || defaults.failed {
            return None;
        }
        let retry_spots = (self.retries_at.take(), self.retry_backoff_at.take());
        let before = ctx.error_count();
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
            ctx.error(table.error_here(message));
        }
        let utc = self.schedule.take().or_else(|| defaults.schedule.clone());
        if utc.is_none() {
            ctx.error(table.error_here("`schedule` is required"));
        }
        let action = self.take_action().or_else(|| defaults.action());
        if action.is_none() {
            let message = "no action: set one of `command`, `argv` or `http`";
            ctx.error(table.error_here(message));
        }
        let (Some(utc), Some(action)) = (utc, action) else {
            return None;
        };
        if ctx.error_count() > before {
            return None;
        }
        let splay = self.splay.or(defaults.splay).unwrap_or(Duration::ZERO);
        let schedule = utc.with_timezone(self.timezone.or(defaults.timezone).unwrap_or(Tz::UTC));
        let mut env = defaults.env.clone();
        env.extend(self.env);
        let extras = JobExtras {
            env,
            working_dir: self.working_dir.or_else(|| defaults.working_dir.clone()),
            splay,
            retry_backoff: self
                .retry_backoff
                .or(defaults.retry_backoff)
                .unwrap_or(DEFAULT_RETRY_BACKOFF),
            on_failure: self.on_failure.or_else(|| defaults.on_failure.clone()),
            on_success: self.on_success.or_else(|| defaults.on_success.clone()),
            max_silence: self.max_silence.or(defaults.max_silence),
            run_on: self.run_on.or_else(|| defaults.run_on.clone()),
            group: self.group.or_else(|| defaults.group.clone()),
            skip_during: self
                .skip_during
                .or_else(|| defaults.skip_during.clone())
                .unwrap_or_default(),
            only_during: self
                .only_during
                .or_else(|| defaults.only_during.clone())
                .unwrap_or_default(),
        };
        let job = Job {
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
            output_log_max: self
                .output_log_max
                .or(defaults.output_log_max)
                .unwrap_or(DEFAULT_OUTPUT_LOG_MAX),
            splay_offset: splay_offset(name, splay),
            retries: self.retries.or(defaults.retries).unwrap_or(0),
            extras: extras.shared(),
            fingerprint: Default::default(),
        };
        if !ctx.inspect {
            warn_unreachable_retries(&job, &table.name, retry_spots, defaults, ctx);
        }
        Some(job)
    }
}

/// Warns when `job`'s first retry waits as long as the shortest interval
/// between its occurrences or longer ([`warnings::retries`]): a retry
/// never starts once the next occurrence is due, so `retries` would do
/// nothing, silently, after such an occurrence. The warning points at the
/// job's own `retry_backoff`, else its own `retries` (the backoff comes
/// from elsewhere), else at those of `[defaults]`, naming the job.
/// `section` is the job's `[jobs.NAME]`; `own` are its own keys' spots.
fn warn_unreachable_retries(
    job: &Job,
    section: &str,
    own: (Option<Spot>, Option<Spot>),
    defaults: &JobFields,
    ctx: &Context<'_>,
) {
    if job.retries == 0 {
        return;
    }
    let backoff = job.extras.retry_backoff;
    let Some(shortest) = ctx
        .shortest_interval(&job.schedule, backoff)
        .filter(|shortest| backoff >= *shortest)
    else {
        return;
    };
    let shown = humantime::format_duration(backoff);
    let named_elsewhere = if defaults.retry_backoff_at.is_some() {
        format!("`retry_backoff` from [defaults] ({shown})")
    } else {
        format!("the default `retry_backoff` ({shown})")
    };
    let (own_retries, own_backoff) = own;
    let (spot, backoff_named, job_named) = match (own_backoff, own_retries) {
        (Some(spot), _) => (spot, shown.to_string(), None),
        (None, Some(spot)) => (spot, named_elsewhere, None),
        (None, None) => match (&defaults.retry_backoff_at, &defaults.retries_at) {
            (Some(spot), _) => (spot.clone(), shown.to_string(), Some(section)),
            (None, Some(spot)) => (spot.clone(), named_elsewhere, Some(section)),
            (None, None) => return,
        },
    };
    let retries = warnings::Retries {
        retries: job.retries,
        backoff,
        shortest,
        longest: ctx.longest_interval(&job.schedule),
        expression: job.schedule.expression(),
    };
    let wording = warnings::RetryWording {
        backoff: backoff_named,
        job: job_named,
    };
    if let Some(message) = warnings::retries(&retries, &wording) {
        ctx.warn(spot.warning(&message));
    }
}

fn on_lock_lost(table: &Table<'_, '_>) -> Result<Option<OnLockLost>, ConfigError> {
    let Some(value) = table.string("on_lock_lost")? else {
        return Ok(None);
    };
    match *value.get_ref() {
        "kill" => Ok(Some(OnLockLost::Kill)),
        "continue" => Ok(Some(OnLockLost::Continue)),
        other => {
            let message = format!("expected `kill` or `continue`, found `{other}`");
            Err(table.error(value.span(), "on_lock_lost", message))
        }
    }
}

/// Most retries of one occurrence: the backoff doubles each time, and an
/// occurrence is never retried once the next one is due.
const MAX_RETRIES: i64 = 10;

fn retries(table: &Table<'_, '_>) -> Result<Option<u32>, ConfigError> {
    let Some(value) = table.integer("retries")? else {
        return Ok(None);
    };
    match u32::try_from(*value.get_ref()) {
        Ok(count) if i64::from(count) <= MAX_RETRIES => Ok(Some(count)),
        _ => {
            let message = format!(
                "must be between 0 and {MAX_RETRIES}, found {}",
                value.get_ref()
            );
            Err(table.error(value.span(), "retries", message))
        }
    }
}

fn overlap(table: &Table<'_, '_>) -> Result<Option<Overlap>, ConfigError> {
    let Some(value) = table.string("overlap")? else {
        return Ok(None);
    };
    if *value.get_ref() != "skip" {
        let message = format!("the only policy is `skip`, found `{}`", value.get_ref());
        return Err(table.error(value.span(), "overlap", message));
    }
    Ok(Some(Overlap::Skip))
}

/// A `command` as run: interpolated, and not empty before or after.
pub(super) fn read_command(
    table: &Table<'_, '_>,
    written: &str,
    span: Range<usize>,
    ctx: &Context<'_>,
) -> Option<String> {
    if written.trim().is_empty() {
        ctx.error(table.error(span, "command", "must not be empty"));
        return None;
    }
    let filled = match ctx.fill(written) {
        Ok(filled) => filled,
        Err(err) => {
            ctx.error(table.error(span, "command", err.describe(Place::Command)));
            return None;
        }
    };
    if filled.text.trim().is_empty() {
        // `sh -c ""` would "succeed" every time, hiding an unset value.
        let message = format!("`{written}` is empty once its variables are filled in");
        ctx.error(table.error(span, "command", message));
        return None;
    }
    if filled.text.contains('\0') {
        let message = format!(
            "{} (a command that must print one can write `printf '\\000'`)",
            nul_problem(written)
        );
        ctx.error(table.error(span, "command", message));
        return None;
    }
    Some(filled.text)
}

/// Why a value with a NUL byte is refused: no process argument,
/// environment value or path can hold one, so every run would fail to
/// start ("contains a NUL byte"). The value is not quoted (it may hold an
/// interpolated secret); `written` only tells whether the byte is in the
/// file or came with a `${VAR}`.
fn nul_problem(written: &str) -> String {
    let whence = if written.contains('\0') {
        ""
    } else {
        " once its variables are filled in"
    };
    format!(
        "contains a NUL byte (`\\u0000`){whence}, which a process cannot be given: every run would fail to start; remove it"
    )
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

/// `Err` is the message for a name that is not an IANA time zone (with
/// the closest one, if any).
pub fn time_zone(name: &str) -> Result<Tz, String> {
    if let Ok(tz) = name.parse::<Tz>() {
        return Ok(tz);
    }
    let known = chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name());
    Err(match closest(name, known) {
        Some(close) => format!("unknown time zone `{name}`; did you mean `{close}`?"),
        None => format!("unknown time zone `{name}`; use an IANA name such as `Europe/Berlin`"),
    })
}

/// `run_on = ["role=db", "node=web-*"]`: every term `key=value`, a value
/// may end in `*`.
fn read_run_on(
    table: &Table<'_, '_>,
    value: &super::table::Value<'_>,
) -> Result<crate::tags::RunOn, ConfigError> {
    let what = "an array of tags like [\"role=db\", \"zone=eu-*\"]";
    let DeValue::Array(items) = value.get_ref() else {
        return Err(table.expected("run_on", value, what));
    };
    let mut terms = Vec::with_capacity(items.len());
    for item in items {
        let DeValue::String(text) = item.get_ref() else {
            return Err(table.expected("run_on", item, "a string like \"role=db\""));
        };
        let term = crate::tags::Term::parse(text)
            .map_err(|message| table.error(item.span(), "run_on", message))?;
        terms.push(term);
    }
    if terms.is_empty() {
        let message = "lists no tag; leave `run_on` out to run the job on every node";
        return Err(table.error(value.span(), "run_on", message));
    }
    Ok(crate::tags::RunOn::new(terms))
}

pub(super) fn read_argv(
    table: &Table<'_, '_>,
    value: &super::table::Value<'_>,
) -> Result<Vec<String>, ConfigError> {
    let what = "an array of strings like [\"/usr/bin/logrotate\", \"/etc/logrotate.conf\"]";
    let DeValue::Array(items) = value.get_ref() else {
        return Err(table.expected("argv", value, what));
    };
    let mut argv = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let DeValue::String(arg) = item.get_ref() else {
            return Err(table.expected("argv", item, "a string"));
        };
        if arg.contains('\0') {
            let message = format!("item {}: {}", index + 1, nul_problem(arg));
            return Err(table.error(item.span(), "argv", message));
        }
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

fn read_env(table: &Table<'_, '_>, ctx: &Context<'_>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (key, value) in table.in_file_order() {
        let name: &str = key.get_ref();
        if !is_env_name(name) {
            let message =
                "not a variable name: use letters, digits and `_`, not starting with a digit";
            ctx.error(table.error(key.span(), name, message));
            continue;
        }
        if name.starts_with("SOLOCRON_") {
            let message = "`SOLOCRON_` variables are set by solocron for each run";
            ctx.error(table.error(key.span(), name, message));
            continue;
        }
        let DeValue::String(template) = value.get_ref() else {
            ctx.error(table.expected(name, value, "a string"));
            continue;
        };
        match ctx.fill(template) {
            Ok(filled) if filled.text.contains('\0') => {
                let message = nul_problem(template);
                ctx.error(table.error(value.span(), name, message));
            }
            Ok(filled) => {
                out.insert(name.to_string(), filled.text);
            }
            Err(err) => ctx.error(table.error(value.span(), name, err.describe(Place::Env))),
        }
    }
    out
}
