//! The Debian package, end to end with the real tools: `scripts/package`
//! builds it; `dpkg-deb` shows what is in it; `dpkg -i` installs it, the
//! same package repacked as a newer version upgrades it, `dpkg -r` and
//! `dpkg -P` remove it. It packages the debug binary `cargo test` built
//! (`scripts/package --binary`: about 35 s in all on 2 busy cores);
//! `SOLOCRON_TEST_PACKAGE_RELEASE=1` makes it run the release build as
//! well (minutes more).
//!
//! It installs **on the machine it runs on**, as root (CI is root on a
//! throwaway Debian machine), not into a scratch root: the maintainer
//! scripts need a working system (adduser, dpkg-statoverride,
//! deb-systemd-helper), and `dpkg --root` runs them chrooted into that root,
//! which would have to be a whole debootstrapped Debian. Without root,
//! dpkg or systemd-analyze it fails with what to install or how to run it;
//! it never skips. It refuses to touch a `solocron` package it did not
//! install (a note in [`STATE`] says it did, so a run that was killed is
//! cleaned up by the next), and leaves the machine as it found it: the
//! package purged, and the user `solocron`, its home and /etc/solocron
//! removed again if it created them.
//!
//! The fast tests check the hidden `generate-docs` and the shipped
//! `jobs.toml` with the debug binary, without dpkg.

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use clap::CommandFactory as _;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// Written before the first `dpkg -i`, removed after the purge: a
/// `solocron` package found installed with this file present is this
/// test's own leftover. Its content says whether the test created the user.
const STATE: &str = "/var/tmp/solocron-package-test.state";
/// Where cargo-deb puts the unit; Debian 12's /lib is /usr/lib, so this is
/// /lib/systemd/system/solocron.service too.
const UNIT: &str = "/usr/lib/systemd/system/solocron.service";
const CONFIG: &str = "/etc/solocron/jobs.toml";
const PASSWORD: &str = "/etc/solocron/redis.pass";

/// The visible subcommands, from the clap definitions the pages are made of.
fn subcommands() -> Vec<String> {
    solocron::cli::Cli::command()
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set())
        .map(|sub| sub.get_name().to_string())
        .collect()
}

/// The top page `solocron.1`: clap's sections and what it has no notion
/// of: exit statuses, the environment, a line for every key of jobs.toml
/// (from the loader's own key lists), FILES and SEE ALSO.
fn check_top_page(top: &str) {
    for needle in [
        ".SH \"EXIT STATUS\"",
        ".SH ENVIRONMENT",
        ".SH CONFIGURATION",
        ".SH FILES",
        "/etc/solocron/jobs.toml",
        "/etc/solocron/redis.pass",
        "SOLOCRON_CONFIG",
        "SOLOCRON_NODE_ID",
        "SOLOCRON_REDIS_URL",
        "SOLOCRON_SERVICE_USER",
        "\\fBSOLOCRON_LOG\\fR",
        "SOLOCRON_OCCURRENCE",
        "\\fB78\\fR",
        "\\fB2\\fR",
    ] {
        assert!(top.contains(needle), "{needle}: {top}");
    }
    use solocron::config::keys;
    for key in [
        keys::REDIS,
        keys::SENTINEL,
        keys::DAEMON,
        keys::JOB,
        keys::NOTIFIER,
        keys::HTTP,
    ]
    .concat()
    {
        assert!(top.contains(&format!("\\fB{key}\\fR")), "key {key}: {top}");
    }
    for sub in subcommands() {
        // roff writes every hyphen `\-` (`solocron\-import\-crontab(1)`).
        let page = format!("solocron-{sub}(1)").replace('-', "\\-");
        assert!(top.contains(&page), "{sub}: {top}");
    }
}

/// Runs `command`; panics with its output unless it exits 0.
fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|err| panic!("cannot run {command:?}: {err}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        tail(&String::from_utf8_lossy(&output.stderr), 60),
    );
    output
}

fn stdout(command: &mut Command) -> String {
    String::from_utf8_lossy(&run(command).stdout).into_owned()
}

