//! The status page's routes: each reads Redis through `inspect` (the reads
//! the CLI prints) and renders HTML ([`super::html`]) or the CLI's JSON.
//!
//! Failure model: a wrong request is a 400 naming the parameter; an
//! unknown job a 404 naming it, with the closest known name; Redis failing
//! a 503 saying since when ([`super::state::Outage`]). JSON errors are
//! `{"error": TEXT, …}` objects. Nothing here writes to Redis.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::html::{self, Shown};
use super::params::{self, BadParam, HistoryParams};
use super::state::{Outage, Page};
use crate::inspect::history::{Found, read_history, render_json};
use crate::inspect::{HistoryQuery, UnknownJob, audit, status};

/// History entries on `/`.
const INDEX_HISTORY: usize = 20;
/// Audit records on `/`.
const INDEX_AUDIT: usize = 10;
/// The largest `limit` of `/jobs/NAME` (its entries show whole output tails).
pub const JOB_MAX_LIMIT: usize = 200;

/// `/`: the whole fleet.
pub async fn index(State(page): State<Arc<Page>>) -> Response {
    let source = page.source();
    let now_ms = match page.now_ms(&source).await {
        Ok(now_ms) => now_ms,
        Err(outage) => return html::outage(&page.node, &outage, "./"),
    };
    let query = history_query(None, INDEX_HISTORY);
    let coordinator = &page.coordinator;
    let (fleet, found, audit) = tokio::join!(
        status::read(coordinator, now_ms, &source),
        read_history(coordinator, now_ms, &source, &query),
        audit::read(coordinator, &source, None, INDEX_AUDIT),
    );
    let (fleet, found, audit) = match (fleet, found, audit) {
        (Ok(fleet), Ok(found), Ok(audit)) => (fleet, found, audit),
        (Err(err), _, _) | (_, Err(err), _) | (_, _, Err(err)) => {
            return html::outage(&page.node, &page.failed(&err), "./");
        }
    };
    page.answered();
    let shown = Shown {
        node: &page.node,
        now_ms,
        home: "./",
    };
    html::response(
        StatusCode::OK,
        html::index::page(&shown, &fleet, &found.entries, &audit),
    )
}

/// `/jobs/NAME`: one job and its recent history.
pub async fn job(
    State(page): State<Arc<Page>>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let limit = match params::history(query.as_deref(), &["limit"], JOB_MAX_LIMIT) {
        Ok(HistoryParams { limit, .. }) => limit,
        Err(bad) => return html::plain_error(StatusCode::BAD_REQUEST, &bad.message),
    };
    let source = page.source();
    let now_ms = match page.now_ms(&source).await {
        Ok(now_ms) => now_ms,
        Err(outage) => return html::outage(&page.node, &outage, "../"),
    };
    let query = history_query(Some(name.clone()), limit);
    let coordinator = &page.coordinator;
    let (fleet, found) = tokio::join!(
        status::read(coordinator, now_ms, &source),
        read_history(coordinator, now_ms, &source, &query),
    );
    let found = match found {
        Ok(found) => found,
        Err(err) => match err.downcast_ref::<UnknownJob>() {
            Some(unknown) => return unknown_job_page(unknown),
            None => return html::outage(&page.node, &page.failed(&err), "../"),
        },
    };
    let fleet = match fleet {
        Ok(fleet) => fleet,
        Err(err) => return html::outage(&page.node, &page.failed(&err), "../"),
    };
    page.answered();
    let shown = Shown {
        node: &page.node,
        now_ms,
        home: "../",
    };
    let Found { entries, cut, .. } = found;
    let job = html::job::JobPage {
        name: &name,
        status: fleet.jobs.iter().find(|job| job.job.name == name),
        history: &entries,
        limit,
        cut,
    };
    html::response(StatusCode::OK, html::job::page(&shown, &job))
}

fn unknown_job_page(unknown: &UnknownJob) -> Response {
    use maud::html;
    let body = html! {
        p { (unknown.to_string()) }
        @if let Some(near) = &unknown.closest {
            p { "Did you mean " a href=(params::path_segment(near)) { (near) } "?" }
        }
    };
    html::response(
        StatusCode::NOT_FOUND,
        html::layout("Unknown job", "../", html! {}, body, false),
    )
}

/// `/status.json`: what `solocron status --json` prints.
pub async fn status_json(State(page): State<Arc<Page>>) -> Response {
    let source = page.source();
    let fleet = match page.now_ms(&source).await {
        Ok(now_ms) => status::read(&page.coordinator, now_ms, &source).await,
        Err(outage) => return outage_json(&outage),
    };
    match fleet {
        Ok(fleet) => {
            page.answered();
            json_text(
                StatusCode::OK,
                format!("{:#}\n", status::render::to_json(&fleet)),
            )
        }
        Err(err) => outage_json(&page.failed(&err)),
    }
}

/// `/history.json?job=JOB&limit=N`: what `solocron history [JOB] --limit N
/// --json` prints.
pub async fn history_json(State(page): State<Arc<Page>>, RawQuery(query): RawQuery) -> Response {
    let asked = match params::history(query.as_deref(), &["job", "limit"], params::MAX_LIMIT) {
        Ok(asked) => asked,
        Err(bad) => return bad_param_json(&bad),
    };
    let source = page.source();
    let now_ms = match page.now_ms(&source).await {
        Ok(now_ms) => now_ms,
        Err(outage) => return outage_json(&outage),
    };
    let query = history_query(asked.job, asked.limit);
    match read_history(&page.coordinator, now_ms, &source, &query).await {
        Ok(found) => {
            page.answered();
            json_text(StatusCode::OK, render_json(&found.entries))
        }
        Err(err) => match err.downcast_ref::<UnknownJob>() {
            Some(unknown) => json_value(
                StatusCode::NOT_FOUND,
                &json!({
                    "error": unknown.to_string(),
                    "job": unknown.job,
                    "did_you_mean": unknown.closest,
                }),
            ),
            None => outage_json(&page.failed(&err)),
        },
    }
}

/// Any other path: a 404 page with a link back to `/`.
pub async fn not_found(uri: Uri) -> Response {
    let path = uri.path();
    let depth = path.matches('/').count().saturating_sub(1);
    let home = if depth == 0 {
        "./".to_string()
    } else {
        "../".repeat(depth)
    };
    html::not_found(path, &home)
}

fn history_query(job: Option<String>, limit: usize) -> HistoryQuery {
    HistoryQuery {
        job,
        limit,
        since: None,
        until: None,
        nodes: Vec::new(),
        outcomes: Vec::new(),
        json: true,
    }
}

fn outage_json(outage: &Outage) -> Response {
    let mut response = json_value(
        StatusCode::SERVICE_UNAVAILABLE,
        &json!({
            "error": format!("redis is unreachable: {}", outage.error),
            "redis_unreachable_since": crate::inspect::format::millis(outage.since),
        }),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("10"));
    response
}

fn bad_param_json(bad: &BadParam) -> Response {
    json_value(
        StatusCode::BAD_REQUEST,
        &json!({"error": bad.message, "parameter": bad.parameter}),
    )
}

fn json_value(status: StatusCode, value: &Value) -> Response {
    json_text(status, format!("{value:#}\n"))
}

fn json_text(status: StatusCode, text: String) -> Response {
    let mut response = (status, text).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
