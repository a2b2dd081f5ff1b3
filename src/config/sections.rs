//! `[redis]` and `[daemon]`: the two sections that are not about jobs.
//!
//! The Redis password, from the URL or from `password_file`, never appears
//! in a message: URLs are shown through [`redact_url`], and a password file
//! is named but its content never quoted. The same holds for `env_file`:
//! a bad line is reported by its number, never its text.
//!
//! `[redis]` must name its server: there is no default URL, because a file
//! cut short by a failed copy must stop the node loudly, not connect it to
//! whatever listens on 127.0.0.1 with no jobs.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use super::context::Context;
use super::envfile::{self, EnvFileError};
use super::error::ConfigError;
use super::model::{DaemonConfig, RedisConfig, RedisTls, redact_url};
use super::table::Table;
use super::tls;

/// The key namespace used when `key_prefix` is absent.
pub const DEFAULT_KEY_PREFIX: &str = "solocron";

use super::keys::{DAEMON as DAEMON_KEYS, REDIS as REDIS_KEYS, REDIS_SERVER};
const REDIS_SCHEMES: &[&str] = &["redis", "rediss", "redis+unix", "unix"];

/// How a message asks for one of [`REDIS_SERVER`]: "`url`", or "one of
/// `a`, `b` or `c`" once there are several.
pub(super) fn server_keys() -> String {
    let keys: Vec<String> = REDIS_SERVER.iter().map(|key| format!("`{key}`")).collect();
    match keys.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("one of {} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// Reads `[redis]`. A relative `password_file` or `tls_*_file` is taken
/// relative to the directory of `config_path`. Errors go to `ctx`; what
/// comes back is only meaningful when none were recorded.
pub(super) fn redis(table: &Table<'_, '_>, config_path: &Path, ctx: &Context<'_>) -> RedisConfig {
    let mut redis = RedisConfig {
        url: String::new(),
        mode: crate::config::RedisMode::Single,
        wait_replicas: 0,
        wait_timeout: crate::config::DEFAULT_WAIT_TIMEOUT,
        username: None,
        password: None,
        key_prefix: DEFAULT_KEY_PREFIX.to_string(),
        tls: RedisTls::default(),
    };
    let before = ctx.error_count();
    table.check_keys(REDIS_KEYS, ctx);
    // After an unknown key (`urll`), "no server" would only repeat it.
    let keys_known = ctx.error_count() == before;
    let mut url_is_tls = None;
    if let Some(url) = ctx.keep(table.string("url")).flatten() {
        match check_redis_url(url.get_ref()) {
            Ok(()) => {
                redis.url = url.get_ref().to_string();
                url_is_tls = Some(url.get_ref().starts_with("rediss://"));
            }
            Err(message) => ctx.error(table.error(url.span(), "url", message)),
        }
    }
    if keys_known && !REDIS_SERVER.iter().any(|key| table.get(key).is_some()) {
        let message = format!(
            "no Redis server: set {}, like `url = \"redis://10.0.0.5:6379\"` \
             (if the file used to have it, it may have been truncated)",
            server_keys()
        );
        ctx.error(table.error_here(message));
    }
    if let Some(tls) = ctx.keep(tls::read(table, config_path, url_is_tls)) {
        redis.tls = tls;
    }
    if let Some(file) = ctx.keep(table.string("password_file")).flatten() {
        redis.password = ctx
            .keep(password(
                table,
                config_path,
                file.get_ref(),
                file.span(),
                ctx,
            ))
            .flatten();
    }
    if let Some(prefix) = ctx.keep(table.string("key_prefix")).flatten() {
        let value = *prefix.get_ref();
        if value.is_empty() || value.contains(['{', '}']) {
            let message = format!(
                "`{value}` is not a key prefix: it must be non-empty and without `{{` or `}}`"
            );
            ctx.error(table.error(prefix.span(), "key_prefix", message));
        } else {
            redis.key_prefix = value.to_string();
        }
    }
    redis
}

/// The content of `password_file`; `Ok(None)` when loading for inspection
/// and the file cannot be read (the read-only commands may lack it).
fn password(
    table: &Table<'_, '_>,
    config_path: &Path,
    written: &str,
    span: std::ops::Range<usize>,
    ctx: &Context<'_>,
) -> Result<Option<String>, ConfigError> {
    let full = tls::beside(config_path, written);
    let content = match std::fs::read_to_string(&full) {
        Ok(content) => content,
        Err(_) if ctx.inspect => return Ok(None),
        Err(err) => {
            let message = format!("cannot read password file `{}`: {err}", full.display());
            return Err(table.error(span, "password_file", message));
        }
    };
    let password = content.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        let message = format!("password file `{}` is empty", full.display());
        return Err(table.error(span, "password_file", message));
    }
    Ok(Some(password.to_string()))
}

/// `Err` is the message; it shows the URL only with its password masked.
fn check_redis_url(written: &str) -> Result<(), String> {
    let shown = redact_url(written);
    let hint = "write it like `redis://127.0.0.1:6379` or `rediss://user@host:6380/0`";
    let Ok(url) = url::Url::parse(written) else {
        return Err(format!("invalid Redis URL `{shown}`; {hint}"));
    };
    if !REDIS_SCHEMES.contains(&url.scheme()) {
        return Err(format!(
            "unsupported scheme `{}` in `{shown}`; use `redis://`, `rediss://` or `redis+unix://`",
            url.scheme()
        ));
    }
    let needs_host = matches!(url.scheme(), "redis" | "rediss");
    if needs_host && url.host_str().is_none_or(str::is_empty) {
        return Err(format!("no host in Redis URL `{shown}`; {hint}"));
    }
    if let Some(fragment) = url.fragment() {
        return Err(format!(
            "`#{fragment}` in `{shown}` is not supported: certificate checks stay on; \
             trust a private CA with `tls_ca_file`"
        ));
    }
    Ok(())
}

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
    let mut pairs = BTreeMap::new();
    if let Some(file) = ctx.keep(table.string("env_file")).flatten() {
        if file.get_ref().is_empty() {
            ctx.error(table.error(file.span(), "env_file", "must not be empty"));
        } else {
            let full = tls::beside(config_path, file.get_ref());
            pairs = env_file(table, &full, file.span(), ctx);
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
    use std::path::Path;
    use std::time::Duration;

    use crate::config::tests::{PATH, complete, config, env, error};
    use crate::config::{parse, parse_for_inspection};

    #[test]
    fn redis_section() {
        let redis = config("[redis]\nurl = \"redis://db:6379\"\nkey_prefix = \"app\"\n").redis;
        assert_eq!(
            (redis.url.as_str(), redis.key_prefix.as_str()),
            ("redis://db:6379", "app")
        );
        // No default server: a `[redis]` must name one (issue #9).
        assert_eq!(
            error("[redis]\nkey_prefix = \"app\"\n"),
            "/etc/solocron/jobs.toml:1:1: [redis]: no Redis server: set `url`, like \
             `url = \"redis://10.0.0.5:6379\"` (if the file used to have it, it may have been truncated)"
        );
        let with = |line: &str| format!("[redis]\nurl = \"redis://db\"\n{line}\n");
        let redis = config("[redis]\nurl = \"rediss://u:pw@db.internal:6380/2\"\n").redis;
        assert_eq!(redis.redacted_url(), "rediss://u:***@db.internal:6380/2");
        assert_eq!(
            error(&with("key_prefix = \"\"")),
            "/etc/solocron/jobs.toml:3:14: [redis] `key_prefix`: `` is not a key prefix: it must be non-empty and without `{` or `}`"
        );
        assert!(error(&with("key_prefix = \"a{b}\"")).contains("`a{b}` is not a key prefix"));
        assert_eq!(
            error("[redis]\nurl = \"http://u:hunter2@db\"\n"),
            "/etc/solocron/jobs.toml:2:7: [redis] `url`: unsupported scheme `http` in `http://u:***@db`; \
         use `redis://`, `rediss://` or `redis+unix://`"
        );
    }

    #[test]
    fn redis_password_never_shows() {
        for url in [
            "redis://u:hunter2@db:notaport",
            "redis://u:hunter2@",
            "nonsense://:hunter2@x",
        ] {
            let text = complete(&format!("[redis]\nurl = \"{url}\"\n"));
            let err = parse(&text, Path::new(PATH), &env)
                .expect_err(url)
                .to_string();
            assert!(
                err.contains("[redis] `url`") && !err.contains("hunter2"),
                "{err}"
            );
        }
        let text = "[redis]\nurl = \"redis://u:hunter2@db\"\n[jobs.x]\nschedule = 1\n";
        let err = parse(text, Path::new(PATH), &env).expect_err("bad schedule");
        assert!(!format!("{err}").contains("hunter2"));
        let config = config("[redis]\nurl = \"redis://u:hunter2@db\"\n");
        assert!(!format!("{config:?}").contains("hunter2"));
    }

    #[test]
    fn redact_url_masks_odd_passwords_and_query_passwords() {
        use crate::config::redact_url;
        assert_eq!(redact_url("redis://u:hun/ter2@db/0"), "redis://u:***@db/0");
        assert_eq!(redact_url("redis://u:a@b?c@db"), "redis://u:***@db");
        assert_eq!(redact_url("redis://:pw@db:6379"), "redis://:***@db:6379");
        assert_eq!(
            redact_url("redis+unix:///run/redis.sock?db=1&pass=hunter2#x"),
            "redis+unix:///run/redis.sock?db=1&pass=***#x"
        );
        assert_eq!(redact_url("redis://db:6379/0"), "redis://db:6379/0");
    }

    #[test]
    fn redis_password_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("redis.pass"), "hunter2\n").expect("write password");
        let config_path = dir.path().join("jobs.toml");
        let with = |file: &str| {
            complete(&format!(
                "[redis]\nurl = \"redis://db\"\npassword_file = \"{file}\"\n"
            ))
        };
        let config =
            parse(&with("redis.pass"), &config_path, &env).expect("relative to the config file");
        assert_eq!(config.redis.password.as_deref(), Some("hunter2"));
        let missing = with("/nonexistent/redis.pass");
        let err = parse(&missing, Path::new(PATH), &env)
            .expect_err("missing file")
            .to_string();
        assert!(err.starts_with(
            "/etc/solocron/jobs.toml:3:17: [redis] `password_file`: cannot read password file `/nonexistent/redis.pass`: "
        ), "{err}");
        // `status` and `history` work for people who cannot read it.
        let inspected = parse_for_inspection(&missing, Path::new(PATH), &env)
            .expect("an unreadable password file is no error for inspection");
        assert_eq!(inspected.redis.password, None);
        std::fs::write(dir.path().join("empty.pass"), "\n").expect("write password");
        let err = parse(&with("empty.pass"), &config_path, &env).expect_err("empty");
        assert!(err.to_string().contains("is empty"));
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
