//! `[daemon]`: the daemon's own settings (`[redis]` is `redis`).
//!
//! The values of `env_file` may be secrets: a bad line is reported by its
//! number, never its text.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use super::context::Context;
use super::envfile::{self, EnvFileError};
use super::keys::DAEMON as DAEMON_KEYS;
use super::model::{ClockSource, DaemonConfig};
use super::table::Table;
use super::tls;

/// Reads `[daemon]` (`None` = the section is absent) and the pairs of its
/// `env_file` (empty without one). Errors go to `ctx`.
pub(super) fn daemon(
    table: Option<&Table<'_, '_>>,
    config_path: &Path,
    ctx: &Context<'_>,
) -> (DaemonConfig, BTreeMap<String, String>) {
    let mut daemon = DaemonConfig {
        shutdown_grace: Duration::from_secs(30),
        history_max: 10_000,
        metrics_listen: None,
        status_listen: None,
        env_file: None,
        clock: ClockSource::Redis,
        max_running: None,
    };
    let Some(table) = table else {
        return (daemon, BTreeMap::new());
    };
    table.check_keys(DAEMON_KEYS, ctx);
    if let Some(grace) = ctx
        .keep(table.duration("shutdown_grace", Duration::ZERO))
        .flatten()
    {
        daemon.shutdown_grace = grace;
    }
    if let Some(max) = ctx.keep(table.integer("history_max")).flatten() {
        match u64::try_from(*max.get_ref()).ok().filter(|max| *max >= 1) {
            Some(value) => daemon.history_max = value,
            None => {
                let message = format!("must be at least 1, found {}", max.get_ref());
                ctx.error(table.error(max.span(), "history_max", message));
            }
        }
    }
    if let Some(max) = ctx.keep(table.integer("max_running")).flatten() {
        match u32::try_from(*max.get_ref()).ok().filter(|max| *max >= 1) {
            Some(value) => daemon.max_running = Some(value),
            None => {
                let message = format!(
                    "must be a whole number from 1 to {}, found {}; leave it out for no cap",
                    u32::MAX,
                    max.get_ref()
                );
                ctx.error(table.error(max.span(), "max_running", message));
            }
        }
    }
    daemon.metrics_listen = listen_address(table, "metrics_listen", "127.0.0.1:9464", ctx);
    daemon.status_listen = listen_address(table, "status_listen", "127.0.0.1:9465", ctx);
    if let (Some(status), Some(metrics)) = (&daemon.status_listen, &daemon.metrics_listen)
        && status.parse::<SocketAddr>().ok() == metrics.parse::<SocketAddr>().ok()
        && let Some(listen) = ctx.keep(table.string("status_listen")).flatten()
    {
        let message = format!(
            "`{status}` is `metrics_listen` too; give the status page a port of its own, \
             like `127.0.0.1:9465`"
        );
        ctx.error(table.error(listen.span(), "status_listen", message));
    }
    if let Some(status) = &daemon.status_listen
        && status
            .parse::<SocketAddr>()
            .is_ok_and(|addr| !addr.ip().is_loopback())
        && let Some(listen) = ctx.keep(table.string("status_listen")).flatten()
    {
        let message = format!(
            "`{status}` is not a loopback address: anyone who reaches it sees every job, \
             node and output tail of the fleet, and the page has no authentication; put it \
             on `127.0.0.1` behind a reverse proxy that asks for a login \
             (docs/operations.md, \"The status page\")"
        );
        ctx.warn(table.warning(listen.span(), "status_listen", message));
    }
    if let Some(clock) = ctx.keep(table.string("clock")).flatten() {
        match *clock.get_ref() {
            "redis" => daemon.clock = ClockSource::Redis,
            "local" => daemon.clock = ClockSource::Local,
            other => {
                let message = format!("expected `redis` or `local`, found `{other}`");
                ctx.error(table.error(clock.span(), "clock", message));
            }
        }
    }
    let mut pairs = BTreeMap::new();
    if let Some(file) = ctx.keep(table.string("env_file")).flatten() {
        if file.get_ref().is_empty() {
            ctx.error(table.error(file.span(), "env_file", "must not be empty"));
        } else {
            let full = tls::beside(config_path, file.get_ref());
            pairs = env_file(table, &full, file.span(), ctx);
            ctx.named_file(table.spot(file.span(), "env_file"), full.clone());
            daemon.env_file = Some(full);
        }
    }
    (daemon, pairs)
}

