//! Short hashes of effective job definitions, for the config drift guard.
//!
//! Every node publishes the fingerprint of each job as it loaded it (after
//! `[defaults]` and `${VAR}` interpolation); nodes that disagree on a job are
//! running different definitions of it. The hash is SHA-256 over a canonical
//! text (not `Debug`, which may change between releases), cut to 12 hex
//! digits: enough to tell definitions apart, and the definition (which may
//! hold interpolated secrets) cannot be read back from it.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

use super::model::{Action, Config, DEFAULT_OUTPUT_LOG_MAX, Job, OnLockLost, Overlap};

/// Hex digits kept from the SHA-256.
const LEN: usize = 12;

impl Job {
    /// The fingerprint of this job's effective definition: computed once
    /// per job, then remembered (the timetable, the node registry's entry
    /// and the config's own fingerprint each need every job's at start).
    pub fn fingerprint(&self) -> String {
        let bits = self
            .fingerprint
            .0
            .get_or_init(|| short_bits(&canonical(self)));
        format!("{bits:0width$x}", width = LEN)
    }
}

impl Action {
    /// Whether `other` runs the same as this: the same `command`, `argv`
    /// or `http` request (URL, method, timeout, headers, body), values
    /// interpolated. A reload that removes a job and adds one that runs the
    /// same treats it as a rename (`daemon::rename`).
    pub fn runs_the_same_as(&self, other: &Action) -> bool {
        action_text(self) == action_text(other)
    }
}

/// `action` as the fingerprint's lines show it.
fn action_text(action: &Action) -> String {
    let mut text = String::new();
    action_lines(
        &mut |key: &str, value: String| {
            let _ = writeln!(text, "{key}={value}");
        },
        "",
        action,
    );
    text
}

/// A job's fingerprint once computed ([`Job::fingerprint`]), as the number
/// its hex digits spell. A clone starts empty: a job copied with other
/// settings (`Job { action, ..job.clone() }`) never carries the original's.
#[derive(Default)]
pub struct FingerprintCache(std::sync::OnceLock<u64>);

impl Clone for FingerprintCache {
    fn clone(&self) -> FingerprintCache {
        FingerprintCache::default()
    }
}

impl Config {
    /// One fingerprint over all jobs (names and definitions, in name order).
    pub fn fingerprint(&self) -> String {
        let mut jobs: Vec<(&str, String)> = self
            .jobs
            .iter()
            .map(|job| (job.name.as_str(), job.fingerprint()))
            .collect();
        jobs.sort();
        let mut text = String::new();
        for (name, fingerprint) in jobs {
            let _ = writeln!(text, "{name}={fingerprint}");
        }
        short_hash(&text)
    }
}

/// The first [`LEN`] hex digits of the SHA-256 of `text`, as a number.
fn short_bits(text: &str) -> u64 {
    let digest = Sha256::digest(text.as_bytes());
    digest
        .iter()
        .take(LEN / 2)
        .fold(0, |bits, byte| bits << 8 | u64::from(*byte))
}

