//! A job's name, made from its command: the program it runs.
//!
//! The words of the command are read plainly (split at blanks, quotes
//! dropped; no shell parsing). Skipped, in turn: `NAME=value`
//! assignments, a leading `cd DIR &&` (or `;`), a `test ... ||` or
//! `[ ... ] ||` guard, `(` and `{`, wrappers with their options (`nice`,
//! `ionice`, `nohup`, `chronic`, `env`, `exec`, `time`, `setsid`,
//! `timeout` with its duration, `flock` with its lock file) and
//! interpreters with theirs (`sh`, `bash`, `python3`, `perl`, `php`, ...).
//! The first word left names the job: its base name, without a script's
//! extension (`.sh`, `.py`, ...); for `run-parts`, the directory it runs
//! (`cron.daily`). Characters other than `A-Z a-z 0-9 _ . -` become `-`;
//! `job` if nothing is left. [`Names`] then makes each name unique in file
//! order (`-2`, `-3`, ...), so the same file always gives the same names.

use std::collections::HashSet;

/// Programs that run the command given after their options.
const WRAPPERS: [&str; 10] = [
    "nice", "ionice", "nohup", "chronic", "env", "exec", "time", "setsid", "timeout", "flock",
];

/// Programs that run the script given after their options.
const INTERPRETERS: [&str; 15] = [
    "sh", "bash", "dash", "zsh", "ksh", "python", "python2", "python3", "perl", "ruby", "php",
    "node", "nodejs", "Rscript", "lua",
];

/// Extensions of scripts, dropped from a name.
const EXTENSIONS: [&str; 9] = [
    ".sh", ".bash", ".py", ".pl", ".rb", ".php", ".js", ".R", ".lua",
];

/// At most this many characters (the loader's limit).
const MAX_LEN: usize = 64;

/// The name `command` suggests (not yet unique).
pub(super) fn suggest(command: &str) -> String {
    let words: Vec<String> = command
        .split_whitespace()
        .map(|word| {
            word.trim_start_matches(['(', '{'])
                .trim_matches(['\'', '"'])
        })
        .filter(|word| !word.is_empty())
        .map(str::to_string)
        .collect();
    let program = program(&words);
    let base = match program.map(|at| (at, basename(&words[at]))) {
        Some((at, "run-parts")) => words[at + 1..]
            .iter()
            .map(|word| word.trim_end_matches([')', ';', '}']))
            .rfind(|word| !word.is_empty() && !word.starts_with('-'))
            .map(basename)
            .unwrap_or("run-parts"),
        Some((_, base)) => base,
        None => "",
    };
    let base = EXTENSIONS
        .iter()
        .find_map(|extension| base.strip_suffix(extension))
        .filter(|stem| !stem.is_empty())
        .unwrap_or(base);
    slug(base)
}

/// The index of the word that names the program, if any.
fn program(words: &[String]) -> Option<usize> {
    let mut at = 0;
    while let Some(word) = words.get(at) {
        let base = basename(word);
        if is_assignment(word) || matches!(word.as_str(), "&&" | "||" | ";") {
            at += 1;
        } else if word == "cd" {
            at = after_separator(words, at).unwrap_or(words.len());
        } else if word == "test" || word == "[" {
            at = words[at..]
                .iter()
                .position(|word| word == "||" || word == "&&")
                .map_or(words.len(), |found| at + found + 1);
        } else if WRAPPERS.contains(&base) || INTERPRETERS.contains(&base) {
            // (A duration, `timeout 5m`, counts as an option's number.)
            at = past_options(words, at + 1);
            if base == "flock" {
                // The lock file.
                at += 1;
            }
        } else {
            return Some(at);
        }
    }
    None
}

/// The index after the `&&` or `;` that ends the command at `at` (a word
/// ending in `;` ends it too).
fn after_separator(words: &[String], at: usize) -> Option<usize> {
    words[at..]
        .iter()
        .position(|word| word == "&&" || word == ";" || word.ends_with(';'))
        .map(|found| at + found + 1)
}

