//! The two faces of `history`: the text table (one row per entry, the
//! whole error flattened to one line) and the `--json` array (exactly the
//! keys docs/operations.md lists, in that order, times RFC 3339 UTC, `null`
//! where not applicable).

use serde::Serialize;

use crate::history::Recorded;
use crate::inspect::format::{self, NONE, Table};

/// Fences start far above 0 (Redis time in µs); 0 means "no fence".
fn fence(fence: u64) -> Option<u64> {
    (fence > 0).then_some(fence)
}

/// One entry in `history --json`: exactly the keys docs/operations.md lists, in
/// that order.
#[derive(Serialize)]
struct JsonEntry<'a> {
    job: &'a str,
    occurrence: &'a str,
    node: &'a str,
    /// `None` for a decision without a fence (`missed` records fence 0).
    fence: Option<u64>,
    outcome: &'a str,
    exit_code: Option<i32>,
    http_status: Option<u16>,
    started_at: String,
    finished_at: String,
    duration_ms: Option<u64>,
    /// The whole text.
    error: Option<&'a str>,
    /// The last bytes the run printed.
    output_tail: Option<&'a str>,
    attempt: Option<u32>,
    /// Who ran it by hand (`trigger`); `null` for a scheduled run.
    by: Option<&'a str>,
}

/// `history --json`: one array of objects with exactly the keys
/// docs/operations.md lists, in that order, times RFC 3339 UTC, `null` where not
/// applicable.
pub fn render_json(entries: &[Recorded]) -> String {
    let array: Vec<JsonEntry<'_>> = entries.iter().map(json_entry).collect();
    // Serializing plain structs of strings and numbers cannot fail.
    let mut text = serde_json::to_string_pretty(&array).unwrap_or_else(|_| "[]".to_string());
    text.push('\n');
    text
}

fn json_entry(recorded: &Recorded) -> JsonEntry<'_> {
    let entry = &recorded.entry;
    JsonEntry {
        job: &recorded.job,
        occurrence: &entry.occurrence,
        node: &entry.node,
        fence: fence(entry.fence),
        outcome: &entry.outcome,
        exit_code: entry.exit_code,
        http_status: entry.http_status,
        started_at: format::millis(entry.started_at),
        finished_at: format::millis(entry.finished_at),
        duration_ms: entry.duration_ms,
        error: entry.error.as_deref(),
        output_tail: entry.output_tail.as_deref(),
        attempt: entry.attempt,
        by: entry.by.as_deref(),
    }
}

/// The text table, in the order given.
pub fn render(entries: &[Recorded]) -> String {
    let mut table = Table::new(&[
        "OCCURRENCE",
        "JOB",
        "NODE",
        "FENCE",
        "OUTCOME",
        "ATTEMPT",
        "EXIT/HTTP",
        "DURATION",
        "ERROR",
    ]);
    for recorded in entries {
        let entry = &recorded.entry;
        let status = match (entry.exit_code, entry.http_status) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(status)) => format!("http {status}"),
            (None, None) => NONE.to_string(),
        };
        let duration = entry
            .duration_ms
            .map(|ms| format::duration_ms(i64::try_from(ms).unwrap_or(i64::MAX)))
            .unwrap_or_else(|| NONE.to_string());
        table.row(vec![
            entry.occurrence.clone(),
            recorded.job.clone(),
            entry.node.clone(),
            fence(entry.fence).map_or_else(|| NONE.to_string(), |f| f.to_string()),
            entry.outcome.clone(),
            entry
                .attempt
                .map_or_else(|| NONE.to_string(), |attempt| attempt.to_string()),
            status,
            duration,
            entry.error.as_deref().map(format::flat).unwrap_or_default(),
        ]);
    }
    table.render()
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;

    use serde_json::Value;

    use super::*;
    use crate::history::Entry;

    fn skipped() -> Recorded {
        let at = DateTime::from_timestamp_millis(1_796_072_400_250).expect("valid");
        Recorded {
            job: "tick".into(),
            id: "1796072400250-0".into(),
            entry: Entry {
                occurrence: "2026-11-30T21:00:00Z".into(),
                node: "web-2".into(),
                fence: 1_796_072_399_000_123,
                outcome: "skipped".into(),
                exit_code: None,
                http_status: None,
                started_at: at,
                finished_at: at,
                duration_ms: None,
                error: Some("lock held by web-1".into()),
                output_tail: None,
                attempt: None,
                retry_at: None,
                by: None,
            },
        }
    }

    #[test]
    fn json_has_exactly_the_spec_keys_in_order_with_nulls() {
        let text = render_json(&[skipped()]);
        let value: Value = serde_json::from_str(&text).expect("valid JSON");
        let value = &value[0];
        let keys: Vec<&String> = value.as_object().expect("an object").keys().collect();
        let expected = [
            "job",
            "occurrence",
            "node",
            "fence",
            "outcome",
            "exit_code",
            "http_status",
            "started_at",
            "finished_at",
            "duration_ms",
            "error",
            "output_tail",
            "attempt",
            "by",
        ];
        let mut sorted = expected;
        sorted.sort();
        assert_eq!(keys, sorted);
        let positions: Vec<usize> = expected
            .iter()
            .map(|key| text.find(&format!("\"{key}\"")).expect("every key"))
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{text}");
        assert_eq!(value["duration_ms"], Value::Null);
        assert_eq!(value["exit_code"], Value::Null);
        assert_eq!(value["finished_at"], "2026-11-30T21:00:00.250Z");
        assert_eq!(value["fence"], 1_796_072_399_000_123_u64);
        assert_eq!(value["error"], "lock held by web-1");
        assert_eq!(value["output_tail"], Value::Null);
        assert_eq!(value["attempt"], Value::Null);
    }

    #[test]
    fn text_rows_show_dashes_for_what_does_not_apply() {
        let text = render(&[skipped()]);
        let row = text.lines().nth(1).expect("a row");
        assert!(
            row.starts_with("2026-11-30T21:00:00Z  tick  web-2  1796072399000123  skipped  -"),
            "{row}"
        );
        assert!(row.ends_with("lock held by web-1"), "{row}");
    }

    #[test]
    fn the_table_shows_the_whole_error_on_one_line() {
        let mut failed = skipped();
        let long = format!("first line\nsecond\tline {}", "x".repeat(200));
        failed.entry.error = Some(long);
        let text = render(&[failed]);
        assert_eq!(text.lines().count(), 2, "{text}");
        let row = text.lines().nth(1).expect("a row");
        assert!(
            row.ends_with(&format!("first line second line {}", "x".repeat(200))),
            "{row}"
        );
    }
}
