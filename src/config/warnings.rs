//! Warnings: what is probably wrong, on *this* machine or in the file, but
//! not a reason to refuse it.
//!
//! Every node loads the same `jobs.toml`, and a program or directory may
//! exist only on the nodes meant to run a job, so a missing `working_dir`
//! or `argv` program is a warning, not an error: `check` prints it and
//! still succeeds. Checking where the file is written, before `[defaults]`
//! apply, makes each warning point at its own line, once. Retries that
//! can never start ([`retries`]) depend on the whole job, so that warning
//! is worded once the job is built, one per job, at the [`Spot`] of the
//! key that set the backoff (in `[defaults]` it names the job). An `argv`
//! program named without `/` is searched in the job's `PATH` the way the
//! launcher does (`env.PATH`, else the daemon's, else
//! `/usr/local/bin:/usr/bin:/bin`); a relative path with a `/` depends on
//! the working directory at run time and is not checked.

use std::fmt;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::model::retries_within;

/// The launcher's `PATH` when the job's environment has none.
pub(super) const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Methods a hook is expected to use; another one gets a warning.
const USUAL_METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// One warning about `jobs.toml`: where it points and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub path: PathBuf,
    /// 1-based line of the value it is about.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// Dotted path of the key (`jobs.rotate.argv`).
    pub key: String,
    /// The whole sentence after `path:line:column: `, naming the table
    /// and the key the way errors do.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Warning {
            path,
            line,
            column,
            message,
            ..
        } = self;
        write!(f, "{}:{line}:{column}: {message}", path.display())
    }
}

/// Where a key is written, to point a warning at it that can only be
/// worded later (a job's retries need its schedule and `[defaults]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Spot {
    pub path: PathBuf,
    pub line: usize,
    pub column: usize,
    /// Dotted path of the key.
    pub key: String,
    /// How messages name it: ``[jobs.x] `retries` ``.
    pub label: String,
}

impl Spot {
    /// The warning `message` about the key here.
    pub fn warning(&self, message: &str) -> Warning {
        Warning {
            path: self.path.clone(),
            line: self.line,
            column: self.column,
            key: self.key.clone(),
            message: format!("{}: {message}", self.label),
        }
    }
}

/// A job's retries and the rhythm of its schedule, for [`retries`].
pub(super) struct Retries<'a> {
    pub retries: u32,
    pub backoff: Duration,
    /// The shortest and the longest interval between two consecutive
    /// occurrences (`None`: not known).
    pub shortest: Duration,
    pub longest: Option<Duration>,
    pub expression: &'a str,
}

/// How a [`retries`] warning names things: the backoff (its value alone
/// when the warning points at `retry_backoff` itself), and the job when
/// the warning points at `[defaults]`.
pub(super) struct RetryWording<'a> {
    pub backoff: String,
    pub job: Option<&'a str>,
}

/// The warning when the first retry's backoff is not shorter than the
/// shortest interval between the job's occurrences: a retry never starts
/// once the next occurrence is due, so after such an occurrence no retry
/// can happen; after a longer interval (an irregular schedule) some may.
pub(super) fn retries(r: &Retries<'_>, wording: &RetryWording<'_>) -> Option<String> {
    if r.retries == 0 || r.backoff < r.shortest {
        return None;
    }
    let show = |d: Duration| humantime::format_duration(d).to_string();
    let (shortest, count) = (show(r.shortest), r.retries);
    let regular = r.longest.is_none_or(|longest| longest <= r.shortest);
    let interval = if regular {
        format!(
            "the {shortest} between its occurrences (`{}`)",
            r.expression
        )
    } else {
        format!(
            "the shortest interval between its occurrences ({shortest}, `{}`)",
            r.expression
        )
    };
    let after_longest = r
        .longest
        .map_or(0, |longest| retries_within(r.backoff, count, longest));
    let outcome = match (after_longest, r.longest) {
        (0, _) | (_, None) if count == 1 => "its retry can never happen".to_string(),
        (0, _) | (_, None) => format!("none of its {count} retries can ever happen"),
        (fit, Some(longest)) => {
            let some = if fit == count {
                format!("all {count} can")
            } else {
                format!("at most {fit} of its {count} can")
            };
            format!(
                "no retry can happen after an occurrence that the next one follows {shortest} \
                 later (after the longest interval, {}, {some})",
                show(longest)
            )
        }
    };
    let all = fits_all(count, r.shortest)
        .filter(|_| count > 1)
        .map(|most| {
            let all = if count == 2 {
                "both".to_string()
            } else {
                format!("all {count}")
            };
            format!(" ({} or less for {all} to fit)", show(most))
        })
        .unwrap_or_default();
    let fix = if r.shortest <= MIN_BACKOFF {
        // `retry_backoff` is at least 1 s.
        let whose = wording
            .job
            .map(|job| format!(" for {job}"))
            .unwrap_or_default();
        format!(
            "no `retry_backoff` is shorter (it is at least 1s): set `retries = 0`{whose}, or \
             run the job less often"
        )
    } else {
        match wording.job {
            Some(job) => format!(
                "give {job} a `retry_backoff` shorter than {shortest}{all}, or `retries = 0` if \
                 it is not to be retried"
            ),
            None => format!(
                "make `retry_backoff` shorter than {shortest}{all}, or set `retries = 0` if the \
                 job is not to be retried"
            ),
        }
    };
    let subject = wording
        .job
        .map(|job| format!("for {job}, "))
        .unwrap_or_default();
    Some(format!(
        "{subject}{} is not shorter than {interval}, and a retry never starts once the next \
         occurrence is due: {outcome}; {fix}",
        wording.backoff
    ))
}

