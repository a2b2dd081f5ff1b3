//! What the file does not say: whether a user name follows the time fields
//! (a system crontab), and the zone cron read its entries in.
//!
//! The format, unless `--system` or `--user` says it: `/etc/crontab` and
//! the files in `/etc/cron.d` are system crontabs (as cron reads them);
//! any other file is one when every entry has a word after the time
//! fields and before a command that is `root` or a user of this machine
//! (a command's first word rarely is, and never in every entry), else a
//! user crontab. The zone, unless `--timezone` says it: `TZ`, else the
//! zone `/etc/localtime` links to, else `/etc/timezone`.

use std::path::Path;

use chrono_tz::Tz;

use super::line::{self, Line};

/// How to read a file taken for a system crontab as a user crontab.
const USER_HINT: &str = "; --user to read it as a user crontab";

/// Whether to read `text` (from `path`, `None` for standard input) as a
/// system crontab, and a sentence saying why, for stderr.
pub(super) fn format(path: Option<&Path>, text: &str) -> (bool, String) {
    if let Some(path) = path {
        let real = std::fs::canonicalize(path).ok();
        for candidate in std::iter::once(path).chain(real.as_deref()) {
            if candidate == Path::new("/etc/crontab") {
                return (true, format!("as cron reads /etc/crontab{USER_HINT}"));
            }
            if candidate.parent() == Some(Path::new("/etc/cron.d")) {
                return (
                    true,
                    format!("as cron reads the files in /etc/cron.d{USER_HINT}"),
                );
            }
        }
    }
    by_users(text, &|name| {
        matches!(nix::unistd::User::from_name(name), Ok(Some(_)))
    })
}

/// The system format when every entry of `text` names a user (`root`, or
/// one `exists` knows) before its command.
fn by_users(text: &str, exists: &dyn Fn(&str) -> bool) -> (bool, String) {
    let mut users: Vec<&str> = Vec::new();
    let mut entries = 0;
    for raw in text.lines() {
        match line::read(raw, true) {
            Line::Nothing | Line::Variable { .. } => {}
            Line::Entry(Ok(entry)) => {
                entries += 1;
                match entry.user {
                    Some(user) if is_user_name(user) && (user == "root" || exists(user)) => {
                        if !users.contains(&user) {
                            users.push(user);
                        }
                    }
                    _ => return (false, user_format()),
                }
            }
            Line::Entry(Err(_)) => return (false, user_format()),
        }
    }
    if entries == 0 {
        return (false, user_format());
    }
    (
        true,
        format!(
            "as the word after the time fields of each entry is a user of this machine \
             ({}){USER_HINT}",
            users.join(", ")
        ),
    )
}

fn user_format() -> String {
    "(the command right after the time fields); --system if a user name comes first".to_string()
}

/// `[a-z_][a-z0-9_.-]*` with an optional final `$`, at most 32 long: what
/// `useradd` accepts.
fn is_user_name(word: &str) -> bool {
    let name = word.strip_suffix('$').unwrap_or(word);
    (1..=32).contains(&word.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-'))
}

/// This machine's zone and where it was read, if it can be told.
pub(super) fn local_zone() -> Option<(Tz, &'static str)> {
    if let Ok(value) = std::env::var("TZ")
        && let Some(zone) = zone_named(&value)
    {
        return Some((zone, "TZ"));
    }
    if let Ok(target) = std::fs::read_link("/etc/localtime")
        && let Some(zone) = zone_named(&target.to_string_lossy())
    {
        return Some((zone, "/etc/localtime"));
    }
    if let Ok(text) = std::fs::read_to_string("/etc/timezone")
        && let Some(zone) = zone_named(text.trim())
    {
        return Some((zone, "/etc/timezone"));
    }
    None
}

/// The zone `text` names: `Europe/Berlin`, `:Europe/Berlin`, or a path
/// into a zoneinfo directory.
fn zone_named(text: &str) -> Option<Tz> {
    let text = text.trim().trim_start_matches(':');
    let name = match text.rfind("zoneinfo/") {
        Some(at) => &text[at + "zoneinfo/".len()..],
        None => text,
    };
    name.parse::<Tz>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_naming_a_user_makes_a_system_crontab() {
        let exists = |name: &str| matches!(name, "backup" | "www-data");
        let system = |text: &str| by_users(text, &exists).0;
        assert!(system(
            "PATH=/bin\n# x\n0 * * * * root run-parts /etc/cron.hourly\n@daily www-data /x y\n"
        ));
        assert!(system("0 1 * * * backup dump --all\n"));
        // A command, not a user; a user not on this machine; no command.
        assert!(!system("0 * * * * /usr/bin/x y\n"));
        assert!(!system("0 * * * * root x\n0 1 * * * nobody-here x\n"));
        assert!(!system("0 * * * * backup\n"));
        assert!(!system("0 * * * * cd /x && y\n"));
        assert!(!system("# nothing\n"));
        assert!(
            by_users(
                "0 1 * * * backup x\n0 2 * * * root y\n0 3 * * * root z\n",
                &exists
            )
            .1
            .contains("(backup, root)")
        );
    }

    #[test]
    fn user_names_and_zones() {
        assert!(is_user_name("www-data") && is_user_name("_apt") && is_user_name("m$"));
        assert!(!is_user_name("/usr/bin/x") && !is_user_name("Root") && !is_user_name(""));
        assert_eq!(zone_named(":Europe/Berlin"), Some(Tz::Europe__Berlin));
        assert_eq!(
            zone_named("/usr/share/zoneinfo/America/New_York"),
            Some(Tz::America__New_York)
        );
        assert_eq!(zone_named("../zoneinfo/Etc/UTC"), Some(Tz::Etc__UTC));
        assert_eq!(zone_named("CET-1CEST"), None);
    }
}
