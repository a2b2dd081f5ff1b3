//! `${NAME}` interpolation of config values from the daemon's environment.
//!
//! Done once, when the file loads, so a missing variable is an error at
//! start (or reload), not at 2 a.m. `$${` is an escape for a literal `${`;
//! any other `$` is kept as written. The resolved values may be secrets, so
//! errors name the variable, never a value.
//!
//! The `SOLOCRON_*` variables a run sees (docs/configuration.md) do not exist
//! yet when the file loads: `${SOLOCRON_OCCURRENCE}` is refused with what to
//! write instead, even when the loading process happens to have it set (a
//! `check` run by a job would otherwise bake in that run's value).

/// Set by solocron for each run (and notifier), never at load time.
const RUN_TIME: &[&str] = &[
    "SOLOCRON_JOB",
    "SOLOCRON_OCCURRENCE",
    "SOLOCRON_FENCE",
    "SOLOCRON_NODE",
    "SOLOCRON_ATTEMPT",
    "SOLOCRON_OUTCOME",
    "SOLOCRON_EXIT_CODE",
    "SOLOCRON_ERROR",
    "SOLOCRON_OUTPUT_TAIL",
];

/// Why a template could not be filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum InterpolateError {
    /// `${NAME}` where `NAME` is not set in the environment.
    Missing(String),
    /// `${` without a closing `}`.
    Unterminated,
    /// `${...}` whose content is not a variable name.
    BadName(String),
    /// `${SOLOCRON_OCCURRENCE}` and the like: set for each run.
    RunTime(String),
}

/// Where a template sits, for what to write instead of a run-time variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// `command`, run by `/bin/sh -c`.
    Command,
    /// `http.url`, `http.headers`, `http.body`.
    Http,
    /// A value of `env`.
    Env,
}

/// A filled-in template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Filled {
    pub text: String,
    /// `false` when an unset `${VAR}` was kept as written (only when
    /// loading for inspection): checks of the resolved value do not apply.
    pub complete: bool,
    /// The values put in place of `${VAR}`s, in order (empty ones left
    /// out): what may be a secret, as opposed to the text of the file.
    pub values: Vec<String>,
}

impl InterpolateError {
    /// The reason, lowercase, for after "[jobs.x] `key`: ".
    pub fn describe(&self, place: Place) -> String {
        match self {
            InterpolateError::Missing(name) => format!(
                "environment variable `{name}` is not set (write `$${{` for a literal `${{`)"
            ),
            InterpolateError::Unterminated => {
                "`${` without a closing `}` (write `$${` for a literal `${`)".to_string()
            }
            InterpolateError::BadName(name) => format!(
                "`${{{name}}}` is not a variable name: use letters, digits and `_`, not starting with a digit"
            ),
            InterpolateError::RunTime(name) => {
                let when = format!(
                    "`${{{name}}}` is set for each run, not when the file loads (`${{...}}` is filled in at load time)"
                );
                match place {
                    Place::Command => format!(
                        "{when}: write `$${{{name}}}` so that the shell expands it when the job runs"
                    ),
                    Place::Http => format!(
                        "{when}: every request already carries it in the `{}` header",
                        header_name(name)
                    ),
                    Place::Env => {
                        format!("{when}: every run already has `{name}` in its environment")
                    }
                }
            }
        }
    }
}

/// `SOLOCRON_EXIT_CODE` -> `Solocron-Exit-Code`.
fn header_name(variable: &str) -> String {
    variable
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            match chars.next() {
                Some(first) => first
                    .to_uppercase()
                    .chain(chars.flat_map(char::to_lowercase))
                    .collect(),
                None => String::new(),
            }
        })
        .collect::<Vec<String>>()
        .join("-")
}

