//! One line of a crontab, read as cron reads it (cronie's `load_env`,
//! then `load_entry`): nothing (blank, a comment), a variable, or an entry.
//!
//! A line is a variable when it reads as `NAME=value` by cron's rules
//! (blanks around `=`, a name or value in single or double quotes, an
//! unquoted value's trailing blanks dropped); anything else that is not
//! blank or a comment is an entry: five time fields or an `@` word, a user
//! name in a system crontab, then the command, everything to the end of
//! the line. An entry cron would refuse is `Err` with the reason.

/// The `@` words cron reads as a schedule (`@reboot` aside).
const MACROS: [&str; 7] = [
    "yearly", "annually", "monthly", "weekly", "daily", "midnight", "hourly",
];

/// What one line is.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Line<'a> {
    /// Blank, or a comment (`#` first after blanks).
    Nothing,
    /// `NAME=value`: sets `NAME` for the entries below it.
    Variable { name: String, value: String },
    /// An entry cron reads; `Err` why cron refuses it.
    Entry(Result<Entry<'a>, String>),
}

/// An entry: when, as whom (system crontab), what.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Entry<'a> {
    pub when: When<'a>,
    /// The user field of a system crontab.
    pub user: Option<&'a str>,
    /// Everything after the time fields (and user), blanks before it
    /// dropped, `%` not yet read.
    pub command: &'a str,
}

/// An entry's schedule.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum When<'a> {
    /// The five time fields, joined by one space.
    Fields(String),
    /// `@daily` and the like, as written.
    Macro(&'a str),
    /// `@reboot`: at each start of cron.
    Reboot,
}

/// Reads `text`, one line of a crontab; `system`: a user name follows the
/// time fields.
pub(super) fn read(text: &str, system: bool) -> Line<'_> {
    let trimmed = text.trim_start();
    if trimmed.is_empty() || trimmed.starts_with('#') {
        return Line::Nothing;
    }
    if let Some((name, value)) = variable(trimmed) {
        return Line::Variable { name, value };
    }
    Line::Entry(entry(trimmed, system))
}

/// The states of cron's reading of `NAME=value`, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The first character of the name: it may be a quote.
    NameStart,
    Name,
    /// After the name, before `=`.
    BeforeEquals,
    /// After `=`, blanks skipped.
    AfterEquals,
    /// The first character of the value: it may be a quote.
    ValueStart,
    Value,
    /// After a quoted value: only blanks may follow.
    Done,
}

/// `NAME=value` by cronie's `load_env`, or `None` when the line is not a
/// variable. One leniency: `NAME=` with nothing after it is an empty value
/// (cronie refuses the line; other crons take it).
fn variable(text: &str) -> Option<(String, String)> {
    let mut state = State::NameStart;
    let mut quote: Option<char> = None;
    let (mut name, mut value) = (String::new(), String::new());
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        match state {
            State::NameStart | State::ValueStart => {
                if c == '\'' || c == '"' {
                    quote = Some(c);
                    chars.next();
                }
                state = if state == State::NameStart {
                    State::Name
                } else {
                    State::Value
                };
            }
            State::Name | State::Value => {
                if let Some(q) = quote {
                    if c == q {
                        chars.next();
                        state = if state == State::Name {
                            State::BeforeEquals
                        } else {
                            State::Done
                        };
                        continue;
                    }
                    if state == State::Name && c == '=' {
                        return None;
                    }
                } else if state == State::Name {
                    if c.is_ascii_whitespace() {
                        chars.next();
                        state = State::BeforeEquals;
                        continue;
                    }
                    if c == '=' {
                        state = State::BeforeEquals;
                        continue;
                    }
                }
                if state == State::Name {
                    name.push(c);
                } else {
                    value.push(c);
                }
                chars.next();
            }
            State::BeforeEquals => {
                if c == '=' {
                    state = State::AfterEquals;
                    quote = None;
                } else if !c.is_ascii_whitespace() {
                    return None;
                }
                chars.next();
            }
            State::AfterEquals | State::Done => {
                if c.is_ascii_whitespace() {
                    chars.next();
                } else if state == State::Done {
                    return None;
                } else {
                    state = State::ValueStart;
                }
            }
        }
    }
    if name.is_empty() {
        return None;
    }
    match state {
        State::Done | State::AfterEquals => Some((name, value)),
        State::Value if quote.is_none() => {
            let kept = value.trim_end_matches(|c: char| c.is_ascii_whitespace());
            Some((name, kept.to_string()))
        }
        _ => None,
    }
}

/// The word at the start of `text` (blanks before it skipped) and the
/// rest after the blanks that follow it.
fn word(text: &str) -> (&str, &str) {
    let text = text.trim_start_matches([' ', '\t']);
    let end = text.find([' ', '\t']).unwrap_or(text.len());
    (&text[..end], text[end..].trim_start_matches([' ', '\t']))
}

