//! The HTML of the status page: one layout (a viewport for phones, one
//! inline style sheet, no script), the pages ([`index`], [`job`]) and the
//! error pages (404, 400, 503, 405).
//!
//! Every text goes through maud's escaping (job and node names, tags,
//! reasons, errors, output tails: a job printing `<script>` shows it as
//! text); only the constant [`STYLE`] is written unescaped. Links are
//! relative (`jobs/NAME` from `/`, `../` back), so the page works under any
//! path prefix of a reverse proxy.
//!
//! Failure model: rendering is pure and cannot fail.

pub mod index;
pub mod job;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::state::Outage;
use crate::inspect::format;
use crate::outcome::Outcome;

/// The seconds between two loads of `/` in a browser (`<meta refresh>`).
pub const REFRESH_SECS: u32 = 30;

/// The style sheet: narrow screens first; tables scroll sideways or, the
/// wide ones marked `stack`, become one block per row under 700 px.
const STYLE: &str = r#"
:root{color-scheme:light dark;--bg:#fff;--fg:#1b1f24;--mute:#59636e;--line:#d8dee4;--ok:#1a7f37;--bad:#cf222e;--run:#0969da;--warn:#9a6700;--chip:#eef1f4}
@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--fg:#e6edf3;--mute:#9198a1;--line:#30363d;--ok:#3fb950;--bad:#f85149;--run:#58a6ff;--warn:#d29922;--chip:#21262d}}
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;background:var(--bg);color:var(--fg)}
header,main,footer{max-width:1400px;margin:0 auto;padding:0 12px}
header{padding-top:10px;padding-bottom:6px;border-bottom:1px solid var(--line)}
footer{padding-top:16px;padding-bottom:24px}
h1{font-size:1.3rem;margin:.2rem 0}h2{font-size:1.08rem;margin:1.5rem 0 .4rem}h3{font-size:1rem;margin:0 0 .3rem}
.mute{color:var(--mute);font-size:.9em}
a{color:var(--run)}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.9em}
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{font-size:.78em;text-transform:uppercase;letter-spacing:.03em;color:var(--mute);white-space:nowrap}
td.nowrap{white-space:nowrap}
.badge{font-weight:600;white-space:nowrap}
.ok{color:var(--ok)}.bad{color:var(--bad)}.run{color:var(--run)}.warn{color:var(--warn)}
.chip{display:inline-block;background:var(--chip);border-radius:4px;padding:0 5px;margin:1px 3px 1px 0;font-size:.85em}
.alert{border:1px solid var(--bad);border-left-width:5px;padding:8px 10px;margin:10px 0;border-radius:4px}
.summary{display:flex;flex-wrap:wrap;gap:4px 18px;margin:10px 0}
.entry{border:1px solid var(--line);border-radius:6px;padding:8px 10px;margin:10px 0}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:6px 0}
dl.facts dt{color:var(--mute);font-size:.9em}dl.facts dd{margin:0;overflow-wrap:anywhere}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:var(--chip);padding:8px;border-radius:4px;max-height:24em;overflow:auto;margin:4px 0}
@media (max-width:700px){
table.stack thead{display:none}
table.stack tr{display:block;border-bottom:1px solid var(--line);padding:6px 0}
table.stack td{display:block;border:0;padding:1px 4px}
table.stack td[data-label]::before{content:attr(data-label) ": ";color:var(--mute);font-size:.85em}
table.stack td:first-child{font-weight:600;font-size:1.05em}
table.stack td:first-child::before{content:none}
table.stack td:empty{display:none}
}
"#;

/// What every page says about where it comes from.
pub struct Shown<'a> {
    /// The node serving the page.
    pub node: &'a str,
    /// Redis `TIME`, UTC epoch ms.
    pub now_ms: i64,
    /// The relative link to `/` from this page (`./` or `../`).
    pub home: &'a str,
}

/// A whole page: `title`, the header line `meta`, then `body`; `home` is
/// the relative link to `/`; `refresh` reloads it every [`REFRESH_SECS`].
pub fn layout(title: &str, home: &str, meta: Markup, body: Markup, refresh: bool) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if refresh {
                    meta http-equiv="refresh" content=(REFRESH_SECS);
                }
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    h1 { (title) }
                    div.mute { (meta) }
                }
                main { (body) }
                footer.mute {
                    a href=(home) { "All jobs" } ". Read-only. The same data as JSON: "
                    a href={ (home) "status.json" } { "status.json" } ", "
                    a href={ (home) "history.json" } { "history.json" } "."
                }
            }
        }
    }
}

