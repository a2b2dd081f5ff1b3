//! `systemd/solocron.service` keeps the settings docs/operations.md
//! (signals and systemd) and the daemon's
//! shutdown rely on, and systemd's own parser (`systemd-analyze verify`)
//! accepts every line of it.

use std::path::Path;
use std::time::Duration;

/// `(section, key, value)` for every assignment, in file order.
fn settings() -> Vec<(String, String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/solocron.service");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("read {}: {err}", path.display()));
    let mut section = String::new();
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("not `Key=value`: {line:?}"));
        out.push((
            section.clone(),
            key.trim().to_string(),
            value.trim().to_string(),
        ));
    }
    out
}

/// The last value of `[Service] key` (later assignments win in systemd).
fn service(key: &str) -> String {
    settings()
        .into_iter()
        .rev()
        .find(|(section, name, _)| section == "Service" && name == key)
        .map(|(_, _, value)| value)
        .unwrap_or_else(|| panic!("[Service] has no {key}="))
}

#[test]
fn unit_is_a_notify_service_reloaded_by_sighup() {
    assert_eq!(service("Type"), "notify");
    assert_eq!(service("NotifyAccess"), "main");
    let reloads: Vec<String> = settings()
        .into_iter()
        .filter(|(section, key, _)| section == "Service" && key == "ExecReload")
        .map(|(_, _, value)| value)
        .collect();
    assert_eq!(
        reloads,
        ["/usr/bin/solocron check --quiet", "/bin/kill -HUP $MAINPID"],
        "the file is checked before the SIGHUP"
    );
    assert_eq!(service("WorkingDirectory"), "/var/lib/solocron");
    assert_eq!(service("StateDirectory"), "solocron");
    assert_eq!(service("ExecStart"), "/usr/bin/solocron run");
    let watchdog = humantime::parse_duration(&service("WatchdogSec")).expect("WatchdogSec");
    assert!(watchdog >= Duration::from_secs(10), "{watchdog:?}");
}

#[test]
fn unit_does_not_restart_a_bad_config_and_stops_gracefully() {
    assert_eq!(service("RestartPreventExitStatus"), "78");
    assert_eq!(service("Restart"), "on-failure");
    assert_eq!(service("KillMode"), "mixed");

    let minimal = "[redis]\nurl = \"redis://127.0.0.1:6379\"\n\
                   [jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n";
    let config = solocron::config::parse(minimal, Path::new("jobs.toml"), &|_| None)
        .expect("a minimal jobs.toml is valid");
    // What a run sees: the job's group gets SIGKILL 10 s after SIGTERM.
    let needed = config.daemon.shutdown_grace + Duration::from_secs(10);
    let stop = humantime::parse_duration(&service("TimeoutStopSec")).expect("TimeoutStopSec");
    assert!(
        stop > needed,
        "TimeoutStopSec {stop:?} must exceed the default shutdown_grace + kill grace {needed:?}"
    );
}

#[test]
fn unit_runs_hardened_as_a_dedicated_user() {
    assert_eq!(service("User"), "solocron");
    assert_eq!(service("Group"), "solocron");
    for (key, value) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("PrivateTmp", "yes"),
        ("ProtectHome", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectControlGroups", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("LockPersonality", "yes"),
        ("RestrictRealtime", "yes"),
        ("RestrictNamespaces", "yes"),
        ("SystemCallArchitectures", "native"),
        ("CapabilityBoundingSet", ""),
        ("UMask", "0027"),
        ("EnvironmentFile", "-/etc/solocron/daemon.env"),
        ("ProtectProc", "invisible"),
        ("RemoveIPC", "yes"),
        ("StateDirectoryMode", "0750"),
    ] {
        assert_eq!(service(key), value, "[Service] {key}");
    }
    // Directories jobs write to are the operator's, in a drop-in: the
    // shipped unit opens none beyond its StateDirectory.
    assert!(
        !settings()
            .iter()
            .any(|(section, key, _)| section == "Service" && key == "ReadWritePaths"),
        "no ReadWritePaths= in the shipped unit"
    );
    assert!(settings().iter().any(|(section, key, value)| {
        section == "Install" && key == "WantedBy" && value == "multi-user.target"
    }));
}

/// The daemon logs to the journal natively only when its stderr is the
/// journal stream (`JOURNAL_STREAM`) and no `--log-format` is given.
#[test]
fn unit_leaves_stderr_on_the_journal_for_native_logging() {
    for key in ["StandardOutput", "StandardError"] {
        if let Some((_, _, value)) = settings()
            .into_iter()
            .rev()
            .find(|(section, name, _)| section == "Service" && name == key)
        {
            assert!(value.starts_with("journal"), "[Service] {key}={value}");
        }
    }
    assert!(!service("ExecStart").contains("--log-format"));
    if let Some((_, _, families)) = settings()
        .into_iter()
        .find(|(section, name, _)| section == "Service" && name == "RestrictAddressFamilies")
    {
        assert!(families.contains("AF_UNIX"), "{families}");
    }
}

/// The first `ExecReload=` fails on a broken file, so `systemctl reload`
/// does; on a good file it prints one line.
#[test]
fn the_reload_check_fails_on_a_broken_file_and_says_one_line_on_a_good_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("jobs.toml");
    let check = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_solocron"))
            .args(["check", "--quiet"])
            .env("SOLOCRON_CONFIG", &path)
            .output()
            .expect("run solocron check")
    };
    std::fs::write(
        &path,
        "[redis]\nurl = \"redis://127.0.0.1:6379\"\n[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n",
    )
    .expect("write");
    let good = check();
    assert!(good.status.success(), "{good:?}");
    assert_eq!(
        String::from_utf8_lossy(&good.stdout).lines().count(),
        1,
        "{good:?}"
    );
    std::fs::write(&path, "[redis]\nurl = \"redis://127.0.0.1:6379\"\n").expect("truncate");
    let broken = check();
    assert_eq!(broken.status.code(), Some(1), "{broken:?}");
}

/// systemd parses every line: a misspelt key or value is only a warning
/// to `systemctl` (the line is ignored), so any complaint fails here. The
/// unit is verified as written, with its binary pointed at the one `cargo
/// test` built (verify checks that it exists); the man page it names is
/// checked where it is installed (tests/it/package/deb.rs).
#[test]
fn systemd_analyze_verify_accepts_every_line() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/solocron.service");
    let text = std::fs::read_to_string(&path).expect("read the unit");
    let dir = tempfile::tempdir().expect("temp dir");
    let unit = dir.path().join("solocron.service");
    std::fs::write(
        &unit,
        text.replace("/usr/bin/solocron", env!("CARGO_BIN_EXE_solocron")),
    )
    .expect("write the unit");
    let verify = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
        .expect("run systemd-analyze (Debian: apt-get install systemd)");
    let complaints = String::from_utf8_lossy(&verify.stderr);
    assert!(
        verify.status.success() && complaints.trim().is_empty(),
        "systemd-analyze verify {}: {verify:?}\n{complaints}",
        path.display()
    );
}
