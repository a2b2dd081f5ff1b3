//! What reaches Redis: a raw `MONITOR` connection read on its own thread
//! (client round trips, and commands run inside scripts, tagged `lua`), and
//! `INFO commandstats` snapshots (commands executed, scripts' inner
//! commands included, and the time spent in them) with deltas that leave
//! out the bench's own commands.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// One command as MONITOR shows it.
#[derive(Debug, Clone)]
pub struct MonLine {
    /// Redis's clock when it ran, seconds since the epoch.
    pub ts: f64,
    /// `lua` for a command run inside a script, else the client's `IP:PORT`.
    pub client: String,
    /// Upper-case command name.
    pub cmd: String,
    /// The first arguments (up to 8).
    pub args: Vec<String>,
}

impl MonLine {
    pub fn is_lua(&self) -> bool {
        self.client == "lua"
    }

    /// The first argument that is a key of a job (`{PREFIX:JOB}...`, a
    /// colon inside the hash tag; the registry's `{PREFIX}:nodes` is not).
    pub fn job_key(&self) -> Option<&str> {
        self.args
            .iter()
            .find(|arg| {
                arg.strip_prefix('{')
                    .and_then(|rest| rest.split_once('}'))
                    .is_some_and(|(tag, _)| tag.contains(':'))
            })
            .map(String::as_str)
    }
}

/// A MONITOR session; [`Monitor::stop`] returns what it saw.
pub struct Monitor {
    stream: TcpStream,
    lines: Arc<Mutex<Vec<MonLine>>>,
    reader: Option<JoinHandle<()>>,
}

impl Monitor {
    pub fn start(port: u16) -> Monitor {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect for MONITOR");
        stream.write_all(b"MONITOR\r\n").expect("send MONITOR");
        let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
        let mut first = String::new();
        reader.read_line(&mut first).expect("MONITOR reply");
        assert!(first.starts_with("+OK"), "MONITOR refused: {first}");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        let handle = std::thread::spawn(move || {
            let mut line = String::new();
            loop {
                line.clear();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if let Some(parsed) = parse(line.trim_end()) {
                            sink.lock().expect("monitor lines").push(parsed);
                        }
                    }
                }
            }
        });
        Monitor {
            stream,
            lines,
            reader: Some(handle),
        }
    }

    /// Ends the session.
    pub fn stop(mut self) -> Vec<MonLine> {
        let _ = self.stream.shutdown(Shutdown::Both);
        if let Some(handle) = self.reader.take() {
            let _ = handle.join();
        }
        std::mem::take(&mut *self.lines.lock().expect("monitor lines"))
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

/// `+1700000000.123456 [0 127.0.0.1:54321] "EVALSHA" "..."`.
fn parse(line: &str) -> Option<MonLine> {
    let line = line.strip_prefix('+')?;
    let (ts, rest) = line.split_once(' ')?;
    let rest = rest.strip_prefix('[')?;
    let (inside, rest) = rest.split_once("] ")?;
    let client = inside.split_whitespace().nth(1)?.to_string();
    let mut tokens = quoted_tokens(rest).into_iter();
    let cmd = tokens.next()?.to_ascii_uppercase();
    Some(MonLine {
        ts: ts.parse().ok()?,
        client,
        cmd,
        args: tokens.take(8).collect(),
    })
}

/// The `"..."` tokens of a MONITOR line, unescaped enough for key names.
fn quoted_tokens(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut token = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(next) = chars.next() {
                        token.push(next);
                    }
                }
                '"' => break,
                _ => token.push(c),
            }
        }
        tokens.push(token);
    }
    tokens
}

/// `INFO commandstats`: calls per command name (lower case).
pub fn commandstats(conn: &mut redis::Connection) -> BTreeMap<String, u64> {
    commandstats_usec(conn)
        .into_iter()
        .map(|(name, stat)| (name, stat.calls))
        .collect()
}

/// Calls and microseconds of one command in `INFO commandstats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmdStat {
    pub calls: u64,
    /// Time spent executing it (not blocked: a `WAIT`'s wait is not in it).
    pub usec: u64,
}

/// `INFO commandstats` with the time spent per command (lower case names).
pub fn commandstats_usec(conn: &mut redis::Connection) -> BTreeMap<String, CmdStat> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO commandstats");
    info.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("cmdstat_")?;
            let (name, fields) = rest.split_once(':')?;
            let field = |key: &str| -> Option<u64> {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(key))?
                    .parse()
                    .ok()
            };
            let stat = CmdStat {
                calls: field("calls=")?,
                usec: field("usec=")?,
            };
            Some((name.to_string(), stat))
        })
        .collect()
}

/// [`delta`] of [`commandstats_usec`] snapshots, the bench's own left out.
pub fn delta_usec(
    from: &BTreeMap<String, CmdStat>,
    to: &BTreeMap<String, CmdStat>,
) -> BTreeMap<String, CmdStat> {
    to.iter()
        .filter(|(name, _)| !OWN.contains(&name.as_str()))
        .filter_map(|(name, stat)| {
            let before = from.get(name).copied().unwrap_or_default();
            let diff = CmdStat {
                calls: stat.calls.saturating_sub(before.calls),
                usec: stat.usec.saturating_sub(before.usec),
            };
            (diff.calls > 0).then(|| (name.clone(), diff))
        })
        .collect()
}

/// The bench's own commands, left out of deltas.
const OWN: &[&str] = &[
    "info",
    "monitor",
    "config|resetstat",
    "config",
    "ping",
    "flushall",
    "client|setinfo",
    "hello",
];

/// Calls per command between two snapshots, without the bench's own.
pub fn delta(from: &BTreeMap<String, u64>, to: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    to.iter()
        .filter(|(name, _)| !OWN.contains(&name.as_str()))
        .filter_map(|(name, calls)| {
            let diff = calls.saturating_sub(from.get(name).copied().unwrap_or(0));
            (diff > 0).then(|| (name.clone(), diff))
        })
        .collect()
}

/// `evalsha 30, get 30, …` (largest first).
pub fn describe_counts(counts: &BTreeMap<String, u64>) -> String {
    let mut list: Vec<(&String, &u64)> = counts.iter().collect();
    list.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    list.iter()
        .map(|(name, calls)| format!("{name} {calls}"))
        .collect::<Vec<_>>()
        .join(", ")
}
