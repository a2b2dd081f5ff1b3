//! Native logging to journald (issue item "journald natively").
//!
//! A [`FakeJournal`] stands in for journald: a real unix datagram socket at
//! a path of the test's (given to the daemon as `SOLOCRON_JOURNAL_SOCKET`)
//! and a thread that decodes each datagram with the native protocol's two
//! field forms: `NAME=value` and a newline, or for a value holding a
//! newline, `NAME`, a newline, the value's length as a little-endian u64,
//! the value and a newline. The daemon never passes a memfd (its entries
//! are small): an empty datagram, which is what a passed file descriptor
//! arrives as here, or one over 64 KiB is recorded as a problem and fails
//! the test, and so does a field name journald would drop.
//!
//! "Under systemd" is what systemd sets up: `JOURNAL_STREAM` holding the
//! device and inode of the daemon's stderr (here a file the test created).

use crate::common;

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{
    Node, RedisServer, Workdir, free_port, history, scrape_metrics, toml_path, wait_until,
};

/// Largest datagram the daemon may send (its values are cut at 8 KiB).
const MAX_ENTRY: usize = 64 * 1024;

/// One journal entry: its fields in the order they came.
#[derive(Debug, Clone)]
struct Entry(Vec<(String, String)>);

impl Entry {
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The field, or a panic naming the entry.
    fn field(&self, name: &str) -> &str {
        self.get(name)
            .unwrap_or_else(|| panic!("no {name} in {self:?}"))
    }

    fn event(&self) -> &str {
        self.get("SOLOCRON_EVENT").unwrap_or("")
    }
}

/// Decodes one datagram of the native protocol.
fn decode(mut data: &[u8]) -> Result<Entry, String> {
    let mut fields = Vec::new();
    while !data.is_empty() {
        let end = data
            .iter()
            .position(|&b| b == b'\n')
            .ok_or("a field without its newline")?;
        let line = &data[..end];
        let text = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).map_err(|e| e.to_string());
        if let Some(eq) = line.iter().position(|&b| b == b'=') {
            fields.push((text(&line[..eq])?, text(&line[eq + 1..])?));
            data = &data[end + 1..];
        } else {
            let rest = &data[end + 1..];
            let len: [u8; 8] = rest
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .ok_or("a binary field without its length")?;
            let len = u64::from_le_bytes(len) as usize;
            let value = rest.get(8..8 + len).ok_or("a binary value cut short")?;
            if rest.get(8 + len) != Some(&b'\n') {
                return Err("a binary value without its newline".to_string());
            }
            fields.push((text(line)?, text(value)?));
            data = &rest[8 + len + 1..];
        }
    }
    for (name, _) in &fields {
        let valid = !name.is_empty()
            && name.len() <= 64
            && !name.starts_with('_')
            && name
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        if !valid {
            return Err(format!("field name journald would drop: {name:?}"));
        }
    }
    Ok(Entry(fields))
}

/// A journald stand-in that reads and decodes everything sent to `path`.
struct FakeJournal {
    path: PathBuf,
    entries: Arc<Mutex<Vec<Entry>>>,
    problems: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<()>>,
}

