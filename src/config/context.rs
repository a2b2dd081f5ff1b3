//! What reading one `jobs.toml` carries from table to table: where `${VAR}`
//! values come from, whether the load is for the read-only commands, the
//! errors and warnings found so far, and what the warnings looked up
//! (programs in `PATH`, the intervals of schedules).
//!
//! Errors are collected, not returned, so that one bad key never hides the
//! next (guarantee 7, docs/guarantees.md: `check` reports every error of a
//! file). A reader pushes what it finds and goes on with the next key; the
//! loader refuses the file at the end if anything was pushed. The collections
//! sit in `RefCell`s so that every reader can take `&Context` while it also
//! holds borrows of the document.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::access::NamedFile;
use super::error::ConfigError;
use super::interpolate::{Filled, InterpolateError, interpolate};
use super::warnings::{Spot, Warning};
use crate::schedule::{PERIOD_HORIZON, Schedule};

/// The state of one load.
pub(super) struct Context<'a> {
    /// The process environment (or what a test passes instead).
    process_env: &'a dyn Fn(&str) -> Option<String>,
    /// `[daemon] env_file`, once read; it wins over `process_env`.
    file_env: RefCell<BTreeMap<String, String>>,
    /// Every value a `${VAR}` was filled with so far (for `Config.filled`).
    filled: RefCell<BTreeSet<String>>,
    /// A load for `status` / `history` (see `config::load_for_inspection`).
    pub inspect: bool,
    errors: RefCell<Vec<ConfigError>>,
    warnings: RefCell<Vec<Warning>>,
    /// The files the config names and the loader read (see `access`).
    files: RefCell<Vec<NamedFile>>,
    /// `PATH` look-ups of `argv` programs already done: (PATH, program) ->
    /// the warning, if any (10,000 jobs often run a handful of programs).
    programs: RefCell<HashMap<(String, String), Option<String>>>,
    /// Shortest intervals between occurrences already computed, by
    /// expression and zone (jobs with retries share a few schedules).
    intervals: RefCell<HashMap<(String, Tz), Option<Duration>>>,
    /// When the load started: where interval searches begin.
    now: DateTime<Utc>,
    /// `[groups.NAME]`, read before any job names one.
    groups: RefCell<super::groups::Groups>,
    /// `[calendars.NAME]`, the same.
    calendars: RefCell<super::calendars::Calendars>,
}

impl<'a> Context<'a> {
    pub fn new(process_env: &'a dyn Fn(&str) -> Option<String>, inspect: bool) -> Self {
        Context {
            process_env,
            file_env: RefCell::default(),
            filled: RefCell::default(),
            inspect,
            errors: RefCell::default(),
            warnings: RefCell::default(),
            files: RefCell::default(),
            programs: RefCell::default(),
            intervals: RefCell::default(),
            now: Utc::now(),
            groups: RefCell::default(),
            calendars: RefCell::default(),
        }
    }

    /// The calendars jobs may name.
    pub fn set_calendars(&self, calendars: super::calendars::Calendars) {
        *self.calendars.borrow_mut() = calendars;
    }

    /// The calendars `table`'s `key` names (see `Calendars::of`).
    pub fn calendars_of(
        &self,
        table: &super::table::Table<'_, '_>,
        key: &str,
    ) -> Result<Vec<std::sync::Arc<super::model::Calendar>>, ()> {
        self.calendars.borrow().of(table, key, self)
    }

    /// The groups jobs may name.
    pub fn set_groups(&self, groups: super::groups::Groups) {
        *self.groups.borrow_mut() = groups;
    }

    /// The groups, once every job was read.
    pub fn take_groups(&self) -> super::groups::Groups {
        self.groups.take()
    }

    /// The group `table`'s `group` key names (see `Groups::of`).
    pub fn group_of(
        &self,
        table: &super::table::Table<'_, '_>,
    ) -> Result<Option<std::sync::Arc<super::model::Group>>, ()> {
        self.groups.borrow().of(table, self)
    }

    /// Makes the env file's pairs the first source of `${VAR}`.
    pub fn set_file_env(&self, pairs: BTreeMap<String, String>) {
        *self.file_env.borrow_mut() = pairs;
    }