/// The last `lines` lines of `text` (a cargo build says a lot).
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `dpkg ARGS`, waiting up to 2 minutes for the dpkg lock if an apt run
/// elsewhere on the machine holds it.
fn dpkg(args: &[&str]) -> Output {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(120);
    loop {
        let output = Command::new("dpkg")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .unwrap_or_else(|err| panic!("cannot run dpkg {args:?}: {err}"));
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() && stderr.contains("lock") && Instant::now() < deadline {
            // Another dpkg holds its lock: try again a little later.
            std::thread::sleep(Duration::from_secs(3));
            continue;
        }
        assert!(
            output.status.success(),
            "dpkg {args:?} failed ({}):\nstdout:\n{}\nstderr:\n{stderr}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
        );
        eprintln!("dpkg {args:?}: {:.1?}", started.elapsed());
        return output;
    }
}

/// dpkg's status of the package `solocron`: `None` when dpkg does not know
/// it, else e.g. `install ok installed` or `deinstall ok config-files`.
fn package_status() -> Option<String> {
    let output = Command::new("dpkg-query")
        .args(["-W", "-f", "${Status}", "solocron"])
        .output()
        .expect("run dpkg-query");
    let status = String::from_utf8_lossy(&output.stdout).trim().to_string();
    (output.status.success() && !status.contains("not-installed")).then_some(status)
}

/// `getent DATABASE KEY` split at `:`, or `None` if there is no entry.
fn getent(database: &str, key: &str) -> Option<Vec<String>> {
    let output = Command::new("getent")
        .args([database, key])
        .output()
        .expect("run getent");
    output.status.success().then(|| {
        String::from_utf8_lossy(&output.stdout)
            .trim()
            .split(':')
            .map(str::to_string)
            .collect()
    })
}

/// Fails (never skips) where the test cannot run, saying what to do.
fn require_root_and_tools() {
    let euid = stdout(Command::new("id").arg("-u"));
    assert_eq!(
        euid.trim(),
        "0",
        "tests/it/package/deb.rs installs the .deb with dpkg and needs root (CI runs as root); \
         run it as root on a machine you may install packages on, e.g. `sudo -E cargo test --test it package::deb::`"
    );
    for tool in [
        "dpkg",
        "dpkg-deb",
        "dpkg-query",
        "systemd-analyze",
        "runuser",
    ] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|out| out.status.success());
        assert!(
            found,
            "`{tool}` is missing: tests/it/package/deb.rs needs a Debian machine with dpkg and systemd; \
             run `scripts/need-deps --tests` (as root it installs what is missing)"
        );
    }
}

/// Puts the machine back when the test ends, also when it panics: purges
/// the package, and deletes the user and its home if this test created them.
struct Restore {
    created_user: bool,
    created_home: bool,
    /// /etc/solocron was not there: a failed run may leave the files it
    /// wrote there (a purge that did not remove them).
    created_etc: bool,
}

const HOME: &str = "/var/lib/solocron";
const ETC: &str = "/etc/solocron";

impl Drop for Restore {
    fn drop(&mut self) {
        restore(self);
    }
}

fn restore(made: &Restore) {
    if package_status().is_some() {
        let purged = Command::new("dpkg").args(["-P", "solocron"]).status();
        if !purged.is_ok_and(|status| status.success()) {
            eprintln!("cleanup: `dpkg -P solocron` failed; run it by hand");
            return;
        }
    }
    if made.created_user && getent("passwd", "solocron").is_some() {
        let deleted = Command::new("deluser")
            .args(["--system", "--quiet", "solocron"])
            .status();
        if !deleted.is_ok_and(|status| status.success()) {
            eprintln!("cleanup: `deluser --system solocron` failed; run it by hand");
            return;
        }
    }
    if made.created_home
        && Path::new(HOME).exists()
        && let Err(err) = std::fs::remove_dir_all(HOME)
    {
        eprintln!("cleanup: cannot remove {HOME}: {err}; remove it by hand");
        return;
    }
    if made.created_etc
        && Path::new(ETC).exists()
        && let Err(err) = std::fs::remove_dir_all(ETC)
    {
        eprintln!("cleanup: cannot remove {ETC}: {err}; remove it by hand");
        return;
    }
    let _ = std::fs::remove_file(STATE);
}

