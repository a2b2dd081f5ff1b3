//! Field-by-field explanations of a cron expression croner refused.
//!
//! croner says "Number out of bounds" for `0 25 * * *` without naming the
//! field or its range, so when it refuses a pattern we walk the fields
//! ourselves and name the first part we can explain: the field, the part
//! as written and what the field accepts ("hour `25` is out of range
//! 0–23"). This is only ever asked after croner refused the pattern, so it
//! can never make us stricter than croner; when it finds nothing to say,
//! croner's own message is used.

/// What one position of the expression accepts.
struct Field {
    name: &'static str,
    min: u16,
    max: u16,
    /// `JAN`–`DEC` or `SUN`–`SAT`, with the number each stands for.
    names: &'static [(&'static str, u16)],
    /// `L`, `nW`, `LW` (day of month).
    day_of_month: bool,
    /// `L`, `nL`, `n#k` (day of week).
    day_of_week: bool,
}

const MONTHS: &[(&str, u16)] = &[
    ("JAN", 1),
    ("FEB", 2),
    ("MAR", 3),
    ("APR", 4),
    ("MAY", 5),
    ("JUN", 6),
    ("JUL", 7),
    ("AUG", 8),
    ("SEP", 9),
    ("OCT", 10),
    ("NOV", 11),
    ("DEC", 12),
];
const DAYS: &[(&str, u16)] = &[
    ("SUN", 0),
    ("MON", 1),
    ("TUE", 2),
    ("WED", 3),
    ("THU", 4),
    ("FRI", 5),
    ("SAT", 6),
];

const fn field(name: &'static str, min: u16, max: u16) -> Field {
    Field {
        name,
        min,
        max,
        names: &[],
        day_of_month: false,
        day_of_week: false,
    }
}

const SECOND: Field = field("second", 0, 59);
const MINUTE: Field = field("minute", 0, 59);
const HOUR: Field = field("hour", 0, 23);
const DAY_OF_MONTH: Field = Field {
    day_of_month: true,
    ..field("day-of-month", 1, 31)
};
const MONTH: Field = Field {
    names: MONTHS,
    ..field("month", 1, 12)
};
const DAY_OF_WEEK: Field = Field {
    names: DAYS,
    day_of_week: true,
    ..field("day-of-week", 0, 7)
};

/// The first problem found in a 5- or 6-field `pattern`, as the rest of
/// "invalid cron expression `…`: ", or `None` when none is recognised.
pub(super) fn explain(pattern: &str) -> Option<String> {
    let parts: Vec<&str> = pattern.split_whitespace().collect();
    let fields: &[Field] = match parts.len() {
        5 => &[MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK],
        6 => &[SECOND, MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK],
        _ => return None,
    };
    fields
        .iter()
        .zip(parts)
        .find_map(|(field, written)| check_field(field, written).err())
}

/// A problem: the text at fault (a part of the field or a value in it)
/// and what completes "`TEXT` …".
type Problem = (String, String);

/// `Err` names the field, the text at fault and what to write instead.
fn check_field(field: &Field, written: &str) -> Result<(), String> {
    for part in written.split(',').filter(|part| !part.is_empty()) {
        check_part(field, part).map_err(|(at_fault, reason)| {
            let name = field.name;
            // An empty value (`1-`) is shown as the part it is missing from.
            let at_fault = if at_fault.is_empty() {
                part.to_string()
            } else {
                at_fault
            };
            if at_fault == written {
                format!("{name} `{at_fault}` {reason}")
            } else {
                format!("{name} `{written}`: `{at_fault}` {reason}")
            }
        })?;
    }
    Ok(())
}