impl FakeJournal {
    fn listen(path: &Path) -> FakeJournal {
        let socket = UnixDatagram::bind(path).expect("bind the journal socket");
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("read timeout");
        let entries = Arc::new(Mutex::new(Vec::new()));
        let problems = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (entries, problems, stop) = (entries.clone(), problems.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 4 * MAX_ENTRY];
                while !stop.load(Ordering::SeqCst) {
                    let problem = match socket.recv(&mut buf) {
                        Ok(0) => Some("an empty datagram (a passed memfd?)".to_string()),
                        Ok(len) if len > MAX_ENTRY => Some(format!("a {len}-byte entry")),
                        Ok(len) => match decode(&buf[..len]) {
                            Ok(entry) => {
                                entries.lock().expect("entries").push(entry);
                                None
                            }
                            Err(err) => {
                                Some(format!("{err}: {:?}", String::from_utf8_lossy(&buf[..len])))
                            }
                        },
                        Err(err)
                            if matches!(
                                err.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) =>
                        {
                            None
                        }
                        Err(err) => Some(format!("recv: {err}")),
                    };
                    if let Some(problem) = problem {
                        problems.lock().expect("problems").push(problem);
                    }
                }
            })
        };
        FakeJournal {
            path: path.to_path_buf(),
            entries,
            problems,
            stop,
            reader: Some(reader),
        }
    }

    fn env(&self) -> (&'static str, &str) {
        (
            "SOLOCRON_JOURNAL_SOCKET",
            self.path.to_str().expect("utf-8"),
        )
    }

    fn entries(&self) -> Vec<Entry> {
        self.entries.lock().expect("entries").clone()
    }

    /// The first entry matching `pred`, waiting for it up to `limit`.
    fn wait_for(&self, limit: Duration, what: &str, pred: impl Fn(&Entry) -> bool) -> Entry {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(entry) = self.entries().into_iter().find(|e| pred(e)) {
                return entry;
            }
            assert!(
                Instant::now() < deadline,
                "no journal entry {what} within {limit:?}; got {} entries, problems {:?}, last: {:#?}",
                self.entries().len(),
                self.problems(),
                self.entries().iter().rev().take(5).collect::<Vec<_>>()
            );
            std::thread::sleep(common::POLL);
        }
    }

    fn problems(&self) -> Vec<String> {
        self.problems.lock().expect("problems").clone()
    }

    /// journald goes away: the reader stops and the socket file is removed.
    fn shut_down(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(reader) = self.reader.take() {
            reader.join().expect("the reader thread");
        }
        std::fs::remove_file(&self.path).expect("remove the journal socket");
    }
}

