//! The Redis URLs of `[redis]`: `url`, and the lists of `cluster`,
//! `redlock` and `sentinel.urls`.
//!
//! Every URL is checked the same way: a scheme the redis crate speaks, a
//! host, and no `#` fragment (the crate's `#insecure` would turn
//! certificate checks off). A list takes network servers only
//! (`redis+unix://` is one socket on this machine, meaningful for `url`
//! alone), one scheme for all of them (a fleet's servers are either TLS or
//! not, and the TLS keys apply to every one), and each server once: a
//! Redlock master listed twice would count twice towards the majority.
//! Two URLs name the same server when host and port are equal (6379 when
//! none is written, as the redis crate connects); user, password and
//! database do not make another server.
//!
//! Messages show a URL only through [`redact_url`], so its password never
//! appears.

use toml::de::DeValue;

use crate::config::context::Context;
use crate::config::model::redact_url;
use crate::config::table::{Table, Value};

/// Schemes `url` accepts; a list takes the first two only.
const SCHEMES: &[&str] = &["redis", "rediss", "redis+unix", "unix"];
/// The port the redis crate connects to when a URL names none.
const DEFAULT_PORT: u16 = 6379;

/// What a list holds, for its rules and messages.
pub(super) struct List {
    /// One item, as messages name it: `seed node`, `master`, `sentinel`.
    pub noun: &'static str,
    /// Fewer items than this is an error...
    pub min: usize,
    /// ... which says this after "has N {noun}s; ".
    pub too_few: &'static str,
}

/// `cluster = [...]`: seed nodes of one Redis Cluster.
pub(super) const CLUSTER: List = List {
    noun: "seed node",
    min: 1,
    too_few: "list at least one node of the cluster, like `cluster = [\"redis://10.0.0.1:6379\", \
              \"redis://10.0.0.2:6379\", \"redis://10.0.0.3:6379\"]` (it finds the others from \
              them)",
};

/// `redlock = [...]`: independent masters.
pub(super) const REDLOCK: List = List {
    noun: "master",
    min: 3,
    too_few: "Redlock needs at least 3 independent masters: with 2, a majority is both, so \
              either one down stops every job; list 3 or 5, on different machines",
};

/// `sentinel.urls = [...]`.
pub(super) const SENTINELS: List = List {
    noun: "sentinel",
    min: 1,
    too_few: "list the sentinels that watch the master, like `urls = \
              [\"redis://10.0.0.1:26379\", \"redis://10.0.0.2:26379\", \
              \"redis://10.0.0.3:26379\"]`",
};

/// Checks one URL as written. `list`: the key of the list it is an item
/// of, which takes network servers only; `None` for `url`. `Err` is the
/// message; it shows the URL only with its password masked.
pub(super) fn check(written: &str, list: Option<&str>) -> Result<url::Url, String> {
    let shown = redact_url(written);
    let hint = "write it like `redis://127.0.0.1:6379` or `rediss://user@host:6380/0`";
    let Ok(url) = url::Url::parse(written) else {
        return Err(format!("invalid Redis URL `{shown}`; {hint}"));
    };
    let scheme = url.scheme();
    if !SCHEMES.contains(&scheme) {
        let allowed = match list {
            None => "use `redis://`, `rediss://` or `redis+unix://`",
            Some(_) => "use `redis://` or `rediss://`",
        };
        return Err(format!(
            "unsupported scheme `{scheme}` in `{shown}`; {allowed}"
        ));
    }
    let networked = matches!(scheme, "redis" | "rediss");
    if let (Some(key), false) = (list, networked) {
        return Err(format!(
            "`{scheme}://` is a socket on this machine, only for `url`; the servers of `{key}` \
             are reached over the network: use `redis://` or `rediss://`"
        ));
    }
    if networked && url.host_str().is_none_or(str::is_empty) {
        return Err(format!("no host in Redis URL `{shown}`; {hint}"));
    }
    if let Some(fragment) = url.fragment() {
        // Only `#insecure` is named: a password with an unencoded `#` in
        // it ends up in the fragment.
        let (what, password) = if fragment == "insecure" {
            ("`#insecure`", "")
        } else {
            ("a `#` fragment", " (a `#` in a password is written `%23`)")
        };
        return Err(format!(
            "{what} in `{shown}` is not supported: certificate checks stay on; trust a private \
             CA with `tls_ca_file`{password}"
        ));
    }
    Ok(url)
}

/// The URLs of the list `key` of `table` (`value` is what is written
/// there), each checked like `url` and against the others; `None` after
/// an error, which is recorded, with every other error of the list.
pub(super) fn list(
    table: &Table<'_, '_>,
    key: &str,
    value: &Value<'_>,
    list: &List,
    ctx: &Context<'_>,
) -> Option<Vec<String>> {
    let DeValue::Array(items) = value.get_ref() else {
        let what = format!(
            "an array of {} URLs like `[\"redis://10.0.0.1:6379\", …]`",
            list.noun
        );
        ctx.error(table.expected(key, value, &what));
        return None;
    };
    let before = ctx.error_count();
    let mut urls = Vec::with_capacity(items.len());
    // (host, port, item number) of each server so far, and the item that
    // set the scheme.
    let mut servers: Vec<(String, u16, usize)> = Vec::new();
    let mut scheme: Option<(String, usize)> = None;
    let mut counted = 0;
    for (index, item) in items.iter().enumerate() {
        let number = index + 1;
        let fail = |message: String| {
            let message = format!("item {number}: {message}");
            ctx.error(table.error(item.span(), key, message));
        };
        let DeValue::String(written) = item.get_ref() else {
            fail(format!(
                "expected a URL string, found {}",
                item.get_ref().type_str()
            ));
            counted += 1;
            continue;
        };
        let written: &str = written.as_ref();
        let url = match check(written, Some(key)) {
            Ok(url) => url,
            Err(message) => {
                fail(message);
                counted += 1;
                continue;
            }
        };
        let shown = redact_url(written);
        match &scheme {
            None => scheme = Some((url.scheme().to_string(), number)),
            Some((first, at)) if first != url.scheme() => fail(format!(
                "`{shown}` is `{}://` but item {at} is `{first}://`; write every {} with \
                 `rediss://` (TLS) or every one with `redis://`",
                url.scheme(),
                list.noun
            )),
            Some(_) => {}
        }
        let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
        let port = url.port().unwrap_or(DEFAULT_PORT);
        if let Some((_, _, at)) = servers.iter().find(|(h, p, _)| *h == host && *p == port) {
            fail(format!(
                "`{shown}` is the same server as item {at} ({host}:{port}); list each {} once",
                list.noun
            ));
            continue;
        }
        servers.push((host, port, number));
        counted += 1;
        urls.push(written.to_string());
    }
    if counted < list.min {
        let noun = if counted == 1 {
            list.noun.to_string()
        } else {
            format!("{}s", list.noun)
        };
        let message = format!("has {counted} {noun}; {}", list.too_few);
        ctx.error(table.error(value.span(), key, message));
    }
    (ctx.error_count() == before).then_some(urls)
}
