//! A crontab, line by line, into jobs and the lines left as comments.
//!
//! Pure: the text and the [`Options`] in, [`Translation`] out. Cron's
//! order holds: each variable line updates the [`Scope`] the entries below
//! it are read in (its zone, shell and `env`). An entry whose schedule
//! solocron's parser refuses, that cron would refuse, or that cannot carry
//! over (`@reboot`) is left as a comment with the reason; so is a variable
//! line with no counterpart.

use chrono_tz::Tz;

use super::command;
use super::line::{self, Entry, Line, When};
use super::name::{self, Names};
use super::scope::{Scope, Zone};
use crate::schedule::Schedule;

/// Why `@reboot` has no counterpart.
const REBOOT: &str = "not imported: @reboot has no equivalent, as solocron runs the \
    occurrences of a schedule, each on one node of the fleet, not a command at each boot; \
    run it on each machine from a systemd unit of its own (Type=oneshot, \
    WantedBy=multi-user.target)";

/// How to read the crontab.
#[derive(Debug, Clone, Copy)]
pub(super) struct Options {
    /// A user name follows the time fields (/etc/crontab, /etc/cron.d).
    pub system: bool,
    /// The zone of the entries with no `CRON_TZ` above them: cron reads
    /// those in the machine's local time.
    pub zone: Tz,
}

/// One job of the fragment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Job {
    /// Its line number in the crontab, from 1.
    pub line: usize,
    /// That line as written.
    pub text: String,
    pub name: String,
    pub schedule: String,
    /// `None`: UTC, solocron's default (the key is left out).
    pub timezone: Option<Tz>,
    /// What the shell or the program is to see (not yet escaped for
    /// `${VAR}` interpolation).
    pub action: Action,
    /// The variables set above it, in the order they were first set.
    pub env: Vec<(String, String)>,
    /// The user field of a system crontab.
    pub user: Option<String>,
    /// Its command carries the text cron wrote to its standard input.
    pub fed_input: bool,
}

/// A job's action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Action {
    /// Run by `/bin/sh -c`.
    Command(String),
    /// Run without a shell.
    Argv(Vec<String>),
}

/// A part of the fragment, in the crontab's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Block {
    Job(Job),
    /// A line left as a comment: its number, its text and why.
    Note {
        line: usize,
        text: String,
        why: String,
    },
}

/// A crontab read.
#[derive(Debug, Default)]
pub(super) struct Translation {
    pub blocks: Vec<Block>,
    /// The entries read (lines that are neither blank, a comment nor a
    /// variable), whether they carried over or not.
    pub entries: usize,
    /// The jobs in the zone of [`Options::zone`] (no `CRON_TZ` above them).
    pub in_default_zone: usize,
    /// For stderr: what the operator should look at (never a value).
    pub warnings: Vec<String>,
}

impl Translation {
    pub fn jobs(&self) -> usize {
        self.blocks
            .iter()
            .filter(|block| matches!(block, Block::Job(_)))
            .count()
    }

    pub fn notes(&self) -> usize {
        self.blocks.len() - self.jobs()
    }
}

/// Reads `text` as a crontab.
pub(super) fn translate(text: &str, options: &Options) -> Translation {
    let mut out = Translation::default();
    let mut scope = Scope::default();
    let mut names = Names::default();
    for (index, raw) in text.lines().enumerate() {
        let number = index + 1;
        let note = |why: String| Block::Note {
            line: number,
            text: raw.to_string(),
            why,
        };
        match line::read(raw, options.system) {
            Line::Nothing => {}
            Line::Variable { name, value } => {
                if let Some(why) = scope.set(&name, value, number, &mut out.warnings) {
                    out.blocks.push(note(why));
                }
            }
            Line::Entry(entry) => {
                out.entries += 1;
                let at = (number, raw);
                match entry.and_then(|entry| job(&entry, at, &scope, options, &mut names)) {
                    Ok(job) => {
                        if matches!(scope.zone, Zone::Default) {
                            out.in_default_zone += 1;
                        }
                        out.blocks.push(Block::Job(job));
                    }
                    Err(why) => out.blocks.push(note(why)),
                }
            }
        }
    }
    out
}

