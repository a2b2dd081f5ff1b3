//! Reading one table of the parsed document: unknown keys (with a "did you
//! mean"), and typed values that keep their span for messages.
//!
//! We walk toml's spanned document (`DeTable`) instead of deserializing into
//! serde structs: every value keeps its own span, and an unknown key can be
//! reported with the table it sits in, which `deny_unknown_fields` cannot
//! say. `DeTable` keeps keys sorted; where file order matters (jobs, headers,
//! the first unknown key) we sort by span.

use std::ops::Range;
use std::time::Duration;

use toml::Spanned;
use toml::de::{DeString, DeTable, DeValue};

use super::context::Context;
use super::error::{ConfigError, Position, Source, locate};
use super::warnings::{Spot, Warning};

/// The longest duration any key accepts: 100 years. The daemon adds and
/// subtracts durations to and from dates and clocks, so a longer one (say
/// `starting_deadline = "300000y"`) is refused by the loader rather than
/// overflowing `DateTime - TimeDelta` in the job's loop.
pub(super) const MAX_DURATION: Duration = Duration::from_secs(100 * 31_557_600);

/// A value as the document holds it.
pub(super) type Value<'i> = Spanned<DeValue<'i>>;

/// One table and how messages name it.
pub(super) struct Table<'a, 'i> {
    pub src: &'a Source<'a>,
    pub entries: &'a DeTable<'i>,
    /// The header (`[jobs.x]`) or inline table, for "missing key" errors.
    pub span: Range<usize>,
    /// How an unknown-key message names it: `[jobs.x]`, `jobs.x.http`.
    pub name: String,
    /// The section that owns it, prefixing value messages: `[jobs.x]`;
    /// empty at the top level.
    pub owner: String,
    /// Key prefix inside `owner`: `""`, `http.`, `http.headers.`.
    pub prefix: String,
    /// Dotted path of the table, for the `key` of `ConfigError::Invalid`.
    pub path: String,
}

impl<'a, 'i> Table<'a, 'i> {
    /// A top-level section such as `[redis]` or `[jobs.x]`.
    pub fn section(
        src: &'a Source<'a>,
        entries: &'a DeTable<'i>,
        span: Range<usize>,
        path: String,
    ) -> Self {
        let name = format!("[{path}]");
        Table {
            src,
            entries,
            span,
            owner: name.clone(),
            name,
            prefix: String::new(),
            path,
        }
    }

    /// An error about the value of `key`, which sits at `span`.
    pub fn error(&self, span: Range<usize>, key: &str, message: impl AsRef<str>) -> ConfigError {
        let full_key = self.key_path(key);
        let owner = if self.owner.is_empty() {
            String::new()
        } else {
            format!("{} ", self.owner)
        };
        let message = format!("{owner}`{}{key}`: {}", self.prefix, message.as_ref());
        self.src.invalid(span, full_key, message)
    }

    /// The dotted path of `key` in this table.
    fn key_path(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// An error about the table as a whole (a missing key, a conflict).
    pub fn error_here(&self, message: impl AsRef<str>) -> ConfigError {
        let message = format!("{}: {}", self.name, message.as_ref());
        self.src
            .invalid(self.span.clone(), self.path.clone(), message)
    }

    /// The entries in file order.
    pub fn in_file_order(&self) -> Vec<(&'a Spanned<DeString<'i>>, &'a Value<'i>)> {
        let mut entries: Vec<_> = self.entries.iter().collect();
        entries.sort_by_key(|(key, _)| key.span().start);
        entries
    }

    /// Records an error for every key (in file order) that is not in
    /// `allowed`.
    pub fn check_keys(&self, allowed: &[&str], ctx: &Context<'_>) {
        for (key, value) in self.in_file_order() {
            let key_name: &str = key.get_ref();
            if allowed.contains(&key_name) {
                continue;
            }
            let mut message = format!("unknown key `{key_name}` in {}", self.name);
            let job = self
                .name
                .strip_prefix("[jobs.")
                .and_then(|rest| rest.strip_suffix(']'));
            if let (Some(job), DeValue::Table(_)) = (job, value.get_ref()) {
                // `[jobs.db.backup]`: TOML reads a dot as a nested table.
                message.push_str(&format!(
                    "; a job name with a dot is written in quotes: [jobs.\"{job}.{key_name}\"]"
                ));
            } else if let Some(close) = closest(key_name, allowed.iter().copied()) {
                message.push_str(&format!(", did you mean `{close}`?"));
            }
            ctx.error(
                self.src
                    .invalid(key.span(), self.key_path(key_name), message),
            );
        }
    }

    /// A warning about the value of `key`, which sits at `span`, worded
    /// like [`Table::error`].
    pub fn warning(&self, span: Range<usize>, key: &str, message: impl AsRef<str>) -> Warning {
        self.spot(span, key).warning(message.as_ref())
    }

    /// Where `key`'s value sits (`span`), for a warning worded later.
    pub fn spot(&self, span: Range<usize>, key: &str) -> Spot {
        let Position { line, column, .. } = locate(self.src.text, span);
        let owner = if self.owner.is_empty() {
            String::new()
        } else {
            format!("{} ", self.owner)
        };
        Spot {
            path: self.src.path.to_path_buf(),
            line,
            column,
            key: self.key_path(key),
            label: format!("{owner}`{}{key}`", self.prefix),
        }
    }

    /// The raw value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&'a Value<'i>> {
        self.entries.get(key)
    }

