//! `http = { url, method, timeout, headers, body }` of a job.
//!
//! `url`, header values and `body` are interpolated from the environment;
//! what they resolve to may be a secret, so messages quote the value as
//! written in the file, never as resolved, and the values filled in are
//! kept apart ([`HttpAction::secrets`]) for the hook's errors to mask.
//! Headers keep file order. Each key is checked on its own, so one bad key
//! never hides another.

use std::time::Duration;

use toml::de::DeValue;

use super::context::Context;
use super::interpolate::Place;
use super::model::HttpAction;
use super::table::Table;
use super::warnings;

use super::keys::HTTP as HTTP_KEYS;

/// Reads the `http` table of a job (or of `[defaults]`); `None` after an
/// error, which went to `ctx`.
pub(super) fn http_action(table: &Table<'_, '_>, ctx: &Context<'_>) -> Option<HttpAction> {
    let before = ctx.error_count();
    table.check_keys(HTTP_KEYS, ctx);
    let mut secrets = Vec::new();
    let url = read_url(table, ctx, &mut secrets);
    let method = match ctx.keep(table.string("method")).flatten() {
        None => "POST".to_string(),
        Some(method) if is_token(method.get_ref()) => {
            let upper = method.get_ref().to_ascii_uppercase();
            if !ctx.inspect
                && let Some(warning) = warnings::method(&upper)
            {
                ctx.warn(table.warning(method.span(), "method", warning));
            }
            upper
        }
        Some(method) => {
            let message = format!("`{}` is not an HTTP method", method.get_ref());
            ctx.error(table.error(method.span(), "method", message));
            String::new()
        }
    };
    let timeout = ctx
        .keep(table.duration("timeout", Duration::from_millis(1)))
        .flatten();
    let headers = match ctx.keep(table.table("headers")).flatten() {
        Some(headers) => read_headers(&headers, ctx, &mut secrets),
        None => Vec::new(),
    };
    let body =
        ctx.keep(table.string("body"))
            .flatten()
            .and_then(|body| match ctx.fill(body.get_ref()) {
                Ok(filled) => {
                    secrets.extend(filled.values);
                    Some(filled.text)
                }
                Err(err) => {
                    ctx.error(table.error(body.span(), "body", err.describe(Place::Http)));
                    None
                }
            });
    secrets.sort();
    secrets.dedup();
    (ctx.error_count() == before).then_some(HttpAction {
        url,
        method,
        timeout,
        headers,
        body,
        secrets,
    })
}

/// `url`, interpolated and checked (unless it still holds an unset
/// `${VAR}`, when loading for inspection); empty after an error. The
/// values filled in go to `secrets`.
fn read_url(table: &Table<'_, '_>, ctx: &Context<'_>, secrets: &mut Vec<String>) -> String {
    let url = match ctx.keep(table.string("url")) {
        Some(Some(url)) => url,
        Some(None) => {
            ctx.error(table.error_here("`url` is required"));
            return String::new();
        }
        None => return String::new(),
    };
    let written = *url.get_ref();
    match ctx.fill(written) {
        Ok(filled) => {
            if filled.complete
                && let Err(problem) = check_url(&filled.text)
            {
                let message = format!("`{written}` {problem}");
                ctx.error(table.error(url.span(), "url", message));
            }
            secrets.extend(filled.values);
            filled.text
        }
        Err(err) => {
            ctx.error(table.error(url.span(), "url", err.describe(Place::Http)));
            String::new()
        }
    }
}

/// `Err` completes "`URL` ..." (the URL as written).
///
/// The `//` is required as written: the URL standard reads `http:80/x` as
/// `http://80/x` (host `0.0.0.80`), which is a typo to refuse at load time,
/// not a host to call at 2 a.m. (found by tests/it/config/prop_config.rs, #4).
fn check_url(resolved: &str) -> Result<(), &'static str> {
    let url = url::Url::parse(resolved).map_err(|_| "is not a valid URL")?;
    let written_scheme = resolved.trim_start().split("//").next().unwrap_or_default();
    let has_slashes = written_scheme.eq_ignore_ascii_case(&format!("{}:", url.scheme()));
    if !matches!(url.scheme(), "http" | "https") || !has_slashes {
        return Err("is not an `http://` or `https://` URL");
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("has no host");
    }
    Ok(())
}