impl Drop for FakeJournal {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// `JOURNAL_STREAM` for `path` as systemd writes it: `DEVICE:INODE`.
fn journal_stream(path: &Path) -> String {
    let meta = std::fs::metadata(path).expect("stat");
    format!("{}:{}", meta.dev(), meta.ino())
}

/// Creates `ID.log` (which the node's stderr will be) and returns its
/// `JOURNAL_STREAM` value.
fn stderr_stream(work: &Workdir, id: &str) -> String {
    let log = work.path(&format!("{id}.log"));
    std::fs::File::create(&log).expect("create the log file");
    journal_stream(&log)
}

fn run_args(work: &Workdir, redis: &RedisServer) -> Vec<String> {
    vec![
        "--config".to_string(),
        toml_path(&work.path("jobs.toml")),
        "--redis".to_string(),
        redis.url(),
    ]
}

fn spawn(work: &Workdir, id: &str, args: &[String], env: &[(&str, &str)]) -> Node {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Node::spawn_with_args(work, id, &args, env)
}

/// `solocron_log_lines_lost_total`, 0 while the endpoint is not up yet.
fn lost_lines(port: u16) -> f64 {
    if std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        return 0.0;
    }
    scrape_metrics(port)
        .lines()
        .find_map(|line| {
            line.strip_prefix("solocron_log_lines_lost_total ")?
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

/// Runs of `job` by `node` with `outcome`, for occurrences after `since`.
fn runs_after(
    redis: &RedisServer,
    job: &str,
    node: &str,
    outcome: &str,
    since: chrono::DateTime<chrono::Utc>,
) -> usize {
    history(redis, job)
        .iter()
        .filter(|entry| entry.get("node").map(String::as_str) == Some(node))
        .filter(|entry| entry.get("outcome").map(String::as_str) == Some(outcome))
        .filter(|entry| {
            entry
                .get("occurrence")
                .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
                .is_some_and(|at| at > since)
        })
        .count()
}

fn stop_cleanly(node: &mut Node) {
    node.signal("TERM");
    let status = node.wait_exit(Duration::from_secs(15));
    assert_eq!(status.code(), Some(0), "a clean stop:\n{}", node.log());
}

#[test]
fn under_systemd_a_failed_run_is_logged_natively_with_its_fields() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config(
        "[jobs.nightly-report]\nschedule = \"* * * * * *\"\n\
         command = 'echo report started; echo disk full >&2; exit 3'\n",
    );
    let journal = FakeJournal::listen(&work.path("journal.sock"));
    let stream = stderr_stream(&work, "n1");
    let mut node = spawn(
        &work,
        "n1",
        &run_args(&work, &redis),
        &[("JOURNAL_STREAM", &stream), journal.env()],
    );
    let limit = Duration::from_secs(15);
    let started = journal.wait_for(limit, "`solocron started`", |e| {
        e.event() == "solocron started"
    });
    assert_eq!(started.field("SOLOCRON_NODE"), "n1");
    assert_eq!(started.field("PRIORITY"), "6", "INFO is informational");
    assert_eq!(started.field("SYSLOG_IDENTIFIER"), "solocron");
    assert!(
        started
            .field("MESSAGE")
            .starts_with("solocron started node=n1 ")
    );

    let finished = journal.wait_for(limit, "`run finished` of nightly-report", |e| {
        e.event() == "run finished" && e.get("SOLOCRON_JOB") == Some("nightly-report")
    });
    let occurrence = finished.field("SOLOCRON_OCCURRENCE").to_string();
    let fence = finished.field("SOLOCRON_FENCE").to_string();
    assert!(fence.parse::<u64>().is_ok(), "{finished:?}");
    assert_eq!(finished.field("SOLOCRON_OUTCOME"), "failed");
    assert_eq!(finished.field("SOLOCRON_EXIT_CODE"), "3");
    assert_eq!(finished.field("SOLOCRON_NODE"), "n1");
    assert!(
        finished
            .field("SOLOCRON_DURATION_MS")
            .parse::<u64>()
            .is_ok()
    );
    assert_eq!(finished.field("PRIORITY"), "4", "a failed run is a warning");
    assert_eq!(finished.field("SYSLOG_IDENTIFIER"), "solocron");
    let message = finished.field("MESSAGE");
    assert!(
        message.starts_with(&format!(
            "run finished job=nightly-report occurrence={occurrence} node=n1 fence={fence} \
             outcome=failed exit=3 duration="
        )),
        "MESSAGE reads like the text log line: {message}"
    );

    let won = journal.wait_for(limit, "`claim won` of that occurrence", |e| {
        e.event() == "claim won" && e.get("SOLOCRON_OCCURRENCE") == Some(&occurrence)
    });
    assert_eq!(won.field("SOLOCRON_JOB"), "nightly-report");
    assert_eq!(won.field("SOLOCRON_NODE"), "n1");
    assert_eq!(won.field("SOLOCRON_FENCE"), fence);
    assert_eq!(won.field("PRIORITY"), "6");
    assert!(
        won.field("MESSAGE")
            .starts_with("claim won job=nightly-report ")
    );

    let output = |stream: &str| {
        journal.wait_for(limit, &format!("`job output` on {stream}"), |e| {
            e.event() == "job output"
                && e.get("SOLOCRON_OCCURRENCE") == Some(&occurrence)
                && e.get("SOLOCRON_STREAM") == Some(stream)
        })
    };
    let stdout = output("stdout");
    assert_eq!(stdout.field("SOLOCRON_LINE"), "report started");
    assert_eq!(stdout.field("PRIORITY"), "6");
    let stderr = output("stderr");
    assert_eq!(stderr.field("SOLOCRON_LINE"), "disk full");
    assert_eq!(stderr.field("PRIORITY"), "4");

    // The journal and the history tell the same story (the entry is
    // written by the release, which may follow the log lines).
    let entry = || {
        history(&redis, "nightly-report")
            .into_iter()
            .find(|entry| entry.get("occurrence") == Some(&occurrence))
    };
    common::wait_until(limit, "the occurrence is in the history", || {
        entry().is_some()
    });
    let recorded = entry().expect("the occurrence is in the history");
    assert_eq!(recorded.get("outcome").map(String::as_str), Some("failed"));
    assert_eq!(recorded.get("node").map(String::as_str), Some("n1"));
    assert_eq!(recorded.get("fence"), Some(&fence));

    stop_cleanly(&mut node);
    journal.wait_for(limit, "`stopped`", |e| e.event() == "stopped");
    assert_eq!(node.log(), "", "nothing is written to stderr as well");
    assert_eq!(journal.problems(), Vec::<String>::new());
}

#[test]
fn a_fatal_error_is_one_journal_entry_with_its_lines() {
    let work = Workdir::new();
    let path = work.path("jobs.toml");
    std::fs::write(
        &path,
        "[redis]\nurl = \"redis://127.0.0.1:1\"\n[jobs.x]\nschedule = \"nope\"\ncommand = \"true\"\n",
    )
    .expect("write");
    let journal = FakeJournal::listen(&work.path("journal.sock"));
    let (key, socket) = journal.env();
    // `--log-format journal` without JOURNAL_STREAM: forced on.
    let output = Command::new(common::solocron_bin())
        .args([
            "run",
            "--config",
            &toml_path(&path),
            "--log-format",
            "journal",
        ])
        .env_remove("SOLOCRON_CONFIG")
        .env_remove("SOLOCRON_LOG_FORMAT")
        .env_remove("JOURNAL_STREAM")
        .env(key, socket)
        .output()
        .expect("run solocron");
    assert_eq!(output.status.code(), Some(78), "{output:?}");
    assert!(output.stderr.is_empty(), "{output:?}");
    let fatal = journal.wait_for(Duration::from_secs(5), "for the fatal error", |e| {
        e.get("PRIORITY") == Some("3")
    });
    let error = fatal.field("SOLOCRON_ERROR");
    assert!(error.contains("jobs.toml:4:"), "{fatal:?}");
    assert!(
        error.contains('\n'),
        "the snippet keeps its lines: {fatal:?}"
    );
    assert_eq!(fatal.event(), "fatal error, solocron stops");
    assert_eq!(journal.problems(), Vec::<String>::new());
}

#[test]
fn journald_gone_mid_run_costs_log_lines_not_runs() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let metrics_port = free_port();
    work.write_config(&format!(
        "[daemon]\nmetrics_listen = \"127.0.0.1:{metrics_port}\"\n\n\
         [jobs.tick]\nschedule = \"*/2 * * * * *\"\ncommand = 'echo start; sleep 1; echo done'\n"
    ));
    let socket = work.path("journal.sock");
    let journal = FakeJournal::listen(&socket);
    let stream = stderr_stream(&work, "n1");
    let mut node = spawn(
        &work,
        "n1",
        &run_args(&work, &redis),
        &[("JOURNAL_STREAM", &stream), journal.env()],
    );
    // A run claimed on time (not one a node that just started catches up
    // on, which may still be running at the next occurrence) has begun:
    // its first output line is in the journal, and it sleeps.
    let limit = Duration::from_secs(15);
    let won = journal.wait_for(limit, "`claim won` on time", |e| {
        e.event() == "claim won" && e.get("SOLOCRON_CATCH_UP").is_none()
    });
    let occurrence = won.field("SOLOCRON_OCCURRENCE").to_string();
    journal.wait_for(limit, "of that run's first line", |e| {
        e.event() == "job output"
            && e.get("SOLOCRON_OCCURRENCE") == Some(&occurrence)
            && e.get("SOLOCRON_LINE") == Some("start")
    });
    assert_eq!(journal.problems(), Vec::<String>::new());

    // journald stops in the middle of that run: its socket is gone, every
    // send fails.
    journal.shut_down();
    let gone = chrono::Utc::now();
    wait_until(
        Duration::from_secs(10),
        "the run in progress is recorded",
        || {
            history(&redis, "tick").iter().any(|entry| {
                entry.get("occurrence") == Some(&occurrence)
                    && entry.get("outcome").map(String::as_str) == Some("succeeded")
            })
        },
    );
    wait_until(
        Duration::from_secs(20),
        "three more runs recorded after journald went away",
        || runs_after(&redis, "tick", "n1", "succeeded", gone) >= 3,
    );
    assert!(
        node.log().contains("cannot send to the journal socket"),
        "said once on stderr: {}",
        node.log()
    );
    assert_eq!(
        node.log()
            .matches("cannot send to the journal socket")
            .count(),
        1,
        "once, not per line: {}",
        node.log()
    );
    let lost = lost_lines(metrics_port);
    assert!(lost >= 5.0, "the lost lines are counted: {lost}");
    assert!(common::is_alive(node.pid()), "the daemon is up");

    // journald is back (a new socket at the same path): entries arrive again.
    let journal = FakeJournal::listen(&socket);
    let back = journal.wait_for(Duration::from_secs(15), "after journald came back", |e| {
        e.event() == "run finished"
    });
    assert_eq!(back.field("SOLOCRON_OUTCOME"), "succeeded");
    assert!(
        node.log().contains("answers again"),
        "the recovery is said too: {}",
        node.log()
    );
    let not_run: Vec<_> = history(&redis, "tick")
        .into_iter()
        .filter(|entry| entry.get("outcome").map(String::as_str) != Some("succeeded"))
        .filter(|entry| {
            entry
                .get("occurrence")
                .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
                .is_some_and(|at| at > gone)
        })
        .collect();
    assert!(not_run.is_empty(), "every run ran: {not_run:?}");
    stop_cleanly(&mut node);
    assert_eq!(journal.problems(), Vec::<String>::new());
}

#[test]
fn a_journald_that_stopped_reading_blocks_no_run() {
    // The socket is bound and never read: after a few datagrams every send
    // would block. 3,000 output lines a run fill the writer's queue fast.
    // Every 2 s, not every second: on a loaded machine a claim can be most
    // of a second late, and a run still going at the next occurrence would
    // skip it for a reason that is not the log.
    let redis = RedisServer::start();
    let work = Workdir::new();
    let metrics_port = free_port();
    work.write_config(&format!(
        "[daemon]\nmetrics_listen = \"127.0.0.1:{metrics_port}\"\n\n\
         [jobs.tick]\nschedule = \"*/2 * * * * *\"\ncommand = 'seq 3000'\n"
    ));
    let socket = work.path("journal.sock");
    let _deaf = UnixDatagram::bind(&socket).expect("bind the journal socket");
    let stream = stderr_stream(&work, "n1");
    let mut node = spawn(
        &work,
        "n1",
        &run_args(&work, &redis),
        &[
            ("JOURNAL_STREAM", &stream),
            ("SOLOCRON_JOURNAL_SOCKET", socket.to_str().expect("utf-8")),
        ],
    );
    let started = chrono::Utc::now();
    wait_until(
        Duration::from_secs(30),
        "lines were lost to the full socket",
        || lost_lines(metrics_port) > 0.0,
    );
    let full = chrono::Utc::now();
    wait_until(
        Duration::from_secs(30),
        "five more runs recorded with the socket full",
        || runs_after(&redis, "tick", "n1", "succeeded", full) >= 5,
    );
    assert!(runs_after(&redis, "tick", "n1", "succeeded", started) >= 5);
    // Since the overflow (not since the start: a node that starts just
    // after an occurrence runs it late, and the next may find it running).
    let not_run: Vec<_> = history(&redis, "tick")
        .into_iter()
        .filter(|entry| entry.get("outcome").map(String::as_str) != Some("succeeded"))
        .filter(|entry| {
            entry
                .get("occurrence")
                .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
                .is_some_and(|at| at > full)
        })
        .collect();
    assert!(not_run.is_empty(), "every run ran: {not_run:?}");
    stop_cleanly(&mut node);
}

#[test]
fn the_journal_is_used_only_when_stderr_is_the_journal_or_when_asked() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config("[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = 'true'\n");
    let journal = FakeJournal::listen(&work.path("journal.sock"));
    let args = run_args(&work, &redis);
    let with_flag = |format: &str| {
        let mut args = args.clone();
        args.extend(["--log-format".to_string(), format.to_string()]);
        args
    };
    // A JOURNAL_STREAM inherited by a process whose stderr is something else.
    let stale = journal_stream(&work.path("jobs.toml"));
    let stale_node = spawn(
        &work,
        "stale",
        &args,
        &[("JOURNAL_STREAM", &stale), journal.env()],
    );
    // Forced off: stderr is the journal, but text was asked for; json too.
    let stream = stderr_stream(&work, "text");
    let text_node = spawn(
        &work,
        "text",
        &with_flag("text"),
        &[("JOURNAL_STREAM", &stream), journal.env()],
    );
    let stream = stderr_stream(&work, "json");
    let json_node = spawn(
        &work,
        "json",
        &args,
        &[
            ("JOURNAL_STREAM", &stream),
            ("SOLOCRON_LOG_FORMAT", "json"),
            journal.env(),
        ],
    );
    // Forced on, but no journal listens there: text on stderr, and it says why.
    let nowhere = work.path("no-journal.sock");
    let fallback = spawn(
        &work,
        "fallback",
        &with_flag("journal"),
        &[("SOLOCRON_JOURNAL_SOCKET", nowhere.to_str().expect("utf-8"))],
    );
    // The four share the job: each logs `claim won` or `claim lost`.
    let limit = Duration::from_secs(15);
    for node in [&stale_node, &text_node, &json_node, &fallback] {
        wait_until(limit, &format!("{} logs a claim", node.id), || {
            node.log()
                .lines()
                .any(|line| line.contains("claim ") && line.contains("tick"))
        });
    }
    let first = fallback.log();
    let first = first.lines().next().unwrap_or_default();
    assert!(
        first.contains("WARN") && first.contains("cannot reach the journal socket"),
        "{first}"
    );
    assert!(first.contains(nowhere.to_str().expect("utf-8")), "{first}");
    assert!(
        fallback.log().contains("solocron started node=fallback"),
        "{}",
        fallback.log()
    );
    let text_line = |log: String| {
        log.lines()
            .any(|line| line.contains("INFO claim ") && line.contains(" job=tick"))
    };
    assert!(text_line(text_node.log()), "{}", text_node.log());
    assert!(text_line(stale_node.log()), "{}", stale_node.log());
    let json_line = json_node
        .log()
        .lines()
        .find(|line| line.contains("\"claim "))
        .map(str::to_string)
        .unwrap_or_default();
    let json: serde_json::Value = serde_json::from_str(&json_line).expect("a JSON line");
    assert_eq!(json["job"], "tick", "{json}");
    let entries: HashMap<String, usize> =
        journal
            .entries()
            .iter()
            .fold(HashMap::new(), |mut nodes, entry| {
                *nodes
                    .entry(entry.get("SOLOCRON_NODE").unwrap_or("?").to_string())
                    .or_default() += 1;
                nodes
            });
    assert!(
        entries.is_empty(),
        "nothing went to the journal: {entries:?}"
    );
}