/// The header line: the Redis time read at, the node serving.
pub fn meta(shown: &Shown<'_>, extra: Markup) -> Markup {
    html! {
        "As of " (instant(shown.now_ms)) " (Redis time), served by node "
        span.mono { (shown.node) } ". " (extra)
    }
}

/// An HTML response.
pub fn response(status: StatusCode, markup: Markup) -> Response {
    let mut response = (status, markup.into_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

/// A short page saying `message` (`status` 4xx or 5xx).
pub fn plain_error(status: StatusCode, message: &str) -> Response {
    let title = status.canonical_reason().unwrap_or("Error");
    let body = html! {
        p { (message) }
    };
    response(status, layout(title, "/", html! {}, body, false))
}

/// The 404 page for a path that is no page, with a link back from `home`.
pub fn not_found(path: &str, home: &str) -> Response {
    let body = html! {
        p { "There is no page " code { (path) } "." }
        p { a href=(home) { "The status of every job" } }
    };
    response(
        StatusCode::NOT_FOUND,
        layout("Not found", home, html! {}, body, false),
    )
}

/// The 503 page: Redis does not answer, since when.
pub fn outage(node: &str, outage: &Outage, home: &str) -> Response {
    let since_ms = outage.since.timestamp_millis();
    let now_ms = chrono::Utc::now().timestamp_millis();
    let body = html! {
        div.alert {
            p { strong { "Redis is unreachable" } " since " (instant(since_ms))
                " (" (format::duration_ms(now_ms - since_ms)) " ago), as node "
                span.mono { (node) } " sees it. No job runs meanwhile (fail closed)." }
            p.mute { (outage.error) }
        }
        p { "This page reads everything from Redis; it shows the fleet again once Redis answers. "
            a href=(home) { "Try again" } }
    };
    let mut response = response(
        StatusCode::SERVICE_UNAVAILABLE,
        layout("Redis is unreachable", home, html! {}, body, true),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("10"));
    response
}

/// An instant as RFC 3339 UTC (whole seconds).
pub fn instant(ms: i64) -> String {
    format::from_ms(ms).map_or_else(|| ms.to_string(), format::secs)
}

/// "3m05s ago" or "in 3m05s" from `now_ms`.
pub fn relative(at_ms: i64, now_ms: i64) -> String {
    if at_ms <= now_ms {
        format!("{} ago", format::duration_ms(now_ms - at_ms))
    } else {
        format!("in {}", format::duration_ms(at_ms - now_ms))
    }
}

/// The class an outcome (or `running`, or a decision) is shown in.
pub fn tone(word: &str) -> &'static str {
    match word {
        "running" | "claimed" => "run",
        "succeeded" => "ok",
        _ => match Outcome::parse(word) {
            Some(outcome) if outcome.is_bad() => "bad",
            _ => "warn",
        },
    }
}

/// An outcome word in its colour.
pub fn badge(word: &str) -> Markup {
    html! { span class={ "badge " (tone(word)) } { (word) } }
}

/// `text` cut to `max` characters (with `…`), on one line.
pub fn short(text: &str, max: usize) -> String {
    let flat = format::flat(text);
    if flat.chars().count() <= max {
        return flat;
    }
    let mut cut: String = flat.chars().take(max).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_get_their_colour_and_long_text_is_cut() {
        assert_eq!(tone("succeeded"), "ok");
        assert_eq!(tone("failed"), "bad");
        assert_eq!(tone("running"), "run");
        assert_eq!(tone("skipped"), "warn");
        assert_eq!(short("a\nb", 5), "a b");
        assert_eq!(short("abcdef", 3), "abc…");
        assert_eq!(relative(1_000, 4_000), "3.0s ago");
        assert_eq!(relative(4_000, 1_000), "in 3.0s");
    }

    #[test]
    fn every_text_is_escaped() {
        let page = layout(
            "<b>",
            "./",
            html! { ("<script>alert(1)</script>") },
            badge("<i>"),
            false,
        )
        .into_string();
        assert!(!page.contains("<script>alert"), "{page}");
        assert!(
            page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{page}"
        );
        assert!(!page.contains("<b>") && !page.contains("<i>"), "{page}");
    }
}
