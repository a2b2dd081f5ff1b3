//! A cron line read as cron reads it (Vixie cron, cronie, `crontab(5)`),
//! turned into the text and the day rule croner is given.
//!
//! Two rules differ from croner's defaults and are applied here:
//! - `N/S` is `N-MAX/S` (`5/15` in the minute field is `5-59/15`; the
//!   day-of-week maximum is 7, Sunday, as in cronie). croner refuses it.
//! - Day of month and day of week: when both are restricted, a day that
//!   matches *either* runs; a field that starts with `*` (or `?`) is
//!   unrestricted, and then a day must match both (`0 0 */2 * 1` is the
//!   odd days that are Mondays). croner counts only a bare `*` as
//!   unrestricted, so its `dom_and_dow` switch is chosen per expression
//!   ([`days_match_either`]).
//!
//! Both take a 5- or 6-field pattern (macros already expanded) and never
//! fail: what they cannot read is passed on unchanged for croner to refuse.

/// The largest value of each field of a 6-field pattern (seconds first);
/// a 5-field pattern uses the last five.
const MAX: [u16; 6] = [59, 59, 23, 31, 12, 7];

/// `pattern` with every `N/S` part written `N-MAX/S`.
pub(super) fn with_open_steps(pattern: &str) -> String {
    let fields: Vec<&str> = pattern.split_whitespace().collect();
    let maxima = &MAX[MAX.len().saturating_sub(fields.len())..];
    fields
        .iter()
        .zip(maxima)
        .map(|(field, max)| {
            field
                .split(',')
                .map(|part| open_step(part, *max))
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `N/S` -> `N-MAX/S`; any other part as it is.
fn open_step(part: &str, max: u16) -> String {
    match part.split_once('/') {
        Some((start, step))
            if !start.is_empty() && start.chars().all(|c| c.is_ascii_alphanumeric()) =>
        {
            format!("{start}-{max}/{step}")
        }
        _ => part.to_string(),
    }
}

/// Whether a day matching either day field runs: both are restricted (do
/// not start with `*` or `?`). Otherwise a day must match both.
pub fn days_match_either(pattern: &str) -> bool {
    let fields: Vec<&str> = pattern.split_whitespace().collect();
    let (day_of_month, day_of_week) = match fields.as_slice() {
        [_, _, dom, _, dow] | [_, _, _, dom, _, dow] => (*dom, *dow),
        _ => return false,
    };
    let restricted = |field: &str| !field.starts_with(['*', '?']);
    restricted(day_of_month) && restricted(day_of_week)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_start_steps_to_the_end_of_its_field() {
        assert_eq!(with_open_steps("5/15 * * * *"), "5-59/15 * * * *");
        assert_eq!(with_open_steps("0 5/15 * * * *"), "0 5-59/15 * * * *");
        assert_eq!(
            with_open_steps("0 3/6 2/10 */2 MON/2"),
            "0 3-23/6 2-31/10 */2 MON-7/2"
        );
        assert_eq!(
            with_open_steps("1,10/20 * * 2/3 *"),
            "1,10-59/20 * * 2-12/3 *"
        );
        // What is not `N/S` stays as written, for croner to read or refuse.
        assert_eq!(with_open_steps("*/5 1-5/2 /3 * *"), "*/5 1-5/2 /3 * *");
    }

    #[test]
    fn days_match_either_only_when_both_day_fields_are_restricted() {
        assert!(days_match_either("0 0 1-7 * 1"));
        assert!(days_match_either("0 0 0 1,15 * MON-FRI"));
        assert!(days_match_either("0 0 L * 5L"));
        assert!(!days_match_either("0 0 */2 * 1"));
        assert!(!days_match_either("0 0 1 * *"));
        assert!(!days_match_either("0 0 * * 1"));
        assert!(!days_match_either("0 0 ? * 1"));
        assert!(!days_match_either("0 0 1 * *,1"));
        assert!(!days_match_either("0 0 0 * * *"));
    }
}