/// The job of `entry`, written on line `at` (its number and text), named
/// from `names` (which takes the name only for a job), or why it is left
/// as a comment.
fn job(
    entry: &Entry<'_>,
    at: (usize, &str),
    scope: &Scope,
    options: &Options,
    names: &mut Names,
) -> Result<Job, String> {
    let schedule = match &entry.when {
        When::Reboot => return Err(REBOOT.to_string()),
        When::Macro(word) => word.to_string(),
        When::Fields(fields) => fields.clone(),
    };
    let zone = match &scope.zone {
        Zone::Default => options.zone,
        Zone::Set(zone) => *zone,
        Zone::Unknown { name, line } => {
            return Err(format!(
                "not imported: the CRON_TZ above it (line {line}) names no time zone, `{name}`; \
                 correct it and import the file again"
            ));
        }
    };
    Schedule::parse(&schedule, zone).map_err(|err| format!("not imported: {err}"))?;
    if entry.command.contains('\0') {
        return Err("not imported: the command holds a NUL byte, which no command can".to_string());
    }
    let split = command::split(entry.command);
    if split.command.trim().is_empty() {
        return Err("not imported: the command before its first `%` is empty".to_string());
    }
    let action = match (&scope.shell, &split.input) {
        (None, None) => Action::Command(split.command.clone()),
        (None, Some(input)) => Action::Command(command::with_input(&split.command, input)),
        (Some(shell), None) => {
            Action::Argv(vec![shell.clone(), "-c".to_string(), split.command.clone()])
        }
        (Some(shell), Some(input)) => Action::Argv(vec![
            "/bin/sh".to_string(),
            "-c".to_string(),
            command::other_shell_with_input(input),
            shell.clone(),
            split.command.clone(),
        ]),
    };
    Ok(Job {
        line: at.0,
        text: at.1.to_string(),
        name: names.unique(&name::suggest(&split.command)),
        schedule,
        timezone: Some(zone).filter(|zone| !is_utc(*zone)),
        action,
        env: scope.env.clone(),
        user: entry.user.map(str::to_string),
        fed_input: split.input.is_some(),
    })
}

