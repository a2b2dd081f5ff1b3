//! `http` hooks: one request on the daemon's shared client.
//!
//! The request carries the configured method, headers and body plus the
//! `Solocron-*` headers and `Idempotency-Key: JOB@OCCURRENCE`, so the
//! receiver can drop a duplicate or a stale fence. A 2xx status succeeds,
//! any other fails; only the status is read, never the body. Redirects
//! are not followed (the client is built so, `Executor::new`): a 302 would
//! turn a POST into a GET without its body. A 3xx is a failure whose error names where its
//! `Location` pointed (not a 304 Not Modified, which points nowhere).
//!
//! Errors are shown without secrets: reqwest errors lose their URL
//! (`without_url`), configured header values are marked sensitive, and the
//! values `${VAR}`s filled into the hook ([`HttpAction::secrets`]) and a
//! URL's password are replaced by `***` wherever they still show up in a
//! message. Nothing else is masked: the rest of the URL is the file's own
//! text, and masking it made errors unreadable (a `?job=nightly-report`
//! masked the job's name in every message).
//!
//! A proxy named by `HTTP_PROXY`, `HTTPS_PROXY` or `ALL_PROXY` (or their
//! lowercase forms) in the daemon's environment carries every hook except
//! those `NO_PROXY` names and those to this machine (`localhost`, a
//! loopback address), which always go direct, as Go's HTTP client does: a
//! hook's outcome is what this machine answered, never a proxy's. The
//! daemon logs the proxies it found at start
//! ([`proxies_from_env`]).

use std::future::Future;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, RequestBuilder, Url};

use super::{Finish, Outcome, RunContext, StopReason};
use crate::config::HttpAction;

/// Whether `url` is for this machine (`localhost`, `*.localhost`, a
/// loopback address): such a hook never goes through a proxy.
pub(super) fn is_loopback(url: &str) -> bool {
    match Url::parse(url).ok().as_ref().and_then(Url::host) {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            name == "localhost" || name.ends_with(".localhost")
        }
        None => false,
    }
}

/// The proxy variables of the environment that hooks obey, each with
/// where it points (`scheme://host:port`, never its user or password).
pub fn proxies_from_env() -> Vec<(&'static str, String)> {
    const NAMES: [&str; 6] = [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ];
    NAMES
        .into_iter()
        .filter_map(|name| {
            let value = std::env::var(name).ok()?;
            let value = value.trim();
            (!value.is_empty()).then(|| (name, proxy_shown(value)))
        })
        .collect()
}

/// Where a proxy URL points, without its user or password.
fn proxy_shown(value: &str) -> String {
    let full = if value.contains("://") {
        value.to_string()
    } else {
        format!("http://{value}")
    };
    match Url::parse(&full) {
        Ok(url) => match (url.host_str(), url.port_or_known_default()) {
            (Some(host), Some(port)) => format!("{}://{host}:{port}", url.scheme()),
            (Some(host), None) => format!("{}://{host}", url.scheme()),
            (None, _) => "(not a URL)".to_string(),
        },
        Err(_) => "(not a URL)".to_string(),
    }
}

/// Sends the hook; `stop` completing first abandons the request.
pub(super) async fn run(
    client: &reqwest::Client,
    ctx: &RunContext,
    action: &HttpAction,
    stop: impl Future<Output = StopReason>,
) -> Finish {
    let request = match build_request(client, ctx, action) {
        Ok(request) => request,
        Err(error) => return Finish::failed(error),
    };
    tokio::select! {
        result = request.send() => match result {
            Ok(response) => answered(&response, ctx, action),
            Err(err) => failed(err, ctx, action),
        },
        reason = stop => Finish::new(Outcome::from(reason)),
    }
}

