//! `[redis]`: which coordinator (exactly one of `url`, `sentinel`,
//! `cluster`, `redlock`; docs/configuration.md, docs/ha.md), how claims are
//! acknowledged (`wait_replicas`, `wait_timeout`), and the credentials and
//! certificates.
//!
//! Every server key present is read, also when there are two, so `check`
//! lists the errors inside both along with the conflict. A URL of any mode
//! is checked like `url` (`urls`); `sentinel` has its own file. A setting
//! that only makes a setup weaker (one sentinel, an even number of Redlock
//! masters, `wait_replicas = 0` where a failover can happen, a key that
//! has no effect in the mode) is a warning: the file is still valid.
//!
//! The passwords, from the URLs or from `password_file` and
//! `sentinel.password_file`, never appear in a message: URLs are shown
//! through `redact_url`, and a password file is named but its content
//! never quoted.
//!
//! `[redis]` must name its server: there is no default URL, because a file
//! cut short by a failed copy must stop the node loudly, not connect it to
//! whatever listens on 127.0.0.1 with no jobs.

use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use toml::de::DeValue;

mod sentinel;
mod urls;

use super::context::Context;
use super::error::locate;
use super::keys::{REDIS as REDIS_KEYS, REDIS_SERVER};
use super::model::{DEFAULT_WAIT_TIMEOUT, RedisConfig, RedisMode, RedisTls};
use super::table::{Table, Value};
use super::tls;
use super::warnings::Warning;
use urls::List;

/// The key namespace used when `key_prefix` is absent.
pub const DEFAULT_KEY_PREFIX: &str = "solocron";

/// The most replicas `wait_replicas` may ask for.
const WAIT_REPLICAS_MAX: i64 = 16;
/// Bounds of `wait_timeout`.
const WAIT_TIMEOUT_MIN: Duration = Duration::from_millis(10);
const WAIT_TIMEOUT_MAX: Duration = Duration::from_secs(10);

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

/// One server key, read: the mode it selects, its URL (for `url`), and
/// whether a URL of it is plain `redis://` (for the TLS keys).
struct Server {
    key: &'static str,
    mode: RedisMode,
    url: String,
    plain: bool,
}

/// Reads `[redis]`. A relative `password_file`, `sentinel.password_file`
/// or `tls_*_file` is taken relative to the directory of `config_path`.
/// Errors go to `ctx`; what comes back is only meaningful when none were
/// recorded.
pub(super) fn read(table: &Table<'_, '_>, config_path: &Path, ctx: &Context<'_>) -> RedisConfig {
    let mut redis = RedisConfig {
        url: String::new(),
        mode: RedisMode::Single,
        wait_replicas: 0,
        wait_timeout: DEFAULT_WAIT_TIMEOUT,
        username: None,
        password: None,
        key_prefix: DEFAULT_KEY_PREFIX.to_string(),
        tls: RedisTls::default(),
    };
    let before = ctx.error_count();
    table.check_keys(REDIS_KEYS, ctx);
    // After an unknown key (`urll`), "no server" would only repeat it.
    let keys_known = ctx.error_count() == before;
    let chosen = choose_server(table, keys_known, ctx);
    let servers: Vec<Server> = present_servers(table)
        .into_iter()
        .filter_map(|(key, value)| server(table, key, value, config_path, ctx))
        .collect();
    if let Some(server) = servers.iter().find(|server| Some(server.key) == chosen) {
        redis.url = server.url.clone();
        redis.mode = server.mode.clone();
    }
    (redis.wait_replicas, redis.wait_timeout) = acknowledgement(table, chosen, ctx);
    redis.username = username(table, chosen, ctx);
    let plain = servers.iter().find(|server| server.plain).map(plain_key);
    if let Some(tls) = ctx.keep(tls::read(table, config_path, plain)) {
        redis.tls = tls;
        for key in tls::KEYS {
            if let Ok(Some(file)) = table.string(key) {
                let full = tls::beside(config_path, file.get_ref());
                ctx.named_file(table.spot(file.span(), key), full);
            }
        }
    }
    if let Some(file) = ctx.keep(table.string("password_file")).flatten() {
        redis.password = password(table, "password_file", config_path, &file, ctx);
    }
    if let Some(prefix) = ctx.keep(table.string("key_prefix")).flatten() {
        let value = *prefix.get_ref();
        if value.is_empty() || value.contains(['{', '}']) || value.contains(char::is_whitespace) {
            let message = format!(
                "`{value}` is not a key prefix: it must be non-empty, without spaces and without `{{` or `}}`"
            );
            ctx.error(table.error(prefix.span(), "key_prefix", message));
        } else {
            redis.key_prefix = value.to_string();
        }
    }
    redis
}

