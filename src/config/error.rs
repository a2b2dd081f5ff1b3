//! [`ConfigError`] and the one way a position in `jobs.toml` becomes text.
//!
//! Every error a user can cause in the file starts with `path:line:column: `
//! (1-based; the column counts characters, not bytes) and ends with the
//! offending line and carets under the span, the way rustc and the toml
//! crate show it. Snippets come from the file as written, before `${VAR}`
//! interpolation, so a resolved secret can never appear in one; a
//! `scheme://user:password@` in the shown line is masked all the same,
//! because the Redis URL may carry its password in the file.
//!
//! A file with several errors is refused with all of them
//! ([`ConfigError::Several`], in file order, each shown whole). toml's
//! "duplicate key" names only the second definition; we find the first one
//! in the text and show both, because "which other `[jobs.x]`?" is the
//! first thing a reader of a 2,000-line file asks.

use std::fmt::Write as _;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::model::redact_url;

/// Why `jobs.toml` was refused; `Display` is the full message for people
/// (several lines when it shows a snippet).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file itself could not be read. The reason is part of the
    /// message (not a `source`), so the message is whole however it is
    /// printed and never says it twice.
    #[error("cannot read `{}`: {error}", path.display())]
    Read { path: PathBuf, error: io::Error },
    /// Not valid TOML.
    #[error("{}:{line}:{column}: {message}\n{snippet}", path.display())]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
        snippet: String,
    },
    /// Valid TOML that breaks a rule of docs/configuration.md. `key` is the
    /// dotted path of the offending key (`jobs.nightly-report.timezone`);
    /// `message` names the table and key the way a person reads them.
    #[error("{}:{line}:{column}: {message}\n{snippet}", path.display())]
    Invalid {
        path: PathBuf,
        line: usize,
        column: usize,
        key: String,
        message: String,
        snippet: String,
    },
    /// More than one error in the file (guarantee 7, docs/guarantees.md: every
    /// error of a file is reported), in file order. Never empty and never holds
    /// a `Several`; a single error is reported as itself. `Display` shows each
    /// one whole, then `N errors in PATH`.
    #[error("{}", show_several(path, errors))]
    Several {
        path: PathBuf,
        errors: Vec<ConfigError>,
    },
}

fn show_several(path: &Path, errors: &[ConfigError]) -> String {
    let mut out = String::new();
    for err in errors {
        let _ = write!(out, "{err}\n\n");
    }
    let _ = write!(out, "{} errors in {}", errors.len(), path.display());
    out
}

impl ConfigError {
    /// Where in the file the error points, as `(line, column)`; `None` when
    /// the file could not be read at all.
    pub fn position(&self) -> Option<(usize, usize)> {
        match self {
            ConfigError::Read { .. } => None,
            ConfigError::Syntax { line, column, .. }
            | ConfigError::Invalid { line, column, .. } => Some((*line, *column)),
            ConfigError::Several { errors, .. } => errors.first().and_then(Self::position),
        }
    }

    /// The errors this one stands for: itself, or each of a `Several`.
    pub fn errors(&self) -> &[ConfigError] {
        match self {
            ConfigError::Several { errors, .. } => errors,
            single => std::slice::from_ref(single),
        }
    }

    /// One error for `errors` found in `path`: `None` for none, the error
    /// itself for one, else a `Several` in file order (line, column).
    pub(super) fn combine(path: &Path, errors: Vec<ConfigError>) -> Option<ConfigError> {
        let mut errors: Vec<ConfigError> = errors
            .into_iter()
            .flat_map(|err| match err {
                ConfigError::Several { errors, .. } => errors,
                single => vec![single],
            })
            .collect();
        errors.sort_by_key(|err| err.position());
        match errors.len() {
            0 => None,
            1 => errors.pop(),
            _ => Some(ConfigError::Several {
                path: path.to_path_buf(),
                errors,
            }),
        }
    }
}