fn check_part(field: &Field, part: &str) -> Result<(), Problem> {
    let upper = part.to_ascii_uppercase();
    let problem = |reason: String| (part.to_string(), reason);
    let dom_or_dow = field.day_of_month || field.day_of_week;
    if upper == "*" || (upper == "?" && dom_or_dow) || (upper == "L" && dom_or_dow) {
        return Ok(());
    }
    if upper == "?" {
        return Err(problem(
            "(any) is allowed only in day-of-month and day-of-week; write `*`".to_string(),
        ));
    }
    if upper == "L" {
        return Err(problem(only_in("(last)", "day-of-month and day-of-week")));
    }
    if let Some((base, step)) = part.split_once('/') {
        return check_step(field, part, base, step);
    }
    if let Some(day) = strip_suffix_ignore_case(part, 'W') {
        if !field.day_of_month {
            return Err(problem(only_in("(nearest weekday)", "day-of-month")));
        }
        return if day.eq_ignore_ascii_case("L") {
            Ok(())
        } else {
            value(field, day).map(drop)
        };
    }
    if let Some(day) = strip_suffix_ignore_case(part, 'L') {
        if !field.day_of_week {
            return Err(problem(only_in(
                "(last such weekday of the month)",
                "day-of-week",
            )));
        }
        return value(field, day).map(drop);
    }
    if let Some((day, nth)) = part.split_once('#') {
        if !field.day_of_week {
            return Err(problem(only_in(
                "(nth weekday of the month)",
                "day-of-week",
            )));
        }
        match day.split_once('-') {
            Some((start, end)) => range(field, day, start, end).map(drop)?,
            None => value(field, day).map(drop)?,
        }
        return match nth.parse::<u8>() {
            Ok(1..=5) => Ok(()),
            _ => Err(problem(format!(
                "has week `{nth}`: the number after `#` is 1–5 (the first to fifth such day of the month)"
            ))),
        };
    }
    if let Some((start, end)) = part.split_once('-') {
        return range(field, part, start, end).map(drop);
    }
    value(field, part).map(drop)
}

fn strip_suffix_ignore_case(part: &str, suffix: char) -> Option<&str> {
    part.strip_suffix(suffix)
        .or_else(|| part.strip_suffix(suffix.to_ascii_lowercase()))
}

fn only_in(what: &str, fields: &str) -> String {
    format!("{what} is allowed only in {fields}")
}

/// `BASE/STEP`: the base is `*`, a range, or one value (`5/15`, read as
/// `5-MAX/15`).
fn check_step(field: &Field, part: &str, base: &str, step: &str) -> Result<(), Problem> {
    let problem = |reason: String| (part.to_string(), reason);
    match step.parse::<u16>() {
        Ok(0) => return Err(problem("has a step of 0; a step is at least 1".to_string())),
        Ok(_) => {}
        Err(_) => {
            return Err(problem(format!(
                "has step `{step}`, which is not a number; write it like `*/5`"
            )));
        }
    }
    if base == "*" {
        return Ok(());
    }
    if let Some((start, end)) = base.split_once('-') {
        return range(field, base, start, end).map(drop);
    }
    if base.is_empty() {
        return Err(problem(format!(
            "needs `*`, a value or a range before the `/`: write `*/{step}`"
        )));
    }
    value(field, base).map(drop)
}

/// `START-END`, both in range and not backwards; `written` is the range
/// as written.
fn range(field: &Field, written: &str, start: &str, end: &str) -> Result<(u16, u16), Problem> {
    let (from, to) = (value(field, start)?, value(field, end)?);
    if from > to {
        let (min, max) = (field.min, field.max);
        return Err((
            written.to_string(),
            format!("runs backwards; ranges do not wrap around: write `{start}-{max},{min}-{end}`"),
        ));
    }
    Ok((from, to))
}

/// One number or name of the field, within its range.
fn value(field: &Field, written: &str) -> Result<u16, Problem> {
    let (min, max) = (field.min, field.max);
    let accepted = match (field.names.first(), field.names.last()) {
        (Some((first, _)), Some((last, _))) => format!("{min}–{max} or {first}–{last}"),
        _ => format!("{min}–{max}"),
    };
    let problem = |at_fault: &str, reason: String| Err((at_fault.to_string(), reason));
    if written.is_empty() {
        return problem(written, format!("is missing a value: use {accepted}"));
    }
    if written.chars().all(|c| c.is_ascii_digit()) {
        let sunday = if field.day_of_week {
            " (0 and 7 are Sunday)"
        } else {
            ""
        };
        return match written.parse::<u16>() {
            Ok(number) if (min..=max).contains(&number) => Ok(number),
            _ => problem(written, format!("is out of range {accepted}{sunday}")),
        };
    }
    if let Some((_, number)) = field
        .names
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(written))
    {
        return Ok(*number);
    }
    let what = if field.names.is_empty() {
        "a number"
    } else {
        "a number or a name"
    };
    problem(written, format!("is not {what}: use {accepted}"))
}

#[cfg(test)]
mod tests {
    use super::explain;

    fn check(cases: &[(&str, &str)]) {
        for (pattern, want) in cases {
            assert_eq!(explain(pattern).as_deref(), Some(*want), "{pattern}");
        }
    }

