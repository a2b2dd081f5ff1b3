//! Opens the one multiplexed Redis connection a node uses.
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
use redis::{ClientTlsConfig, ConnectionAddr, IntoConnectionInfo as _, TlsCertificates};

use crate::config::RedisConfig;

/// A lazily connecting manager for `config` (password from `password_file`
/// applied, TLS certificates from `tls_*_file`). Errors name the redacted
/// URL, never the password.
pub fn connect(config: &RedisConfig) -> anyhow::Result<ConnectionManager> {
    // Err means a provider is already installed, which is all we need.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let redacted = config.redacted_url();
    let mut info = config
        .url
        .as_str()
        .into_connection_info()
        .map_err(|err| anyhow::anyhow!("{:?}", err.kind()))
        .with_context(|| format!("invalid redis url `{redacted}`"))?;
    // No `CLIENT SETINFO` on connect: Redis 7.0's ACLs do not know it, so
    // the README's ACL user could not allow it there, and 7.2+ would log
    // every refusal in `ACL LOG`.
    let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
    if let Some(password) = &config.password {
        settings = settings.set_password(password);
    }
    info = info.set_redis_settings(settings);
    let is_tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
    let client = if config.tls.is_configured() {
        anyhow::ensure!(
            is_tls,
            "`[redis]` sets TLS certificate files but the url `{redacted}` is not `rediss://`; \
             refusing to connect without TLS"
        );
        let certificates = TlsCertificates {
            client_tls: config.tls.client.as_ref().map(|client| ClientTlsConfig {
                client_cert: client.cert.clone(),
                client_key: client.key.clone(),
            }),
            root_cert: config.tls.ca.clone(),
        };
        redis::Client::build_with_tls(info, certificates)
    } else {
        redis::Client::open(info)
    }
    .map_err(|err| anyhow::anyhow!("{:?}", err.kind()))
    .with_context(|| format!("cannot use redis url `{redacted}`"))?;
    let manager_config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(Duration::from_millis(500)))
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_millis(500));
    ConnectionManager::new_lazy_with_config(client, manager_config)
        .map_err(|err| anyhow::anyhow!("{:?}", err.kind()))
        .with_context(|| format!("cannot set up the redis connection to `{redacted}`"))
}