/// A position in the text, ready for a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// 1-based line number.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// The line and a row of carets under the span, rustc style.
    pub snippet: String,
}

/// Turns a byte span of `text` into its 1-based line and column and a
/// caret snippet. A span past the end or off a character boundary is
/// clamped; carets never run past the end of the first line of the span.
pub fn locate(text: &str, span: Range<usize>) -> Position {
    let start = floor_char_boundary(text, span.start.min(text.len()));
    let end = floor_char_boundary(text, span.end.clamp(start, text.len()));
    let line_start = text[..start].rfind('\n').map_or(0, |newline| newline + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let line_text = text[line_start..line_end].trim_end_matches('\r');
    let line = text[..start].matches('\n').count() + 1;
    let column = text[line_start..start].chars().count() + 1;
    // Carets go under the line as shown, where a masked password may have
    // made it shorter than the file's line.
    let shown_width = |upto: usize| mask_passwords(&text[line_start..upto]).chars().count();
    let caret_column = shown_width(start);
    let marked = shown_width(end.min(line_end).max(start)).saturating_sub(caret_column);
    let gutter = " ".repeat(line.to_string().len());
    let mut snippet = String::new();
    let _ = writeln!(snippet, "{gutter} |");
    let _ = writeln!(snippet, "{line} | {}", mask_passwords(line_text));
    let _ = write!(
        snippet,
        "{gutter} | {}{}",
        " ".repeat(caret_column),
        "^".repeat(marked.max(1))
    );
    Position {
        line,
        column,
        snippet,
    }
}

/// The text a file's position refers to, and its path for messages.
pub(super) struct Source<'a> {
    pub path: &'a Path,
    pub text: &'a str,
}

impl Source<'_> {
    /// A rule broken at `span`: `key` is the dotted key path, `message` the
    /// whole sentence after `path:line:col: `.
    pub fn invalid(&self, span: Range<usize>, key: String, message: String) -> ConfigError {
        let Position {
            line,
            column,
            snippet,
        } = locate(self.text, span);
        ConfigError::Invalid {
            path: self.path.to_path_buf(),
            line,
            column,
            key,
            message,
            snippet,
        }
    }

    /// The toml crate's own parse error, in our format. A duplicate table
    /// or key also points at its first definition, which toml's error does
    /// not name.
    pub fn syntax(&self, err: &toml::de::Error) -> ConfigError {
        let span = err.span().unwrap_or(0..0);
        let Position {
            line,
            column,
            mut snippet,
        } = locate(self.text, span.clone());
        let mut message = lowercase_first(err.message().trim_end_matches('.'));
        if message == "duplicate key"
            && let Some((first, what, advice)) = first_definition(self.text, span.start)
        {
            let first = locate(self.text, first);
            message = format!(
                "duplicate key: {what} is defined twice, first defined at line {}; {advice}",
                first.line
            );
            let _ = write!(snippet, "\n{} first defined here", first.snippet);
        }
        ConfigError::Syntax {
            path: self.path.to_path_buf(),
            line,
            column,
            message,
            snippet,
        }
    }
}

