//! Warnings: what is probably wrong on *this* machine but not a reason to
//! refuse the file.
//!
//! Every node loads the same `jobs.toml`, and a program or directory may
//! exist only on the nodes meant to run a job, so a missing `working_dir`
//! or `argv` program is a warning, not an error: `check` prints it and
//! still succeeds. Checking where the file is written, before `[defaults]`
//! apply, makes each warning point at its own line, once. An `argv`
//! program named without `/` is searched in the job's `PATH` the way the
//! launcher does (`env.PATH`, else the daemon's, else
//! `/usr/local/bin:/usr/bin:/bin`); a relative path with a `/` depends on
//! the working directory at run time and is not checked.

use std::fmt;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// The launcher's `PATH` when the job's environment has none.
pub(super) const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Methods a hook is expected to use; another one gets a warning.
const USUAL_METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// One warning about `jobs.toml`: where it points and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub path: PathBuf,
    /// 1-based line of the value it is about.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// Dotted path of the key (`jobs.rotate.argv`).
    pub key: String,
    /// The whole sentence after `path:line:column: `, naming the table
    /// and the key the way errors do.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Warning {
            path,
            line,
            column,
            message,
            ..
        } = self;
        write!(f, "{}:{line}:{column}: {message}", path.display())
    }
}

/// What is wrong with `dir` as a working directory here, if anything.
pub(super) fn working_dir(dir: &Path) -> Option<String> {
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => None,
        Ok(_) => Some(format!(
            "`{}` is not a directory on this machine; the job cannot start here",
            dir.display()
        )),
        Err(_) => Some(format!(
            "`{}` does not exist on this machine; the job cannot start here",
            dir.display()
        )),
    }
}

/// What is wrong with `program` (an `argv[0]`) under `path` (a `PATH`
/// value), if anything.
pub(super) fn program(program: &str, path: &str) -> Option<String> {
    if program.starts_with('/') {
        return match executable(Path::new(program)) {
            Some(true) => None,
            Some(false) => Some(format!(
                "`{program}` is not an executable file on this machine; the job cannot start here"
            )),
            None => Some(format!(
                "`{program}` does not exist on this machine; the job cannot start here"
            )),
        };
    }
    if program.contains('/') {
        return None;
    }
    let found = std::env::split_paths(path).any(|dir| {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        executable(&dir.join(program)) == Some(true)
    });
    if found {
        None
    } else {
        // The PATH itself is not shown: it may come from an interpolated
        // `env` value.
        Some(format!(
            "`{program}` is not found in the job's PATH on this machine; the job cannot start \
             here: give its full path, or set `PATH` in `env`"
        ))
    }
}

/// `Some(true)`: a file with an execute bit; `Some(false)`: something else
/// that exists; `None`: nothing there.
fn executable(path: &Path) -> Option<bool> {
    let meta = std::fs::metadata(path).ok()?;
    Some(meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// The warning for an HTTP method outside [`USUAL_METHODS`] (upper case).
pub(super) fn method(method: &str) -> Option<String> {
    if USUAL_METHODS.contains(&method) {
        return None;
    }
    Some(format!(
        "`{method}` is an unusual HTTP method (expected one of {}); check the spelling",
        USUAL_METHODS.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn working_dirs() {
        assert_eq!(working_dir(Path::new("/")), None);
        let missing = working_dir(Path::new("/nonexistent/solocron")).expect("warning");
        assert_eq!(
            missing,
            "`/nonexistent/solocron` does not exist on this machine; the job cannot start here"
        );
        let file = working_dir(Path::new("/bin/sh")).expect("warning");
        assert!(file.contains("is not a directory"), "{file}");
    }

    #[test]
    fn programs_by_path_and_by_name() {
        assert_eq!(program("/bin/sh", DEFAULT_PATH), None);
        assert_eq!(program("sh", DEFAULT_PATH), None);
        assert_eq!(program("./local-script", DEFAULT_PATH), None);
        assert!(
            program("/nonexistent/tool", DEFAULT_PATH)
                .is_some_and(|w| w.contains("does not exist"))
        );
        assert!(
            program("/etc/passwd", DEFAULT_PATH).is_some_and(|w| w.contains("not an executable"))
        );
        assert_eq!(
            program("surely-not-a-program", "/nonexistent:/also-not").as_deref(),
            Some(
                "`surely-not-a-program` is not found in the job's PATH on this machine; the job \
                 cannot start here: give its full path, or set `PATH` in `env`"
            )
        );
        assert!(program("sh", "/nonexistent").is_some());
    }

    #[test]
    fn methods() {
        for usual in USUAL_METHODS {
            assert_eq!(method(usual), None);
        }
        assert!(
            method("PURGE").is_some_and(|w| w.starts_with("`PURGE` is an unusual HTTP method"))
        );
    }
}