/// Takes over what a killed run left, and refuses a package it did not
/// install. Notes in [`STATE`] whether the user and its home existed.
fn take_over_the_machine() -> Restore {
    if let Ok(state) = std::fs::read_to_string(STATE) {
        eprintln!("cleaning up after an earlier run of this test ({STATE})");
        restore(&Restore {
            created_user: state.lines().any(|line| line == "user-created"),
            created_home: state.lines().any(|line| line == "home-created"),
            created_etc: state.lines().any(|line| line == "etc-created"),
        });
    }
    if let Some(status) = package_status() {
        panic!(
            "a `solocron` package is on this machine ({status}) and this test did not install it: \
             it would purge it; remove it with `dpkg -P solocron`, or run the test elsewhere"
        );
    }
    let made = Restore {
        created_user: getent("passwd", "solocron").is_none(),
        created_home: !Path::new(HOME).exists(),
        created_etc: !Path::new(ETC).exists(),
    };
    let mut note = String::new();
    if made.created_user {
        note.push_str("user-created\n");
    }
    if made.created_home {
        note.push_str("home-created\n");
    }
    if made.created_etc {
        note.push_str("etc-created\n");
    }
    std::fs::write(STATE, note).unwrap_or_else(|err| panic!("write {STATE}: {err}"));
    made
}

/// `path`'s mode bits, owner and group ids.
fn owner_and_mode(path: &str) -> (u32, u32, u32) {
    let meta = std::fs::metadata(path).unwrap_or_else(|err| panic!("stat {path}: {err}"));
    (meta.permissions().mode() & 0o7777, meta.uid(), meta.gid())
}

fn gunzip(path: &str) -> String {
    stdout(Command::new("gzip").args(["-dc", path]))
}

