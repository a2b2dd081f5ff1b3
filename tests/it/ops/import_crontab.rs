//! `solocron import-crontab`, the real binary: a crontab in, the exact
//! fragment out, and that fragment (with a `[redis]` section) passing the
//! real `solocron check`; a command's `%` input reaching the program as
//! cron (cronie's `do_command.c`) would have written it, through a real
//! `/bin/sh`; standard input, and the files it cannot read.

use crate::common;

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::Workdir;

/// `solocron import-crontab ARGS`, with `stdin` piped in (`None`:
/// `/dev/null`) and `env` set.
fn import(args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(common::solocron_bin());
    command
        .arg("import-crontab")
        .args(args)
        .envs(env.iter().copied())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("start solocron import-crontab");
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(text.as_bytes()).expect("write stdin");
    }
    child.wait_with_output().expect("wait for solocron")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The fragment plus a `[redis]` section, as `jobs.toml` of `work`.
fn with_redis(work: &Workdir, fragment: &str) -> std::path::PathBuf {
    let path = work.path("jobs.toml");
    let text = format!("{fragment}\n[redis]\nurl = \"redis://127.0.0.1:6379\"\n");
    std::fs::write(&path, text).expect("write jobs.toml");
    path
}

/// `solocron check --config PATH` (the service user is one that does not
/// exist, so that a root run warns about nothing of this machine's).
fn check(path: &Path) -> Output {
    Command::new(common::solocron_bin())
        .args(["check", "--config"])
        .arg(path)
        .env("SOLOCRON_SERVICE_USER", "no-such-user-solocron-test")
        .output()
        .expect("run solocron check")
}

fn assert_checks(work: &Workdir, fragment: &str, jobs: usize) {
    let checked = check(&with_redis(work, fragment));
    assert!(checked.status.success(), "{checked:?}\n{fragment}");
    assert!(
        stdout(&checked).contains(&format!("valid, {jobs} job(s)")),
        "{checked:?}"
    );
}

