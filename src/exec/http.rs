//! `http` hooks: one request on the daemon's shared client.
//!
//! The request carries the configured method, headers and body plus the
//! `Solocron-*` headers and `Idempotency-Key: JOB@OCCURRENCE`, so the
//! receiver can drop a duplicate or a stale fence. A 2xx status succeeds,
//! any other fails; only the status is read, never the body.
//!
//! Errors are shown without secrets: reqwest errors lose their URL
//! (`without_url`), configured header values are marked sensitive, and any
//! header value, URL password or URL query value that still shows up in a
//! message is replaced by `***`.

use std::future::Future;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, RequestBuilder, Url};

use super::{Finish, Outcome, RunContext, StopReason};
use crate::config::HttpAction;

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
            Ok(response) => answered(response.status()),
            Err(err) => failed(err, ctx, action),
        },
        reason = stop => Finish::new(Outcome::from(reason)),
    }
}

fn answered(status: reqwest::StatusCode) -> Finish {
    let outcome = if status.is_success() {
        Outcome::Succeeded
    } else {
        Outcome::Failed
    };
    Finish {
        http_status: Some(status.as_u16()),
        ..Finish::new(outcome)
    }
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

/// Replaces configured secrets (header values, URL password and query
/// values, e.g. `?token=${TOKEN}`) by `***`.
fn scrub(mut text: String, action: &HttpAction) -> String {
    let url = Url::parse(&action.url).ok();
    let password = url
        .as_ref()
        .and_then(|url| url.password().map(str::to_string));
    let query_values: Vec<String> = url
        .iter()
        .flat_map(|url| url.query_pairs().map(|(_, value)| value.into_owned()))
        .collect();
    let secrets = action
        .headers
        .iter()
        .map(|(_, value)| value.clone())
        .chain(password)
        .chain(query_values);
    for secret in secrets {
        // Very short values are not secrets and would mangle the message.
        if secret.len() >= 4 {
            text = text.replace(&secret, "***");
        }
    }
    text
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
            ("solocron-outcome", notice.outcome.clone()),
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
        "outcome": notice.outcome,
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
    fn timeout_is_the_shorter_one() {
        let s = Duration::from_secs;
        assert_eq!(effective_timeout(Some(s(10)), Some(s(3))), Some(s(3)));
        assert_eq!(effective_timeout(Some(s(2)), Some(s(3))), Some(s(2)));
        assert_eq!(effective_timeout(None, Some(s(3))), Some(s(3)));
        assert_eq!(effective_timeout(Some(s(2)), None), Some(s(2)));
        assert_eq!(effective_timeout(None, None), None);
    }

    #[test]
    fn scrub_removes_header_values_and_url_password() {
        let action = HttpAction {
            url: "http://user:hunter22@example.invalid/x?token=s3cr3t".to_string(),
            method: "POST".to_string(),
            timeout: None,
            headers: vec![("Authorization".to_string(), "Bearer t0ken".to_string())],
            body: None,
        };
        let text = scrub("a Bearer t0ken b hunter22 c s3cr3t".to_string(), &action);
        assert_eq!(text, "a *** b *** c ***");
    }
}
