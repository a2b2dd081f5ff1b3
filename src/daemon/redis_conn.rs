//! Opens the one multiplexed Redis connection a node uses.
//!
//! The connection manager is lazy: the daemon starts even when Redis is down
//! and reconnects by itself; every command after an outage may fail once,
//! which the claim and release loops retry with the same token.

use std::time::Duration;

use anyhow::Context as _;
use redis::IntoConnectionInfo as _;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::config::RedisConfig;

/// A lazily connecting manager for `config` (password from `password_file`
/// applied). Errors name the redacted URL, never the password.
pub fn connect(config: &RedisConfig) -> anyhow::Result<ConnectionManager> {
    let redacted = config.redacted_url();
    let mut info = config
        .url
        .as_str()
        .into_connection_info()
        .map_err(|err| anyhow::anyhow!("{:?}", err.kind()))
        .with_context(|| format!("invalid redis url `{redacted}`"))?;
    if let Some(password) = &config.password {
        let settings = info.redis_settings().clone().set_password(password);
        info = info.set_redis_settings(settings);
    }
    let client = redis::Client::open(info)
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