/// The smallest `retry_backoff` the loader takes.
const MIN_BACKOFF: Duration = Duration::from_secs(1);

/// The longest `retry_backoff` (at least its minimum of 1 s; in whole
/// milliseconds, whole seconds from 10 s on) with which all `retries`
/// start within `interval`; `None` when not even 1 s lets them.
fn fits_all(retries: u32, interval: Duration) -> Option<Duration> {
    let fits = |ms: u64| retries_within(Duration::from_millis(ms), retries, interval) == retries;
    let min = u64::try_from(MIN_BACKOFF.as_millis()).unwrap_or(1000);
    let (mut low, mut high) = (min, u64::try_from(interval.as_millis()).unwrap_or(u64::MAX));
    if !fits(low) {
        return None;
    }
    // `fits(low)` holds and `fits(high)` does not (a backoff as long as
    // the interval lets no retry start).
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        if fits(middle) {
            low = middle;
        } else {
            high = middle;
        }
    }
    // A shorter backoff fits too: round the long ones down for reading.
    if low >= 10_000 {
        low -= low % 1000;
    }
    Some(Duration::from_millis(low))
}

/// What is wrong with `dir` as a working directory here, if anything. A
/// relative one is resolved against the daemon's working directory when
/// the job runs (not this file's, nor `check`'s), so it is not looked up.
pub(super) fn working_dir(dir: &Path) -> Option<String> {
    if dir.is_relative() {
        return Some(format!(
            "`{}` is relative: it is resolved against the daemon's working directory when the job runs (`/var/lib/solocron` under the unit), not against this file's directory; write an absolute path",
            dir.display()
        ));
    }
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => None,
        Ok(_) => Some(format!(
            "`{}` is not a directory on this machine; the job cannot start here",
            dir.display()
        )),
        Err(_) => Some(format!(
            "`{}` does not exist on this machine; the job cannot start here",
            dir.display()
        )),
    }
}

/// What is wrong with `program` (an `argv[0]`) under `path` (a `PATH`
/// value), if anything.
pub(super) fn program(program: &str, path: &str) -> Option<String> {
    if program.starts_with('/') {
        return match executable(Path::new(program)) {
            Some(true) => None,
            Some(false) => Some(format!(
                "`{program}` is not an executable file on this machine; the job cannot start here"
            )),
            None => Some(format!(
                "`{program}` does not exist on this machine; the job cannot start here"
            )),
        };
    }
    if program.contains('/') {
        return None;
    }
    let found = std::env::split_paths(path).any(|dir| {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        executable(&dir.join(program)) == Some(true)
    });
    if found {
        None
    } else {
        // The PATH itself is not shown: it may come from an interpolated
        // `env` value.
        Some(format!(
            "`{program}` is not found in the job's PATH on this machine; the job cannot start \
             here: give its full path, or set `PATH` in `env`"
        ))
    }
}