#[test]
fn the_package_builds_installs_upgrades_and_purges() {
    require_root_and_tools();
    let started = Instant::now();
    let restore = take_over_the_machine();

    // Build as an operator does, but with the binary `cargo test` has just
    // built (`--binary`) instead of a release build of several minutes:
    // everything after the build is the same. SOLOCRON_TEST_PACKAGE_RELEASE=1
    // runs the release build too.
    let mut package = Command::new(Path::new(ROOT).join("scripts/package"));
    if std::env::var_os("SOLOCRON_TEST_PACKAGE_RELEASE").is_none() {
        package.args(["--binary", env!("CARGO_BIN_EXE_solocron")]);
    }
    let output = run(package.current_dir(ROOT));
    let printed = String::from_utf8_lossy(&output.stdout);
    let deb = PathBuf::from(
        printed
            .lines()
            .last()
            .expect("scripts/package printed nothing"),
    );
    let deb = if deb.is_absolute() {
        deb
    } else {
        Path::new(ROOT).join(deb)
    };
    assert!(deb.is_file(), "scripts/package printed {deb:?}, not a file");
    let built = started.elapsed();
    eprintln!("built {} in {built:.0?}", deb.display());
    let deb_str = deb.to_str().expect("UTF-8 path");

    // What is in it: `dpkg-deb -c` lines end with `./path` (links: `-> target`).
    let listing = stdout(Command::new("dpkg-deb").args(["-c", deb_str]));
    let entries: Vec<(String, String)> = listing
        .lines()
        .filter_map(|line| {
            let mode = line.split_whitespace().next()?.to_string();
            let path = line.split(" ./").nth(1)?.split(" -> ").next()?.to_string();
            Some((format!("/{path}"), mode))
        })
        .collect();
    let mode_of = |path: &str| {
        entries
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, mode)| mode.clone())
            .unwrap_or_else(|| panic!("the package has no {path}:\n{listing}"))
    };
    assert_eq!(mode_of("/usr/bin/solocron"), "-rwxr-xr-x");
    assert_eq!(mode_of(UNIT), "-rw-r--r--");
    assert_eq!(mode_of(CONFIG), "-rw-r-----", "no world-readable jobs.toml");
    let mut expected = vec![
        "/usr/share/man/man1/solocron.1.gz".to_string(),
        "/usr/share/bash-completion/completions/solocron".to_string(),
        "/usr/share/zsh/vendor-completions/_solocron".to_string(),
        "/usr/share/fish/vendor_completions.d/solocron.fish".to_string(),
        "/usr/share/doc/solocron/README.md".to_string(),
        "/usr/share/doc/solocron/copyright".to_string(),
        "/usr/share/doc/solocron/changelog.Debian.gz".to_string(),
    ];
    for sub in subcommands() {
        expected.push(format!("/usr/share/man/man1/solocron-{sub}.1.gz"));
    }
    // Every file of docs/ (its images too) and of examples/configs/.
    let mut dirs = vec!["docs".to_string(), "examples/configs".to_string()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(Path::new(ROOT).join(&dir)).expect("list the repo's docs") {
            let entry = entry.expect("dir entry");
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if entry.file_type().expect("file type").is_dir() {
                dirs.push(format!("{dir}/{name}"));
                continue;
            }
            let installed = dir.replace("examples/configs", "examples");
            expected.push(format!("/usr/share/doc/solocron/{installed}/{name}"));
        }
    }
    for path in &expected {
        mode_of(path);
    }
    let pages: BTreeSet<&str> = entries
        .iter()
        .filter_map(|(path, _)| path.strip_prefix("/usr/share/man/man1/"))
        .filter(|name| !name.is_empty())
        .collect();
    assert_eq!(
        pages.len(),
        subcommands().len() + 1,
        "one page per visible subcommand, none for the hidden generate-docs: {pages:?}"
    );

    // Its control data.
    let field = |name: &str| stdout(Command::new("dpkg-deb").args(["-f", deb_str, name]));
    assert_eq!(field("Package").trim(), "solocron");
    let version = format!("{}-1", env!("CARGO_PKG_VERSION"));
    assert_eq!(field("Version").trim(), version);
    let doc = |name: &str| {
        let tar = Command::new("sh")
            .args([
                "-c",
                &format!("dpkg-deb --fsys-tarfile '{deb_str}' | tar -xOf - ./usr/share/doc/solocron/{name}"),
            ])
            .output()
            .expect("run dpkg-deb | tar");
        assert!(tar.status.success(), "{name}: {tar:?}");
        tar.stdout
    };
    // copyright in Debian's machine-readable format, with the license of
    // Cargo.toml when it has one.
    let copyright = String::from_utf8(doc("copyright")).expect("UTF-8 copyright");
    assert!(
        copyright.starts_with(
            "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
        ) && copyright.contains("Upstream-Name: solocron"),
        "{copyright}"
    );
    let license = env!("CARGO_PKG_LICENSE");
    if !license.is_empty() {
        assert!(
            copyright.contains(&format!("License: {license}")),
            "{copyright}"
        );
    }
    // The changelog's top entry is this version, and dpkg can read it.
    let changelog_gz = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(changelog_gz.path(), doc("changelog.Debian.gz")).expect("write");
    let changelog = stdout(Command::new("gzip").arg("-dc").arg(changelog_gz.path()));
    assert!(
        changelog.starts_with(&format!("solocron ({version}) ")),
        "the changelog's top entry is not {version}: {changelog}"
    );
    let plain = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(plain.path(), &changelog).expect("write");
    let parsed = stdout(
        Command::new("dpkg-parsechangelog")
            .args(["-S", "Version", "-l"])
            .arg(plain.path()),
    );
    assert_eq!(parsed.trim(), version, "{changelog}");
    let depends = field("Depends");
    assert!(
        depends.contains("adduser") && depends.contains("libc6"),
        "Depends: {depends}"
    );
    let control = tempfile::tempdir().expect("temp dir");
    run(Command::new("dpkg-deb")
        .args(["-e", deb_str])
        .arg(control.path().join("DEBIAN")));
    let conffiles = std::fs::read_to_string(control.path().join("DEBIAN/conffiles"))
        .expect("the package has a conffiles list");
    assert_eq!(conffiles.lines().collect::<Vec<_>>(), [CONFIG]);
    // Without a running systemd (CI) the start and restart branches cannot
    // be run, so read them: never a start, only a restart of a running
    // daemon on upgrade; and the user is made before cargo-deb's part.
    let postinst = std::fs::read_to_string(control.path().join("DEBIAN/postinst"))
        .expect("the package has a postinst");
    assert!(
        postinst.contains("deb-systemd-invoke try-restart solocron.service")
            && !postinst.contains("deb-systemd-invoke start")
            && !postinst.contains("_dh_action=start"),
        "{postinst}"
    );
    assert_eq!(
        postinst.matches("deb-systemd-helper update-state").count(),
        1,
        "cargo-deb's part once, where the token is: {postinst}"
    );
    let user_at = postinst
        .find("adduser --system")
        .expect("postinst adds the user");
    let systemd_at = postinst
        .find("deb-systemd-helper")
        .expect("cargo-deb's part");
    assert!(user_at < systemd_at, "{postinst}");

    // Install.
    let installed = dpkg(&["-i", deb_str]);
    let note = String::from_utf8_lossy(&installed.stderr);
    assert!(
        note.contains("install -m 0640 -o root -g solocron /dev/null /etc/solocron/redis.pass"),
        "a first install says how to make a secret file: {note}"
    );
    assert_eq!(package_status().as_deref(), Some("install ok installed"));
    let version_line = stdout(Command::new("/usr/bin/solocron").arg("--version"));
    assert_eq!(
        version_line.trim(),
        format!("solocron {}", env!("CARGO_PKG_VERSION"))
    );
    let user = getent("passwd", "solocron").expect("the package created the user solocron");
    let group = getent("group", "solocron").expect("the package created the group solocron");
    let uid: u32 = user[2].parse().expect("uid");
    let gid: u32 = group[2].parse().expect("gid");
    assert!(uid < 1000, "a system user: {user:?}");
    assert_eq!(user[3], group[2], "primary group solocron: {user:?}");
    assert_eq!(user[5], HOME, "{user:?}");
    let (home_mode, home_uid, _) = owner_and_mode(HOME);
    assert_eq!(
        home_uid, uid,
        "{HOME}, the jobs' working directory, belongs to solocron"
    );
    if restore.created_user {
        assert_eq!(home_mode, 0o750, "{HOME} is the service's only");
    }
    assert_eq!(user[6], "/usr/sbin/nologin", "{user:?}");
    assert_eq!(owner_and_mode("/etc/solocron"), (0o750, 0, gid));
    assert_eq!(owner_and_mode(CONFIG), (0o640, 0, gid));
    assert!(Path::new("/lib/systemd/system/solocron.service").is_file());
    assert_eq!(
        std::fs::read(UNIT).expect("read the installed unit"),
        std::fs::read(Path::new(ROOT).join("systemd/solocron.service")).expect("read the unit"),
        "the installed unit is the repository's"
    );
    assert!(
        !Path::new("/etc/systemd/system/multi-user.target.wants/solocron.service").exists(),
        "the package must not enable the unit before jobs.toml is edited"
    );
    let verifying = Instant::now();
    let verify = Command::new("systemd-analyze")
        .args(["verify", UNIT])
        .output()
        .expect("run systemd-analyze");
    eprintln!("systemd-analyze verify: {:.1?}", verifying.elapsed());
    let complaints = String::from_utf8_lossy(&verify.stderr);
    assert!(
        verify.status.success() && !complaints.contains("solocron.service"),
        "systemd-analyze verify {UNIT}: {verify:?}\n{complaints}"
    );
    let man = gunzip("/usr/share/man/man1/solocron.1.gz");
    assert!(man.contains(".TH solocron 1"), "{man}");
    check_top_page(&man);
    let history = gunzip("/usr/share/man/man1/solocron-history.1.gz");
    assert!(history.contains("since"), "{history}");
    for (path, marker) in [
        (
            "/usr/share/bash-completion/completions/solocron",
            "complete -F",
        ),
        (
            "/usr/share/zsh/vendor-completions/_solocron",
            "#compdef solocron",
        ),
        (
            "/usr/share/fish/vendor_completions.d/solocron.fish",
            "complete -c solocron",
        ),
    ] {
        let script = std::fs::read_to_string(path).unwrap_or_else(|err| panic!("{path}: {err}"));
        assert!(script.contains(marker), "{path}");
        assert!(
            script.contains("since") && script.contains("trigger"),
            "{path}"
        );
        assert!(
            !script.contains("generate-docs"),
            "{path} offers the hidden command"
        );
    }

    // The shipped jobs.toml is refused until edited; then it is valid,
    // also for the service user, who may read it through its group.
    let check = Command::new("/usr/bin/solocron")
        .args(["check", "--config", CONFIG])
        .output()
        .expect("run solocron check");
    let said = String::from_utf8_lossy(&check.stderr);
    assert_eq!(check.status.code(), Some(1), "{check:?}");
    assert!(
        said.contains("no `[redis]` section") && said.contains("no job"),
        "{said}"
    );
    assert!(
        said.contains("installed template") && !said.contains("truncated"),
        "{said}"
    );
    // A password file made root's own (mode 600: the docs' old third
    // recipe), and the env files made the one way docs/operations.md says.
    std::fs::write(PASSWORD, "hunter2-package-test\n").expect("write redis.pass");
    std::fs::set_permissions(PASSWORD, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    for file in ["/etc/solocron/env", "/etc/solocron/daemon.env"] {
        run(Command::new("install").args([
            "-m",
            "0640",
            "-o",
            "root",
            "-g",
            "solocron",
            "/dev/null",
            file,
        ]));
    }
    let mut edited = std::fs::read_to_string(CONFIG)
        .expect("read jobs.toml")
        .replacen(
            "\n[daemon]\n",
            "\n[daemon]\nenv_file = \"/etc/solocron/env\"\n",
            1,
        );
    edited.push_str(&format!(
        "\n[redis]\nurl = \"redis://127.0.0.1:6379\"\npassword_file = \"{PASSWORD}\"\n\n\
         [jobs.hello]\nschedule = \"@daily\"\nargv = [\"true\"]\n",
    ));
    std::fs::write(CONFIG, &edited).expect("edit jobs.toml");
    let as_solocron = || {
        Command::new("runuser")
            .args([
                "-u",
                "solocron",
                "--",
                "/usr/bin/solocron",
                "check",
                "--quiet",
                "--config",
                CONFIG,
            ])
            .output()
            .expect("run runuser")
    };
    // Root reads it; the daemon, as solocron, would not: check says so.
    let refused = as_solocron();
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let warned =
        run(Command::new("/usr/bin/solocron").args(["check", "--quiet", "--config", CONFIG]));
    let said = String::from_utf8_lossy(&warned.stderr);
    let fix = format!("chown root:solocron {PASSWORD} && chmod 0640 {PASSWORD}");
    assert!(
        String::from_utf8_lossy(&warned.stdout).contains("valid, 1 job(s), 1 warning(s)")
            && said.contains("[redis] `password_file`: the service user `solocron` cannot read")
            && said.contains("owner root, group root, mode 0600")
            && said.contains(&fix),
        "{warned:?}"
    );
    run(Command::new("sh").args(["-c", &fix]));
    let quiet =
        run(Command::new("/usr/bin/solocron").args(["check", "--quiet", "--config", CONFIG]));
    assert!(quiet.stderr.is_empty(), "{quiet:?}");
    let valid = as_solocron();
    assert!(
        valid.status.success()
            && String::from_utf8_lossy(&valid.stdout).contains("valid, 1 job(s)"),
        "{valid:?}"
    );

    // Upgrade to a newer version of the same files (repacked with
    // dpkg-deb): the edit survives, the user and the modes stay, the unit
    // stays disabled.
    let repack = tempfile::tempdir().expect("temp dir");
    let tree = repack.path().join("tree");
    run(Command::new("dpkg-deb").args(["-R", deb_str]).arg(&tree));
    let control_file = tree.join("DEBIAN/control");
    let text = std::fs::read_to_string(&control_file).expect("read control");
    let newer = format!("{}-2", env!("CARGO_PKG_VERSION"));
    std::fs::write(
        &control_file,
        text.replace(&format!("Version: {version}"), &format!("Version: {newer}")),
    )
    .expect("write control");
    let newer_deb = repack.path().join("newer.deb");
    run(Command::new("dpkg-deb")
        .args(["--root-owner-group", "-Znone", "-b"])
        .arg(&tree)
        .arg(&newer_deb));
    let upgraded = dpkg(&["-i", newer_deb.to_str().expect("UTF-8 path")]);
    assert!(
        !String::from_utf8_lossy(&upgraded.stderr).contains("install -m 0640"),
        "only a first install says it: {upgraded:?}"
    );
    let installed = stdout(Command::new("dpkg-query").args(["-W", "-f", "${Version}", "solocron"]));
    assert_eq!(installed, newer);
    assert_eq!(
        std::fs::read_to_string(CONFIG).expect("read jobs.toml"),
        edited,
        "the upgrade kept the operator's jobs.toml"
    );
    assert_eq!(
        getent("passwd", "solocron").expect("user after upgrade"),
        user
    );
    assert_eq!(owner_and_mode(CONFIG), (0o640, 0, gid));
    assert!(!Path::new("/etc/systemd/system/multi-user.target.wants/solocron.service").exists());

    // Remove: the binary and unit go, the config and the user stay.
    dpkg(&["-r", "solocron"]);
    assert!(
        !Path::new("/usr/bin/solocron").exists(),
        "dpkg -r left the binary"
    );
    assert!(!Path::new(UNIT).exists(), "dpkg -r left the unit");
    assert_eq!(
        std::fs::read_to_string(CONFIG).expect("dpkg -r keeps jobs.toml"),
        edited
    );
    assert_eq!(
        package_status().as_deref(),
        Some("deinstall ok config-files")
    );

    // Purge: the config, the secret files docs/operations.md has the operator
    // create and the statoverrides go, the user stays. A file of the
    // operator's own stays, but no longer for the group solocron or the
    // user: their ids go to the next system user made after `deluser`.
    let notes = "/etc/solocron/notes.txt";
    std::fs::write(notes, "the operator's own\n").expect("write notes");
    std::fs::set_permissions(notes, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    std::os::unix::fs::chown(notes, Some(uid), Some(gid)).expect("chown");
    let purged = dpkg(&["-P", "solocron"]);
    assert_eq!(package_status(), None);
    assert!(!Path::new(CONFIG).exists(), "dpkg -P left jobs.toml");
    for secret in [PASSWORD, "/etc/solocron/env", "/etc/solocron/daemon.env"] {
        assert!(!Path::new(secret).exists(), "dpkg -P left {secret}");
    }
    assert_eq!(owner_and_mode("/etc/solocron"), (0o700, 0, 0));
    assert_eq!(owner_and_mode(notes), (0o600, 0, 0));
    let told = String::from_utf8_lossy(&purged.stderr);
    assert!(told.contains(notes), "the purge lists what it kept: {told}");
    std::fs::remove_dir_all(ETC).expect("remove the test's /etc/solocron");
    let overrides = stdout(Command::new("dpkg-statoverride").arg("--list"));
    assert!(!overrides.contains("/etc/solocron"), "{overrides}");
    assert!(
        getent("passwd", "solocron").is_some(),
        "removal keeps the system user"
    );
    for leftover in [
        "/etc/systemd/system/solocron.service",
        "/etc/systemd/system/multi-user.target.wants/solocron.service",
    ] {
        assert!(
            std::fs::symlink_metadata(leftover).is_err(),
            "dpkg -P left the unit's mask or enablement {leftover}"
        );
    }

    let (created_user, created_home) = (restore.created_user, restore.created_home);
    drop(restore);
    assert_eq!(
        getent("passwd", "solocron").is_some(),
        !created_user,
        "the cleanup puts the user back as it was"
    );
    assert_eq!(Path::new(HOME).exists(), !created_home, "and its home");
    assert!(!Path::new(STATE).exists(), "the cleanup removes {STATE}");
    eprintln!(
        "package test: {:.0?} in all ({built:.0?} of it building)",
        started.elapsed()
    );
}

/// The hidden `generate-docs` writes a page per visible subcommand and the
/// three completions; the package test checks them once installed.
#[test]
fn generate_docs_writes_a_page_per_subcommand_and_three_completions() {
    let dir = tempfile::tempdir().expect("temp dir");
    let output = run(Command::new(env!("CARGO_BIN_EXE_solocron"))
        .arg("generate-docs")
        .arg(dir.path()));
    let listed: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            Path::new(line)
                .strip_prefix(dir.path())
                .expect("a path under DIR")
                .display()
                .to_string()
        })
        .collect();
    let mut expected = vec!["man/solocron.1".to_string()];
    expected.extend(
        subcommands()
            .iter()
            .map(|sub| format!("man/solocron-{sub}.1")),
    );
    expected.sort();
    expected.extend(
        [
            "completions/solocron.bash",
            "completions/_solocron",
            "completions/solocron.fish",
        ]
        .map(String::from),
    );
    assert_eq!(listed, expected);
    let trigger = std::fs::read_to_string(dir.path().join("man/solocron-trigger.1")).expect("page");
    assert!(trigger.contains("solocron trigger"), "{trigger}");
    assert!(trigger.contains("node\\-id"), "{trigger}");
    let top = std::fs::read_to_string(dir.path().join("man/solocron.1")).expect("page");
    check_top_page(&top);

    for file in ["solocron.bash", "_solocron", "solocron.fish"] {
        let script = std::fs::read_to_string(dir.path().join("completions").join(file))
            .expect("completion script");
        for sub in subcommands() {
            assert!(script.contains(&sub), "{file} lacks {sub}");
        }
        assert!(script.contains("outcome"), "{file} lacks history's options");
        assert!(
            !script.contains("generate-docs"),
            "{file} offers the hidden command"
        );
    }

    // A directory that cannot be made is named in the error.
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").expect("write");
    let failed = Command::new(env!("CARGO_BIN_EXE_solocron"))
        .arg("generate-docs")
        .arg(file.join("out"))
        .output()
        .expect("run");
    assert_eq!(failed.status.code(), Some(1), "{failed:?}");
    let said = String::from_utf8_lossy(&failed.stderr);
    assert!(said.contains("a-file/out/man"), "{said}");
}