fn answered(response: &reqwest::Response, ctx: &RunContext, action: &HttpAction) -> Finish {
    let status = response.status();
    let (outcome, error) = if status.is_success() {
        (Outcome::Succeeded, None)
    } else if status.is_redirection() && status != reqwest::StatusCode::NOT_MODIFIED {
        // A 304 points nowhere: it fails like any other non-2xx, without
        // the redirect's advice to put a final URL in jobs.toml.
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
        let error = redirected(status, location.as_deref(), ctx, action);
        (Outcome::Failed, Some(error))
    } else {
        (Outcome::Failed, None)
    };
    Finish {
        http_status: Some(status.as_u16()),
        error,
        ..Finish::new(outcome)
    }
}

/// The error of a hook answered with a redirect, which is not followed:
/// where it pointed (resolved against the hook's URL, its password and
/// secrets masked) and what to do.
fn redirected(
    status: reqwest::StatusCode,
    location: Option<&str>,
    ctx: &RunContext,
    action: &HttpAction,
) -> String {
    let job = &ctx.job.name;
    let answer = format!("http hook of job `{job}` was answered {status}, a redirect");
    let text = match location {
        Some(location) => {
            let target = Url::parse(&action.url)
                .and_then(|base| base.join(location))
                .map_or_else(|_| location.to_string(), String::from);
            format!(
                "{answer} to `{}`: redirects are not followed; put the final URL in jobs.toml",
                crate::config::redact_url(&target)
            )
        }
        None => format!(
            "{answer} without a `Location`: redirects are not followed; put the final URL in jobs.toml"
        ),
    };
    scrub(text, action)
}

fn failed(err: reqwest::Error, ctx: &RunContext, action: &HttpAction) -> Finish {
    let outcome = if err.is_timeout() {
        Outcome::TimedOut
    } else {
        Outcome::Failed
    };
    Finish {
        error: Some(describe(err, ctx, action)),
        ..Finish::new(outcome)
    }
}

/// The error chain joined by `: `, without the URL or any configured secret.
fn describe(err: reqwest::Error, ctx: &RunContext, action: &HttpAction) -> String {
    let err = err.without_url();
    let mut text = format!("http hook of job `{}` failed", ctx.job.name);
    let mut cause: Option<&dyn std::error::Error> = Some(&err);
    while let Some(current) = cause {
        text.push_str(": ");
        text.push_str(&current.to_string());
        cause = current.source();
    }
    scrub(text, action)
}

/// Shortest value [`scrub`] masks: a shorter one is no secret, and
/// masking it would mangle the message (`${PORT}` = `80`).
const SECRET_MIN: usize = 4;

/// Replaces the secrets of `action` by `***` wherever they show up in
/// `text`: every value a `${VAR}` filled into its URL, headers or body, and
/// the URL's password, each as a whole value, as written and
/// percent-encoded as a form, a URL's path and its query carry it
/// ([`url_encoded`]). Longest first, so a secret that
/// holds another one is masked whole. Nothing else of the text changes.
fn scrub(mut text: String, action: &HttpAction) -> String {
    let password = Url::parse(&action.url)
        .ok()
        .and_then(|url| url.password().map(str::to_string));
    let decoded = password.as_deref().map(|password| {
        url::form_urlencoded::parse(format!("p={password}").as_bytes())
            .next()
            .map(|(_, value)| value.into_owned())
            .unwrap_or_default()
    });
    let mut secrets: Vec<String> = Vec::new();
    for secret in action
        .secrets
        .iter()
        .cloned()
        .chain(password)
        .chain(decoded)
    {
        let encoded: String = url::form_urlencoded::byte_serialize(secret.as_bytes()).collect();
        secrets.push(encoded);
        secrets.extend(url_encoded(&secret));
        secrets.push(secret);
    }
    secrets.dedup();
    secrets.retain(|secret| secret.len() >= SECRET_MIN);
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    for secret in secrets {
        text = text.replace(&secret, "***");
    }
    text
}