/// The index of the first word from `at` that is not an option (`-n`,
/// `--x=1`) or a number or duration given to one (`19`, `5m`, `1.5s`).
fn past_options(words: &[String], mut at: usize) -> usize {
    while let Some(word) = words.get(at) {
        let number = word.starts_with(|c: char| c.is_ascii_digit())
            && word
                .trim_end_matches(['s', 'm', 'h', 'd'])
                .chars()
                .all(|c| c.is_ascii_digit() || c == '.');
        if word.starts_with('-') || number || is_assignment(word) {
            at += 1;
        } else {
            break;
        }
    }
    at
}

/// `NAME=value` (`env` and the shell take it as a variable).
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The part after the last `/`.
fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// `text` with every run of characters a job name cannot hold turned into
/// one `-`, no `-` or `.` at either end, at most [`MAX_LEN`] characters;
/// `job` if nothing is left.
fn slug(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let trimmed = out.trim_matches(['-', '.']);
    let cut: String = trimmed.chars().take(MAX_LEN).collect();
    let cut = cut.trim_end_matches(['-', '.']);
    if cut.is_empty() {
        "job".to_string()
    } else {
        cut.to_string()
    }
}

/// The names given so far.
#[derive(Default)]
pub(super) struct Names {
    taken: HashSet<String>,
}

impl Names {
    /// `base` if it is free, else `base-2`, `base-3`, ... (shortened to fit
    /// [`MAX_LEN`]); taken from then on.
    pub fn unique(&mut self, base: &str) -> String {
        let mut candidate = base.to_string();
        let mut n = 1;
        while self.taken.contains(&candidate) {
            n += 1;
            let suffix = format!("-{n}");
            let keep = MAX_LEN.saturating_sub(suffix.len());
            let stem: String = base.chars().take(keep).collect();
            candidate = format!("{}{suffix}", stem.trim_end_matches(['-', '.']));
        }
        self.taken.insert(candidate.clone());
        candidate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_names_the_job() {
        for (command, name) in [
            ("/usr/local/bin/backup.sh --full", "backup"),
            ("cd /srv/app && ./bin/report > /tmp/r.log 2>&1", "report"),
            ("cd /srv/app; make clean", "make"),
            ("flock -n /tmp/x.lock /usr/local/bin/sync", "sync"),
            ("flock -w 10 /tmp/x.lock sync", "sync"),
            ("nice -n 19 ionice -c3 /usr/bin/rsync -a /a /b", "rsync"),
            ("timeout 1h php /var/www/artisan schedule:run", "artisan"),
            ("FOO=1 python3 -u /opt/jobs/clean.py", "clean"),
            ("env LANG=C /usr/bin/updatedb", "updatedb"),
            (
                "test -x /usr/sbin/anacron || ( cd / && run-parts --report /etc/cron.daily )",
                "cron.daily",
            ),
            ("cd / && run-parts --report /etc/cron.hourly", "cron.hourly"),
            ("[ -x /usr/lib/x ] && /usr/lib/x/cleanup", "cleanup"),
            ("(cd /tmp && rm -f x)", "rm"),
            ("\"/opt/My Tool/run\" now", "My"),
            ("echo ${HOME} | mail", "echo"),
            ("/usr/bin/!!!", "job"),
            ("nice", "job"),
            ("/srv/.hidden", "hidden"),
        ] {
            assert_eq!(suggest(command), name, "{command}");
        }
        let long = format!("/bin/{}", "a".repeat(100));
        assert_eq!(suggest(&long).len(), 64);
        assert_eq!(suggest("/x/ümlaut.sh"), "mlaut");
    }

    #[test]
    fn names_are_unique_in_file_order() {
        let mut names = Names::default();
        assert_eq!(names.unique("backup"), "backup");
        assert_eq!(names.unique("backup"), "backup-2");
        assert_eq!(names.unique("backup-2"), "backup-2-2");
        assert_eq!(names.unique("backup"), "backup-3");
        let long = "b".repeat(64);
        assert_eq!(names.unique(&long), long);
        let second = names.unique(&long);
        assert_eq!(second, format!("{}-2", "b".repeat(62)));
        assert!(crate::config::is_job_name(&second));
    }
}