/// A listener's `IP:PORT` at `key` (`None`: absent, or wrong: the error
/// goes to `ctx`, with `example` as how to write it).
fn listen_address(
    table: &Table<'_, '_>,
    key: &str,
    example: &str,
    ctx: &Context<'_>,
) -> Option<String> {
    let listen = ctx.keep(table.string(key)).flatten()?;
    let value = *listen.get_ref();
    if value.parse::<SocketAddr>().is_ok() {
        return Some(value.to_string());
    }
    let message = format!("`{value}` is not a socket address; write it like `{example}`");
    ctx.error(table.error(listen.span(), key, message));
    None
}

/// The pairs of the env file at `full` (written at `span`); errors name the
/// file and, for a bad line, its number. Loading for inspection takes an
/// unreadable file as empty.
fn env_file(
    table: &Table<'_, '_>,
    full: &Path,
    span: std::ops::Range<usize>,
    ctx: &Context<'_>,
) -> BTreeMap<String, String> {
    match envfile::read(full) {
        Ok(pairs) => pairs,
        Err(EnvFileError::Read(_)) if ctx.inspect => BTreeMap::new(),
        Err(EnvFileError::Read(err)) => {
            let message = format!("cannot read env file `{}`: {err}", full.display());
            ctx.error(table.error(span, "env_file", message));
            BTreeMap::new()
        }
        Err(EnvFileError::Lines(lines)) => {
            for (line, reason) in lines {
                let message = format!("`{}` line {line}: {reason}", full.display());
                ctx.error(table.error(span.clone(), "env_file", message));
            }
            BTreeMap::new()
        }
    }
}

/// About what one history entry costs Redis (a run's fields; a failure's
/// `error` text adds its length): docs/operations.md, "History size".
pub(super) const HISTORY_ENTRY_BYTES: u64 = 100;
/// The Redis memory the full histories may reach above which the loader
/// warns: `jobs × history_max × HISTORY_ENTRY_BYTES`.
pub(super) const HISTORY_WARN_BYTES: u64 = 4 << 30;

