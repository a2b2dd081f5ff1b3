//! The query parameters of the status page: `job` and `limit` of
//! `/history.json` (and `limit` of `/jobs/NAME`), checked before Redis is
//! read.
//!
//! Failure model: a wrong request is a [`BadParam`] naming the parameter,
//! what it got and what it takes (a 400); never a panic.

/// `limit` when none is given: `solocron history`'s default.
pub const DEFAULT_LIMIT: usize = 20;
/// The largest `limit` of `/history.json`: a thousand entries with full
/// output tails are a few MB.
pub const MAX_LIMIT: usize = 1_000;

/// A parameter the request got wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadParam {
    pub parameter: String,
    pub message: String,
}

/// What `/history.json` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryParams {
    pub job: Option<String>,
    pub limit: usize,
}

/// Parses the query string `query` (`None`: there is none), taking the
/// parameters in `known` (each at most once) and `limit` from 1 to
/// `max_limit`.
pub fn history(
    query: Option<&str>,
    known: &[&str],
    max_limit: usize,
) -> Result<HistoryParams, BadParam> {
    let mut params = HistoryParams {
        job: None,
        limit: DEFAULT_LIMIT.min(max_limit),
    };
    let mut seen: Vec<String> = Vec::new();
    let pairs = url::form_urlencoded::parse(query.unwrap_or_default().as_bytes());
    for (name, value) in pairs {
        let bad = |message: String| BadParam {
            parameter: name.to_string(),
            message,
        };
        if !known.contains(&name.as_ref()) {
            let takes: Vec<String> = known.iter().map(|name| format!("`{name}`")).collect();
            return Err(bad(format!(
                "unknown parameter `{name}`; this page takes {}",
                takes.join(" and ")
            )));
        }
        if seen.iter().any(|seen| *seen == name) {
            return Err(bad(format!("`{name}` is given twice; give it once")));
        }
        seen.push(name.to_string());
        match name.as_ref() {
            "job" if value.trim().is_empty() => {
                return Err(bad(
                    "`job` is empty; name a job, or leave `job` out for every job".to_string(),
                ));
            }
            "job" => params.job = Some(value.trim().to_string()),
            _ => {
                params.limit = value
                    .trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|limit| (1..=max_limit).contains(limit))
                    .ok_or_else(|| {
                        bad(format!(
                            "`limit` must be a whole number from 1 to {max_limit}, found `{value}`"
                        ))
                    })?;
            }
        }
    }
    Ok(params)
}

/// `name` as one segment of a URL path: every byte but the unreserved
/// ones (`A-Z a-z 0-9 - _ . ~`) percent-encoded, and a name of dots only
/// (`.`, `..`) encoded whole, since a browser would resolve it as a path.
pub fn path_segment(name: &str) -> String {
    if name.bytes().all(|byte| byte == b'.') {
        return name.bytes().map(|_| "%2E").collect();
    }
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `name` as a query value (`job=…`).
pub fn query_value(name: &str) -> String {
    url::form_urlencoded::byte_serialize(name.as_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN: &[&str] = &["job", "limit"];

    #[test]
    fn job_and_limit_are_read_and_checked() {
        assert_eq!(
            history(None, KNOWN, MAX_LIMIT),
            Ok(HistoryParams {
                job: None,
                limit: 20
            })
        );
        assert_eq!(
            history(Some("job=db.backup&limit=5"), KNOWN, MAX_LIMIT),
            Ok(HistoryParams {
                job: Some("db.backup".into()),
                limit: 5
            })
        );
        let err = |query: &str| history(Some(query), KNOWN, MAX_LIMIT).expect_err(query);
        let bad = err("limit=0");
        assert_eq!(bad.parameter, "limit");
        assert_eq!(
            bad.message,
            "`limit` must be a whole number from 1 to 1000, found `0`"
        );
        assert_eq!(err("limit=1001").parameter, "limit");
        assert_eq!(err("limit=lots").parameter, "limit");
        assert_eq!(err("job=").parameter, "job");
        assert_eq!(
            err("job=a&job=b").message,
            "`job` is given twice; give it once"
        );
        let unknown = err("jbo=a");
        assert_eq!(
            (unknown.parameter.as_str(), unknown.message.as_str()),
            (
                "jbo",
                "unknown parameter `jbo`; this page takes `job` and `limit`"
            )
        );
    }

    #[test]
    fn names_are_encoded_for_paths_and_queries() {
        assert_eq!(path_segment("db.backup"), "db.backup");
        assert_eq!(path_segment("a b/c?<"), "a%20b%2Fc%3F%3C");
        assert_eq!(path_segment(".."), "%2E%2E");
        assert_eq!(query_value("a b&c"), "a+b%26c");
    }
}