    #[test]
    fn a_value_out_of_range_names_its_field_and_the_range() {
        check(&[
            ("0 25 * * *", "hour `25` is out of range 0–23"),
            ("61 * * * *", "minute `61` is out of range 0–59"),
            ("0 0 32 * *", "day-of-month `32` is out of range 1–31"),
            ("0 0 0 * *", "day-of-month `0` is out of range 1–31"),
            ("0 0 * 13 *", "month `13` is out of range 1–12 or JAN–DEC"),
            (
                "0 0 * * 8",
                "day-of-week `8` is out of range 0–7 or SUN–SAT (0 and 7 are Sunday)",
            ),
            ("60 0 0 * * *", "second `60` is out of range 0–59"),
            ("0 60 0 * * *", "minute `60` is out of range 0–59"),
            ("0 99999999 * * *", "hour `99999999` is out of range 0–23"),
        ]);
    }

    #[test]
    fn lists_ranges_and_steps_point_at_the_bad_value() {
        check(&[
            ("0 1,25 * * *", "hour `1,25`: `25` is out of range 0–23"),
            ("0 20-25 * * *", "hour `20-25`: `25` is out of range 0–23"),
            (
                "0 22-2 * * *",
                "hour `22-2` runs backwards; ranges do not wrap around: write `22-23,0-2`",
            ),
            (
                "*/0 * * * *",
                "minute `*/0` has a step of 0; a step is at least 1",
            ),
            (
                "*/x * * * *",
                "minute `*/x` has step `x`, which is not a number; write it like `*/5`",
            ),
            (
                "0-70/5 * * * *",
                "minute `0-70/5`: `70` is out of range 0–59",
            ),
            ("70/10 * * * *", "minute `70/10`: `70` is out of range 0–59"),
            (
                "/10 * * * *",
                "minute `/10` needs `*`, a value or a range before the `/`: write `*/10`",
            ),
            ("0 1- * * *", "hour `1-` is missing a value: use 0–23"),
        ]);
    }

    #[test]
    fn names_are_checked_in_their_fields() {
        check(&[
            (
                "0 12 * * mon-fry",
                "day-of-week `mon-fry`: `fry` is not a number or a name: use 0–7 or SUN–SAT",
            ),
            (
                "0 0 1 JANUARY *",
                "month `JANUARY` is not a number or a name: use 1–12 or JAN–DEC",
            ),
            (
                "0 0 1 DEC-JAN *",
                "month `DEC-JAN` runs backwards; ranges do not wrap around: write `DEC-12,1-JAN`",
            ),
            ("0 noon * * *", "hour `noon` is not a number: use 0–23"),
        ]);
    }

    #[test]
    fn l_w_and_hash_belong_to_the_day_fields() {
        check(&[
            (
                "0 L * * *",
                "hour `L` (last) is allowed only in day-of-month and day-of-week",
            ),
            (
                "0 0 15W 5W *",
                "month `5W` (nearest weekday) is allowed only in day-of-month",
            ),
            (
                "0 0 32W * *",
                "day-of-month `32W`: `32` is out of range 1–31",
            ),
            (
                "0 0 5L * *",
                "day-of-month `5L` (last such weekday of the month) is allowed only in day-of-week",
            ),
            (
                "0 0 * * 9L",
                "day-of-week `9L`: `9` is out of range 0–7 or SUN–SAT (0 and 7 are Sunday)",
            ),
            (
                "0 0 1#2 * *",
                "day-of-month `1#2` (nth weekday of the month) is allowed only in day-of-week",
            ),
            (
                "0 0 * * MON#6",
                "day-of-week `MON#6` has week `6`: the number after `#` is 1–5 (the first to fifth such day of the month)",
            ),
            (
                "0 0 * * 8#1",
                "day-of-week `8#1`: `8` is out of range 0–7 or SUN–SAT (0 and 7 are Sunday)",
            ),
            (
                "0 ? * * *",
                "hour `?` (any) is allowed only in day-of-month and day-of-week; write `*`",
            ),
        ]);
    }

    #[test]
    fn valid_fields_are_not_explained() {
        for pattern in [
            "0 2 * * *",
            "*/15 0-23/2 L * MON-FRI",
            "0 0 LW JAN,DEC 5L",
            "0 0 15W * SUN#1",
            "0 0 ? * ?",
            "0 0 0 1 1 7",
            "1,,2 * * * *",
        ] {
            assert_eq!(explain(pattern), None, "{pattern}");
        }
    }
}