/// Replaces every `${NAME}` in `template` with `env(NAME)` and every `$${`
/// with `${`. With `keep_unset`, an unset `${NAME}` stays as written and
/// the result is not `complete`; every other error still counts.
pub(super) fn interpolate(
    template: &str,
    env: &dyn Fn(&str) -> Option<String>,
    keep_unset: bool,
) -> Result<Filled, InterpolateError> {
    let mut out = String::with_capacity(template.len());
    let mut complete = true;
    let mut values = Vec::new();
    let mut rest = template;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let tail = &rest[dollar..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let close = after.find('}').ok_or(InterpolateError::Unterminated)?;
            let name = &after[..close];
            if !is_env_name(name) {
                return Err(InterpolateError::BadName(name.to_string()));
            }
            if RUN_TIME.contains(&name) {
                return Err(InterpolateError::RunTime(name.to_string()));
            }
            match env(name) {
                Some(value) => {
                    out.push_str(&value);
                    if !value.is_empty() {
                        values.push(value);
                    }
                }
                None if keep_unset => {
                    out.push_str(&tail[..close + 3]);
                    complete = false;
                }
                None => return Err(InterpolateError::Missing(name.to_string())),
            }
            rest = &after[close + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(Filled {
        text: out,
        complete,
        values,
    })
}

/// `text` written so that [`interpolate`] gives it back unchanged: every
/// `${` becomes `$${` (read left to right, `$$${` is a `$` then the
/// escape). For a value taken from elsewhere that must mean what it says,
/// such as a crontab's command (`solocron import-crontab`).
pub fn escape(text: &str) -> String {
    text.replace("${", "$${")
}

/// `[A-Za-z_][A-Za-z0-9_]*`: a name a shell would accept.
pub fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("s3cret".to_string()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    fn filled(template: &str) -> Result<String, InterpolateError> {
        interpolate(template, &env, false).map(|filled| filled.text)
    }

    #[test]
    fn replaces_variables_and_keeps_other_text() {
        let filled = filled("Bearer ${TOKEN}!${EMPTY} $5 a$b $");
        assert_eq!(filled, Ok("Bearer s3cret! $5 a$b $".to_string()));
    }

    #[test]
    fn double_dollar_brace_is_a_literal() {
        assert_eq!(filled("$${TOKEN} $$x"), Ok("${TOKEN} $$x".to_string()));
        // Read left to right: a lone `$`, then the escape.
        assert_eq!(filled("$$${TOKEN}"), Ok("$${TOKEN}".to_string()));
    }

    #[test]
    fn missing_unterminated_and_bad_names_are_errors() {
        assert_eq!(
            filled("x ${NOPE} y"),
            Err(InterpolateError::Missing("NOPE".to_string()))
        );
        assert_eq!(filled("${TOKEN"), Err(InterpolateError::Unterminated));
        assert_eq!(
            filled("${1X}"),
            Err(InterpolateError::BadName("1X".to_string()))
        );
        assert_eq!(
            InterpolateError::Missing("NOPE".to_string()).describe(Place::Command),
            "environment variable `NOPE` is not set (write `$${` for a literal `${`)"
        );
    }

    #[test]
    fn keep_unset_keeps_the_text_and_says_it_is_incomplete() {
        let filled = interpolate("a ${NOPE} ${TOKEN} $${X}", &env, true);
        assert_eq!(
            filled,
            Ok(Filled {
                text: "a ${NOPE} s3cret ${X}".to_string(),
                complete: false,
                values: vec!["s3cret".to_string()],
            })
        );
        assert_eq!(
            interpolate("${TOKEN", &env, true),
            Err(InterpolateError::Unterminated)
        );
        let full = interpolate("${TOKEN}", &env, true).map(|f| f.complete);
        assert_eq!(full, Ok(true));
    }

    #[test]
    fn run_time_variables_are_refused_with_what_to_write() {
        let set = |_: &str| Some("stale".to_string());
        let err = interpolate("echo ${SOLOCRON_OCCURRENCE}", &set, false).expect_err("run time");
        assert_eq!(
            err.describe(Place::Command),
            "`${SOLOCRON_OCCURRENCE}` is set for each run, not when the file loads \
             (`${...}` is filled in at load time): write `$${SOLOCRON_OCCURRENCE}` so that \
             the shell expands it when the job runs"
        );
        assert!(
            err.describe(Place::Http)
                .ends_with("already carries it in the `Solocron-Occurrence` header")
        );
        let err = InterpolateError::RunTime("SOLOCRON_EXIT_CODE".to_string());
        assert!(err.describe(Place::Http).contains("`Solocron-Exit-Code`"));
        assert!(
            err.describe(Place::Env)
                .ends_with("every run already has `SOLOCRON_EXIT_CODE` in its environment")
        );
        // Other `SOLOCRON_` names are ordinary variables.
        assert_eq!(
            interpolate("${SOLOCRON_NODE_ID}", &set, false).map(|f| f.text),
            Ok("stale".to_string())
        );
        assert_eq!(
            filled("$${SOLOCRON_JOB}"),
            Ok("${SOLOCRON_JOB}".to_string())
        );
    }

    /// Every string of `$`, `{`, `}` and `A` up to 7 characters: its escape
    /// fills in to itself, with no variable looked up.
    #[test]
    fn an_escaped_text_fills_in_to_itself() {
        let none = |_: &str| None;
        let alphabet = ['$', '{', '}', 'A'];
        let mut texts = vec![String::new()];
        let mut longest = vec![String::new()];
        for _ in 0..7 {
            longest = longest
                .iter()
                .flat_map(|text| alphabet.iter().map(move |c| format!("{text}{c}")))
                .collect();
            texts.extend(longest.iter().cloned());
        }
        assert!(texts.len() > 20_000);
        for text in &texts {
            let filled = interpolate(&escape(text), &none, false).map(|filled| filled.text);
            assert_eq!(filled.as_deref(), Ok(text.as_str()), "{text:?}");
        }
        assert_eq!(escape("echo ${HOME} $${X}"), "echo $${HOME} $$${X}");
    }

    #[test]
    fn env_names() {
        assert!(is_env_name("REPORT_TO") && is_env_name("_x1"));
        assert!(!is_env_name("") && !is_env_name("1A") && !is_env_name("A-B"));
    }
}
