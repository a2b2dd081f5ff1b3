//! Per-process figures from `/proc`: CPU time (utime+stime of the process,
//! and cutime+cstime of its reaped children, e.g. spawned jobs), resident
//! memory (VmRSS, VmHWM), CPU % over a window from two snapshots, and the
//! (local, remote) ports of a process's TCP connections (which tells which
//! daemon a `MONITOR` line's client is).

use std::collections::BTreeSet;
use std::time::Instant;

/// CPU ticks of one process at one instant.
#[derive(Debug, Clone, Copy)]
pub struct CpuSample {
    pub own_ticks: u64,
    pub children_ticks: u64,
    pub at: Instant,
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`).
#[allow(unsafe_code)]
pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

/// The CPU counters of `pid`, `None` if it is gone.
pub fn cpu(pid: i32) -> Option<CpuSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    // After the comm: state is field 3; utime 14, stime 15, cutime 16, cstime 17.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    Some(CpuSample {
        own_ticks: field(14)? + field(15)?,
        children_ticks: field(16)? + field(17)?,
        at: Instant::now(),
    })
}

/// CPU use between two samples, in % of one core: (own, children).
pub fn cpu_percent(from: &CpuSample, to: &CpuSample) -> (f64, f64) {
    let secs = to.at.duration_since(from.at).as_secs_f64().max(1e-9);
    let tick = clock_ticks();
    (
        (to.own_ticks.saturating_sub(from.own_ticks)) as f64 / tick / secs * 100.0,
        (to.children_ticks.saturating_sub(from.children_ticks)) as f64 / tick / secs * 100.0,
    )
}

/// VmRSS and VmHWM of `pid` in KiB.
pub fn memory_kib(pid: i32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let value = |key: &str| {
        status
            .lines()
            .find(|line| line.starts_with(key))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some((value("VmRSS:")?, value("VmHWM:")?))
}

/// Named processes sampled at the start and end of a window.
pub struct CpuWindow {
    start: Vec<(String, i32, Option<CpuSample>)>,
}

/// CPU figures of one process over a window.
#[derive(Debug, Clone)]
pub struct CpuUse {
    pub name: String,
    pub own_pct: f64,
    pub children_pct: f64,
    pub rss_kib: u64,
    pub hwm_kib: u64,
}

impl CpuWindow {
    pub fn start(procs: &[(String, i32)]) -> CpuWindow {
        CpuWindow {
            start: procs
                .iter()
                .map(|(name, pid)| (name.clone(), *pid, cpu(*pid)))
                .collect(),
        }
    }

    pub fn finish(&self) -> Vec<CpuUse> {
        self.start
            .iter()
            .map(|(name, pid, from)| {
                let (own_pct, children_pct) = match (from, cpu(*pid)) {
                    (Some(from), Some(to)) => cpu_percent(from, &to),
                    _ => (f64::NAN, f64::NAN),
                };
                let (rss_kib, hwm_kib) = memory_kib(*pid).unwrap_or((0, 0));
                CpuUse {
                    name: name.clone(),
                    own_pct,
                    children_pct,
                    rss_kib,
                    hwm_kib,
                }
            })
            .collect()
    }
}

/// `redis 35% · n1 80% (+jobs 40%) · …` for the table.
pub fn describe(uses: &[CpuUse]) -> String {
    uses.iter()
        .map(|u| {
            if u.children_pct >= 0.5 {
                format!(
                    "{} {:.0}% (+children {:.0}%)",
                    u.name, u.own_pct, u.children_pct
                )
            } else {
                format!("{} {:.0}%", u.name, u.own_pct)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn json(uses: &[CpuUse]) -> serde_json::Value {
    serde_json::Value::Array(
        uses.iter()
            .map(|u| {
                serde_json::json!({"name": u.name, "cpu_pct": u.own_pct, "children_cpu_pct": u.children_pct, "rss_kib": u.rss_kib, "hwm_kib": u.hwm_kib})
            })
            .collect(),
    )
}

/// The (local port, remote port) of `pid`'s TCP sockets: the socket inodes
/// among its `/proc/PID/fd` links, looked up in `/proc/PID/net/tcp` and
/// `tcp6`. Both ports, since Linux gives one local port to connections to
/// different servers. Empty if the process is gone.
pub fn tcp_connections(pid: i32) -> BTreeSet<(u16, u16)> {
    let inodes: BTreeSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.flatten()
                .filter_map(|entry| std::fs::read_link(entry.path()).ok())
                .filter_map(|target| {
                    target
                        .to_str()?
                        .strip_prefix("socket:[")?
                        .strip_suffix(']')?
                        .parse()
                        .ok()
                })
                .collect()
        })
        .unwrap_or_default();
    let port = |address: &str| {
        address
            .rsplit_once(':')
            .and_then(|(_, port)| u16::from_str_radix(port, 16).ok())
    };
    let mut connections = BTreeSet::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        // `sl local_address rem_address st … uid timeout inode …`, addresses `HEX:PORT`.
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(remote), Some(inode)) =
                (fields.get(1), fields.get(2), fields.get(9))
            else {
                continue;
            };
            if let (Some(local), Some(remote), Ok(inode)) =
                (port(local), port(remote), inode.parse::<u64>())
                && inodes.contains(&inode)
            {
                connections.insert((local, remote));
            }
        }
    }
    connections
}
