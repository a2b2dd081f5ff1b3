//! What the variables above an entry set: cron applies a variable to the
//! entries below it, up to the next line that sets it again.
//!
//! `CRON_TZ` is the entries' zone; `SHELL` their shell; `MAILTO`,
//! `MAILFROM`, the mail headers and `RANDOM_DELAY` have no counterpart
//! (their lines are left as comments, saying what to use instead), nor
//! does a name `env` cannot take; every other variable goes into the
//! entries' `env`. Those values may be secrets: a warning never holds
//! one (only a `CRON_TZ`'s zone name).

use chrono_tz::Tz;

/// The zone `CRON_TZ` sets for the entries below it.
#[derive(Debug, Default)]
pub(super) enum Zone {
    /// No `CRON_TZ` (or an empty one): the machine's zone.
    #[default]
    Default,
    Set(Tz),
    /// A name that is no zone, set on `line`: its entries are left out.
    Unknown {
        name: String,
        line: usize,
    },
}

/// What the variables read so far set.
#[derive(Debug, Default)]
pub(super) struct Scope {
    pub zone: Zone,
    /// `None`: `/bin/sh`.
    pub shell: Option<String>,
    /// In the order the names were first set.
    pub env: Vec<(String, String)>,
}

impl Scope {
    /// Applies `NAME=value`, set on `line`; `Some` why when the line is
    /// left as a comment (`warnings` gets what stderr should say).
    pub fn set(
        &mut self,
        name: &str,
        value: String,
        line: usize,
        warnings: &mut Vec<String>,
    ) -> Option<String> {
        if value.contains('\0') {
            return Some("not carried over: the value holds a NUL byte".to_string());
        }
        match name {
            "CRON_TZ" if value.is_empty() => self.zone = Zone::Default,
            "CRON_TZ" => match crate::config::time_zone(&value) {
                Ok(zone) => self.zone = Zone::Set(zone),
                Err(message) => {
                    let why = format!(
                        "{message}: the entries below it, up to the next CRON_TZ, are left as \
                         comments"
                    );
                    warnings.push(format!("line {line}: CRON_TZ: {why}"));
                    self.zone = Zone::Unknown { name: value, line };
                    return Some(why);
                }
            },
            "SHELL" => {
                self.shell = Some(value).filter(|shell| !shell.is_empty() && shell != "/bin/sh");
            }
            "MAILTO" | "MAILFROM" | "CONTENT_TYPE" | "CONTENT_TRANSFER_ENCODING" => {
                return Some(
                    "not carried over: solocron sends no mail; a run's output goes to the log and \
                 its history entry. To hear of a failure, give the jobs an `on_failure` \
                 notifier (README.md, \"When a job fails\")"
                        .to_string(),
                );
            }
            "RANDOM_DELAY" => {
                let splay = match value.trim().parse::<u32>() {
                    Ok(minutes) => format!("`splay = \"{minutes}m\"`"),
                    Err(_) => "`splay`".to_string(),
                };
                return Some(format!(
                    "not carried over: solocron has no random delay; {splay} on a job starts each \
                 of its occurrences a fixed offset of its own later, up to that long"
                ));
            }
            _ if !crate::config::is_env_name(name) => {
                return Some(format!(
                    "not carried over: `{name}` is not a name `env` takes (letters, digits and `_`, \
                 not starting with a digit)"
                ));
            }
            _ if name.starts_with("SOLOCRON_") => {
                return Some(
                    "not carried over: `SOLOCRON_` variables are set by solocron for each run"
                        .to_string(),
                );
            }
            _ => match self.env.iter_mut().find(|(known, _)| known == name) {
                Some((_, old)) => *old = value,
                None => self.env.push((name.to_string(), value)),
            },
        }
        None
    }
}
