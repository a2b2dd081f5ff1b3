//! The corpus of broken `jobs.toml` files in `tests/it/config/bad-configs/`: one file
//! per rule of docs/configuration.md and per error the loader can produce.
//!
//! Each file starts with one or more `# expect: TEXT` lines; every `TEXT` must
//! be a substring of the error, and the first one starts with `:LINE:COL: `,
//! so the message must begin with `PATH:LINE:COL: `. A `# rule:` line says
//! what the file breaks. Every file goes through [`config::parse`] and through
//! the real binary (`solocron check --config FILE`: exit 1, the same message
//! on stderr after `error: `). A file breaks one rule once, so the loader
//! reports exactly one error, unless an `# errors: N` line says it reports
//! N (`check` reports every error of a file). So that each file is about
//! its own rule, every file has a `[redis]` naming a server and a job
//! unless that is what it is about (appended at the end, where they move
//! no line of the rest).
//!
//! `${VAR}` look-ups see only [`ENV`] (the binary runs with exactly these
//! variables): `HOST` and `EMPTY` (set to "") for ordinary values;
//! `SECRET` and `SECRET_WITH_NEWLINE` are planted secrets, as is
//! the Redis URL password `s3cret-in-url` written in some files; no message
//! may contain either. Add a file: write the rule, run the test, and copy
//! the message into `# expect:` after checking that it says the right thing.

use std::path::{Path, PathBuf};
use std::process::Command;

use solocron::config;

/// The only environment `${VAR}` can see here.
const ENV: &[(&str, &str)] = &[
    ("SECRET", SECRET_FROM_ENV),
    ("SECRET_WITH_NEWLINE", "s3cret-from-env\r\nX-Evil: 1"),
    ("HOST", "hooks.internal"),
    ("EMPTY", ""),
];
const SECRET_FROM_ENV: &str = "s3cret-from-env";
const SECRET_IN_URL: &str = "s3cret-in-url";

/// Fewer files than this means the corpus went missing, not that it passed.
const MIN_FILES: usize = 165;

fn lookup(name: &str) -> Option<String> {
    ENV.iter()
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_string())
}

fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/config/bad-configs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("read {}: {err}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= MIN_FILES,
        "expected at least {MIN_FILES} files in {}, found {}",
        dir.display(),
        files.len()
    );
    files
}

/// The `# expect:` lines of the leading comment block.
fn expectations(text: &str) -> Vec<String> {
    text.lines()
        .take_while(|line| line.starts_with('#'))
        .filter_map(|line| line.strip_prefix("# expect: "))
        .map(str::to_string)
        .collect()
}

/// How many errors the file says it causes (`# errors: N`, default 1).
fn expected_count(text: &str) -> usize {
    text.lines()
        .take_while(|line| line.starts_with('#'))
        .find_map(|line| line.strip_prefix("# errors: "))
        .map_or(1, |count| count.trim().parse().expect("`# errors: N`"))
}

/// What is wrong with `message` as the error for `path`, if anything.
fn problems(path: &Path, message: &str, expect: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    match expect.first() {
        Some(first) if first.starts_with(':') => {
            let head = format!("{}{first}", path.display());
            if !message.starts_with(&head) {
                found.push(format!("does not start with `{head}`"));
            }
        }
        _ => found.push("first `# expect:` line must start with `:LINE:COL: `".to_string()),
    }
    for wanted in expect {
        if !message.contains(wanted.as_str()) {
            found.push(format!("does not contain `{wanted}`"));
        }
    }
    for secret in [SECRET_FROM_ENV, SECRET_IN_URL] {
        if message.contains(secret) {
            found.push(format!("leaks the planted secret `{secret}`"));
        }
    }
    found
}