fn short_hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    let mut hex = String::with_capacity(LEN);
    for byte in digest.iter().take(LEN / 2) {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

/// One `key=value` line per setting; strings are written with `{:?}` so a
/// newline inside a value cannot imitate another line.
fn canonical(job: &Job) -> String {
    let mut text = String::new();
    let mut line = |key: &str, value: String| {
        let _ = writeln!(text, "{key}={value}");
    };
    line("name", format!("{:?}", job.name));
    line(
        "schedule",
        format!("{:?}", job.schedule.expression().trim()),
    );
    line("timezone", job.schedule.timezone().name().to_string());
    line("lock_ttl_ms", job.lock_ttl.as_millis().to_string());
    line(
        "timeout_ms",
        format!("{:?}", job.timeout.map(|t| t.as_millis())),
    );
    line(
        "starting_deadline_ms",
        job.starting_deadline.as_millis().to_string(),
    );
    line(
        "on_lock_lost",
        match job.on_lock_lost {
            OnLockLost::Kill => "kill",
            OnLockLost::Continue => "continue",
        }
        .to_string(),
    );
    line(
        "overlap",
        match job.overlap {
            Overlap::Skip => "skip",
        }
        .to_string(),
    );
    action_lines(&mut line, "", &job.action);
    line("env", format!("{:?}", job.extras.env));
    line("working_dir", format!("{:?}", job.extras.working_dir));
    // Only when set: jobs that keep the default keep the fingerprints they
    // had before the key existed (no drift shown during a rolling upgrade).
    if job.output_log_max != DEFAULT_OUTPUT_LOG_MAX {
        line("output_log_max", job.output_log_max.to_string());
    }
    if !job.extras.splay.is_zero() {
        line("splay_ms", job.extras.splay.as_millis().to_string());
    }
    if job.retries != 0 {
        line("retries", job.retries.to_string());
        line(
            "retry_backoff_ms",
            job.extras.retry_backoff.as_millis().to_string(),
        );
    }
    for (key, notifier) in [
        ("on_failure", &job.extras.on_failure),
        ("on_success", &job.extras.on_success),
    ] {
        if let Some(notifier) = notifier {
            line(
                &format!("{key}.timeout_ms"),
                notifier.timeout.as_millis().to_string(),
            );
            action_lines(&mut line, &format!("{key}."), &notifier.action);
        }
    }
    if let Some(silence) = job.extras.max_silence {
        line("max_silence_ms", silence.as_millis().to_string());
    }
    if let Some(run_on) = &job.extras.run_on {
        line("run_on", format!("{:?}", run_on.to_string()));
    }
    for (key, calendars) in [
        ("skip_during", &job.extras.skip_during),
        ("only_during", &job.extras.only_during),
    ] {
        if !calendars.is_empty() {
            // Names and contents: a calendar file changed on half the
            // fleet is drift too.
            let named: Vec<String> = calendars
                .iter()
                .map(|c| format!("{}={:?}", c.name, c.spans))
                .collect();
            line(key, format!("{named:?}"));
        }
    }
    // The group's limits are part of each of its jobs: a reload that
    // changes `max_running` on half the fleet is drift, not two limits.
    if let Some(group) = &job.extras.group {
        line("group", format!("{:?}", group.name));
        if let Some(max) = group.max_running {
            line("group.max_running", max.to_string());
        }
        if let Some(rate) = group.max_starts {
            line("group.max_starts", rate.to_string());
        }
        line("group.when_full", group.when_full.as_str().to_string());
    }
    text
}

fn action_lines(line: &mut impl FnMut(&str, String), prefix: &str, action: &Action) {
    match action {
        Action::Command(command) => line(&format!("{prefix}command"), format!("{command:?}")),
        Action::Argv(argv) => line(&format!("{prefix}argv"), format!("{argv:?}")),
        Action::Http(http) => {
            line(&format!("{prefix}http.url"), format!("{:?}", http.url));
            line(&format!("{prefix}http.method"), http.method.clone());
            line(
                &format!("{prefix}http.timeout_ms"),
                format!("{:?}", http.timeout.map(|t| t.as_millis())),
            );
            line(
                &format!("{prefix}http.headers"),
                format!("{:?}", http.headers),
            );
            line(&format!("{prefix}http.body"), format!("{:?}", http.body));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    use crate::config::tests::complete;

    fn parse(text: &str) -> Config {
        super::super::parse(&complete(text), Path::new("jobs.toml"), &|_| {
            Some("v".to_string())
        })
        .expect("valid config")
    }

    #[test]
    fn same_definition_same_fingerprint_any_change_differs() {
        let base = "[jobs.a]\nschedule = \"@hourly\"\ncommand = \"true\"\n";
        let a1 = parse(base);
        let a2 = parse(&format!("# a comment\n{base}"));
        assert_eq!(a1.jobs[0].fingerprint(), a2.jobs[0].fingerprint());
        assert_eq!(a1.fingerprint(), a2.fingerprint());
        assert_eq!(a1.jobs[0].fingerprint().len(), LEN);
        let changes = [
            "[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n",
            "[jobs.a]\nschedule = \"@hourly\"\ncommand = \"false\"\n",
            "[jobs.a]\nschedule = \"@hourly\"\ncommand = \"true\"\ntimezone = \"Europe/Berlin\"\n",
            "[jobs.a]\nschedule = \"@hourly\"\ncommand = \"true\"\nlock_ttl = \"31s\"\n",
            "[jobs.a]\nschedule = \"@hourly\"\ncommand = \"true\"\nenv = { X = \"1\" }\n",
            "[defaults]\ntimeout = \"2h\"\n[jobs.a]\nschedule = \"@hourly\"\ncommand = \"true\"\n",
            "[jobs.a]\nschedule = \"@hourly\"\ncommand = \"true\"\noutput_log_max = \"1KiB\"\n",
            "[jobs.a]\nschedule = \"@hourly\"\ncommand = \"true\"\nretries = 2\n",
            "[jobs.a]\nschedule = \"@hourly\"\ncommand = \"true\"\non_failure = { command = \"page\" }\n",
            "[jobs.a]\nschedule = \"@hourly\"\ncommand = \"true\"\non_success = { argv = [\"ping\"] }\n",
            "[jobs.a]\nschedule = \"@hourly\"\ncommand = \"true\"\nmax_silence = \"1d\"\n",
        ];
        let default_size =
            "[jobs.a]\nschedule = \"@hourly\"\ncommand = \"true\"\noutput_log_max = \"64KiB\"\n";
        assert_eq!(
            a1.jobs[0].fingerprint(),
            parse(default_size).jobs[0].fingerprint()
        );
        for changed in changes {
            assert_ne!(
                a1.jobs[0].fingerprint(),
                parse(changed).jobs[0].fingerprint(),
                "{changed}"
            );
        }
    }

    #[test]
    fn a_remembered_fingerprint_is_the_computed_one_and_a_changed_copy_gets_its_own() {
        let config = parse("[jobs.a]\nschedule = \"@hourly\"\ncommand = \"true\"\n");
        let job = &config.jobs[0];
        let first = job.fingerprint();
        assert_eq!(first, short_hash(&canonical(job)), "same digits as before");
        assert_eq!(job.fingerprint(), first, "remembered");
        // A copy with another action (what a notifier's run is made of)
        // must not keep the original's remembered fingerprint.
        let copy = Job {
            action: Action::Command("false".to_string()),
            ..Job::clone(job)
        };
        assert_ne!(copy.fingerprint(), first);
        assert_eq!(copy.fingerprint(), short_hash(&canonical(&copy)));
    }

    #[test]
    fn interpolated_values_count_but_never_show() {
        let text = &complete("[jobs.a]\nschedule = \"@hourly\"\ncommand = \"echo ${TOKEN}\"\n");
        let one = super::super::parse(text, Path::new("j"), &|_| Some("s3cret-one".into()))
            .expect("valid");
        let two = super::super::parse(text, Path::new("j"), &|_| Some("s3cret-two".into()))
            .expect("valid");
        assert_ne!(one.jobs[0].fingerprint(), two.jobs[0].fingerprint());
        assert!(!one.jobs[0].fingerprint().contains("s3cret"));
    }
}
