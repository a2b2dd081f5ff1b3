//! A crontab command as cron runs it, written for a `/bin/sh -c` that has
//! no standard input of its own.
//!
//! cron (cronie's `do_command.c`) ends the command at the first `%` not
//! escaped by a backslash; `\%` before it is a literal `%` (the backslash
//! dropped), any other backslash is kept. The text after that `%` is the
//! command's standard input: each further unescaped `%` is a newline,
//! `\%` is `%`, any other backslash is kept, and a newline is added at the
//! end unless the last character written was one. solocron gives a job
//! `/dev/null` as its standard input, so that text is written into the
//! command: `printf '%s\n' 'line 1' 'line 2' | { COMMAND }`, which hands
//! the command the same bytes.

/// The command cron runs and the bytes it writes to the command's
/// standard input (`None`: no `%`, or nothing after it, so nothing is
/// written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Split {
    pub command: String,
    pub input: Option<String>,
}

/// Splits `text` (an entry's command) as cron does.
pub(super) fn split(text: &str) -> Split {
    let mut command = String::with_capacity(text.len());
    let mut escaped = false;
    for (at, c) in text.char_indices() {
        if escaped {
            if c == '%' {
                command.pop();
            }
            command.push(c);
            escaped = false;
            continue;
        }
        if c == '%' {
            let input = input_bytes(&text[at + 1..]);
            return Split {
                command,
                input: Some(input).filter(|input| !input.is_empty()),
            };
        }
        escaped = c == '\\';
        command.push(c);
    }
    Split {
        command,
        input: None,
    }
}

/// What cron writes to standard input for `text`, the part of the command
/// after its first `%`.
fn input_bytes(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 1);
    let mut escaped = false;
    let mut need_newline = false;
    for mut c in text.chars() {
        if escaped {
            if c != '%' {
                out.push('\\');
            }
        } else if c == '%' {
            c = '\n';
        }
        escaped = c == '\\';
        if !escaped {
            out.push(c);
            need_newline = c != '\n';
        }
    }
    if escaped {
        out.push('\\');
    }
    if need_newline {
        out.push('\n');
    }
    out
}

/// `word` quoted for a POSIX shell: in single quotes, each `'` written
/// `'\''`.
pub(super) fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// A shell command that writes exactly `input` to its standard output:
/// `printf '%s\n'` with a word per line, or (when `input` does not end
/// with a newline) `printf '%s'` with it whole.
pub(super) fn printf(input: &str) -> String {
    match input.strip_suffix('\n') {
        Some(lines) => {
            let words: Vec<String> = lines.split('\n').map(quote).collect();
            format!("printf '%s\\n' {}", words.join(" "))
        }
        None => format!("printf '%s' {}", quote(input)),
    }
}

/// `command` with `input` on its standard input, for `/bin/sh -c`. The
/// command goes in a group on lines of its own, so a list (`a; b`), a
/// trailing `&` or a `# comment` stays as it was.
pub(super) fn with_input(command: &str, input: &str) -> String {
    format!("{} | {{\n{command}\n}}", printf(input))
}

/// The `-c` script of `/bin/sh` that runs `$1` under the shell `$0` with
/// `input` on its standard input, for an entry whose `SHELL` is not
/// `/bin/sh` (argv: `/bin/sh -c SCRIPT SHELL COMMAND`): the command is
/// passed as it is, whatever that shell's syntax.
pub(super) fn other_shell_with_input(input: &str) -> String {
    format!("{} | exec \"$0\" -c \"$1\"", printf(input))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_of(text: &str) -> (String, Option<String>) {
        let split = split(text);
        (split.command, split.input)
    }

    fn both(command: &str, input: Option<&str>) -> (String, Option<String>) {
        (command.to_string(), input.map(str::to_string))
    }

    #[test]
    fn the_first_unescaped_percent_ends_the_command() {
        assert_eq!(split_of("date"), both("date", None));
        assert_eq!(split_of(r"date +\%Y-\%m-\%d"), both("date +%Y-%m-%d", None));
        assert_eq!(
            split_of("cat > out%line1%line2"),
            both("cat > out", Some("line1\nline2\n"))
        );
        // A newline is added only when the last one written is not one.
        assert_eq!(split_of("cat%a%"), both("cat", Some("a\n")));
        assert_eq!(split_of("cat%%"), both("cat", Some("\n")));
        assert_eq!(split_of("cat%"), both("cat", None));
        // `\%` in the input is `%`; other backslashes stay.
        assert_eq!(
            split_of(r"mail x%100\% done\n%\\%"),
            both("mail x", Some("100% done\\n\n\\%\n"))
        );
        // `\\` before `%` in the command: the second backslash escapes
        // nothing, so that `%` ends the command.
        assert_eq!(split_of(r"echo \\%in"), both(r"echo \\", Some("in\n")));
        assert_eq!(split_of(r"echo \x"), both(r"echo \x", None));
        // A backslash at the very end of the input is written, with no
        // newline after it when the text before ended in one.
        assert_eq!(split_of("cat%a%\\"), both("cat", Some("a\n\\")));
        assert_eq!(split_of("cat%a\\"), both("cat", Some("a\\\n")));
    }

    #[test]
    fn printf_writes_the_input_back() {
        assert_eq!(printf("a\nb c\n"), r"printf '%s\n' 'a' 'b c'");
        assert_eq!(printf("\n"), r"printf '%s\n' ''");
        assert_eq!(printf("it's\n"), r"printf '%s\n' 'it'\''s'");
        assert_eq!(printf("a\n\\"), "printf '%s' 'a\n\\'");
        assert_eq!(
            with_input("a; b # c", "x\n"),
            "printf '%s\\n' 'x' | {\na; b # c\n}"
        );
    }
}
