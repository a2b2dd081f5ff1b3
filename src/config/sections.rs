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
        env_file: None,
        clock: ClockSource::Redis,
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
    if let Some(listen) = ctx.keep(table.string("metrics_listen")).flatten() {
        let value = *listen.get_ref();
        if value.parse::<SocketAddr>().is_ok() {
            daemon.metrics_listen = Some(value.to_string());
        } else {
            let message =
                format!("`{value}` is not a socket address; write it like `127.0.0.1:9464`");
            ctx.error(table.error(listen.span(), "metrics_listen", message));
        }
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::tests::{config, error};

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