fn report(failures: &[String], total: usize) {
    assert!(
        failures.is_empty(),
        "{} of {total} bad configs failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn the_corpus_plants_both_secrets() {
    let texts: Vec<String> = corpus()
        .iter()
        .map(|path| std::fs::read_to_string(path).expect("read"))
        .collect();
    assert!(texts.iter().any(|text| text.contains(SECRET_IN_URL)));
    assert!(texts.iter().any(|text| text.contains("${SECRET}")));
}

#[test]
fn every_bad_config_is_refused_by_the_loader_with_its_message() {
    let files = corpus();
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("read corpus file");
        let expect = expectations(&text);
        let found = match config::parse(&text, path, &lookup) {
            Ok(config) => vec![format!("was accepted with {} job(s)", config.jobs.len())],
            Err(err) => {
                let message = err.to_string();
                let mut found = problems(path, &message, &expect);
                if err.position().is_none() {
                    found.push("has no line and column".to_string());
                }
                let (count, expected) = (err.errors().len(), expected_count(&text));
                if count != expected {
                    found.push(format!("reports {count} error(s), not {expected}"));
                }
                found
                    .into_iter()
                    .map(|p| format!("{p}; got:\n{message}"))
                    .collect()
            }
        };
        if !found.is_empty() {
            failures.push(format!("{}: {}", path.display(), found.join("; ")));
        }
    }
    report(&failures, files.len());
}

#[test]
fn every_bad_config_is_refused_by_check_with_the_same_message() {
    let files = corpus();
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("read corpus file");
        let expect = expectations(&text);
        let library = config::parse(&text, path, &lookup)
            .err()
            .map(|err| err.to_string());
        let output = Command::new(env!("CARGO_BIN_EXE_solocron"))
            .args(["check", "--config"])
            .arg(path)
            .env_clear()
            .envs(ENV.iter().copied())
            .output()
            .expect("run solocron check");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let mut found = Vec::new();
        if output.status.code() != Some(1) {
            found.push(format!("exit status {}, not 1", output.status));
        }
        match stderr.strip_prefix("error: ") {
            Some(message) => {
                found.extend(problems(path, message, &expect));
                if let Some(library) = &library
                    && message.trim_end() != library
                {
                    found.push("stderr differs from the loader's message".to_string());
                }
            }
            None => found.push("stderr does not start with `error: `".to_string()),
        }
        if !output.stdout.is_empty() {
            found.push("printed something on stdout".to_string());
        }
        if !found.is_empty() {
            failures.push(format!(
                "{}: {}; stderr:\n{stderr}",
                path.display(),
                found.join("; ")
            ));
        }
    }
    report(&failures, files.len());
}

/// `--config /dev/zero` (or a `password_file` / `env_file` naming a
/// device that never ends) is refused after 64 MiB, naming it: it was
/// read until the host ran out of memory. The address space limit (2 GiB) makes the old behaviour
/// a failed allocation here, not a host out of memory.
#[test]
fn a_device_as_the_config_or_its_files_is_refused_not_read_for_ever() {
    let dir = std::env::temp_dir().join(format!("solocron-devices-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let files = dir.join("jobs.toml");
    std::fs::write(
        &files,
        "[redis]\nurl = \"redis://127.0.0.1:1\"\npassword_file = \"/dev/zero\"\n\n\
         [daemon]\nenv_file = \"/dev/urandom\"\n\n[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"true\"\n",
    )
    .expect("write jobs.toml");
    for (config, expect) in [
        (
            Path::new("/dev/zero"),
            vec!["cannot read `/dev/zero`: larger than 64 MiB"],
        ),
        (
            files.as_path(),
            vec![
                "cannot read password file `/dev/zero`: larger than 64 MiB",
                "cannot read env file `/dev/urandom`: larger than 64 MiB",
            ],
        ),
    ] {
        let out = Command::new("sh")
            .args(["-c", "ulimit -v 2097152 && exec \"$0\" \"$@\""])
            .arg(env!("CARGO_BIN_EXE_solocron"))
            .args(["check", "--config"])
            .arg(config)
            .env_clear()
            .output()
            .expect("run solocron check");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}: {stderr}", config.display());
        for text in expect {
            assert!(stderr.contains(text), "{}: {stderr}", config.display());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
