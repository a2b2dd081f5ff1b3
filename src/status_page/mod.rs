//! The status page (`[daemon] status_listen`): a read-only web page of the
//! whole fleet that every daemon can serve, read from Redis like `solocron
//! status` ([`crate::inspect`]): `/` (every job, group, live node, the
//! newest history and audit records), `/jobs/NAME` (one job's recent
//! history with output tails), `/status.json` and `/history.json` (the
//! CLI's `--json`, from the same reads).
//!
//! It owns the listener, the routes and the HTML ([`html`]); the data are
//! `inspect`'s. It never writes to Redis, answers only `GET` and `HEAD`
//! (405 otherwise), and is bounded: [`CONCURRENT`] requests at once (the
//! others wait their turn), each given [`REQUEST_LIMIT`] in all, and Redis
//! [`REACH_LIMIT`] to answer its first command. Nothing from the config but
//! job, group and node names and schedules is shown, and every text is
//! HTML-escaped by the templates; output tails and errors come from the
//! history, masked when they were recorded.
//!
//! Failure model: an address it cannot bind stops the daemon at start
//! ([`bind`], a [`StartRefused`]: exit 78, as for `metrics_listen`); after
//! that nothing it meets stops the daemon or panics. A Redis that does not
//! answer is a 503 page saying since when; a request that takes too long
//! is a 503 too. The listener is bound once per process: a changed
//! `status_listen` takes effect at the next restart, not on reload.

mod handlers;
mod html;
mod params;
mod state;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::{Config, StartRefused};
use crate::coordinator::Coordinator;

pub use state::OutageSince;
use state::Page;

/// Requests served at once; the others wait for a turn within their
/// [`REQUEST_LIMIT`]. Each reads the whole fleet (a few pipelined round
/// trips), so a few at once keep Redis and the daemon unhurried.
const CONCURRENT: usize = 4;
/// How long one request may take in all, its wait for a turn included.
const REQUEST_LIMIT: Duration = Duration::from_secs(10);
/// How long Redis may take to answer a request's first command.
const REACH_LIMIT: Duration = Duration::from_secs(3);

/// What the daemon gives the page.
pub struct Setup {
    /// This node's id ("served by").
    pub node: String,
    /// The config as last loaded (the jobs follow reloads).
    pub config: watch::Receiver<Arc<Config>>,
    /// A connection of the page's own (its reads never wait behind the
    /// daemon's claims).
    pub coordinator: Coordinator,
    /// When the daemon found Redis unreachable, if it is now.
    pub outage_since: OutageSince,
}

/// Binds `listen` (`status_listen` of the config at `config_path`).
/// `Err` ([`StartRefused`]: exit 78, a restart does not free a port) names
/// the address, the key, the file and what to do.
pub async fn bind(config_path: &Path, listen: &str) -> anyhow::Result<TcpListener> {
    let refused = |cause: String| {
        StartRefused(format!(
            "cannot serve the status page on `{listen}` (`status_listen` in `[daemon]` of `{}`): \
             {cause}; stop the process that holds the port (`ss -ltnp` names it) or choose a \
             free port or an address of this host in `status_listen`, then start again",
            config_path.display()
        ))
    };
    let addr: SocketAddr = listen
        .parse()
        .map_err(|err| refused(format!("not a socket address ({err})")))?;
    Ok(TcpListener::bind(addr)
        .await
        .map_err(|err| refused(err.to_string()))?)
}

/// Serves the page on `listener` until `stop` is cancelled; the task ends
/// once the requests in progress are answered.
pub fn spawn(
    listener: TcpListener,
    setup: Setup,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let node = setup.node.clone();
    let page = Arc::new(Page::new(setup, CONCURRENT, REACH_LIMIT));
    let app = router(page);
    tokio::spawn(async move {
        if let Ok(addr) = listener.local_addr() {
            info!(node = %node, listen = %addr, "status page served");
        }
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
        if let Err(err) = served {
            warn!(node = %node, error = %err, "the status page stopped");
        }
    })
}

fn router(page: Arc<Page>) -> Router {
    Router::new()
        .route("/", get(handlers::index))
        .route("/status.json", get(handlers::status_json))
        .route("/history.json", get(handlers::history_json))
        .route("/jobs/{name}", get(handlers::job))
        .fallback(handlers::not_found)
        .layer(middleware::from_fn_with_state(Arc::clone(&page), guard))
        .with_state(page)
}

/// Around every request: only `GET` and `HEAD`; a turn among
/// [`CONCURRENT`]; [`REQUEST_LIMIT`] in all; headers that keep a browser
/// from running, framing or caching what it got.
async fn guard(State(page): State<Arc<Page>>, request: Request, next: Next) -> Response {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = html::plain_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "the status page is read-only: it answers GET and HEAD only",
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return secured(response);
    }
    let answered = tokio::time::timeout(REQUEST_LIMIT, async {
        let _turn = page.turn().await;
        next.run(request).await
    })
    .await;
    secured(answered.unwrap_or_else(|_| {
        html::plain_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the status page took too long to answer (Redis slow, or too many requests at once); \
             try again",
        )
    }))
}

fn secured(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; \
             base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        ),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response.into_response()
}
