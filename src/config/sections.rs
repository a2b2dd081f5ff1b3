//! `[redis]` and `[daemon]`: the two sections that are not about jobs.
//!
//! The Redis password, from the URL or from `password_file`, never appears
//! in a message: URLs are shown through [`redact_url`], and a password file
//! is named but its content never quoted.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use super::error::ConfigError;
use super::model::{DaemonConfig, RedisConfig, RedisTls, redact_url};
use super::table::Table;
use super::tls;

/// The URL used when `[redis]` or its `url` is absent.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";
/// The key namespace used when `key_prefix` is absent.
pub const DEFAULT_KEY_PREFIX: &str = "solocron";

use super::keys::{DAEMON as DAEMON_KEYS, REDIS as REDIS_KEYS};
const REDIS_SCHEMES: &[&str] = &["redis", "rediss", "redis+unix", "unix"];

/// Reads `[redis]` (`None` = the section is absent). A relative
/// `password_file` or `tls_*_file` is taken relative to the directory of
/// `config_path`.
pub(super) fn redis(
    table: Option<&Table<'_, '_>>,
    config_path: &Path,
) -> Result<RedisConfig, ConfigError> {
    let mut redis = RedisConfig {
        url: DEFAULT_REDIS_URL.to_string(),
        password: None,
        key_prefix: DEFAULT_KEY_PREFIX.to_string(),
        tls: RedisTls::default(),
    };
    let Some(table) = table else {
        return Ok(redis);
    };
    table.check_keys(REDIS_KEYS)?;
    let mut url_is_tls = None;
    if let Some(url) = table.string("url")? {
        check_redis_url(url.get_ref())
            .map_err(|message| table.error(url.span(), "url", message))?;
        redis.url = url.get_ref().to_string();
        url_is_tls = Some(url.get_ref().starts_with("rediss://"));
    }
    redis.tls = tls::read(table, config_path, url_is_tls)?;
    if let Some(file) = table.string("password_file")? {
        let full = tls::beside(config_path, file.get_ref());
        let content = std::fs::read_to_string(&full).map_err(|err| {
            let message = format!("cannot read password file `{}`: {err}", full.display());
            table.error(file.span(), "password_file", message)
        })?;
        let password = content.trim_end_matches(['\n', '\r']);
        if password.is_empty() {
            let message = format!("password file `{}` is empty", full.display());
            return Err(table.error(file.span(), "password_file", message));
        }
        redis.password = Some(password.to_string());
    }
    if let Some(prefix) = table.string("key_prefix")? {
        let value = *prefix.get_ref();
        if value.is_empty() || value.contains(['{', '}']) {
            let message = format!(
                "`{value}` is not a key prefix: it must be non-empty and without `{{` or `}}`"
            );
            return Err(table.error(prefix.span(), "key_prefix", message));
        }
        redis.key_prefix = value.to_string();
    }
    Ok(redis)
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

/// Reads `[daemon]` (`None` = the section is absent).
pub(super) fn daemon(table: Option<&Table<'_, '_>>) -> Result<DaemonConfig, ConfigError> {
    let mut daemon = DaemonConfig {
        shutdown_grace: Duration::from_secs(30),
        history_max: 10_000,
        metrics_listen: None,
        env_file: None,
    };
    let Some(table) = table else {
        return Ok(daemon);
    };
    table.check_keys(DAEMON_KEYS)?;
    if let Some(grace) = table.duration("shutdown_grace", Duration::ZERO)? {
        daemon.shutdown_grace = grace;
    }
    if let Some(max) = table.integer("history_max")? {
        daemon.history_max = u64::try_from(*max.get_ref())
            .ok()
            .filter(|max| *max >= 1)
            .ok_or_else(|| {
                let message = format!("must be at least 1, found {}", max.get_ref());
                table.error(max.span(), "history_max", message)
            })?;
    }
    if let Some(listen) = table.string("metrics_listen")? {
        let value = *listen.get_ref();
        if value.parse::<SocketAddr>().is_err() {
            let message =
                format!("`{value}` is not a socket address; write it like `127.0.0.1:9464`");
            return Err(table.error(listen.span(), "metrics_listen", message));
        }
        daemon.metrics_listen = Some(value.to_string());
    }
    Ok(daemon)
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use crate::config::parse;
    use crate::config::tests::{PATH, config, env, error};

    #[test]
    fn redis_section() {
        let redis = config("[redis]\nkey_prefix = \"app\"\n").redis;
        assert_eq!(
            (redis.url.as_str(), redis.key_prefix.as_str()),
            ("redis://127.0.0.1:6379", "app")
        );
        let redis = config("[redis]\nurl = \"rediss://u:pw@db.internal:6380/2\"\n").redis;
        assert_eq!(redis.redacted_url(), "rediss://u:***@db.internal:6380/2");
        assert_eq!(
            error("[redis]\nkey_prefix = \"\"\n"),
            "/etc/solocron/jobs.toml:2:14: [redis] `key_prefix`: `` is not a key prefix: it must be non-empty and without `{` or `}`"
        );
        assert!(error("[redis]\nkey_prefix = \"a{b}\"\n").contains("`a{b}` is not a key prefix"));
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
            let text = format!("[redis]\nurl = \"{url}\"\n");
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
        let text = "[redis]\npassword_file = \"redis.pass\"\n";
        let config = parse(text, &config_path, &env).expect("relative to the config file");
        assert_eq!(config.redis.password.as_deref(), Some("hunter2"));
        let err = parse(
            "[redis]\npassword_file = \"/nonexistent/redis.pass\"\n",
            Path::new(PATH),
            &env,
        )
        .expect_err("missing file")
        .to_string();
        assert!(err.starts_with(
        "/etc/solocron/jobs.toml:2:17: [redis] `password_file`: cannot read password file `/nonexistent/redis.pass`: "
    ), "{err}");
        std::fs::write(dir.path().join("empty.pass"), "\n").expect("write password");
        let err = parse(
            "[redis]\npassword_file = \"empty.pass\"\n",
            &config_path,
            &env,
        )
        .expect_err("empty");
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