/// The server keys of `table` in file order, with their values.
fn present_servers<'a, 'i>(table: &Table<'a, 'i>) -> Vec<(&'static str, &'a Value<'i>)> {
    let mut present: Vec<(&'static str, &'a Value<'i>)> = REDIS_SERVER
        .iter()
        .filter_map(|key| table.get(key).map(|value| (*key, value)))
        .collect();
    present.sort_by_key(|(_, value)| value.span().start);
    present
}

/// The server key the file chose (the first, when there are several),
/// recording an error for none (unless `keys_known` is false: an unknown
/// key was probably meant to be one) and for each one after the first.
fn choose_server(
    table: &Table<'_, '_>,
    keys_known: bool,
    ctx: &Context<'_>,
) -> Option<&'static str> {
    let present = present_servers(table);
    let Some((first, first_value)) = present.first() else {
        if keys_known {
            let message = format!(
                "no Redis server: set {}, like `url = \"redis://10.0.0.5:6379\"` \
                 (if the file used to have it, it may have been truncated)",
                server_keys()
            );
            ctx.error(table.error_here(message));
        }
        return None;
    };
    let line = |span: Range<usize>| locate(table.src.text, span).line;
    for (key, value) in &present[1..] {
        let message = format!(
            "`{first}` (line {}) and `{key}` (line {}) both name the Redis server; keep exactly \
             {} and remove the other",
            line(first_value.span()),
            line(value.span()),
            server_keys()
        );
        ctx.error(table.error(key_span(table, key), key, message));
    }
    Some(first)
}

/// Where `key` itself is written in `table` (errors about a key as such
/// point at it, like unknown keys do).
fn key_span(table: &Table<'_, '_>, key: &str) -> Range<usize> {
    table
        .entries
        .get_key_value(key)
        .map_or(table.span.clone(), |(written, _)| written.span())
}

/// How the TLS check names the URLs that are not `rediss://`.
fn plain_key(server: &Server) -> &'static str {
    match server.key {
        "sentinel" => "sentinel.urls",
        key => key,
    }
}

/// Reads the server key `key` (one of [`REDIS_SERVER`]); `None` after an
/// error, which is recorded.
fn server(
    table: &Table<'_, '_>,
    key: &'static str,
    value: &Value<'_>,
    config_path: &Path,
    ctx: &Context<'_>,
) -> Option<Server> {
    let list = |list: &List| urls::list(table, key, value, list, ctx);
    let mut url = String::new();
    let mode = match key {
        "url" => {
            let written = ctx.keep(table.string("url")).flatten()?;
            if let Err(message) = urls::check(written.get_ref(), None) {
                ctx.error(table.error(written.span(), "url", message));
                return None;
            }
            url = written.get_ref().to_string();
            RedisMode::Single
        }
        "sentinel" => sentinel::read(table, value, config_path, ctx)?,
        "cluster" => RedisMode::Cluster {
            urls: list(&urls::CLUSTER)?,
        },
        _ => {
            let urls = list(&urls::REDLOCK)?;
            redlock_warning(table, value, urls.len(), ctx);
            RedisMode::Redlock { urls }
        }
    };
    let urls = match &mode {
        RedisMode::Single => std::slice::from_ref(&url),
        RedisMode::Sentinel { urls, .. }
        | RedisMode::Cluster { urls }
        | RedisMode::Redlock { urls } => urls.as_slice(),
    };
    let plain = urls.iter().any(|url| !url.starts_with("rediss://"));
    Some(Server {
        key,
        mode,
        url,
        plain,
    })
}

/// Records `warning`, except when loading for inspection (which computes
/// none).
fn warn(ctx: &Context<'_>, warning: Warning) {
    if !ctx.inspect {
        ctx.warn(warning);
    }
}

/// An even number of Redlock masters tolerates no more failures than one
/// master fewer.
fn redlock_warning(table: &Table<'_, '_>, value: &Value<'_>, count: usize, ctx: &Context<'_>) {
    if !count.is_multiple_of(2) {
        return;
    }
    let (majority, down) = (count / 2 + 1, count / 2 - 1);
    let message = format!(
        "{count} masters survive {down} down, no more than {} would (a majority of {count} is \
         {majority}); use an odd number, such as {} or {}",
        count - 1,
        count - 1,
        count + 1
    );
    warn(ctx, table.warning(value.span(), "redlock", message));
}