    /// The env file's pairs (for `Config.env`).
    pub fn take_file_env(&self) -> BTreeMap<String, String> {
        self.file_env.take()
    }

    /// `name` from the env file, else from the process environment.
    pub fn var(&self, name: &str) -> Option<String> {
        let from_file = self.file_env.borrow().get(name).cloned();
        from_file.or_else(|| (self.process_env)(name))
    }

    /// `template` with `${VAR}` filled in. Loading for inspection keeps an
    /// unset `${VAR}` as written instead of refusing it.
    pub fn fill(&self, template: &str) -> Result<Filled, InterpolateError> {
        let filled = interpolate(template, &|name| self.var(name), self.inspect)?;
        self.filled
            .borrow_mut()
            .extend(filled.values.iter().cloned());
        Ok(filled)
    }

    /// Every value a `${VAR}` was filled with (for `Config.filled`).
    pub fn take_filled(&self) -> Vec<String> {
        self.filled.take().into_iter().collect()
    }

    /// Records `err`; reading goes on.
    pub fn error(&self, err: ConfigError) {
        self.errors.borrow_mut().push(err);
    }

    /// The value of `result`, or `None` after recording its error.
    pub fn keep<T>(&self, result: Result<T, ConfigError>) -> Option<T> {
        result.map_err(|err| self.error(err)).ok()
    }

    /// How many errors were recorded so far (a reader compares before and
    /// after to know whether its table was clean).
    pub fn error_count(&self) -> usize {
        self.errors.borrow().len()
    }

    /// Every error recorded, in the order found.
    pub fn take_errors(&self) -> Vec<ConfigError> {
        self.errors.take()
    }

    /// Records a warning (never a reason to refuse the file).
    pub fn warn(&self, warning: Warning) {
        self.warnings.borrow_mut().push(warning);
    }

    /// Every warning recorded, in file order.
    pub fn take_warnings(&self) -> Vec<Warning> {
        let mut warnings = self.warnings.take();
        warnings.sort_by_key(|warning| (warning.line, warning.column));
        warnings
    }

    /// Records that the value at `spot` names the file `path`, read.
    pub fn named_file(&self, spot: Spot, path: PathBuf) {
        self.files.borrow_mut().push(NamedFile::new(spot, path));
    }

    /// Every file recorded by [`Context::named_file`], in file order.
    pub fn take_files(&self) -> Vec<NamedFile> {
        let mut files = self.files.take();
        files.sort_by_key(|file| (file.spot.line, file.spot.column));
        files
    }

    /// The shortest interval between two consecutive occurrences of
    /// `schedule` from now on ([`Schedule::shortest_interval`]), computed
    /// once per expression and zone, if it may be `within` or less: `None`
    /// when the pattern alone says it is longer ([`Schedule::interval_floor`];
    /// most are, and 10,000 jobs with `retries` in `[defaults]` then cost
    /// no search).
    pub fn shortest_interval(&self, schedule: &Schedule, within: Duration) -> Option<Duration> {
        if within < schedule.interval_floor() {
            return None;
        }
        let key = (schedule.expression().to_string(), schedule.timezone());
        if let Some(known) = self.intervals.borrow().get(&key) {
            return *known;
        }
        // A week shows every rhythm but a monthly or yearly one; a long
        // backoff is compared with a few of the intervals it could span.
        let span = within
            .saturating_mul(4)
            .max(Duration::from_secs(8 * 86_400));
        let found = schedule.shortest_interval(self.now, span);
        self.intervals.borrow_mut().insert(key, found);
        found
    }

    /// The longest interval between two consecutive occurrences of
    /// `schedule` over the coming [`PERIOD_HORIZON`] (what the job's period
    /// gauge shows).
    pub fn longest_interval(&self, schedule: &Schedule) -> Option<Duration> {
        schedule.longest_interval(self.now, PERIOD_HORIZON)
    }

    /// The warning about `program` under `path` (see
    /// `warnings::program`), looked up once per pair.
    pub fn program_warning(&self, program: &str, path: &str) -> Option<String> {
        let key = (path.to_string(), program.to_string());
        if let Some(known) = self.programs.borrow().get(&key) {
            return known.clone();
        }
        let found = super::warnings::program(program, path);
        self.programs.borrow_mut().insert(key, found.clone());
        found
    }
}