fn read_headers(
    headers: &Table<'_, '_>,
    ctx: &Context<'_>,
    secrets: &mut Vec<String>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (key, value) in headers.in_file_order() {
        let name: &str = key.get_ref();
        if !is_token(name) {
            let message = "not a valid header name (use letters, digits and `-`)";
            ctx.error(headers.error(key.span(), name, message));
            continue;
        }
        let DeValue::String(template) = value.get_ref() else {
            ctx.error(headers.expected(name, value, "a string"));
            continue;
        };
        match ctx.fill(template) {
            Ok(filled) if filled.text.contains(['\r', '\n', '\0']) => {
                let message = "a header value cannot contain a line break or NUL";
                ctx.error(headers.error(value.span(), name, message));
            }
            Ok(filled) => {
                secrets.extend(filled.values);
                out.push((name.to_string(), filled.text));
            }
            Err(err) => ctx.error(headers.error(value.span(), name, err.describe(Place::Http))),
        }
    }
    out
}

/// An RFC 9110 token: what a method or a header name may be.
fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::Action;
    use crate::config::tests::{SECRET, error, job};

    #[test]
    fn http_hooks() {
        let text = r#"
[jobs.warm]
schedule = "*/30 * * * * *"
http = { url = "https://${HOST}/hooks/warm", method = "put", timeout = "500ms", body = "{}", headers = { Z-Last = "1", Authorization = "Bearer ${WARM_TOKEN}", A-First = "$${literal}" } }
"#;
        let Action::Http(http) = &job(text).action else {
            panic!("an http action");
        };
        assert_eq!(http.url, "https://hooks.internal/hooks/warm");
        // What `${VAR}`s filled in, not the text of the file.
        assert_eq!(http.secrets, ["hooks.internal", SECRET]);
        assert_eq!(http.method, "PUT");
        assert_eq!(http.timeout, Some(Duration::from_millis(500)));
        assert_eq!(http.body.as_deref(), Some("{}"));
        let headers: Vec<_> = http
            .headers
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        let bearer = format!("Authorization: Bearer {SECRET}");
        assert_eq!(
            headers,
            ["Z-Last: 1", bearer.as_str(), "A-First: ${literal}"]
        );
        let plain =
            job("[jobs.p]\nschedule = \"@daily\"\nhttp = { url = \"http://127.0.0.1:8080/\" }\n");
        assert!(
            matches!(&plain.action, Action::Http(h) if h.method == "POST" && h.headers.is_empty())
        );
    }

    #[test]
    fn http_errors() {
        let with = |http: &str| format!("[jobs.x]\nschedule = \"@daily\"\nhttp = {{ {http} }}\n");
        assert_eq!(
            error(&with("method = \"POST\"")),
            "/etc/solocron/jobs.toml:3:8: jobs.x.http: `url` is required"
        );
        assert_eq!(
            error(&with("url = \"ftp://h/x\"")),
            "/etc/solocron/jobs.toml:3:16: [jobs.x] `http.url`: `ftp://h/x` is not an `http://` or `https://` URL"
        );
        assert!(error(&with("url = \"not a url\"")).ends_with("`not a url` is not a valid URL"));
        // Found by tests/it/config/prop_config.rs: the URL standard reads `http:80/x`
        // as `http://80/x` (host 0.0.0.80), and the loader took it.
        for typo in ["http:80/hooks/warm", "http:/127.0.0.1/x", "https:h/x"] {
            assert!(
                error(&with(&format!("url = \"{typo}\"")))
                    .ends_with(&format!("`{typo}` is not an `http://` or `https://` URL")),
                "{typo}"
            );
        }
        assert!(job(&with("url = \"HTTPS://h/x\"")).name == "x");
        assert_eq!(
            error(&with("url = \"http://h/\", method = \"GE T\"")),
            "/etc/solocron/jobs.toml:3:38: [jobs.x] `http.method`: `GE T` is not an HTTP method"
        );
        assert!(error(&with("url = \"http://h/\", headers = { \"Bad Name\" = \"x\" }")).contains(
        "[jobs.x] `http.headers.Bad Name`: not a valid header name (use letters, digits and `-`)"
    ));
        assert!(
            error(&with(
                "url = \"http://h/\", headers = { X = \"a\\r\\nEvil: 1\" }"
            ))
            .ends_with("`http.headers.X`: a header value cannot contain a line break or NUL")
        );
    }
}