/// Warns (at `[daemon] history_max`, or at the top of the file when it is
/// the default) when `jobs` full histories would hold more than
/// [`HISTORY_WARN_BYTES`] of Redis memory, with a `history_max` that fits.
pub(super) fn warn_history_size(
    table: Option<&Table<'_, '_>>,
    root: &Table<'_, '_>,
    daemon: &DaemonConfig,
    jobs: usize,
    ctx: &Context<'_>,
) {
    let jobs = u64::try_from(jobs).unwrap_or(u64::MAX).max(1);
    let bytes = jobs
        .saturating_mul(daemon.history_max)
        .saturating_mul(HISTORY_ENTRY_BYTES);
    if bytes <= HISTORY_WARN_BYTES {
        return;
    }
    let fits = (HISTORY_WARN_BYTES / HISTORY_ENTRY_BYTES / jobs).max(1);
    let gib = |bytes: u64| bytes as f64 / f64::from(1u32 << 30);
    let message = format!(
        "{jobs} jobs × history_max {} entries can hold about {:.0} GiB of history in Redis \
         (about {HISTORY_ENTRY_BYTES} bytes an entry, about 5 KiB for a run whose output fills its \
         4 KiB tail); set `history_max = {fits}` or lower \
         (about {:.1} GiB), or give Redis that memory (docs/operations.md, \"History size\")",
        daemon.history_max,
        gib(bytes),
        gib(fits
            .saturating_mul(jobs)
            .saturating_mul(HISTORY_ENTRY_BYTES)),
    );
    let set = table.and_then(|table| Some((table, table.integer("history_max").ok()??)));
    let warning = match set {
        Some((table, max)) => table.warning(max.span(), "history_max", message),
        None => root.warning(0..0, "daemon.history_max", message),
    };
    ctx.warn(warning);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::tests::{config, error};

    #[test]
    fn histories_that_would_outgrow_4_gib_of_redis_are_warned_with_a_cap_that_fits() {
        let job = "[redis]\nurl = \"redis://127.0.0.1\"\n[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"true\"\n";
        assert!(
            config(job).warnings.is_empty(),
            "1 job × 10,000 entries: 1 MB"
        );
        let big = format!("[daemon]\nhistory_max = 100000000\n{job}");
        let warnings: Vec<String> = config(&big)
            .warnings
            .iter()
            .map(|w| w.to_string())
            .collect();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with("/etc/solocron/jobs.toml:2:15: [daemon] `history_max`: 1 jobs × history_max 100000000 entries can hold about 9 GiB")
                && warnings[0].contains("set `history_max = 42949672` or lower"),
            "{warnings:?}"
        );
        let mut many = "[redis]\nurl = \"redis://127.0.0.1\"\n".to_string();
        for i in 0..5_000 {
            many.push_str(&format!(
                "[jobs.j{i}]\nschedule = \"* * * * *\"\ncommand = \"true\"\n"
            ));
        }
        let warnings: Vec<String> = config(&many)
            .warnings
            .iter()
            .map(|w| w.to_string())
            .collect();
        assert_eq!(
            warnings,
            [
                "/etc/solocron/jobs.toml:1:1: `daemon.history_max`: 5000 jobs × history_max 10000 entries \
              can hold about 5 GiB of history in Redis (about 100 bytes an entry, about 5 KiB for a run whose output fills its 4 KiB tail); set `history_max = 8589` \
              or lower (about 4.0 GiB), or give Redis that memory (docs/operations.md, \"History size\")"
            ]
        );
    }

    #[test]
    fn status_listen_is_a_socket_address_of_its_own_and_warned_off_loopback() {
        let redis = "[redis]\nurl = \"redis://127.0.0.1\"\n";
        let on = |daemon: &str| config(&format!("[daemon]\n{daemon}{redis}"));
        let page = on("status_listen = \"127.0.0.1:9465\"\n");
        assert_eq!(page.daemon.status_listen.as_deref(), Some("127.0.0.1:9465"));
        assert!(page.warnings.is_empty(), "{:?}", page.warnings);
        assert_eq!(config(redis).daemon.status_listen, None, "off by default");
        assert_eq!(
            error("[daemon]\nstatus_listen = \"localhost:9465\"\n"),
            "/etc/solocron/jobs.toml:2:17: [daemon] `status_listen`: `localhost:9465` is not a socket \
             address; write it like `127.0.0.1:9465`"
        );
        assert_eq!(
            error(
                "[daemon]\nmetrics_listen = \"127.0.0.1:9464\"\nstatus_listen = \"127.0.0.1:9464\"\n"
            ),
            "/etc/solocron/jobs.toml:3:17: [daemon] `status_listen`: `127.0.0.1:9464` is \
             `metrics_listen` too; give the status page a port of its own, like `127.0.0.1:9465`"
        );
        let open = on("status_listen = \"0.0.0.0:9465\"\n");
        let warnings: Vec<String> = open.warnings.iter().map(|w| w.to_string()).collect();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with(
                "/etc/solocron/jobs.toml:2:17: [daemon] `status_listen`: `0.0.0.0:9465` is not a loopback address"
            ) && warnings[0].contains("no authentication"),
            "{warnings:?}"
        );
        assert!(on("status_listen = \"[::1]:9465\"\n").warnings.is_empty());
        // A node's own listener, not the jobs' definition: no drift.
        assert_eq!(page.fingerprint(), config(redis).fingerprint());
    }

    #[test]
    fn daemon_section() {
        let text = "[daemon]\nshutdown_grace = \"2m\"\nhistory_max = 50\nmetrics_listen = \"127.0.0.1:9464\"\n";
        let daemon = config(text).daemon;
        assert_eq!(daemon.shutdown_grace, Duration::from_secs(120));
        assert_eq!(daemon.history_max, 50);
        assert_eq!(daemon.metrics_listen.as_deref(), Some("127.0.0.1:9464"));
        assert_eq!(
            error("[daemon]\nhistory_max = 0\n"),
            "/etc/solocron/jobs.toml:2:15: [daemon] `history_max`: must be at least 1, found 0"
        );
        assert!(
            error("[daemon]\nhistory_max = \"10\"\n")
                .ends_with("expected an integer, found string")
        );
        assert_eq!(
            error("[daemon]\nmetrics_listen = \"localhost\"\n"),
            "/etc/solocron/jobs.toml:2:18: [daemon] `metrics_listen`: `localhost` is not a socket address; \
         write it like `127.0.0.1:9464`"
        );
        assert!(
            error("[daemon]\nshutdown_grace = \"forever\"\n")
                .contains("invalid duration `forever`")
        );
        assert_eq!(
            error("daemon = 3\n"),
            "/etc/solocron/jobs.toml:1:10: `daemon`: expected a [daemon] table, found integer"
        );
    }
}
