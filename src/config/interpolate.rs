//! `${NAME}` interpolation of config values from the daemon's environment.
//!
//! Done once, when the file loads, so a missing variable is an error at
//! start (or reload), not at 2 a.m. `$${` is an escape for a literal `${`;
//! any other `$` is kept as written. The resolved values may be secrets, so
//! errors name the variable, never a value.

/// Why a template could not be filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum InterpolateError {
    /// `${NAME}` where `NAME` is not set in the environment.
    Missing(String),
    /// `${` without a closing `}`.
    Unterminated,
    /// `${...}` whose content is not a variable name.
    BadName(String),
}

impl InterpolateError {
    /// The reason, lowercase, for after "[jobs.x] `key`: ".
    pub fn describe(&self) -> String {
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
        }
    }
}

/// Replaces every `${NAME}` in `template` with `env(NAME)` and every `$${`
/// with `${`.
pub(super) fn interpolate(
    template: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, InterpolateError> {
    let mut out = String::with_capacity(template.len());
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
            let value = env(name).ok_or_else(|| InterpolateError::Missing(name.to_string()))?;
            out.push_str(&value);
            rest = &after[close + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// `[A-Za-z_][A-Za-z0-9_]*`: a name a shell would accept.
pub(super) fn is_env_name(name: &str) -> bool {
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

    #[test]
    fn replaces_variables_and_keeps_other_text() {
        let filled = interpolate("Bearer ${TOKEN}!${EMPTY} $5 a$b $", &env);
        assert_eq!(filled, Ok("Bearer s3cret! $5 a$b $".to_string()));
    }

    #[test]
    fn double_dollar_brace_is_a_literal() {
        assert_eq!(
            interpolate("$${TOKEN} $$x", &env),
            Ok("${TOKEN} $$x".to_string())
        );
        // Read left to right: a lone `$`, then the escape.
        assert_eq!(interpolate("$$${TOKEN}", &env), Ok("$${TOKEN}".to_string()));
    }

    #[test]
    fn missing_unterminated_and_bad_names_are_errors() {
        assert_eq!(
            interpolate("x ${NOPE} y", &env),
            Err(InterpolateError::Missing("NOPE".to_string()))
        );
        assert_eq!(
            interpolate("${TOKEN", &env),
            Err(InterpolateError::Unterminated)
        );
        assert_eq!(
            interpolate("${1X}", &env),
            Err(InterpolateError::BadName("1X".to_string()))
        );
        assert_eq!(
            InterpolateError::Missing("NOPE".to_string()).describe(),
            "environment variable `NOPE` is not set (write `$${` for a literal `${`)"
        );
    }

    #[test]
    fn env_names() {
        assert!(is_env_name("REPORT_TO") && is_env_name("_x1"));
        assert!(!is_env_name("") && !is_env_name("1A") && !is_env_name("A-B"));
    }
}
