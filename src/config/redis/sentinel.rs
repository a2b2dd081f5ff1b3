//! `[redis] sentinel = { master, urls, password_file }`: the master named
//! `master`, found through the sentinels at `urls`.
//!
//! The sentinels decide a failover, so fewer than three is a warning: one
//! is a single point of failure, and two cannot agree on a failover while
//! one of them is down.

use std::ops::Range;
use std::path::Path;

use toml::de::DeValue;

use super::{password, urls, warn};
use crate::config::context::Context;
use crate::config::keys::SENTINEL as SENTINEL_KEYS;
use crate::config::model::RedisMode;
use crate::config::table::{Table, Value};

/// Sentinels below this many get a warning.
const SENTINELS_ADVISED: usize = 3;

/// `sentinel = { master, urls, password_file }`; `None` after an error.
pub(super) fn read(
    table: &Table<'_, '_>,
    value: &Value<'_>,
    config_path: &Path,
    ctx: &Context<'_>,
) -> Option<RedisMode> {
    if !matches!(value.get_ref(), DeValue::Table(_)) {
        let what =
            "a table like `{ master = \"solocron\", urls = [\"redis://10.0.0.1:26379\", …] }`";
        ctx.error(table.expected("sentinel", value, what));
        return None;
    }
    let sentinel = ctx.keep(table.table("sentinel")).flatten()?;
    let before = ctx.error_count();
    sentinel.check_keys(SENTINEL_KEYS, ctx);
    let missing = |message: &str| {
        ctx.error(table.error(value.span(), "sentinel", message));
    };
    let master = match sentinel.string("master") {
        Ok(Some(master)) => master_name(&sentinel, master.get_ref(), master.span(), ctx),
        Ok(None) => {
            missing(
                "needs `master`: the name the sentinels monitor the master under \
                 (`sentinel monitor NAME …` in sentinel.conf), like `master = \"solocron\"`",
            );
            None
        }
        Err(err) => {
            ctx.error(err);
            None
        }
    };
    let urls = match sentinel.get("urls") {
        Some(urls_value) => {
            let urls = urls::list(&sentinel, "urls", urls_value, &urls::SENTINELS, ctx);
            if let Some(urls) = &urls {
                sentinels_warning(&sentinel, urls_value, urls.len(), ctx);
            }
            urls
        }
        None => {
            missing(
                "needs `urls`: the sentinels' addresses, like `urls = [\"redis://10.0.0.1:26379\", \
                 \"redis://10.0.0.2:26379\", \"redis://10.0.0.3:26379\"]`",
            );
            None
        }
    };
    let password = match ctx.keep(sentinel.string("password_file")).flatten() {
        Some(file) => password(&sentinel, "password_file", config_path, &file, ctx),
        None => None,
    };
    if ctx.error_count() != before {
        return None;
    }
    Some(RedisMode::Sentinel {
        master: master?,
        urls: urls?,
        password,
    })
}

/// `sentinel.master`, if it can be a name the sentinels monitor.
fn master_name(
    sentinel: &Table<'_, '_>,
    name: &str,
    span: Range<usize>,
    ctx: &Context<'_>,
) -> Option<String> {
    let advice = "write the name the sentinels monitor the master under (`sentinel monitor NAME \
                  …` in sentinel.conf)";
    if name.is_empty() {
        let message = format!("must not be empty: {advice}");
        ctx.error(sentinel.error(span, "master", message));
        return None;
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        let message = format!("`{name}` cannot be a master name, it has a blank in it: {advice}");
        ctx.error(sentinel.error(span, "master", message));
        return None;
    }
    Some(name.to_string())
}

/// Fewer than three sentinels: the mode works, but does not survive what
/// it is for.
fn sentinels_warning(sentinel: &Table<'_, '_>, urls: &Value<'_>, count: usize, ctx: &Context<'_>) {
    let message = match count {
        1 => "a single sentinel is a single point of failure; run 3, on different machines"
            .to_string(),
        n if n < SENTINELS_ADVISED => format!(
            "{n} sentinels cannot agree on a failover while one of them is down (a majority of \
             {n} is {n}); run 3, on different machines"
        ),
        _ => return,
    };
    warn(ctx, sentinel.warning(urls.span(), "urls", message));
}