/// Variables, CRON_TZ, SHELL, PATH, MAILTO, `%` input and `\%`, names,
/// steps, `@daily`, `@reboot`, a comment, a blank line, a broken line and a
/// `${X}` in a command: the whole fragment as expected, and it checks.
#[test]
fn a_user_crontab_becomes_the_expected_fragment_and_it_checks() {
    let work = Workdir::new();
    let crontab = work.path("crontab");
    std::fs::write(
        &crontab,
        r#"# m h  dom mon dow   command
PATH=/usr/local/bin:/usr/bin:/bin
MAILTO=ops@example.com
BACKUP_DIR = "/srv/backups"

*/15 * * * * /usr/local/bin/sync-cache.sh --quiet
5/20 8-18 * * mon-fri cd /srv/app && ./bin/report > /tmp/report.log 2>&1
0 3 1 * * mail -s "monthly report" ops@example.com%Hello,%it's 100\% ready.%
0 4 * * * tar czf "${BACKUP_DIR}/etc-$(date +\%F).tgz" /etc
CRON_TZ=Europe/Berlin
@daily /usr/local/bin/backup.sh
@reboot /usr/local/bin/warm-up
SHELL=/bin/bash
30 2 * * 7 /usr/local/bin/backup.sh --weekly
61 * * * * /usr/local/bin/broken
"#,
    )
    .expect("write crontab");
    let path = crontab.display().to_string();
    let output = import(&[&path, "--timezone", "America/New_York"], None, &[]);
    assert!(output.status.success(), "{output:?}");
    let expected = format!(
        r#"# Imported by `solocron import-crontab` from {path}, read as a user crontab.
# Add a [redis] section naming the fleet's Redis, then run `solocron check`.

# line 3: MAILTO=ops@example.com  (not carried over: solocron sends no mail; a run's output goes to the log and its history entry. To hear of a failure, give the jobs an `on_failure` notifier (README.md, "When a job fails"))

# line 6: */15 * * * * /usr/local/bin/sync-cache.sh --quiet
[jobs.sync-cache]
schedule = "*/15 * * * *"
timezone = "America/New_York"
command = "/usr/local/bin/sync-cache.sh --quiet"
env = {{ PATH = "/usr/local/bin:/usr/bin:/bin", BACKUP_DIR = "/srv/backups" }}

# line 7: 5/20 8-18 * * mon-fri cd /srv/app && ./bin/report > /tmp/report.log 2>&1
[jobs.report]
schedule = "5/20 8-18 * * mon-fri"
timezone = "America/New_York"
command = "cd /srv/app && ./bin/report > /tmp/report.log 2>&1"
env = {{ PATH = "/usr/local/bin:/usr/bin:/bin", BACKUP_DIR = "/srv/backups" }}

# line 8: 0 3 1 * * mail -s "monthly report" ops@example.com%Hello,%it's 100\% ready.%
# cron wrote the text after `%` to its standard input; so does printf
[jobs.mail]
schedule = "0 3 1 * *"
timezone = "America/New_York"
command = '''
printf '%s\n' 'Hello,' 'it'\''s 100% ready.' | {{
mail -s "monthly report" ops@example.com
}}'''
env = {{ PATH = "/usr/local/bin:/usr/bin:/bin", BACKUP_DIR = "/srv/backups" }}

# line 9: 0 4 * * * tar czf "${{BACKUP_DIR}}/etc-$(date +\%F).tgz" /etc
[jobs.tar]
schedule = "0 4 * * *"
timezone = "America/New_York"
command = 'tar czf "$${{BACKUP_DIR}}/etc-$(date +%F).tgz" /etc'
env = {{ PATH = "/usr/local/bin:/usr/bin:/bin", BACKUP_DIR = "/srv/backups" }}

# line 11: @daily /usr/local/bin/backup.sh
[jobs.backup]
schedule = "@daily"
timezone = "Europe/Berlin"
command = "/usr/local/bin/backup.sh"
env = {{ PATH = "/usr/local/bin:/usr/bin:/bin", BACKUP_DIR = "/srv/backups" }}

# line 12: @reboot /usr/local/bin/warm-up  (not imported: @reboot has no equivalent, as solocron runs the occurrences of a schedule, each on one node of the fleet, not a command at each boot; run it on each machine from a systemd unit of its own (Type=oneshot, WantedBy=multi-user.target))

# line 14: 30 2 * * 7 /usr/local/bin/backup.sh --weekly
[jobs.backup-2]
schedule = "30 2 * * 7"
timezone = "Europe/Berlin"
argv = ["/bin/bash", "-c", "/usr/local/bin/backup.sh --weekly"]
env = {{ PATH = "/usr/local/bin:/usr/bin:/bin", BACKUP_DIR = "/srv/backups" }}

# line 15: 61 * * * * /usr/local/bin/broken  (not imported: invalid cron expression `61 * * * *`: minute `61` is out of range 0–59)
"#
    );
    assert_eq!(stdout(&output), expected);
    assert_eq!(
        stderr(&output),
        format!(
            "note: reading {path} as a user crontab (the command right after the time fields); \
             --system if a user name comes first\n\
             imported 6 jobs from {path}, 3 lines left as comments\n"
        )
    );
    // `${BACKUP_DIR}` is the shell's, so `check` needs no such variable.
    assert_checks(&work, &expected, 6);
}

