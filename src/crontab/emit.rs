//! The `jobs.toml` fragment: a header, then each job as a `[jobs.NAME]`
//! table and each line left out as a comment, in the crontab's order.
//!
//! Strings are written by the `toml` crate's own writer, so they read back
//! exactly (quotes, backslashes, newlines, any Unicode). `command` and
//! `env` values are also escaped for the loader's `${VAR}` interpolation
//! ([`crate::config::escape_interpolation`]): a crontab's `${HOME}` is the
//! shell's to expand when the job runs, not the loader's. Comment text
//! (the crontab's own lines, a file name) has its control characters
//! written as escapes, which a TOML comment cannot hold.

use std::fmt::Write as _;

use super::translate::{Action, Block, Job};
use crate::config::escape_interpolation;

/// Says, at the top of a system crontab's fragment, how the user field
/// fares under the unit (`systemd/solocron.service`).
const AS_SERVICE_USER: &str = "\
#
# cron ran each entry as the user its line names. solocron runs every job
# as the unit's service user (User=solocron), and the unit's
# NoNewPrivileges=yes and empty CapabilityBoundingSet= keep a job from
# becoming another user (sudo, su and runuser fail). Give the service user
# what each job needs (group membership, file modes, ReadWritePaths= in a
# drop-in), or, when the jobs must all run as one user, set User= and
# Group= in a drop-in (`systemctl edit solocron`).
";

/// The fragment for `blocks`, read from `source` (a path, or "standard
/// input") as a system crontab or not.
pub(super) fn fragment(source: &str, system: bool, blocks: &[Block]) -> String {
    let mut out = String::new();
    let kind = if system { "system" } else { "user" };
    // Writing to a String cannot fail.
    let _ = writeln!(
        out,
        "# Imported by `solocron import-crontab` from {}, read as a {kind} crontab.\n\
         # Add a [redis] section naming the fleet's Redis, then run `solocron check`.",
        comment(source)
    );
    if system {
        out.push_str(AS_SERVICE_USER);
    }
    for block in blocks {
        out.push('\n');
        match block {
            Block::Note { line, text, why } => {
                let _ = writeln!(out, "# line {line}: {}  ({})", comment(text), comment(why));
            }
            Block::Job(job) => write_job(&mut out, job),
        }
    }
    out
}

fn write_job(out: &mut String, job: &Job) {
    let _ = writeln!(out, "# line {}: {}", job.line, comment(&job.text));
    if let Some(user) = &job.user {
        let _ = writeln!(
            out,
            "# cron ran it as `{}`; solocron runs it as its service user (see the top)",
            comment(user)
        );
    }
    if job.fed_input {
        out.push_str("# cron wrote the text after `%` to its standard input; so does printf\n");
    }
    let _ = writeln!(out, "[jobs.{}]", key(&job.name));
    let _ = writeln!(out, "schedule = {}", string(&job.schedule));
    if let Some(zone) = job.timezone {
        let _ = writeln!(out, "timezone = {}", string(zone.name()));
    }
    match &job.action {
        Action::Command(command) => {
            let _ = writeln!(out, "command = {}", string(&escape_interpolation(command)));
        }
        // `argv` is not interpolated.
        Action::Argv(argv) => {
            let items: Vec<String> = argv.iter().map(|item| string(item)).collect();
            let _ = writeln!(out, "argv = [{}]", items.join(", "));
        }
    }
    if !job.env.is_empty() {
        let pairs: Vec<String> = job
            .env
            .iter()
            .map(|(name, value)| {
                format!("{} = {}", key(name), string(&escape_interpolation(value)))
            })
            .collect();
        let _ = writeln!(out, "env = {{ {} }}", pairs.join(", "));
    }
}

/// `text` as a TOML string.
fn string(text: &str) -> String {
    toml::Value::String(text.to_string()).to_string()
}

/// `name` as a TOML key: bare when it can be, else a basic string
/// (`"a.b"`; the writer's choice for values may be multi-line, which a key
/// cannot be).
fn key(name: &str) -> String {
    let bare = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if bare {
        return name.to_string();
    }
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `text` for a comment: control characters but tab written as escapes
/// (`\u{1b}`).
fn comment(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() && c != '\t' {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_and_keys_read_back_exactly() {
        for text in [
            "plain",
            "it's",
            "say \"hi\"",
            "both ' and \"",
            "back\\slash",
            "a\nb",
            "printf '%s\\n' 'it'\\''s' | {\ncat\n}",
            "tab\tand \u{7}bell",
            "''' and \"\"\"",
            "ends with '",
            "ümlaut ✓ 🦀",
        ] {
            let document = format!("value = {}\n{} = 1\n", string(text), key(text));
            let table: toml::Table = document
                .parse()
                .unwrap_or_else(|err| panic!("{document}: {err}"));
            assert_eq!(table["value"].as_str(), Some(text), "{document}");
            assert!(table.contains_key(text), "{document}");
        }
        assert_eq!(key("db.backup"), "\"db.backup\"");
        assert_eq!(key("sync-cache_2"), "sync-cache_2");
    }

    #[test]
    fn comments_hold_no_control_character() {
        assert_eq!(comment("a\tb\u{1b}[0m\r"), "a\tb\\u{1b}[0m\\u{d}");
    }
}
