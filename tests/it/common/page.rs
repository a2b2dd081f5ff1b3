//! For the status page (`[daemon] status_listen`): a plain HTTP/1.1 client
//! ([`request`], [`get`]), headless Chromium under a deadline
//! ([`Chromium`]), and history entries written straight into Redis for
//! many jobs at once ([`fill_history`]), as the release script writes them.
//! The bench's status page scenario uses them too.

use std::fs;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{POLL, RedisServer};

/// What the page answered.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    /// The first header of this (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|err| panic!("not JSON ({err}): {}", self.body))
    }
}

/// `METHOD PATH` to `127.0.0.1:port` over one HTTP/1.1 connection
/// (`Connection: close`), read to its end within 30 s.
pub fn request(port: u16, method: &str, path: &str) -> Answer {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .unwrap_or_else(|err| panic!("connect to the status page on port {port}: {err}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("set a read timeout");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .expect("send the request");
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .unwrap_or_else(|err| panic!("read the answer to {method} {path}: {err}"));
    parse(&raw)
}

/// `GET PATH`.
pub fn get(port: u16, path: &str) -> Answer {
    request(port, "GET", path)
}

fn parse(raw: &[u8]) -> Answer {
    let split = raw
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {head}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(key, value)| (key.trim().to_lowercase(), value.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(key, value)| key == "transfer-encoding" && value.contains("chunked"));
    if chunked {
        body = unchunk(&body);
    }
    Answer {
        status,
        headers,
        body: String::from_utf8(body).expect("a UTF-8 body"),
    }
}

fn unchunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(end) = data.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = usize::from_str_radix(String::from_utf8_lossy(&data[..end]).trim(), 16)
            .expect("a chunk size");
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[end + 2..end + 2 + size]);
        data = &data[end + 4 + size..];
    }
}

/// Writes `per_job` history entries for each of `jobs` under prefix
/// `solocron` (one pipeline per 100 jobs), one a minute over the last
/// hour, each with an output tail of `tail` bytes, and the job's state as
/// the last one left it.
pub fn fill_history(redis: &RedisServer, jobs: &[String], per_job: usize, tail: usize) {
    let mut conn = redis.conn();
    let start_ms = chrono::Utc::now().timestamp_millis() - 3_600_000;
    for chunk in jobs.chunks(100) {
        let mut pipe = redis::pipe();
        for job in chunk {
            let keys = solocron::keys::JobKeys::new("solocron", job);
            let mut last = None;
            for i in 0..per_job {
                let at_ms = start_ms + i as i64 * 60_000;
                let at = chrono::DateTime::from_timestamp_millis(at_ms).expect("an instant");
                let occurrence = at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
                let failed = i % 5 == 4;
                let entry = solocron::history::Entry {
                    occurrence: occurrence.clone(),
                    node: "n1".to_string(),
                    fence: (at_ms as u64) * 1000 + 1,
                    outcome: if failed { "failed" } else { "succeeded" }.to_string(),
                    exit_code: Some(if failed { 3 } else { 0 }),
                    http_status: None,
                    started_at: at,
                    finished_at: at + chrono::TimeDelta::milliseconds(40),
                    duration_ms: Some(40),
                    error: failed.then(|| "exit status 3".to_string()),
                    output_tail: (tail > 0).then(|| "x".repeat(tail)),
                    attempt: Some(1),
                    retry_at: None,
                    by: None,
                };
                // Appended when the run ended, as the release script does.
                let mut xadd = redis::cmd("XADD");
                xadd.arg(&keys.history).arg(format!("{}-0", at_ms + 40));
                for (field, value) in entry.to_fields() {
                    xadd.arg(field).arg(value);
                }
                pipe.add_command(xadd).ignore();
                last = Some((at_ms, occurrence, entry.outcome));
            }
            if let Some((at_ms, occurrence, outcome)) = last {
                pipe.hset_multiple(
                    &keys.state,
                    &[
                        ("last_occ", at_ms.to_string()),
                        ("last_node", "n1".to_string()),
                        ("last_fence", "1".to_string()),
                        ("last_decision", "claimed".to_string()),
                        ("last_outcome", outcome),
                        ("last_outcome_occ", occurrence),
                    ],
                )
                .ignore();
            }
        }
        pipe.query::<()>(&mut conn).expect("write the history");
    }
}

/// `chromium --headless` on one URL, in a process group of its own with a
/// throwaway profile; the group is killed when it is dropped.
pub struct Chromium {
    child: Child,
    profile: tempfile::TempDir,
}

/// The browser the tests drive, or a failure saying how to install it.
pub fn chromium_path() -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("chromium"))
            .find(|path| path.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "chromium is not installed: install chromium (scripts/need-deps --tests), \
             which the status page's browser tests need"
        )
    })
}

impl Chromium {
    /// Starts Chromium with `args` and the URL, stdout to `out`.
    fn start(args: &[String], url: &str, out: &Path) -> Chromium {
        use std::os::unix::process::CommandExt as _;
        let profile = tempfile::tempdir().expect("a profile directory");
        let stdout = fs::File::create(out).expect("create the output file");
        let child = Command::new(chromium_path())
            .args([
                "--headless",
                // Root in CI: Chromium's sandbox refuses to run as root.
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--disable-extensions",
                "--disable-breakpad",
                "--hide-scrollbars",
                "--mute-audio",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(args)
            .arg(url)
            .env("HOME", profile.path())
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start chromium");
        Chromium { child, profile }
    }

    /// Waits for it to exit within `limit`; panics (killing it) after.
    fn finish(mut self, limit: Duration, what: &str) {
        let deadline = Instant::now() + limit;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    assert!(status.success(), "chromium {what} failed: {status}");
                    return;
                }
                Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
                _ => panic!(
                    "chromium {what} did not finish within {limit:?} (profile {})",
                    self.profile.path().display()
                ),
            }
        }
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        // The browser and its helpers share the group we gave it.
        let group = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// The DOM of `url` once loaded, as Chromium serializes it.
pub fn dump_dom(url: &str) -> String {
    let dir = tempfile::tempdir().expect("a directory");
    let out = dir.path().join("dom.html");
    Chromium::start(&["--dump-dom".to_string()], url, &out)
        .finish(Duration::from_secs(60), &format!("--dump-dom {url}"));
    fs::read_to_string(&out).expect("read the dumped DOM")
}

/// A screenshot of `url` in a window `width` x `height` to `png`.
pub fn screenshot(url: &str, width: u32, height: u32, png: &Path) {
    let dir = tempfile::tempdir().expect("a directory");
    let args = [
        format!("--screenshot={}", png.display()),
        format!("--window-size={width},{height}"),
    ];
    Chromium::start(&args, url, &dir.path().join("stdout"))
        .finish(Duration::from_secs(60), &format!("--screenshot {url}"));
}

/// The width and height of a PNG file; panics if it is not one.
pub fn png_size(png: &Path) -> (u32, u32) {
    let bytes = fs::read(png).unwrap_or_else(|err| panic!("read {}: {err}", png.display()));
    assert!(
        bytes.len() > 1000 && bytes.starts_with(b"\x89PNG\r\n\x1a\n") && &bytes[12..16] == b"IHDR",
        "{} is not a PNG with content ({} bytes)",
        png.display(),
        bytes.len()
    );
    let number =
        |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    (number(16), number(20))
}