/// Whether `zone` is UTC under another name (`Etc/UTC`, `Zulu`, `GMT`):
/// solocron's default, so the job needs no `timezone`.
fn is_utc(zone: Tz) -> bool {
    matches!(
        zone.name().trim_start_matches("Etc/"),
        "UTC" | "UCT" | "Universal" | "Zulu" | "GMT" | "GMT0" | "GMT+0" | "GMT-0" | "Greenwich"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str, system: bool) -> Translation {
        translate(
            text,
            &Options {
                system,
                zone: Tz::UTC,
            },
        )
    }

    fn jobs(translation: &Translation) -> Vec<&Job> {
        translation
            .blocks
            .iter()
            .filter_map(|block| match block {
                Block::Job(job) => Some(job),
                Block::Note { .. } => None,
            })
            .collect()
    }

    fn notes(translation: &Translation) -> Vec<(usize, &str)> {
        translation
            .blocks
            .iter()
            .filter_map(|block| match block {
                Block::Note { line, why, .. } => Some((*line, why.as_str())),
                Block::Job(_) => None,
            })
            .collect()
    }

    #[test]
    fn variables_apply_to_the_entries_below_them() {
        let read = read(
            "A=1\n0 1 * * * one\nCRON_TZ=Europe/Berlin\nA=2\nB = x y \n0 2 * * * two\n\
             SHELL=/bin/bash\nCRON_TZ=\n@daily three\n",
            false,
        );
        let jobs = jobs(&read);
        assert_eq!(jobs.len(), 3);
        assert_eq!(jobs[0].env, vec![("A".to_string(), "1".to_string())]);
        assert_eq!(jobs[0].timezone, None);
        assert_eq!(jobs[0].action, Action::Command("one".to_string()));
        assert_eq!(
            jobs[1].env,
            vec![
                ("A".to_string(), "2".to_string()),
                ("B".to_string(), "x y".to_string())
            ]
        );
        assert_eq!(jobs[1].timezone, Some(Tz::Europe__Berlin));
        assert_eq!(
            jobs[2].action,
            Action::Argv(vec!["/bin/bash".into(), "-c".into(), "three".into()])
        );
        assert_eq!(jobs[2].timezone, None);
        assert_eq!((read.entries, read.in_default_zone), (3, 2));
        assert!(is_utc(Tz::Etc__UTC) && is_utc(Tz::GMT) && !is_utc(Tz::Europe__London));
        assert!(read.warnings.is_empty());
    }

    #[test]
    fn what_cannot_carry_over_is_a_note_with_why() {
        let read = read(
            "MAILTO=ops@example.com\nRANDOM_DELAY=30\nmy-var=1\nSOLOCRON_X=1\n\
             @reboot /usr/bin/warm\n61 * * * * x\n0 0 30 2 * x\n0 * * * * %in\n\
             CRON_TZ=Mars/Base\n0 * * * * y\nCRON_TZ=UTC\n0 * * * * z\n\
             SHELL=/bin/\0sh\n0 * * * * a\0b\n",
            false,
        );
        let notes = notes(&read);
        let expect = [
            (1, "solocron sends no mail"),
            (2, "`splay = \"30m\"`"),
            (3, "`my-var` is not a name"),
            (4, "set by solocron for each run"),
            (5, "@reboot has no equivalent"),
            (6, "minute `61` is out of range"),
            (7, "never fires"),
            (8, "the command before its first `%` is empty"),
            (9, "unknown time zone `Mars/Base`"),
            (
                10,
                "the CRON_TZ above it (line 9) names no time zone, `Mars/Base`",
            ),
            (13, "the value holds a NUL byte"),
            (14, "the command holds a NUL byte"),
        ];
        assert_eq!(notes.len(), expect.len(), "{notes:?}");
        for ((line, why), (want_line, want)) in notes.iter().zip(expect) {
            assert_eq!(*line, want_line);
            assert!(why.contains(want), "line {line}: {why}");
        }
        assert_eq!(jobs(&read).len(), 1);
        assert_eq!(read.entries, 7);
        assert_eq!(read.warnings.len(), 1);
        assert!(read.warnings[0].starts_with("line 9: CRON_TZ: unknown time zone"));
    }

    #[test]
    fn input_after_percent_is_fed_to_the_command() {
        let read = read(
            "0 * * * * cat > out%a%b\nSHELL=/bin/zsh\n0 * * * * cat%it's\n",
            false,
        );
        let jobs = jobs(&read);
        assert_eq!(
            jobs[0].action,
            Action::Command("printf '%s\\n' 'a' 'b' | {\ncat > out\n}".to_string())
        );
        assert!(jobs[0].fed_input);
        assert_eq!(
            jobs[1].action,
            Action::Argv(vec![
                "/bin/sh".into(),
                "-c".into(),
                "printf '%s\\n' 'it'\\''s' | exec \"$0\" -c \"$1\"".into(),
                "/bin/zsh".into(),
                "cat".into(),
            ])
        );
    }

    #[test]
    fn system_entries_keep_their_user_and_names_are_unique() {
        let read = read(
            "17 * * * * root cd / && run-parts --report /etc/cron.hourly\n\
             0 1 * * * backup /usr/local/bin/dump.sh\n0 2 * * * root /usr/local/bin/dump.sh\n",
            true,
        );
        let jobs = jobs(&read);
        let names: Vec<(&str, Option<&str>)> = jobs
            .iter()
            .map(|job| (job.name.as_str(), job.user.as_deref()))
            .collect();
        assert_eq!(
            names,
            [
                ("cron.hourly", Some("root")),
                ("dump", Some("backup")),
                ("dump-2", Some("root"))
            ]
        );
    }
}
