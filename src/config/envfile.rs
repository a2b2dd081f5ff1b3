//! `[daemon] env_file`: `NAME=value` lines (the `.env` format) that fill
//! `${VAR}` before the process environment does.
//!
//! The file is read at every load, so a secret rotated in it is picked up
//! by the next reload without restarting the daemon with a new
//! environment. dotenvy parses it (quotes, `export NAME=`, comments,
//! `$OTHER` expansion inside unquoted and double-quoted values; single
//! quotes keep a value as written). Its errors quote the offending line,
//! which may hold a secret, so they are never shown: a problem is reported
//! by line number only. dotenvy does not count lines, so the file is fed
//! to it one line per `read`; `BufReader` then never reads ahead of the
//! line dotenvy is on, and the bytes handed out so far tell which line
//! failed.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::{self, Read};
use std::path::Path;
use std::rc::Rc;

use super::interpolate::is_env_name;

/// Why the env file was not taken; `Display`-free on purpose: the caller
/// words it, naming the file.
#[derive(Debug)]
pub(super) enum EnvFileError {
    /// The file could not be read.
    Read(io::Error),
    /// Lines that are not `NAME=value` or name a variable we refuse: the
    /// 1-based line and the reason, never the line's content.
    Lines(Vec<(usize, String)>),
}

/// Reads `path`. Later lines win over earlier ones with the same name.
pub(super) fn read(path: &Path) -> Result<BTreeMap<String, String>, EnvFileError> {
    let text = super::read_text_file(path).map_err(EnvFileError::Read)?;
    parse(&text)
}

/// Parses the content of an env file.
pub(super) fn parse(text: &str) -> Result<BTreeMap<String, String>, EnvFileError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let handed_out = Rc::new(Cell::new(0));
    let reader = LineByLine {
        text: text.as_bytes(),
        handed_out: Rc::clone(&handed_out),
    };
    let mut pairs = BTreeMap::new();
    let mut bad = Vec::new();
    for item in dotenvy::from_read_iter(reader) {
        let line = line_of(text, handed_out.get());
        match item {
            Ok((name, value)) => match refused(&name) {
                Some(reason) => bad.push((line, reason)),
                // Every job gets the file's variables: one NUL would make
                // every run fail to start.
                None if value.contains('\0') => bad.push((line, nul_in_value(&name))),
                None => {
                    pairs.insert(name, value);
                }
            },
            Err(dotenvy::Error::LineParse(content, _)) => {
                // A quoted value may span lines: report where it began.
                let spans = content.trim_end_matches(['\n', '\r']).matches('\n').count();
                bad.push((line.saturating_sub(spans).max(1), not_a_pair()));
            }
            Err(dotenvy::Error::Io(err)) => return Err(EnvFileError::Read(err)),
            Err(_) => bad.push((line, not_a_pair())),
        }
    }
    if bad.is_empty() {
        Ok(pairs)
    } else {
        Err(EnvFileError::Lines(bad))
    }
}

fn not_a_pair() -> String {
    "not a `NAME=value` line (quote a value that has blanks: `NAME=\"a b\"`)".to_string()
}

/// Why `name` is refused, if it is.
fn refused(name: &str) -> Option<String> {
    if !is_env_name(name) {
        return Some(format!(
            "`{name}` is not a variable name: use letters, digits and `_`, not starting with a digit"
        ));
    }
    if name.starts_with("SOLOCRON_") {
        return Some(format!(
            "`{name}`: `SOLOCRON_` variables are solocron's own; the env file is for the values of `${{VAR}}`"
        ));
    }
    None
}

fn nul_in_value(name: &str) -> String {
    format!(
        "the value of `{name}` contains a NUL byte, which no process environment can hold: every job gets this file's variables, so every run would fail to start; remove it"
    )
}

/// The 1-based line that the byte at `handed_out - 1` is on.
fn line_of(text: &str, handed_out: usize) -> usize {
    let end = handed_out.min(text.len()).saturating_sub(1);
    text.as_bytes()[..end]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// Hands out `text` one line per `read`, counting the bytes handed out.
struct LineByLine<'a> {
    text: &'a [u8],
    handed_out: Rc<Cell<usize>>,
}

impl Read for LineByLine<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let start = self.handed_out.get();
        let rest = &self.text[start..];
        let line = rest
            .iter()
            .position(|b| *b == b'\n')
            .map_or(rest.len(), |newline| newline + 1);
        let n = line.min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.handed_out.set(start + n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad_lines(text: &str) -> Vec<usize> {
        match parse(text) {
            Err(EnvFileError::Lines(lines)) => lines.into_iter().map(|(line, _)| line).collect(),
            other => panic!("expected bad lines, got {other:?}"),
        }
    }

    #[test]
    fn pairs_quotes_comments_and_export() {
        let text = "# comment\n\nA=1\nexport B='two words'\nC=\"x y\" # note\nD=\nA=again\n";
        let pairs = parse(text).expect("valid");
        let pairs: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(pairs, ["A=again", "B=two words", "C=x y", "D="]);
        let bom = parse("\u{feff}A=1\n").expect("a BOM is skipped");
        assert_eq!(bom["A"], "1");
        let multi = parse("A=\"line one\nline two\"\nB=2").expect("multi-line value");
        assert_eq!(
            (multi["A"].as_str(), multi["B"].as_str()),
            ("line one\nline two", "2")
        );
    }

    #[test]
    fn bad_lines_are_reported_by_number_every_one() {
        assert_eq!(bad_lines("A=1\nthis is not a pair\nB=2\n"), [2]);
        assert_eq!(bad_lines("A=1\n\n# c\n=x\nB=2\nC=a b\nD='x\n"), [4, 6, 7]);
        assert_eq!(bad_lines("A=\"open\nstill open\nB=1\n"), [1]);
        assert_eq!(bad_lines("1A=x\nSOLOCRON_JOB=y\nA.B=z"), [1, 2, 3]);
        assert_eq!(bad_lines("A=1\nB=x\0y\nC='\0'\n"), [2, 3]);
    }

    #[test]
    fn no_message_quotes_a_value() {
        let Err(EnvFileError::Lines(lines)) = parse("TOKEN=s3cret value\nX") else {
            panic!("bad lines");
        };
        for (_, reason) in lines {
            assert!(!reason.contains("s3cret"), "{reason}");
        }
    }

    #[test]
    fn line_numbers_count_from_one() {
        assert_eq!(line_of("a\nb\nc", 2), 1);
        assert_eq!(line_of("a\nb\nc", 4), 2);
        assert_eq!(line_of("a\nb\nc", 5), 3);
        assert_eq!(line_of("", 0), 1);
    }
}
