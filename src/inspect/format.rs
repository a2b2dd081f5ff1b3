//! Formatting shared by `status` and `history`: times, durations, and a
//! plain aligned table (no colours, no box drawing: it goes through `grep`,
//! `less` and e-mail unharmed).

use chrono::{DateTime, SecondsFormat, Utc};

/// What a missing value shows as in text output.
pub const NONE: &str = "-";

/// RFC 3339 UTC with `Z` and whole seconds (how occurrences are named).
pub fn secs(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// RFC 3339 UTC with `Z` and milliseconds (recorded start and end times).
pub fn millis(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// UTC epoch ms as a time; `None` if out of range.
pub fn from_ms(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(ms)
}

/// A short duration for a table cell: `850ms`, `4.2s`, `3m05s`, `2h07m`,
/// `3d04h`. Negative values (a clock that went back) show as `0ms`.
pub fn duration_ms(ms: i64) -> String {
    let ms = ms.max(0);
    let secs = ms / 1000;
    match secs {
        _ if ms < 1000 => format!("{ms}ms"),
        0..60 => format!("{:.1}s", ms as f64 / 1000.0),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        3600..86400 => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d{:02}h", secs / 86400, secs % 86400 / 3600),
    }
}

/// `text` on one line: control characters (newlines, tabs, the escape
/// that starts a terminal's colour codes) become spaces.
pub fn flat(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// A text table: a header row and left-aligned columns two spaces apart.
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new(headers: &[&str]) -> Table {
        Table {
            rows: vec![headers.iter().map(|h| h.to_string()).collect()],
        }
    }

    /// Adds a row (cells beyond the header count are kept, missing ones
    /// are empty). Every cell is put on one line ([`flat`]): a reason, an
    /// error or a name read from Redis can hold newlines or a terminal's
    /// escape codes, which would break the table or colour the terminal.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows
            .push(cells.into_iter().map(|cell| flat(&cell)).collect());
    }

    /// The table, one line per row, trailing spaces trimmed.
    pub fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|i| {
                self.rows
                    .iter()
                    .filter_map(|row| row.get(i))
                    .map(|cell| cell.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (cell, width) in row.iter().zip(&widths) {
                line.push_str(cell);
                let pad = width - cell.chars().count() + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_pick_a_readable_unit() {
        assert_eq!(duration_ms(-5), "0ms");
        assert_eq!(duration_ms(850), "850ms");
        assert_eq!(duration_ms(4_249), "4.2s");
        assert_eq!(duration_ms(185_000), "3m05s");
        assert_eq!(duration_ms(7_620_000), "2h07m");
        assert_eq!(duration_ms(273_600_000), "3d04h");
    }

    #[test]
    fn flat_puts_text_on_one_line() {
        assert_eq!(flat("exit 3"), "exit 3");
        assert_eq!(flat("a\nb\tc\r\n"), "a b c  ");
    }

    #[test]
    fn table_cells_are_flattened() {
        let mut table = Table::new(&["JOB", "PAUSE"]);
        table.row(vec!["a".into(), "db\nmigration \u{1b}[31mred\r".into()]);
        assert_eq!(table.render(), "JOB  PAUSE\na    db migration  [31mred\n");
    }

    #[test]
    fn table_aligns_columns_under_their_headers() {
        let mut table = Table::new(&["JOB", "NODE"]);
        table.row(vec!["nightly-report".into(), "web-2".into()]);
        table.row(vec!["x".into(), "web-10".into()]);
        assert_eq!(
            table.render(),
            "JOB             NODE\nnightly-report  web-2\nx               web-10\n"
        );
    }
}