/// `wait_replicas` and `wait_timeout`, checked against the chosen mode
/// (`None`: no server named); the defaults for what is not set.
fn acknowledgement(
    table: &Table<'_, '_>,
    chosen: Option<&str>,
    ctx: &Context<'_>,
) -> (u32, Duration) {
    let replicated = matches!(chosen, Some("sentinel" | "cluster"));
    let mut replicas = u32::from(replicated);
    if let Some(written) = ctx.keep(table.integer("wait_replicas")).flatten() {
        let value = *written.get_ref();
        let span = written.span();
        match u32::try_from(value) {
            _ if chosen == Some("redlock") => {
                let message = "does not apply to `redlock`: its masters are independent, not \
                               replicas of one another, and a claim holds because a majority of \
                               them took it; remove `wait_replicas`";
                ctx.error(table.error(span, "wait_replicas", message));
            }
            Ok(count) if i64::from(count) <= WAIT_REPLICAS_MAX => {
                replicas = count;
                if count == 0 && replicated {
                    let message = format!(
                        "0 with `{}`: a run may start before any replica has its claim, so \
                         after a failover the same occurrence can run again; keep the default 1",
                        chosen.unwrap_or_default()
                    );
                    warn(ctx, table.warning(span, "wait_replicas", message));
                }
            }
            _ => {
                let message = format!(
                    "must be from 0 to {WAIT_REPLICAS_MAX}, found {value}: how many replicas \
                     must acknowledge a claim before its run starts"
                );
                ctx.error(table.error(span, "wait_replicas", message));
            }
        }
    }
    let timeout = wait_timeout(table, ctx);
    if let Some((_, span)) = &timeout
        && chosen.is_some()
        && (replicas == 0 || chosen == Some("redlock"))
    {
        let message = match chosen {
            Some("redlock") => "has no effect with `redlock`: no replica is waited for",
            _ => "has no effect while `wait_replicas` is 0",
        };
        warn(ctx, table.warning(span.clone(), "wait_timeout", message));
    }
    (
        replicas,
        timeout.map_or(DEFAULT_WAIT_TIMEOUT, |(value, _)| value),
    )
}

/// `wait_timeout` and where it is written, if set and within bounds.
fn wait_timeout(table: &Table<'_, '_>, ctx: &Context<'_>) -> Option<(Duration, Range<usize>)> {
    let value = table.get("wait_timeout")?;
    let timeout = ctx
        .keep(table.duration("wait_timeout", Duration::ZERO))
        .flatten()?;
    let found = match value.get_ref() {
        DeValue::String(written) => written.to_string(),
        _ => String::new(),
    };
    let message = if timeout < WAIT_TIMEOUT_MIN {
        format!(
            "must be at least 10ms, found `{found}`: a replica on another machine rarely \
             acknowledges sooner, and a claim that is not acknowledged in time does not run"
        )
    } else if timeout > WAIT_TIMEOUT_MAX {
        format!(
            "must be at most 10s, found `{found}`: every claim, renewal and release waits up \
             to this long for its replicas, so it adds to every claim before its run starts"
        )
    } else {
        return Some((timeout, value.span()));
    };
    ctx.error(table.error(value.span(), "wait_timeout", message));
    None
}

/// `username`, kept only for `sentinel`; elsewhere it is a warning.
fn username(table: &Table<'_, '_>, chosen: Option<&str>, ctx: &Context<'_>) -> Option<String> {
    let user = ctx.keep(table.string("username")).flatten()?;
    let value = *user.get_ref();
    if value.is_empty() {
        let message = "must not be empty; leave it out to log in as the `default` user";
        ctx.error(table.error(user.span(), "username", message));
        return None;
    }
    match chosen {
        Some("sentinel") => Some(value.to_string()),
        Some(mode) => {
            let which = if mode == "url" { "the URL" } else { "each URL" };
            let message = format!(
                "is ignored with `{mode}`: it is for `sentinel`, whose data nodes have no URL of \
                 their own; write the user into {which} instead, like \
                 `redis://{value}@10.0.0.5:6379`"
            );
            warn(ctx, table.warning(user.span(), "username", message));
            None
        }
        None => None,
    }
}

/// The content of the password file written as `file` for `key` of
/// `table`; `None` after an error (recorded), or when loading for
/// inspection and the file cannot be read (the read-only commands may lack
/// it).
fn password(
    table: &Table<'_, '_>,
    key: &str,
    config_path: &Path,
    file: &toml::Spanned<&str>,
    ctx: &Context<'_>,
) -> Option<String> {
    let full = tls::beside(config_path, file.get_ref());
    let fail = |message: String| ctx.error(table.error(file.span(), key, message));
    let content = match crate::config::read_text_file(&full) {
        Ok(content) => content,
        Err(_) if ctx.inspect => return None,
        Err(err) => {
            fail(format!(
                "cannot read password file `{}`: {err}",
                full.display()
            ));
            return None;
        }
    };
    let password = content.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        fail(format!("password file `{}` is empty", full.display()));
        return None;
    }
    ctx.named_file(table.spot(file.span(), key), full);
    Some(password.to_string())
}