/// For toml's "duplicate key" at byte `at`: the span of the first
/// definition, what is duplicated (for "… is defined twice") and what to do.
/// A header (`[jobs.x]`) is looked for on the lines before; a key in the
/// lines of its table before it. `None` when it is neither (an inline
/// table), and the message stays toml's.
fn first_definition(text: &str, at: usize) -> Option<(Range<usize>, String, &'static str)> {
    let at = floor_char_boundary(text, at.min(text.len()));
    let line_start = text[..at].rfind('\n').map_or(0, |newline| newline + 1);
    let line = text[line_start..].lines().next().unwrap_or_default();
    let before = &text[..line_start];
    // Earlier lines, last first, each with its byte offset.
    let earlier: Vec<(usize, &str)> = before
        .split_inclusive('\n')
        .scan(0, |offset, line| {
            let start = *offset;
            *offset += line.len();
            Some((start, line.trim_end_matches(['\n', '\r'])))
        })
        .collect();
    if let Some(header) = table_header(line) {
        let (start, first) = earlier
            .iter()
            .find(|(_, line)| table_header(line).as_deref() == Some(header.as_str()))?;
        let indent = first.len() - first.trim_start().len();
        let what = match header
            .strip_prefix("[jobs.")
            .and_then(|h| h.strip_suffix(']'))
        {
            Some(name) => format!("job `{name}`"),
            None => format!("table `{header}`"),
        };
        let span = start + indent..start + first.trim_end().len();
        return Some((span, what, "merge the two tables or rename one"));
    }
    let key_end = at + text[at..].find(|c: char| c == '=' || c == '.' || c.is_whitespace())?;
    let key = text[at..key_end].trim();
    if key.is_empty() {
        return None;
    }
    for (start, earlier_line) in earlier.iter().rev() {
        let trimmed = earlier_line.trim_start();
        if trimmed.starts_with('[') {
            return None;
        }
        let Some(rest) = trimmed.strip_prefix(key) else {
            continue;
        };
        if rest.trim_start().starts_with(['=', '.']) {
            let indent = earlier_line.len() - trimmed.len();
            let span = start + indent..start + indent + key.len();
            return Some((span, format!("`{key}`"), "keep one"));
        }
    }
    None
}

/// `[a.b]` of a table header line, without blanks and comment; `None` for
/// any other line (and for `[[array]]` headers, which may repeat).
fn table_header(line: &str) -> Option<String> {
    let trimmed = line.trim();
    if !trimmed.starts_with('[') || trimmed.starts_with("[[") {
        return None;
    }
    let close = trimmed.find(']')?;
    Some(
        trimmed[..=close]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect(),
    )
}