/// `Some(true)`: a file with an execute bit; `Some(false)`: something else
/// that exists; `None`: nothing there.
fn executable(path: &Path) -> Option<bool> {
    let meta = std::fs::metadata(path).ok()?;
    Some(meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// The warning for a zone that is a fixed offset, or a POSIX-style rule,
/// rather than a place: `EST` is UTC−5 all year (New York is
/// `America/New_York`), and `Etc/GMT-2` is UTC+2 (the POSIX sign is the
/// other way round). Valid, and what some mean; too easy to mean otherwise.
pub(super) fn fixed_offset_zone(name: &str) -> Option<String> {
    const NO_DST: &[(&str, &str)] = &[
        ("EST", "America/New_York"),
        (
            "MST",
            "America/Denver (or America/Phoenix, which keeps no DST)",
        ),
        ("HST", "Pacific/Honolulu"),
    ];
    const POSIX_RULES: &[&str] = &["EST5EDT", "CST6CDT", "MST7MDT", "PST8PDT"];
    if let Some((_, place)) = NO_DST.iter().find(|(zone, _)| *zone == name) {
        return Some(format!(
            "`{name}` is a fixed offset from UTC with no daylight saving time; for the local time of a place use its IANA name, e.g. `{place}`"
        ));
    }
    if POSIX_RULES.contains(&name) {
        return Some(format!(
            "`{name}` is an old POSIX-style rule, not a place: it follows the current US rules for every year; prefer the IANA name of the place (e.g. `America/New_York`)"
        ));
    }
    let offset = name.strip_prefix("Etc/GMT")?;
    let hours: i32 = offset.parse().ok()?;
    (hours != 0).then(|| {
        format!(
            "`{name}` is UTC{:+} (an `Etc/GMT` name has the POSIX sign, the opposite of ISO 8601) with no daylight saving time; check that this is the offset you mean",
            -hours
        )
    })
}

/// The warning for a schedule whose day-of-month and day-of-week are both
/// restricted, which cron reads as *either* (the classic "first Monday"
/// mistake, `0 0 1-7 * 1`).
pub(super) fn days_match_either(expr: &str) -> String {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    let (dom, dow) = match fields.as_slice() {
        [.., dom, _, dow] => (*dom, *dow),
        _ => ("", ""),
    };
    format!(
        "`{expr}` restricts both day-of-month (`{dom}`) and day-of-week (`{dow}`), so a day that matches either one runs, as in cron (`0 0 1-7 * 1` is the 1st to the 7th and every Monday); for \"the first Monday of the month\" write `0 0 * * 1#1`, and write `*` in the day field you do not mean"
    )
}

/// The warning for an HTTP method outside [`USUAL_METHODS`] (upper case).
pub(super) fn method(method: &str) -> Option<String> {
    if USUAL_METHODS.contains(&method) {
        return None;
    }
    Some(format!(
        "`{method}` is an unusual HTTP method (expected one of {}); check the spelling",
        USUAL_METHODS.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn working_dirs() {
        assert_eq!(working_dir(Path::new("/")), None);
        let missing = working_dir(Path::new("/nonexistent/solocron")).expect("warning");
        assert_eq!(
            missing,
            "`/nonexistent/solocron` does not exist on this machine; the job cannot start here"
        );
        let file = working_dir(Path::new("/bin/sh")).expect("warning");
        assert!(file.contains("is not a directory"), "{file}");
        // Relative: the daemon's directory decides, not `check`'s (`.`
        // exists wherever `check` runs).
        let relative = working_dir(Path::new(".")).expect("warning");
        assert!(relative.contains("is relative"), "{relative}");
    }

    #[test]
    fn programs_by_path_and_by_name() {
        assert_eq!(program("/bin/sh", DEFAULT_PATH), None);
        assert_eq!(program("sh", DEFAULT_PATH), None);
        assert_eq!(program("./local-script", DEFAULT_PATH), None);
        assert!(
            program("/nonexistent/tool", DEFAULT_PATH)
                .is_some_and(|w| w.contains("does not exist"))
        );
        assert!(
            program("/etc/passwd", DEFAULT_PATH).is_some_and(|w| w.contains("not an executable"))
        );
        assert_eq!(
            program("surely-not-a-program", "/nonexistent:/also-not").as_deref(),
            Some(
                "`surely-not-a-program` is not found in the job's PATH on this machine; the job \
                 cannot start here: give its full path, or set `PATH` in `env`"
            )
        );
        assert!(program("sh", "/nonexistent").is_some());
    }

    #[test]
    fn fixed_offset_zones() {
        assert!(fixed_offset_zone("EST").is_some_and(|w| w.contains("America/New_York")));
        assert!(fixed_offset_zone("Etc/GMT-2").is_some_and(|w| w.contains("UTC+2")));
        assert!(fixed_offset_zone("Etc/GMT+5").is_some_and(|w| w.contains("UTC-5")));
        assert!(fixed_offset_zone("EST5EDT").is_some());
        for fine in [
            "UTC",
            "Etc/GMT",
            "Etc/GMT+0",
            "Europe/Berlin",
            "America/New_York",
        ] {
            assert_eq!(fixed_offset_zone(fine), None, "{fine}");
        }
    }

    #[test]
    fn methods() {
        for usual in USUAL_METHODS {
            assert_eq!(method(usual), None);
        }
        assert!(
            method("PURGE").is_some_and(|w| w.starts_with("`PURGE` is an unusual HTTP method"))
        );
    }
}
