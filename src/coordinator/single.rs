//! One Redis server: the lazily connecting manager every mode but Cluster
//! is built from (a `url`, each Redlock master, a Sentinel's current master).
//!
//! The connection manager is lazy: the daemon starts even when Redis is down
//! and reconnects by itself; every command after an outage may fail once,
//! which the claim and release loops retry with the same token.
//!
//! `rediss://` uses rustls with the `ring` provider, installed here as the
//! process default before any TLS config is built (the redis crate asks
//! rustls for the default provider). The server's certificate is checked
//! against `tls_ca_file` when set, else the system's roots; there is no
//! insecure mode.

use std::time::Duration;

use anyhow::Context as _;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{
    ClientTlsConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo as _, TlsCertificates,
};

use crate::config::{RedisConfig, redact_url};

/// Response timeout of every command.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);
/// Connect timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// First pause before a failed connect is tried again (then doubled, with
/// jitter); see [`manager`].
const CONNECT_RETRY_DELAY: Duration = Duration::from_millis(5);

/// The connection info for `url` with the settings of `config`: the data
/// nodes' password (`password_file`) and user name if set, and no `CLIENT
/// SETINFO` on connect (Redis 7.0's ACLs do not know it, so the docs' ACL
/// user could not allow it there, and 7.2+ would log every refusal).
pub fn connection_info(url: &str, config: &RedisConfig) -> anyhow::Result<ConnectionInfo> {
    let redacted = redact_url(url);
    let info = url
        .into_connection_info()
        .map_err(|err| anyhow::anyhow!("{:?}", err.kind()))
        .with_context(|| format!("invalid redis url `{redacted}`"))?;
    Ok(with_settings(info, config))
}

/// `info` with the data nodes' credentials of `config` and no `CLIENT SETINFO`.
pub fn with_settings(info: ConnectionInfo, config: &RedisConfig) -> ConnectionInfo {
    let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
    if let Some(password) = &config.password {
        settings = settings.set_password(password);
    }
    if let Some(username) = &config.username {
        settings = settings.set_username(username);
    }
    info.set_redis_settings(settings)
}

/// A client for `info` with the TLS certificates of `config`; `shown` names
/// the server in errors (redacted).
pub fn client(
    info: ConnectionInfo,
    config: &RedisConfig,
    shown: &str,
) -> anyhow::Result<redis::Client> {
    // Err means a provider is already installed, which is all we need.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let is_tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
    if config.tls.is_configured() {
        anyhow::ensure!(
            is_tls,
            "`[redis]` sets TLS certificate files but `{shown}` is not `rediss://`; \
             refusing to connect without TLS"
        );
        redis::Client::build_with_tls(info, certificates(config))
    } else {
        redis::Client::open(info)
    }
    .map_err(|err| anyhow::anyhow!("{:?}", err.kind()))
    .with_context(|| format!("cannot use redis `{shown}`"))
}

/// The TLS certificates of `config` in the redis crate's form.
pub fn certificates(config: &RedisConfig) -> TlsCertificates {
    TlsCertificates {
        client_tls: config.tls.client.as_ref().map(|client| ClientTlsConfig {
            client_cert: client.cert.clone(),
            client_key: client.key.clone(),
        }),
        root_cert: config.tls.ca.clone(),
    }
}

/// A lazily connecting manager for `client`.
///
/// A failed connect is tried twice more at once (a few ms apart, not the
/// crate's 100 ms and up): the callers' own retry loops space the attempts
/// out, and a refused connection or an untrusted certificate must come back
/// as that error within a Redlock master's answer window
/// ([`super::ANSWER_TIMEOUT`]), not as "did not answer".
pub fn manager(client: redis::Client, shown: &str) -> anyhow::Result<ConnectionManager> {
    let manager_config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_number_of_retries(2)
        .set_min_delay(CONNECT_RETRY_DELAY)
        .set_max_delay(Duration::from_millis(500));
    ConnectionManager::new_lazy_with_config(client, manager_config)
        .map_err(|err| anyhow::anyhow!("{:?}", err.kind()))
        .with_context(|| format!("cannot set up the redis connection to `{shown}`"))
}

/// A lazily connecting manager for the server at `url` with the settings
/// of `config`. Errors name the redacted URL, never the password.
pub fn connect_url(url: &str, config: &RedisConfig) -> anyhow::Result<ConnectionManager> {
    let shown = redact_url(url);
    let info = connection_info(url, config)?;
    manager(client(info, config, &shown)?, &shown)
}