/// `secret` as a URL carries it in its path and in its query: a space is
/// `%20` there, not the `+` of a form (a redirect to the hook's own URL
/// showed a `${VAR}` holding a space or a `{` so, unmasked).
fn url_encoded(secret: &str) -> Vec<String> {
    let Ok(mut url) = Url::parse("http://h/") else {
        return Vec::new();
    };
    url.set_path(secret);
    let path = url.path().trim_start_matches('/').to_string();
    url.set_query(Some(secret));
    let query = url.query().unwrap_or_default().to_string();
    vec![path, query]
}

fn build_request(
    client: &reqwest::Client,
    ctx: &RunContext,
    action: &HttpAction,
) -> Result<RequestBuilder, String> {
    let job = &ctx.job.name;
    let method = Method::from_bytes(action.method.as_bytes())
        .map_err(|_| format!("invalid HTTP method `{}` for job `{job}`", action.method))?;
    // `url::ParseError` does not repeat the URL, so this message is safe.
    let url =
        Url::parse(&action.url).map_err(|err| format!("invalid URL for job `{job}`: {err}"))?;
    let mut request = client.request(method, url).headers(headers(ctx, action)?);
    if let Some(body) = &action.body {
        request = request.body(body.clone());
    } else if let Some(notice) = &ctx.notice {
        request = request
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(notice_body(ctx, notice).to_string());
    }
    if let Some(limit) = effective_timeout(action.timeout, ctx.job.timeout) {
        request = request.timeout(limit);
    }
    Ok(request)
}

fn effective_timeout(hook: Option<Duration>, job: Option<Duration>) -> Option<Duration> {
    match (hook, job) {
        (Some(hook), Some(job)) => Some(hook.min(job)),
        (hook, job) => hook.or(job),
    }
}

fn headers(ctx: &RunContext, action: &HttpAction) -> Result<HeaderMap, String> {
    let job = &ctx.job.name;
    let mut headers = HeaderMap::new();
    for (name, value) in &action.headers {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("invalid header name `{name}` for job `{job}`"))?;
        // Never echo the value: it may hold an interpolated secret.
        let mut value = HeaderValue::from_str(value)
            .map_err(|_| format!("invalid value for header `{name}` of job `{job}`"))?;
        value.set_sensitive(true);
        headers.append(header, value);
    }
    let ours = [
        ("solocron-job", job.clone()),
        ("solocron-occurrence", ctx.occurrence.clone()),
        ("solocron-fence", ctx.fence.to_string()),
        ("solocron-node", ctx.node.clone()),
        ("idempotency-key", format!("{job}@{}", ctx.occurrence)),
        ("solocron-attempt", ctx.attempt.to_string()),
    ];
    let notice = ctx.notice.as_deref().map(|notice| {
        [
            ("solocron-outcome", notice.outcome.as_str().to_string()),
            (
                "solocron-exit-code",
                notice.exit_code.map(|c| c.to_string()).unwrap_or_default(),
            ),
            (
                "solocron-http-status",
                notice
                    .http_status
                    .map(|c| c.to_string())
                    .unwrap_or_default(),
            ),
            (
                "solocron-error",
                header_safe(notice.error.as_deref().unwrap_or_default()),
            ),
        ]
    });
    for (name, value) in ours.into_iter().chain(notice.into_iter().flatten()) {
        let value = HeaderValue::from_str(&value)
            .map_err(|_| format!("`{value}` cannot be sent as header `{name}` for job `{job}`"))?;
        headers.insert(HeaderName::from_static(name), value);
    }
    Ok(headers)
}

/// Longest `Solocron-Error` header; the whole text is in the JSON body.
const HEADER_TEXT_MAX: usize = 512;

/// `text` on one line of visible ASCII (a header value cannot hold a
/// newline or most other bytes), cut to [`HEADER_TEXT_MAX`].
fn header_safe(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_ascii_graphic() { c } else { ' ' })
        .take(HEADER_TEXT_MAX)
        .collect()
}