/// A real `systemd-journald` in a mount namespace of its own, with tmpfs
/// on `/run` and `/var/log/journal` there, so the machine's own journal and
/// sockets are untouched; the test reaches its socket and files through
/// `/proc/PID/root`. Killed on drop.
struct RealJournald {
    child: std::process::Child,
    root: PathBuf,
}

impl RealJournald {
    /// `None` where one cannot be had (not root, no `systemd-journald` or
    /// `unshare`): the caller skips, saying so.
    fn start() -> Option<RealJournald> {
        let journald = [
            "/lib/systemd/systemd-journald",
            "/usr/lib/systemd/systemd-journald",
        ]
        .into_iter()
        .find(|path| Path::new(path).exists())?;
        // Only once both mounts are in place does journald start.
        let script = "mount -t tmpfs tmpfs /run \
                      && { [ ! -d /var/log/journal ] || mount -t tmpfs tmpfs /var/log/journal; } \
                      && exec \"$0\"";
        let mut child = Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                journald,
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .ok()?;
        let root = PathBuf::from(format!("/proc/{}/root", child.id()));
        let journald = |child: std::process::Child| RealJournald {
            child,
            root: root.clone(),
        };
        let socket = root.join("run/systemd/journal/socket");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let mut err = String::new();
                if let Some(mut stderr) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut stderr, &mut err);
                }
                eprintln!("no journald in a mount namespace ({status}): {err}");
                return None;
            }
            if socket.exists() {
                return Some(journald(child));
            }
            if Instant::now() > deadline {
                eprintln!("journald did not create its socket within 10 s");
                return Some(journald(child)).and(None);
            }
            std::thread::sleep(common::POLL);
        }
    }

    fn socket(&self) -> PathBuf {
        self.root.join("run/systemd/journal/socket")
    }

    /// `journalctl -o json MATCHES…` on this journald's files.
    fn query(&self, matches: &[&str]) -> Vec<serde_json::Value> {
        let output = Command::new("journalctl")
            .arg("-D")
            .arg(self.root.join("run/log/journal"))
            .args(["-o", "json", "--no-pager"])
            .args(matches)
            .output()
            .expect("run journalctl");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }
}