/// Debian's /etc/crontab: read as a system crontab (every entry names
/// root), each job says as whom cron ran it, and the fragment checks.
#[test]
fn a_system_crontab_keeps_its_users_as_comments_and_checks() {
    let work = Workdir::new();
    let crontab = work.path("crontab");
    std::fs::write(
        &crontab,
        "# /etc/crontab: system-wide crontab\n\
         SHELL=/bin/sh\n\
         PATH=/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin\n\
         \n\
         # m h dom mon dow user\tcommand\n\
         17 *\t* * *\troot\tcd / && run-parts --report /etc/cron.hourly\n\
         25 6\t* * *\troot\ttest -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }\n\
         47 6\t* * 7\troot\ttest -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.weekly; }\n",
    )
    .expect("write crontab");
    let path = crontab.display().to_string();
    let output = import(&[&path], None, &[("TZ", ":Asia/Tokyo")]);
    assert!(output.status.success(), "{output:?}");
    let expected = format!(
        "# Imported by `solocron import-crontab` from {path}, read as a system crontab.
# Add a [redis] section naming the fleet's Redis, then run `solocron check`.
#
# cron ran each entry as the user its line names. solocron runs every job
# as the unit's service user (User=solocron), and the unit's
# NoNewPrivileges=yes and empty CapabilityBoundingSet= keep a job from
# becoming another user (sudo, su and runuser fail). Give the service user
# what each job needs (group membership, file modes, ReadWritePaths= in a
# drop-in), or, when the jobs must all run as one user, set User= and
# Group= in a drop-in (`systemctl edit solocron`).

# line 6: 17 *\t* * *\troot\tcd / && run-parts --report /etc/cron.hourly
# cron ran it as `root`; solocron runs it as its service user (see the top)
[jobs.\"cron.hourly\"]
schedule = \"17 * * * *\"
timezone = \"Asia/Tokyo\"
command = \"cd / && run-parts --report /etc/cron.hourly\"
env = {{ PATH = \"/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin\" }}

# line 7: 25 6\t* * *\troot\ttest -x /usr/sbin/anacron || {{ cd / && run-parts --report /etc/cron.daily; }}
# cron ran it as `root`; solocron runs it as its service user (see the top)
[jobs.\"cron.daily\"]
schedule = \"25 6 * * *\"
timezone = \"Asia/Tokyo\"
command = \"test -x /usr/sbin/anacron || {{ cd / && run-parts --report /etc/cron.daily; }}\"
env = {{ PATH = \"/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin\" }}

# line 8: 47 6\t* * 7\troot\ttest -x /usr/sbin/anacron || {{ cd / && run-parts --report /etc/cron.weekly; }}
# cron ran it as `root`; solocron runs it as its service user (see the top)
[jobs.\"cron.weekly\"]
schedule = \"47 6 * * 7\"
timezone = \"Asia/Tokyo\"
command = \"test -x /usr/sbin/anacron || {{ cd / && run-parts --report /etc/cron.weekly; }}\"
env = {{ PATH = \"/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin\" }}
"
    );
    assert_eq!(stdout(&output), expected);
    let said = stderr(&output);
    assert!(
        said.contains(&format!(
            "note: reading {path} as a system crontab as the word after the time fields of \
             each entry is a user of this machine (root); --user to read it as a user crontab"
        )),
        "{said}"
    );
    assert!(
        said.contains("read in Asia/Tokyo, this machine's time zone (from TZ)"),
        "{said}"
    );
    assert!(
        said.ends_with(&format!(
            "imported 3 jobs from {path}, 0 lines left as comments\n"
        )),
        "{said}"
    );
    assert_checks(&work, &expected, 3);

    // An /etc/cron.d file of another user, read as one with --system: a
    // leading `-` (cron's "do not log") is dropped, an interpreter's script
    // names the job, and `--user` reads the same file the other way.
    let cron_d = work.path("app");
    std::fs::write(
        &cron_d,
        "MAILTO=\"\"\n-*/10 * * * * www-app /usr/bin/php -q /var/www/app/cron.php >/dev/null 2>&1\n",
    )
    .expect("write cron.d file");
    let app = cron_d.display().to_string();
    let output = import(&["--system", "--timezone", "UTC", &app], None, &[]);
    assert!(output.status.success(), "{output:?}");
    let fragment = stdout(&output);
    assert!(
        fragment.contains(
            "# cron ran it as `www-app`; solocron runs it as its service user (see the top)\n\
             [jobs.cron]\nschedule = \"*/10 * * * *\"\n\
             command = \"/usr/bin/php -q /var/www/app/cron.php >/dev/null 2>&1\"\n"
        ),
        "{fragment}"
    );
    assert!(
        !fragment.contains("timezone"),
        "UTC is the default: {fragment}"
    );
    assert!(!stderr(&output).contains("note:"), "{output:?}");
    assert_checks(&work, &fragment, 1);
    let as_user = import(&["--user", "--timezone", "UTC", &app], None, &[]);
    assert!(
        stdout(&as_user).contains("command = \"www-app /usr/bin/php"),
        "{as_user:?}"
    );
}

/// What `cat > FILE` receives, and what a command without `%` prints,
/// through the jobs the loader reads from the fragment and a real
/// `/bin/sh` (or the argv of `SHELL=/bin/bash`): the bytes cronie writes,
/// worked out from its `do_command.c` by hand.
#[test]
fn percent_input_reaches_the_command_as_cron_wrote_it() {
    let work = Workdir::new();
    let cases: [(&str, &str); 8] = [
        // Each further `%` is a newline; one is added at the end.
        ("cat > out1%line1%line2", "line1\nline2\n"),
        // `\%` is `%`; an empty line; no newline added after a `%` ending.
        (r"cat > out2%a\%b%%c%", "a%b\n\nc\n"),
        // Quotes, `$` and `${X}` are the program's; other backslashes stay.
        (
            r#"cat > out3%it's "quoted" $HOME ${X} \n \\ end"#,
            "it's \"quoted\" $HOME ${X} \\n \\\\ end\n",
        ),
        // A trailing backslash: written, and no newline after a `%` ending.
        (r"cat > out4%a%\", "a\n\\"),
        // A list reads its input as a whole.
        ("read x; echo \"got $x\" > out5%hello", "got hello\n"),
        // No `%`: the command as written, but `\%` is `%`.
        (r"echo 100\% ${X:-unset} > out6", "100% unset\n"),
        // `%` first thing after blanks that end the command: no input.
        ("cat > out7 %", ""),
        // A stray backslash in the command stays.
        (r"printf 'a\tb\n' > out8%ignored", "a\tb\n"),
    ];
    let mut crontab: String = cases
        .iter()
        .map(|(command, _)| format!("* * * * * {command}\n"))
        .collect();
    // Run by bash, which gets `${...}` as written (argv is not interpolated).
    crontab.push_str(
        "SHELL=/bin/bash\n* * * * * cat > out9; echo \"${BASH_VERSION:+bash}\" > shell9%x%y\n",
    );
    let output = import(&["-", "--timezone", "UTC"], Some(&crontab), &[]);
    assert!(output.status.success(), "{output:?}");
    let fragment = stdout(&output);
    assert_checks(&work, &fragment, cases.len() + 1);
    let text = std::fs::read_to_string(work.path("jobs.toml")).expect("read jobs.toml");
    let config = solocron::config::parse(&text, &work.path("jobs.toml"), &|_| None)
        .expect("the fragment loads");
    for job in &config.jobs {
        let status = match &job.action {
            // A job's standard input is /dev/null.
            solocron::config::Action::Command(command) => Command::new("/bin/sh")
                .args(["-c", command])
                .current_dir(work.dir.path())
                .env_remove("X")
                .stdin(Stdio::null())
                .status(),
            solocron::config::Action::Argv(argv) => Command::new(&argv[0])
                .args(&argv[1..])
                .current_dir(work.dir.path())
                .stdin(Stdio::null())
                .status(),
            solocron::config::Action::Http(_) => panic!("no http job"),
        }
        .expect("run the job");
        assert!(status.success(), "{}: {status:?}\n{fragment}", job.name);
    }
    for (index, (command, expected)) in cases.iter().enumerate() {
        let file = work.path(&format!("out{}", index + 1));
        let got = std::fs::read_to_string(&file).unwrap_or_else(|_| panic!("{command}: no output"));
        assert_eq!(got, *expected, "{command}\n{fragment}");
    }
    assert_eq!(
        std::fs::read_to_string(work.path("out9")).expect("out9"),
        "x\ny\n"
    );
    assert_eq!(
        std::fs::read_to_string(work.path("shell9")).expect("shell9"),
        "bash\n"
    );
}

/// `-` and no argument read standard input; a file that cannot be read,
/// one with no entry and one whose entries all stay comments exit 1 with
/// what happened; a terminal on standard input with no FILE is a usage
/// error.
#[test]
fn standard_input_and_files_it_cannot_read() {
    let crontab = "@hourly /usr/bin/true\n";
    for args in [&["-", "--timezone", "UTC"][..], &["--timezone", "UTC"][..]] {
        let output = import(args, Some(crontab), &[]);
        assert!(output.status.success(), "{args:?}: {output:?}");
        assert!(
            stdout(&output).starts_with(
                "# Imported by `solocron import-crontab` from standard input, read as a user crontab.\n"
            ),
            "{output:?}"
        );
        assert!(
            stdout(&output)
                .contains("[jobs.true]\nschedule = \"@hourly\"\ncommand = \"/usr/bin/true\"\n"),
            "{output:?}"
        );
        assert!(
            stderr(&output)
                .ends_with("imported 1 job from standard input, 0 lines left as comments\n"),
            "{output:?}"
        );
    }

    let work = Workdir::new();
    let missing = work.path("no-such-crontab").display().to_string();
    let output = import(&[&missing], None, &[]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(stdout(&output), "");
    assert_eq!(
        stderr(&output),
        format!(
            "error: cannot read the crontab {missing}: No such file or directory (os error 2)\n"
        )
    );

    let latin1 = work.path("latin1");
    std::fs::write(&latin1, b"# ok\n0 * * * * echo caf\xe9\n").expect("write");
    let output = import(&[&latin1.display().to_string()], None, &[]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr(&output).contains("line 2 is not UTF-8 text"),
        "{output:?}"
    );

    let no_entry = "# nothing here\n\nPATH=/bin\n   \n";
    let comments = work.path("comments");
    std::fs::write(&comments, no_entry).expect("write");
    let shown = comments.display().to_string();
    for input in [Some(shown.as_str()), None] {
        let args: Vec<&str> = input.into_iter().collect();
        let piped = input.is_none().then_some(no_entry);
        let output = import(&args, piped, &[]);
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        assert_eq!(stdout(&output), "", "{output:?}");
        let source = input.unwrap_or("standard input");
        assert!(
            stderr(&output).contains(&format!(
                "error: nothing could be read from {source}: it has no crontab entry"
            )),
            "{output:?}"
        );
    }

    let reboot = work.path("reboot");
    std::fs::write(&reboot, "@reboot /usr/local/bin/warm-up\n").expect("write");
    let output = import(
        &[&reboot.display().to_string(), "--timezone", "UTC"],
        None,
        &[],
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stdout(&output)
            .contains("# line 1: @reboot /usr/local/bin/warm-up  (not imported: @reboot"),
        "{output:?}"
    );
    assert!(
        stderr(&output).contains("error: nothing could be carried over from"),
        "{output:?}"
    );

    // No FILE and a terminal on standard input: refused at once, not a
    // wait for typing (`script` gives the command a terminal).
    let binary = common::solocron_bin().display().to_string();
    let output = Command::new("script")
        .args(["-qec", &format!("{binary} import-crontab"), "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("run script(1) from util-linux");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(
        stdout(&output).contains("no crontab given: name a file"),
        "{output:?}"
    );
}