    /// A type mismatch at `value`.
    pub fn expected(&self, key: &str, value: &Value<'_>, what: &str) -> ConfigError {
        let found = value.get_ref().type_str();
        self.error(value.span(), key, format!("expected {what}, found {found}"))
    }

    /// A string value, or `None` when `key` is absent.
    pub fn string(&self, key: &str) -> Result<Option<Spanned<&'a str>>, ConfigError> {
        self.string_like(key, "a string")
    }

    /// A string value; `what` describes it for a type mismatch.
    pub fn string_like(
        &self,
        key: &str,
        what: &str,
    ) -> Result<Option<Spanned<&'a str>>, ConfigError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        match value.get_ref() {
            DeValue::String(text) => Ok(Some(Spanned::new(value.span(), text.as_ref()))),
            _ => Err(self.expected(key, value, what)),
        }
    }

    /// An integer value, or `None` when `key` is absent.
    pub fn integer(&self, key: &str) -> Result<Option<Spanned<i64>>, ConfigError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let DeValue::Integer(integer) = value.get_ref() else {
            return Err(self.expected(key, value, "an integer"));
        };
        match i64::from_str_radix(integer.as_str(), integer.radix()) {
            Ok(number) => Ok(Some(Spanned::new(value.span(), number))),
            Err(_) => Err(self.error(value.span(), key, "number out of range")),
        }
    }

    /// A duration written like `30s` or `1h30m`, at least `min` and at most
    /// [`MAX_DURATION`].
    pub fn duration(&self, key: &str, min: Duration) -> Result<Option<Duration>, ConfigError> {
        let what = "a duration string like `30s`";
        let Some(text) = self.string_like(key, what)? else {
            return Ok(None);
        };
        let written = *text.get_ref();
        let Ok(duration) = humantime::parse_duration(written.trim()) else {
            let message = format!(
                "invalid duration `{written}`; write it like `500ms`, `30s`, `5m` or `1h30m`"
            );
            return Err(self.error(text.span(), key, message));
        };
        if duration < min {
            let min = humantime::format_duration(min);
            let message = format!("must be at least {min}, found `{written}`");
            return Err(self.error(text.span(), key, message));
        }
        if duration > MAX_DURATION {
            let max = humantime::format_duration(MAX_DURATION);
            let message = format!("must be at most {max}, found `{written}`");
            return Err(self.error(text.span(), key, message));
        }
        Ok(Some(duration))
    }

    /// A size in bytes written like `64KiB`, `1MiB`, `500B` or `65536`
    /// (`KiB`, `MiB`, `GiB` count in 1024s, `KB`, `MB`, `GB` in 1000s).
    pub fn size(&self, key: &str) -> Result<Option<u64>, ConfigError> {
        let what = "a size string like `64KiB`";
        let Some(text) = self.string_like(key, what)? else {
            return Ok(None);
        };
        let written = *text.get_ref();
        // bytesize reads a bare number as bytes and wants digits first.
        let starts_with_digit = written.trim().starts_with(|c: char| c.is_ascii_digit());
        match written.trim().parse::<bytesize::ByteSize>() {
            Ok(size) if starts_with_digit => Ok(Some(size.as_u64())),
            _ => {
                let message = format!(
                    "invalid size `{written}`; write it like `64KiB`, `1MiB`, `500B` or `0` \
                     (KiB and MiB count in 1024s, KB and MB in 1000s)"
                );
                Err(self.error(text.span(), key, message))
            }
        }
    }

    /// A nested table (`http = { ... }`, `env = { ... }`), or `None` when
    /// `key` is absent.
    pub fn table(&self, key: &str) -> Result<Option<Table<'a, 'i>>, ConfigError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let DeValue::Table(entries) = value.get_ref() else {
            return Err(self.expected(key, value, "a table"));
        };
        Ok(Some(Table {
            src: self.src,
            entries,
            span: value.span(),
            name: format!("{}.{key}", self.path),
            owner: self.owner.clone(),
            prefix: format!("{}{key}.", self.prefix),
            path: format!("{}.{key}", self.path),
        }))
    }
}

/// The candidate that `typed` most likely meant, if any is close.
pub(super) fn closest<'c>(
    typed: &str,
    candidates: impl Iterator<Item = &'c str>,
) -> Option<&'c str> {
    candidates
        .map(|candidate| (strsim::jaro_winkler(typed, candidate), candidate))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate)
}

/// A key as messages show it: quoted when it would not read back as one
/// bare key (`"a.b"`).
pub(super) fn display_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        key.to_string()
    } else {
        format!("{key:?}")
    }
}