impl Drop for RealJournald {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_real_journald_takes_the_entries_and_journalctl_selects_them_by_field() {
    let Some(journald) = RealJournald::start() else {
        eprintln!("skipped: needs root, unshare and systemd-journald");
        return;
    };
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config("[jobs.nightly-report]\nschedule = \"* * * * * *\"\ncommand = 'exit 3'\n");
    let mut args = run_args(&work, &redis);
    args.extend(["--log-format".to_string(), "journal".to_string()]);
    let socket = journald.socket();
    let mut node = spawn(
        &work,
        "n1",
        &args,
        &[("SOLOCRON_JOURNAL_SOCKET", socket.to_str().expect("utf-8"))],
    );
    let selected = ["SOLOCRON_JOB=nightly-report", "SOLOCRON_OUTCOME=failed"];
    wait_until(
        Duration::from_secs(20),
        "journalctl SOLOCRON_JOB=nightly-report SOLOCRON_OUTCOME=failed finds a run",
        || !journald.query(&selected).is_empty(),
    );
    let finished = journald.query(&selected).remove(0);
    let text = |entry: &serde_json::Value, name: &str| {
        entry[name]
            .as_str()
            .unwrap_or_else(|| panic!("no {name} in {entry}"))
            .to_string()
    };
    assert_eq!(text(&finished, "SOLOCRON_EVENT"), "run finished");
    assert!(text(&finished, "MESSAGE").starts_with("run finished job=nightly-report "));
    assert_eq!(text(&finished, "PRIORITY"), "4");
    assert_eq!(text(&finished, "SYSLOG_IDENTIFIER"), "solocron");
    assert_eq!(text(&finished, "SOLOCRON_EXIT_CODE"), "3");
    assert_eq!(text(&finished, "_TRANSPORT"), "journal");
    assert_eq!(text(&finished, "_PID"), node.pid().to_string());
    let fence = text(&finished, "SOLOCRON_FENCE");
    assert!(fence.parse::<u64>().is_ok(), "{finished}");
    let occurrence = text(&finished, "SOLOCRON_OCCURRENCE");
    let won = journald.query(&[
        "SOLOCRON_EVENT=claim won",
        &format!("SOLOCRON_OCCURRENCE={occurrence}"),
    ]);
    assert_eq!(won.len(), 1, "{won:?}");
    assert_eq!(text(&won[0], "SOLOCRON_FENCE"), fence);
    assert_eq!(text(&won[0], "SOLOCRON_NODE"), "n1");
    assert_eq!(text(&won[0], "PRIORITY"), "6");
    stop_cleanly(&mut node);
    assert_eq!(node.log(), "", "nothing on stderr");
}