/// Masks every `scheme://user:password@` password in a line of the file,
/// and the string value of a key named `password` or `pass`: no such key
/// exists (the password is read from `password_file`), but it is what
/// people try first, and its unknown-key error shows the line.
fn mask_passwords(line: &str) -> String {
    let line = mask_password_values(line);
    let mut out = String::with_capacity(line.len());
    let mut rest = line.as_str();
    while let Some(found) = rest.find("://") {
        // The URL runs to the next quote or blank; let `redact_url` mask it.
        let begin = rest[..found]
            .rfind(|c: char| c == '"' || c == '\'' || c.is_whitespace())
            .map_or(0, |i| i + 1);
        let after = found + 3;
        let end = rest[after..]
            .find(|c: char| c == '"' || c == '\'' || c.is_whitespace())
            .map_or(rest.len(), |i| after + i);
        out.push_str(&rest[..begin]);
        out.push_str(&redact_url(&rest[begin..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// `password = "x"` -> `password = "***"` (also `pass`, in an inline
/// table or after a dot); an unterminated value is masked to the end.
fn mask_password_values(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(found) = rest.find("pass") {
        let key_starts = rest[..found]
            .chars()
            .next_back()
            .is_none_or(|c| c.is_whitespace() || matches!(c, '{' | ',' | '.'));
        let after_key = ["password", "pass"]
            .iter()
            .find(|key| rest[found..].starts_with(*key))
            .map_or(found + 4, |key| found + key.len());
        let value = rest[after_key..].trim_start();
        let quote = value
            .strip_prefix('=')
            .map(str::trim_start)
            .and_then(|v| v.chars().next().filter(|c| matches!(c, '"' | '\'')));
        let (true, Some(quote)) = (key_starts, quote) else {
            out.push_str(&rest[..after_key]);
            rest = &rest[after_key..];
            continue;
        };
        let open = after_key + rest[after_key..].find(quote).unwrap_or(0) + 1;
        let mut close = rest.len();
        let mut escaped = false;
        for (i, c) in rest[open..].char_indices() {
            match c {
                '\\' if quote == '"' && !escaped => escaped = true,
                c if c == quote && !escaped => {
                    close = open + i;
                    break;
                }
                _ => escaped = false,
            }
        }
        out.push_str(&rest[..open]);
        out.push_str("***");
        rest = &rest[close..];
    }
    out.push_str(rest);
    out
}

fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn floor_char_boundary(text: &str, mut index: usize) -> usize {
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

/// A start refused for a cause waiting will not cure: Redis refused this
/// node (wrong password, ACL), or the metrics address cannot be bound.
/// The daemon stops with this error (exit 78, like a bad config).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StartRefused(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_counts_lines_and_characters_from_one() {
        let text = "a = 1\n[jobs.x]\ntimezone = \"Asia/Tashkentt\"\n";
        let start = text.find("\"Asia").expect("present");
        let position = locate(text, start..start + 16);
        assert_eq!((position.line, position.column), (3, 12));
        assert_eq!(
            position.snippet,
            "  |\n3 | timezone = \"Asia/Tashkentt\"\n  |            ^^^^^^^^^^^^^^^^"
        );
    }

    #[test]
    fn locate_counts_characters_not_bytes_and_clamps() {
        let text = "name = \"äöü\" x";
        let start = text.find('x').expect("present");
        assert_eq!(locate(text, start..start + 1).column, 14);
        let past_end = locate(text, 100..200);
        assert_eq!((past_end.line, past_end.column), (1, 15));
        assert!(past_end.snippet.ends_with('^'));
    }

    #[test]
    fn snippets_mask_url_passwords() {
        let text = "url = \"redis://app:hunter2@db:6379/0\" # x";
        let snippet = locate(text, 0..3).snippet;
        assert!(!snippet.contains("hunter2"), "{snippet}");
        assert!(snippet.contains("redis://app:***@db:6379/0"), "{snippet}");
    }

    #[test]
    fn carets_line_up_with_a_masked_line() {
        let text = "url = \"redis://app:hunter2@db\" x = 1";
        let url = text.find('"').expect("present");
        let snippet = locate(text, url..url + 24).snippet;
        assert_eq!(
            snippet,
            "  |\n1 | url = \"redis://app:***@db\" x = 1\n  |       ^^^^^^^^^^^^^^^^^^^^"
        );
        let after = text.find(" x").expect("present") + 1;
        let position = locate(text, after..after + 1);
        assert_eq!(position.column, 32);
        assert!(
            position
                .snippet
                .ends_with(&format!("|{}^", " ".repeat(1 + 27)))
        );
    }

    #[test]
    fn snippets_mask_the_value_of_a_password_key() {
        for (line, shown) in [
            ("password = \"hunter2\"", "password = \"***\""),
            (
                "sentinel = { master = \"m\", pass='hunter2' }",
                "sentinel = { master = \"m\", pass='***' }",
            ),
            (
                "redis.password=\"hun\\\"ter2\" # x",
                "redis.password=\"***\" # x",
            ),
            ("password = \"hunter2", "password = \"***"),
            ("password_file = \"/etc/p\"", "password_file = \"/etc/p\""),
            ("bypass = \"x\"", "bypass = \"x\""),
            ("passes = 3", "passes = 3"),
        ] {
            assert_eq!(
                locate(line, 0..1).snippet.lines().nth(1),
                Some(format!("1 | {shown}").as_str())
            );
        }
    }

    /// Found by tests/it/config/bad-configs: a `/` in the password ended the user info
    /// early, so `redis://app:p/s3cret@db` was shown unmasked.
    #[test]
    fn a_slash_in_the_password_is_masked_too() {
        let url = "redis://app:p/s3cret@db.internal:6379/0";
        assert_eq!(redact_url(url), "redis://app:***@db.internal:6379/0");
        let snippet = locate(&format!("url = \"{url}\""), 0..3).snippet;
        assert!(!snippet.contains("s3cret"), "{snippet}");
        assert_eq!(redact_url("redis://db:6379/0"), "redis://db:6379/0");
    }
}