/// The JSON body of a notifier hook without a `body` of its own.
fn notice_body(ctx: &RunContext, notice: &super::Notice) -> serde_json::Value {
    serde_json::json!({
        "job": ctx.job.name,
        "occurrence": ctx.occurrence,
        "node": ctx.node,
        "fence": ctx.fence,
        "attempt": ctx.attempt,
        "outcome": notice.outcome.as_str(),
        "exit_code": notice.exit_code,
        "http_status": notice.http_status,
        "error": notice.error,
        "output_tail": notice.output_tail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_and_shown_proxies() {
        for url in [
            "http://127.0.0.1:8080/x",
            "http://127.9.9.9/",
            "http://[::1]:80/",
            "https://LOCALHOST./x",
            "http://hooks.localhost/",
        ] {
            assert!(is_loopback(url), "{url}");
        }
        for url in [
            "http://10.0.0.1/",
            "https://hooks.example/",
            "http://localhost.example/",
        ] {
            assert!(!is_loopback(url), "{url}");
        }
        assert_eq!(
            proxy_shown("http://u:s3cr3t@proxy:3128/"),
            "http://proxy:3128"
        );
        assert_eq!(proxy_shown("u:s3cr3t@proxy:3128"), "http://proxy:3128");
        assert_eq!(proxy_shown("socks5://proxy"), "socks5://proxy");
        assert_eq!(proxy_shown("::s3cr3t::"), "(not a URL)");
    }

    #[test]
    fn timeout_is_the_shorter_one() {
        let s = Duration::from_secs;
        assert_eq!(effective_timeout(Some(s(10)), Some(s(3))), Some(s(3)));
        assert_eq!(effective_timeout(Some(s(2)), Some(s(3))), Some(s(2)));
        assert_eq!(effective_timeout(None, Some(s(3))), Some(s(3)));
        assert_eq!(effective_timeout(Some(s(2)), None), Some(s(2)));
        assert_eq!(effective_timeout(None, None), None);
    }

    fn action(url: &str, secrets: &[&str]) -> HttpAction {
        HttpAction {
            url: url.to_string(),
            method: "POST".to_string(),
            timeout: None,
            headers: vec![("Authorization".to_string(), "Bearer t0ken".to_string())],
            body: None,
            secrets: secrets.iter().map(|secret| secret.to_string()).collect(),
        }
    }

    #[test]
    fn scrub_masks_the_filled_in_values_and_the_url_password() {
        let action = action(
            "http://user:hunter%2F22@example.invalid/x?token=s3cr%2Ft&job=nightly-report",
            &["t0ken", "s3cr/t"],
        );
        let text = scrub(
            "a Bearer t0ken b hunter/22 hunter%2F22 c s3cr/t s3cr%2Ft".to_string(),
            &action,
        );
        assert_eq!(text, "a Bearer *** b *** *** c *** ***");
    }

    /// The file's own text is not masked, however it was written: the job
    /// name in a query, words of the error, short values.
    #[test]
    fn scrub_masks_a_secret_as_a_urls_path_and_query_carry_it() {
        let action = action("http://h/", &["Path Secret{9}", "Query Secret\"7"]);
        let text = scrub(
            "to `http://h/services/Path%20Secret%7B9%7D/?key=Query%20Secret%227`".to_string(),
            &action,
        );
        assert_eq!(text, "to `http://h/services/***/?key=***`");
    }

    #[test]
    fn scrub_leaves_everything_else_alone() {
        let action = action(
            "http://127.0.0.1:19399/hooks/run?job=nightly-report&on=error&k=${X}",
            &["abc"],
        );
        let error = "http hook of job `nightly-report` failed: error sending request: \
                     client error (Connect): tcp connect error: Connection refused (os error 111) abc";
        assert_eq!(scrub(error.to_string(), &action), error);
    }

    #[test]
    fn a_secret_holding_another_is_masked_whole() {
        let action = action("http://h/", &["abcd", "abcdefgh"]);
        assert_eq!(scrub("x abcdefgh y".to_string(), &action), "x *** y");
    }
}