/// An entry by cronie's `load_entry`: the time fields are only split here
/// (the schedule's own parser checks them), the rest is checked as cron
/// does.
fn entry(text: &str, system: bool) -> Result<Entry<'_>, String> {
    // A leading `-`: cron logs no line when it runs the entry.
    let text = text.strip_prefix('-').unwrap_or(text);
    let what = if system {
        "five time fields (or an `@` word), a user and a command"
    } else {
        "five time fields (or an `@` word) and a command"
    };
    let (when, rest) = if let Some(after) = text.strip_prefix('@') {
        let (name, rest) = word(after);
        let when = match name {
            "reboot" => When::Reboot,
            _ if MACROS.contains(&name) => When::Macro(&text[..=name.len()]),
            _ => {
                return Err(format!(
                    "cron refuses it: `@{name}` is not one of @reboot, @yearly, @annually, \
                     @monthly, @weekly, @daily, @midnight, @hourly"
                ));
            }
        };
        (when, rest)
    } else {
        let mut fields = Vec::with_capacity(5);
        let mut rest = text;
        for _ in 0..5 {
            let (field, after) = word(rest);
            if field.is_empty() {
                return Err(format!("cron refuses it: expected {what}"));
            }
            fields.push(field);
            rest = after;
        }
        if rest.starts_with('*') {
            return Err(
                "cron refuses it: the command starts with `*` (a sixth time field? cron's \
                 fields are minute, hour, day of month, month, day of week)"
                    .to_string(),
            );
        }
        (When::Fields(fields.join(" ")), rest)
    };
    let (user, command) = if system {
        let (user, command) = word(rest);
        (Some(user).filter(|user| !user.is_empty()), command)
    } else {
        (None, rest)
    };
    if command.is_empty() {
        return Err(format!("cron refuses it: expected {what}"));
    }
    Ok(Entry {
        when,
        user,
        command,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(text: &str) -> Option<(String, String)> {
        match read(text, false) {
            Line::Variable { name, value } => Some((name, value)),
            _ => None,
        }
    }

    fn pair(name: &str, value: &str) -> Option<(String, String)> {
        Some((name.to_string(), value.to_string()))
    }

    #[test]
    fn variables_read_as_cron_reads_them() {
        assert_eq!(var("PATH=/usr/bin:/bin"), pair("PATH", "/usr/bin:/bin"));
        assert_eq!(var("  MAILTO = ops@x  "), pair("MAILTO", "ops@x"));
        assert_eq!(var("A=b c  d  "), pair("A", "b c  d"));
        assert_eq!(var("A=\" spaced \"  "), pair("A", " spaced "));
        assert_eq!(var("A='it\"s'"), pair("A", "it\"s"));
        assert_eq!(var("\"A\"=1"), pair("A", "1"));
        assert_eq!(var("MAILTO=\"\""), pair("MAILTO", ""));
        assert_eq!(var("MAILTO="), pair("MAILTO", ""));
        assert_eq!(var("A=x=y"), pair("A", "x=y"));
        // Not variables: cron reads them as entries.
        assert_eq!(var("A=\"open"), None);
        assert_eq!(var("A=\"x\" y"), None);
        assert_eq!(var("A B=c"), None);
        assert_eq!(var("=x"), None);
        assert_eq!(var("0 2 * * * A=b cmd"), None);
        assert_eq!(var("@daily A=b"), None);
        assert_eq!(var("export A=b"), None);
    }

    #[test]
    fn blanks_and_comments_are_nothing() {
        assert_eq!(read("", false), Line::Nothing);
        assert_eq!(read(" \t", true), Line::Nothing);
        assert_eq!(read("  # 0 * * * * x", false), Line::Nothing);
    }

    #[test]
    fn entries_split_into_when_user_and_command() {
        let entry = |text, system| match read(text, system) {
            Line::Entry(entry) => entry,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            entry("*/5  1-3\t* jan mon-fri  echo  a  b ", false),
            Ok(Entry {
                when: When::Fields("*/5 1-3 * jan mon-fri".to_string()),
                user: None,
                command: "echo  a  b ",
            })
        );
        assert_eq!(
            entry("-@daily root run-parts /etc/cron.daily", true),
            Ok(Entry {
                when: When::Macro("@daily"),
                user: Some("root"),
                command: "run-parts /etc/cron.daily",
            })
        );
        assert_eq!(
            entry("@reboot /usr/bin/warm", false).map(|e| e.when),
            Ok(When::Reboot)
        );
        for (text, system, why) in [
            ("@every 5m x", false, "`@every` is not one of"),
            ("@Daily x", false, "`@Daily` is not one of"),
            ("0 * * *", false, "expected five time fields"),
            ("0 * * * *", false, "and a command"),
            ("0 * * * * root", true, "a user and a command"),
            ("* * * * * * cmd", false, "starts with `*`"),
            ("hello world", false, "expected five"),
        ] {
            let refused = entry(text, system).expect_err(text);
            assert!(refused.contains(why), "{text}: {refused}");
        }
    }
}
