//! `solocron import-crontab`: a crontab or `/etc/cron.d` file in, a
//! `jobs.toml` fragment out (docs/operations.md, "Importing a crontab").
//!
//! Each line is read as cron reads it ([`line`]): variables apply to the
//! entries below them ([`scope`]), and each entry becomes a `[jobs.NAME]` table
//! ([`translate`]) with its schedule checked by [`crate::schedule`], its
//! `%` input written into the command ([`command`]) and a name made from
//! the program it runs ([`name`]). A line that cannot carry over becomes a
//! comment saying why. Whether a user name follows the time fields, and
//! the zone of entries without `CRON_TZ`, come from the options or this
//! machine ([`detect`]). The fragment ([`emit`]) passes `solocron check`
//! once a `[redis]` section is added.
//!
//! Failure model: a file that cannot be read (missing, unreadable, not
//! UTF-8, absurdly large) is an error naming it and why; a file with no
//! entry, or none that carries over, is an error after the fragment (exit
//! 1). Nothing a line holds makes this fail or panic: the line is left as
//! a comment. Variable values never go to stderr (they may be secrets).

mod command;
mod detect;
mod emit;
mod line;
mod name;
mod scope;
mod translate;

use std::io::{Read, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use chrono_tz::Tz;

/// The largest crontab read (far above any real one).
const MAX_BYTES: u64 = 16 << 20;

/// Whether a user name follows the time fields, when the operator says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `crontab -l`: the command right after the time fields.
    User,
    /// `/etc/crontab`, `/etc/cron.d/*`: a user name, then the command.
    System,
}

/// What `solocron import-crontab` was asked.
#[derive(Debug, Clone)]
pub struct Request {
    /// The crontab; `None` or `-`: standard input.
    pub file: Option<PathBuf>,
    /// `None`: [`detect::format`] decides.
    pub format: Option<Format>,
    /// The zone of entries without `CRON_TZ`; `None`: this machine's.
    pub timezone: Option<Tz>,
}

/// Reads the crontab, prints the fragment on stdout and what happened on
/// stderr. `Err` when the crontab cannot be read, has no entry, or has
/// none that carries over (the fragment is printed first).
pub fn run(request: &Request) -> anyhow::Result<ExitCode> {
    let path = request
        .file
        .as_deref()
        .filter(|path| *path != Path::new("-"));
    let (source, text) = match path {
        Some(path) => {
            let source = path.display().to_string();
            let file = std::fs::File::open(path)
                .with_context(|| format!("cannot read the crontab {source}"))?;
            let text = read_text(file, &source)?;
            (source, text)
        }
        None => {
            let source = "standard input".to_string();
            let text = read_text(std::io::stdin().lock(), &source)?;
            (source, text)
        }
    };
    let mut notes = Vec::new();
    let system = match request.format {
        Some(format) => format == Format::System,
        None => {
            let (system, why) = detect::format(path, &text);
            let kind = if system { "system" } else { "user" };
            notes.push(format!("reading {source} as a {kind} crontab {why}"));
            system
        }
    };
    let (zone, zone_note) = match request.timezone {
        Some(zone) => (zone, None),
        None => match detect::local_zone() {
            Some((zone, whence)) => (
                zone,
                Some(format!(
                    "the entries without CRON_TZ are read in {zone}, this machine's time zone \
                     (from {whence}), as cron read them here; --timezone ZONE if the crontab \
                     comes from a machine in another zone"
                )),
            ),
            None => (
                Tz::UTC,
                Some(
                    "cannot tell this machine's time zone (TZ, /etc/localtime, /etc/timezone): \
                     the entries without CRON_TZ are read in UTC; --timezone ZONE to say which \
                     zone cron read them in"
                        .to_string(),
                ),
            ),
        },
    };
    let translation = translate::translate(&text, &translate::Options { system, zone });
    if translation.entries == 0 {
        anyhow::bail!(
            "nothing could be read from {source}: it has no crontab entry (only blank lines, \
             comments or variables)"
        );
    }
    if translation.in_default_zone > 0
        && let Some(note) = zone_note
    {
        notes.push(note);
    }
    let fragment = emit::fragment(&source, system, &translation.blocks);
    let mut out = std::io::stdout().lock();
    out.write_all(fragment.as_bytes())
        .and_then(|()| out.flush())
        .context("cannot write the fragment to standard output")?;
    let mut err = std::io::stderr().lock();
    for note in &notes {
        let _ = writeln!(err, "note: {note}");
    }
    for warning in &translation.warnings {
        let _ = writeln!(err, "warning: {source}: {warning}");
    }
    let (jobs, left) = (translation.jobs(), translation.notes());
    if jobs == 0 {
        anyhow::bail!(
            "nothing could be carried over from {source}: {} left as comments (printed above)",
            count(left, "line")
        );
    }
    let _ = writeln!(
        err,
        "imported {} from {source}, {} left as comments",
        count(jobs, "job"),
        count(left, "line")
    );
    Ok(ExitCode::SUCCESS)
}

/// `1 job`, `2 jobs`.
fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// All of `reader` as text, or an error naming `source`: the OS's reason,
/// too large, or the line that is not UTF-8.
fn read_text(reader: impl Read, source: &str) -> anyhow::Result<String> {
    let mut bytes = Vec::new();
    reader
        .take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read the crontab {source}"))?;
    if bytes.len() as u64 > MAX_BYTES {
        anyhow::bail!(
            "cannot read the crontab {source}: it is larger than {} MiB, which no crontab is",
            MAX_BYTES >> 20
        );
    }
    String::from_utf8(bytes).map_err(|err| {
        let valid = err.utf8_error().valid_up_to();
        let line = err.as_bytes()[..valid]
            .iter()
            .filter(|byte| **byte == b'\n')
            .count()
            + 1;
        anyhow::anyhow!(
            "cannot read the crontab {source}: line {line} is not UTF-8 text; convert the file \
             first (e.g. `iconv -f latin1 -t utf-8`)"
        )
    })
}