/// The conffile as shipped: refused with both reasons, valid once a Redis
/// and a job are added.
#[test]
fn the_shipped_jobs_toml_is_refused_until_edited() {
    let shipped = Path::new(ROOT).join("packaging/jobs.toml");
    // The package test, in parallel, may create the user solocron: this
    // file in a temporary directory is not about it.
    let check = |path: &Path| {
        Command::new(env!("CARGO_BIN_EXE_solocron"))
            .args(["check", "--config"])
            .arg(path)
            .env("SOLOCRON_SERVICE_USER", "no-such-user-solocron-test")
            .output()
            .expect("run solocron check")
    };
    let refused = check(&shipped);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("no `[redis]` section") && said.contains("no job"),
        "{said}"
    );
    // It is a template to fill in, not a truncated file: say what to add.
    assert!(
        said.contains("installed template")
            && said.contains("add `[redis]` with `url = ")
            && said.contains("at least one `[jobs.NAME]` table")
            && !said.contains("truncated")
            && !said.contains("restore"),
        "{said}"
    );
    // Half edited: what is still missing, again without truncation.
    let dir = tempfile::tempdir().expect("temp dir");
    let half = dir.path().join("half.toml");
    let mut text = std::fs::read_to_string(&shipped).expect("read");
    text.push_str("\n[redis]\nurl = \"redis://10.0.0.5:6379\"\n");
    std::fs::write(&half, text).expect("write");
    let refused = check(&half);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("no job") && said.contains("add one") && !said.contains("truncated"),
        "{said}"
    );
    let edited = dir.path().join("jobs.toml");
    let mut text = std::fs::read_to_string(&shipped).expect("read");
    text.push_str("\n[redis]\nurl = \"redis://10.0.0.5:6379\"\n[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n");
    std::fs::write(&edited, text).expect("write");
    let valid = check(&edited);
    assert!(valid.status.success(), "{valid:?}");
    assert!(
        String::from_utf8_lossy(&valid.stderr).is_empty(),
        "no warnings: {valid:?}"
    );
}
