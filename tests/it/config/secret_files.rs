//! `solocron check` run as root warns about each file the config names
//! that the service user cannot read (the daemon, as that user, would stop
//! with exit 78 on it), and its fix is the one recipe for secret files:
//! owner root, the user's group, mode 0640.
//!
//! The service user here is `nobody` (`--service-user`), which every
//! Debian system has, and `runuser` shows what that user can really read.
//! Needs root, as CI is: it fails, never skips, without it.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Output};

const SOLOCRON: &str = env!("CARGO_BIN_EXE_solocron");

fn require_root() {
    let euid = Command::new("id").arg("-u").output().expect("run id");
    assert_eq!(
        String::from_utf8_lossy(&euid.stdout).trim(),
        "0",
        "tests/it/config/secret_files.rs runs `check` as root (CI runs as root): `sudo -E cargo test --test it config::secret_files::`"
    );
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// `solocron check --quiet` of `config` as root, for the service user `user`.
fn check_as_root(config: &Path, user: &str) -> Output {
    Command::new(SOLOCRON)
        .args(["check", "--quiet", "--service-user", user, "--config"])
        .arg(config)
        .env_remove("SOLOCRON_SERVICE_USER")
        .output()
        .expect("run solocron check")
}

/// `solocron check --quiet` of `config` as `user` (what its daemon would read).
fn check_as(config: &Path, user: &str) -> Output {
    Command::new("runuser")
        .args(["-u", user, "--", SOLOCRON, "check", "--quiet", "--config"])
        .arg(config)
        .output()
        .expect("run runuser")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn check_as_root_warns_about_a_secret_file_the_service_user_cannot_read() {
    require_root();
    let dir = tempfile::tempdir().expect("temp dir");
    chmod(dir.path(), 0o755);
    let password = dir.path().join("redis.pass");
    let env = dir.path().join("env");
    std::fs::write(&password, "hunter2-secret\n").expect("write");
    std::fs::write(&env, "TOKEN=abc-secret\n").expect("write");
    // The docs' old third recipe: mode 600, owned by root.
    chmod(&password, 0o600);
    chmod(&env, 0o644);
    let config = dir.path().join("jobs.toml");
    std::fs::write(
        &config,
        format!(
            "[redis]\nurl = \"redis://127.0.0.1:6379\"\npassword_file = \"redis.pass\"\n\
             [daemon]\nenv_file = \"{}\"\n\
             [jobs.a]\nschedule = \"@daily\"\ncommand = \"echo ${{TOKEN}}\"\n",
            env.display()
        ),
    )
    .expect("write");
    chmod(&config, 0o644);

    // As the service user the file is refused: the warning is true.
    let refused = check_as(&config, "nobody");
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(stderr(&refused).contains("redis.pass"), "{refused:?}");

    // As root it is valid, with one warning saying all of it.
    let warned = check_as_root(&config, "nobody");
    assert!(warned.status.success(), "{warned:?}");
    assert!(
        String::from_utf8_lossy(&warned.stdout).contains("valid, 1 job(s), 1 warning(s)"),
        "{warned:?}"
    );
    let said = stderr(&warned);
    let shown = password.display();
    let fix = format!("chown root:nogroup {shown} && chmod 0640 {shown}");
    assert_eq!(said.lines().count(), 1, "{said}");
    for part in [
        "warning: ",
        "jobs.toml:3:17: [redis] `password_file`",
        "the service user `nobody`",
        &format!("`{shown}`"),
        "owner root, group root, mode 0600",
        &fix,
        "exit 78",
    ] {
        assert!(said.contains(part), "{part:?} missing from: {said}");
    }
    assert!(!said.contains("hunter2"), "{said}");

    // The command it gives fixes it, for the service user too.
    let ran = Command::new("sh")
        .args(["-c", &fix])
        .status()
        .expect("run the fix");
    assert!(ran.success());
    let quiet = check_as_root(&config, "nobody");
    assert!(
        quiet.status.success() && stderr(&quiet).is_empty(),
        "{quiet:?}"
    );
    let valid = check_as(&config, "nobody");
    assert!(valid.status.success(), "{valid:?}");

    // A directory on the way that keeps the user out is named, with the
    // file's way into /etc/solocron.
    chmod(dir.path(), 0o700);
    let blocked = check_as_root(&config, "nobody");
    chmod(dir.path(), 0o755);
    assert!(blocked.status.success(), "{blocked:?}");
    let said = stderr(&blocked);
    assert_eq!(said.lines().count(), 3, "jobs.toml and both files: {said}");
    assert!(
        said.contains(&format!(
            "the directory `{}` (owner root, group root, mode 0700) keeps it out",
            dir.path().display()
        )) && said.contains("install -m 0640 -o root -g nogroup"),
        "{said}"
    );

    // No such user: nothing to say.
    chmod(&password, 0o600);
    let unknown = check_as_root(&config, "no-such-user-solocron-test");
    assert!(
        unknown.status.success() && stderr(&unknown).is_empty(),
        "{unknown:?}"
    );
}
