//! Cron expression + IANA time zone -> UTC occurrences.
//!
//! A pure function of its input: [`Schedule::next_after`] never looks at the
//! machine clock, so every node computes the same occurrences from the same
//! `after`. Expressions have 5 fields, 6 fields (seconds first) or are one of
//! `@hourly @daily @weekly @monthly @yearly` (`@annually`, `@midnight` too);
//! a 7th (year) field is refused.
//!
//! croner 4.0.3 does the calendar walk. Time zones follow Vixie cron's DST
//! rule (a step counts as a wildcard), tested on real tzdata dates. A
//! pattern is *fixed-time* when its second, minute and hour fields hold
//! only values, lists and ranges (`30 2 * * *`, `0 2,14 * * *`,
//! `30 1-3 * * *`, `0 0,30 2 * * *`, `@daily`): every wall time it
//! schedules that falls into a spring-forward gap runs at the first instant
//! after the gap (all those of one gap, and the wall time just after it if
//! scheduled too, make one run), and a wall time in a fall-back repeated
//! range runs once, in the first pass. A wildcard or a step in any of those
//! three fields (`*`, `*/15`, `0-30/10`; `@hourly` is `0 * * * *`) makes an
//! *interval* pattern, which follows real elapsed time: nothing runs for
//! the gap's wall times, and the repeated range runs in both passes
//! (`*/30 2 * * *` runs at 02:00 and 02:30 twice on Berlin's fall-back
//! night, and not at all on its spring-forward night).
//!
//! croner reads only one value in each of the three fields as fixed-time
//! (also one value stepped by 1, `2-2/1`, which therefore stays fixed-time)
//! and places those occurrences itself; lists and ranges it reads as
//! interval patterns. For those ([`Form`]) croner walks the wall clock
//! alone, where nothing is missing or repeated, and we place each wall time
//! it finds ([`next_fixed`], [`previous_fixed`]), at the cost of croner's
//! own walk in the zone. Fields read as cron reads them ([`dialect`]):
//! `N/S` is `N-MAX/S`, and a day matching *either* day field runs only
//! when both are restricted (neither starts with `*`).
//!
//! croner's parsed form keeps a byte per year up to 5000 (about 7 KB per
//! expression), too much to keep one per job. So a [`Schedule`] does not
//! keep it. It keeps the expression's text and
//! the next occurrence it last computed ([`Hint`]); the parsed forms live
//! in a cache ([`parsed`]): shared by pattern while anything holds them,
//! and the [`RECENT`] most recently used ones held besides, so that the
//! patterns that fire often are not parsed again at every occurrence (a
//! large load keeps none of its own there, [`LOADING`]). A pattern that
//! fell out of the cache is parsed again (~20 µs) when its next occurrence
//! is computed: once per occurrence of a rarely firing job, which is
//! nothing next to the run. The config loader parses every distinct
//! pattern once, on all cores ([`parse_in_parallel`]), whose threads also
//! find its first occurrence in each zone a job reads it in and drop the
//! parsed form at once; the loader's jobs take those answers while it
//! builds them, so neither start-up nor the timetable parses or searches
//! anything twice. Whether a pattern can fire at all is that same
//! search's answer ([`Schedule::parse`]). croner is given the years
//! 1970–2199 ([`YEARS`]) rather than all of them, which makes parsing
//! ~10× faster; no occurrence after 2199 is computed.
//!
//! croner's messages name neither the field nor its range ("Number out of
//! bounds"); when it refuses a pattern, `fields` explains the first bad
//! field instead ("hour `25` is out of range 0–23").

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

use chrono::{DateTime, LocalResult, NaiveDateTime, SubsecRound, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::{Cron, JobType};

/// Why an expression was refused. Messages are lowercase and name the
/// expression, so the config loader can prefix file, line and key.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// Not a 5-field, 6-field or `@macro` cron expression.
    #[error("invalid cron expression `{expr}`: {reason}")]
    Invalid { expr: String, reason: String },
    /// Well-formed, but no date ever matches (`0 0 30 2 *`).
    #[error("schedule `{expr}` never fires")]
    NeverFires { expr: String },
}

/// A job's schedule: the expression as written, its zone, and the next
/// occurrence last computed. The pattern croner parses is derived from the
/// expression when needed ([`Schedule::pattern`]) rather than kept: it is
/// the same text but for a macro, and 10,000 jobs would keep 10,000 copies.
#[derive(Clone)]
pub struct Schedule {
    expr: Box<str>,
    tz: Tz,
    hint: Option<Hint>,
}

/// A parsed pattern: croner's form, and whether we place its occurrences
/// ourselves ([`next_fixed`], [`previous_fixed`]).
struct Form {
    cron: Cron,
    /// Fixed-time by our rule (no `*` and no step in the second, minute or
    /// hour field) but not by croner's (one value in each): a list or a
    /// range, like `0 2,14 * * *`. croner would read it as an interval
    /// pattern, so it only walks its wall clock ([`wall_after`]) and we
    /// place each wall time found on the time line ([`fixed_instant`]).
    fixed_by_us: bool,
}

impl Form {
    fn new(cron: Cron) -> Form {
        let fixed_by_us =
            is_fixed_time(cron.pattern.as_str()) && cron.determine_job_type() != JobType::FixedTime;
        Form { cron, fixed_by_us }
    }
}

/// Whether `pattern` (croner's 7-field text) is fixed-time: its second,
/// minute and hour fields have no wildcard (`*`, `*/n`; `?`, which croner
/// refuses there) and no step (`a-b/n`), only values, lists and ranges.
fn is_fixed_time(pattern: &str) -> bool {
    pattern
        .split_whitespace()
        .take(3)
        .all(|field| !field.contains(['*', '?', '/']))
}

/// The first occurrence after `start` (whole seconds) of `form` read in `tz`.
fn next_in(form: &Form, tz: Tz, start: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if form.fixed_by_us
        && let Ok(found) = next_fixed(&form.cron, tz, start)
    {
        return found;
    }
    form.cron
        .find_next_occurrence(&start.with_timezone(&tz), false)
        .ok()
        .map(|at| at.with_timezone(&Utc))
}

/// The last occurrence of `form` read in `tz` before `before` (whole
/// seconds), or at it if `inclusive`.
fn previous_in(
    form: &Form,
    tz: Tz,
    before: DateTime<Utc>,
    inclusive: bool,
) -> Option<DateTime<Utc>> {
    if form.fixed_by_us
        && let Ok(found) = previous_fixed(&form.cron, tz, before, inclusive)
    {
        return found;
    }
    form.cron
        .find_previous_occurrence(&before.with_timezone(&tz), inclusive)
        .ok()
        .map(|at| at.with_timezone(&Utc))
}

/// A zone whose transitions are not what tzdata has ever had (a gap of
/// more than a day, a repeated range that does not end): the search falls
/// back to croner's reading of the pattern.
struct Irregular;

/// [`next_in`] for a pattern that is fixed-time by our rule only: the
/// first wall time the pattern schedules after `start`'s, placed by the
/// fixed-time rule ([`fixed_instant`]). So placed, a later wall time never
/// comes at an earlier instant (a gap's wall times all come at its end, a
/// repeated range's at its first pass), so the first wall time placed
/// after `start` is the answer: in the common case one search of the wall
/// clock and two offset lookups, as cheap as croner's own walk in `tz`.
fn next_fixed(
    cron: &Cron,
    tz: Tz,
    start: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, Irregular> {
    let wall = start.with_timezone(&tz).naive_local();
    let Some(first) = wall_after(cron, wall, false) else {
        return Ok(None);
    };
    let at = fixed_instant(tz, first)?;
    if at > start {
        return Ok(Some(at));
    }
    // `start` is in the second pass of a repeated range, and so is `first`:
    // its run, in the first pass, is behind. The next run is the first
    // wall time the pattern schedules from the end of the range on.
    let end = repeated_range_end(tz, first)?;
    let Some(next) = wall_after(cron, end, true) else {
        return Ok(None);
    };
    match fixed_instant(tz, next)? {
        at if at > start => Ok(Some(at)),
        _ => Err(Irregular),
    }
}

/// [`previous_in`] for a pattern that is fixed-time by our rule only: the
/// last wall time the pattern schedules whose placed instant
/// ([`fixed_instant`]) is before `before` (or at it if `inclusive`).
fn previous_fixed(
    cron: &Cron,
    tz: Tz,
    before: DateTime<Utc>,
    inclusive: bool,
) -> Result<Option<DateTime<Utc>>, Irregular> {
    let bound = if inclusive {
        before
            .checked_add_signed(TimeDelta::seconds(1))
            .ok_or(Irregular)?
    } else {
        before
    };
    let wall = bound.with_timezone(&tz).naive_local();
    // From the second pass of a repeated range, every wall time of the range
    // is behind (its run was in the first pass): search from its end.
    let mut from = match tz.from_local_datetime(&wall) {
        LocalResult::Ambiguous(_, later) if later == bound => repeated_range_end(tz, wall)?,
        _ => wall,
    };
    // Twice at most: once more when `bound` ends a gap the pattern
    // schedules a wall time in (that run is at `bound`, not before it).
    for _ in 0..2 {
        let Some(last) = wall_before(cron, from) else {
            return Ok(None);
        };
        let at = fixed_instant(tz, last)?;
        if at < bound {
            return Ok(Some(at));
        }
        // The gap starts at the wall time just after the last second before it.
        let last_before_gap = at
            .checked_sub_signed(TimeDelta::seconds(1))
            .ok_or(Irregular)?;
        from = last_before_gap
            .with_timezone(&tz)
            .naive_local()
            .checked_add_signed(TimeDelta::seconds(1))
            .ok_or(Irregular)?;
    }
    Err(Irregular)
}

/// The first wall time after `wall` (or at it, if `inclusive`) that `cron`
/// schedules: croner's walk on the wall clock alone, where no time is
/// missing or repeated. `None` if there is none up to the end of [`YEARS`].
fn wall_after(cron: &Cron, wall: NaiveDateTime, inclusive: bool) -> Option<NaiveDateTime> {
    cron.find_next_occurrence(&wall, inclusive).ok()
}

/// The last wall time before `wall` that `cron` schedules.
fn wall_before(cron: &Cron, wall: NaiveDateTime) -> Option<NaiveDateTime> {
    cron.find_previous_occurrence(&wall, false).ok()
}

/// Where a fixed-time pattern runs for the wall time `wall` in `tz`: at
/// its instant; at the first of its two instants in a repeated range; at
/// the first instant after the gap if the clock skips it.
fn fixed_instant(tz: Tz, wall: NaiveDateTime) -> Result<DateTime<Utc>, Irregular> {
    let resolve = |wall: NaiveDateTime| {
        tz.from_local_datetime(&wall)
            .earliest()
            .map(|at| at.with_timezone(&Utc))
    };
    if let Some(at) = resolve(wall) {
        return Ok(at);
    }
    // Gaps last two hours at most (Antarctica/Troll), but once a whole day
    // (Pacific/Apia, 30 December 2011).
    let after = wall
        .checked_add_signed(TimeDelta::days(1))
        .ok_or(Irregular)?;
    first_wall(wall, after, resolve).ok_or(Irregular)
}

/// The first wall time after the repeated range `wall` is in: the range
/// repeats as long as its two instants are apart.
fn repeated_range_end(tz: Tz, wall: NaiveDateTime) -> Result<NaiveDateTime, Irregular> {
    let LocalResult::Ambiguous(earlier, later) = tz.from_local_datetime(&wall) else {
        return Err(Irregular);
    };
    let after = wall.checked_add_signed(later - earlier).ok_or(Irregular)?;
    first_wall(wall, after, |wall| {
        match tz.offset_from_local_datetime(&wall) {
            LocalResult::Ambiguous(..) => None,
            _ => Some(wall),
        }
    })
    .ok_or(Irregular)
}

/// What `found` answers for the first wall time in `(after, until]` it
/// answers for, found by halving to the second: it must answer nothing
/// from `after` up to some wall time and something from there to `until`
/// (the end of a gap, or of a repeated range). `None` if it answers
/// nothing at `until`.
fn first_wall<T>(
    after: NaiveDateTime,
    until: NaiveDateTime,
    found: impl Fn(NaiveDateTime) -> Option<T>,
) -> Option<T> {
    let mut answer = found(until)?;
    let (mut low, mut high) = (after, until);
    loop {
        let half = (high - low).num_seconds() / 2;
        if half == 0 {
            return Some(answer);
        }
        let middle = low.checked_add_signed(TimeDelta::seconds(half))?;
        match found(middle) {
            Some(at) => (high, answer) = (middle, at),
            None => low = middle,
        }
    }
}

/// The [`Hint`] of `form` in `tz` at `now` (whole seconds): the next
/// occurrence, reaching [`HINT_LOOKBACK`] back when none fell in that time.
fn hint_at(form: &Form, tz: Tz, now: DateTime<Utc>) -> Option<Hint> {
    let early = now - HINT_LOOKBACK;
    if let Some(next) = next_in(form, tz, early).filter(|next| *next > now) {
        return Some(Hint { after: early, next });
    }
    next_in(form, tz, now).map(|next| Hint { after: now, next })
}

/// What the loader's threads found ([`parse_in_parallel`]) while a
/// [`Warm`] is alive: by pattern, for each zone a job reads it in, the
/// [`Hint`] at load time, or `None` if it never fires. The loader's own
/// parse of each job takes its answer from here and neither parses nor
/// searches again (parsing was most of a 10,000-job load).
static WARM_HINTS: LazyLock<Mutex<HashMap<String, Vec<ZoneHint>>>> = LazyLock::new(Mutex::default);

/// A zone and the pattern's [`Hint`] in it (`None`: it never fires).
type ZoneHint = (Tz, Option<Hint>);

/// [`Warm`]s alive: the last one dropped forgets [`WARM_HINTS`].
static WARMS: AtomicUsize = AtomicUsize::new(0);

/// What the loader's threads found for `pattern` read in `tz`, if it
/// still answers at `now`: `Some(Some(hint))`, or `Some(None)` for a
/// pattern that never fires; `None` when they found nothing to say.
fn warm_verdict(pattern: &str, tz: Tz, now: DateTime<Utc>) -> Option<Option<Hint>> {
    let hints = lock(&WARM_HINTS);
    let (_, verdict) = hints.get(pattern)?.iter().find(|(zone, _)| *zone == tz)?;
    match verdict {
        Some(hint) if hint.after <= now && now < hint.next => Some(Some(*hint)),
        Some(_) => None,
        None => Some(None),
    }
}

/// How far back a [`Hint`] reaches when no occurrence fell in it.
const HINT_LOOKBACK: TimeDelta = TimeDelta::hours(1);

/// `next` is the first occurrence strictly after `after` (both whole
/// seconds): it answers [`Schedule::next_after`] for every instant in
/// `[after, next)` without the parsed form.
#[derive(Clone, Copy)]
struct Hint {
    after: DateTime<Utc>,
    next: DateTime<Utc>,
}

impl Schedule {
    /// Parses a 5-field, 6-field (seconds first) or `@macro` expression read
    /// in `tz`.
    ///
    /// `Err(NeverFires)` when no date can ever match: found by the search
    /// for the next occurrence that the schedule keeps anyway ([`Hint`]),
    /// which finds none up to the end of [`YEARS`] (patterns have no year
    /// field, so what fires once fires at least every 28 years).
    pub fn parse(expr: &str, tz: Tz) -> Result<Schedule, ScheduleError> {
        let trimmed = expr.trim();
        let invalid = |reason: String| ScheduleError::Invalid {
            expr: expr.to_string(),
            reason,
        };
        let pattern = expand_macro(trimmed).map_err(invalid)?;
        let mut schedule = Schedule {
            expr: Box::from(expr),
            tz,
            hint: None,
        };
        schedule.hint = match warm_verdict(pattern, tz, Utc::now().trunc_subsecs(0)) {
            Some(verdict) => verdict,
            None => {
                let form = parsed(pattern).map_err(|Invalid(reason)| invalid(reason))?;
                schedule.hint_now(&form)
            }
        };
        if schedule.hint.is_none() {
            return Err(ScheduleError::NeverFires {
                expr: expr.to_string(),
            });
        }
        Ok(schedule)
    }

    /// The same expression read in another zone (a cron line means the
    /// same wall clock times in every zone).
    pub fn with_timezone(&self, tz: Tz) -> Schedule {
        if tz == self.tz {
            // Same zone, same occurrences: keep the hint (no new search).
            return self.clone();
        }
        let mut schedule = Schedule {
            tz,
            hint: None,
            ..self.clone()
        };
        if let Some(verdict) = warm_verdict(schedule.pattern(), tz, Utc::now().trunc_subsecs(0)) {
            schedule.hint = verdict;
        } else if let Ok(form) = parsed(schedule.pattern()) {
            schedule.hint = schedule.hint_now(&form);
        }
        schedule
    }

    /// The expression as written.
    pub fn expression(&self) -> &str {
        &self.expr
    }

    /// The expanded pattern (macros replaced), the key of [`parsed`]. The
    /// expression was checked when the schedule was made, so this cannot
    /// fail; if it did, the empty pattern parses to no occurrence.
    fn pattern(&self) -> &str {
        expand_macro(self.expr.trim()).unwrap_or_default()
    }

    /// Whether both day fields are restricted, so that a day matching
    /// either runs (`0 0 1-7 * 1`: the 1st to the 7th and every Monday).
    pub fn days_match_either(&self) -> bool {
        dialect::days_match_either(self.pattern())
    }

    /// The zone the expression is read in.
    pub fn timezone(&self) -> Tz {
        self.tz
    }

    /// The first occurrence strictly after `after`, `None` if there is none
    /// up to the end of 2199 ([`YEARS`]).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Occurrences fall on whole seconds, so the first one after the
        // truncated instant is also the first one after `after` itself.
        let start = after.trunc_subsecs(0);
        if let Some(hint) = self.hint
            && hint.after <= start
            && start < hint.next
        {
            return Some(hint.next);
        }
        // The pattern was valid when the schedule was made; parsing it
        // again cannot fail (and if it did, there is no occurrence).
        let form = parsed(self.pattern()).ok()?;
        self.next_with(&form, start)
    }

    /// The first `count` occurrences strictly after `after` (fewer when
    /// the schedule ends first), looking the parsed form up once.
    pub fn occurrences_after(&self, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        let mut found = Vec::with_capacity(count);
        let Some(first) = self.next_after(after) else {
            return found;
        };
        found.push(first);
        if count < 2 {
            return found;
        }
        let Ok(form) = parsed(self.pattern()) else {
            return found;
        };
        while found.len() < count {
            match found.last().and_then(|last| self.next_with(&form, *last)) {
                Some(next) => found.push(next),
                None => break,
            }
        }
        found
    }

    fn next_with(&self, form: &Form, start: DateTime<Utc>) -> Option<DateTime<Utc>> {
        next_in(form, self.tz, start)
    }

    /// The next occurrence from now, while the parsed form is at hand;
    /// when none fell in the last [`HINT_LOOKBACK`], the hint covers that
    /// too, so that a daemon looking for occurrences it missed at start
    /// (`starting_deadline`, one minute by default) does not parse the
    /// pattern again for a job that rarely fires.
    fn hint_now(&self, form: &Form) -> Option<Hint> {
        hint_at(form, self.tz, Utc::now().trunc_subsecs(0))
    }

    /// The last occurrence strictly before `before`, `None` if there is
    /// none from 1970 on ([`YEARS`]).
    pub fn previous_before(&self, before: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // An occurrence on the truncated second is before `before` itself
        // when `before` has a fraction of a second.
        let inclusive = before.timestamp_subsec_nanos() > 0;
        let form = parsed(self.pattern()).ok()?;
        previous_in(&form, self.tz, before.trunc_subsecs(0), inclusive)
    }

    /// The shortest interval between two consecutive occurrences after
    /// `from`, among the first [`WALKED`] intervals or those that end
    /// within `span` of the first occurrence, whichever are fewer (at least
    /// two); `None` if the schedule has fewer than two occurrences left. A
    /// pattern's own rhythm (`*/7` minutes wrapping at the hour, weekdays,
    /// the days of a list) shows within a week; what the walk does not see
    /// is an interval that only a DST change or a rare date makes shorter,
    /// further out. It ends early at an interval of 1 s, the shortest there
    /// is; [`Schedule::interval_floor`] says without a search when it is
    /// not worth making.
    pub fn shortest_interval(&self, from: DateTime<Utc>, span: Duration) -> Option<Duration> {
        let cron = parsed(self.pattern()).ok()?;
        let first = self.next_after(from)?;
        let end = TimeDelta::from_std(span)
            .ok()
            .and_then(|span| first.checked_add_signed(span))
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        let (mut at, mut shortest) = (first, None::<TimeDelta>);
        for walked in 0..WALKED {
            if walked >= 2 && at >= end {
                break;
            }
            let Some(next) = self.next_with(&cron, at) else {
                break;
            };
            let interval = next - at;
            shortest = Some(shortest.map_or(interval, |known| known.min(interval)));
            if interval <= TimeDelta::seconds(1) {
                break;
            }
            at = next;
        }
        shortest.and_then(|shortest| shortest.to_std().ok())
    }

    /// A lower bound of the interval between two consecutive occurrences,
    /// read from the pattern alone: 1 s, unless the second is one value (a
    /// 5-field expression's is 0): then 1 min, or 30 min when the minute is
    /// one value too (an hour, less a half-hour DST change), or 22 h when
    /// the hour is too (a day, less a DST change).
    pub fn interval_floor(&self) -> Duration {
        let fields: Vec<&str> = self.pattern().split_whitespace().collect();
        let (second, rest) = match fields.len() {
            5 => ("0", &fields[..]),
            _ => match fields.split_first() {
                Some((second, rest)) => (*second, rest),
                None => return Duration::ZERO,
            },
        };
        let one_value =
            |field: &str| !field.is_empty() && field.bytes().all(|b| b.is_ascii_digit());
        let (minute, hour) = (rest.first().copied(), rest.get(1).copied());
        if !one_value(second) {
            Duration::from_secs(1)
        } else if !minute.is_some_and(one_value) {
            Duration::from_secs(60)
        } else if !hour.is_some_and(one_value) {
            Duration::from_secs(30 * 60)
        } else {
            Duration::from_secs(22 * 3600)
        }
    }

    /// The longest interval between two consecutive occurrences from the
    /// first one after `from` until `horizon` later (and over at least two
    /// intervals, so a yearly schedule gets one); `None` if the schedule
    /// has fewer than two occurrences left.
    ///
    /// Exact for every interval longer than [`EXACT_ABOVE`] and for those
    /// among the first [`WALKED`] occurrences; a shorter interval further
    /// out may be passed over (it is then no longer than [`EXACT_ABOVE`]).
    /// That keeps the cost near [`WALKED`] + 2 × `horizon` / [`EXACT_ABOVE`]
    /// occurrence searches whatever the schedule, where walking every
    /// occurrence of `* * * * * *` over two months would take 5 million.
    pub fn longest_interval(&self, from: DateTime<Utc>, horizon: Duration) -> Option<Duration> {
        let end = TimeDelta::from_std(horizon)
            .ok()
            .and_then(|horizon| from.checked_add_signed(horizon))
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        // Parsed once for the whole walk, not looked up at every step.
        let form = parsed(self.pattern()).ok()?;
        let next_after = |after: DateTime<Utc>| self.next_with(&form, after.trunc_subsecs(0));
        let mut at = next_after(from)?;
        let mut longest = TimeDelta::zero();
        let mut intervals = 0u32;
        let covered = |at: DateTime<Utc>, intervals: u32| at >= end && intervals >= 2;
        // The first occurrences one by one.
        for _ in 0..WALKED {
            if covered(at, intervals) {
                break;
            }
            let Some(next) = next_after(at) else {
                break;
            };
            longest = longest.max(next - at);
            intervals += 1;
            at = next;
        }
        // Then in jumps: every interval longer than the jump holds some
        // probe, and the occurrences on either side of the probe bound it.
        // What lies between `at` and the probe is shorter than the jump.
        let min_jump = TimeDelta::from_std(EXACT_ABOVE).unwrap_or(TimeDelta::MAX);
        for _ in 0..MAX_JUMPS {
            if covered(at, intervals) {
                break;
            }
            let Some(probe) = at.checked_add_signed(longest.max(min_jump)) else {
                break;
            };
            let Some(next) = next_after(probe) else {
                break;
            };
            let previous = self
                .previous_before(next)
                .map_or(at, |previous| previous.clamp(at, probe));
            longest = longest.max(next - previous);
            intervals += 1;
            at = next;
        }
        if intervals == 0 {
            return None;
        }
        longest.to_std().ok()
    }
}

/// [`Schedule::longest_interval`] and [`Schedule::shortest_interval`] walk
/// this many occurrences one by one.
pub const WALKED: usize = 64;
/// How far ahead a job's period ([`Schedule::longest_interval`]) looks:
/// two months hold every weekly pattern's week and the longest gap of most
/// monthly ones.
pub const PERIOD_HORIZON: Duration = Duration::from_secs(62 * 86_400);
/// [`Schedule::longest_interval`] finds every interval longer than this.
pub const EXACT_ABOVE: Duration = Duration::from_secs(6 * 3600);
/// At most this many jumps: enough for a horizon of ten years.
const MAX_JUMPS: usize = 15_000;

// The parsed form is not shown (it holds a byte per year up to 5000).
impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schedule")
            .field("expr", &self.expr)
            .field("tz", &self.tz)
            .finish()
    }
}

/// Why croner refused a pattern (explained, see [`fields`]).
struct Invalid(String);

/// Parsed patterns by text, shared while anything holds them.
static PARSED: LazyLock<Mutex<HashMap<String, Weak<Form>>>> = LazyLock::new(Mutex::default);

/// How many recently used parsed forms are held besides (about 7 KB each).
const RECENT_MAX: usize = 256;
/// The [`RECENT_MAX`] most recently parsed or used forms, newest last.
static RECENT: LazyLock<Mutex<VecDeque<Arc<Form>>>> = LazyLock::new(Mutex::default);

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Keeps `cron` among the recently used forms.
fn keep_recent(cron: &Arc<Form>) {
    let mut recent = lock(&RECENT);
    if recent.back().is_some_and(|last| Arc::ptr_eq(last, cron)) {
        return;
    }
    if let Some(at) = recent.iter().position(|held| Arc::ptr_eq(held, cron)) {
        recent.remove(at);
    } else if recent.len() >= RECENT_MAX {
        recent.pop_front();
    }
    recent.push_back(Arc::clone(cron));
}

/// The parsed form of `pattern`, shared with every other holder of the
/// same pattern. Whether it can ever fire is not checked here but by
/// [`Schedule::parse`], whose search for the next occurrence tells (a
/// search of its own here would repeat that work).
fn parsed(pattern: &str) -> Result<Arc<Form>, Invalid> {
    if let Some(cron) = lock(&PARSED).get(pattern).and_then(Weak::upgrade) {
        if !loading() {
            keep_recent(&cron);
        }
        return Ok(cron);
    }
    // Parsed without the lock, so that threads warming the cache run in
    // parallel; a pattern parsed twice at once is shared by the first one in.
    let cron = parse_form(pattern)?;
    let cron = {
        let mut cache = lock(&PARSED);
        match cache.get(pattern).and_then(Weak::upgrade) {
            Some(cron) => cron,
            None => {
                let cron = Arc::new(cron);
                // Forget dead entries once they could make up half of the
                // map (each keeps its form's allocation, see `Warm`'s drop).
                if cache.len() >= 2 * RECENT_MAX && cache.len().is_power_of_two() {
                    cache.retain(|_, cron| cron.strong_count() > 0);
                }
                cache.insert(pattern.to_string(), Arc::downgrade(&cron));
                if let Some(held) = lock(&HELD).as_mut() {
                    held.push(Arc::clone(&cron));
                }
                cron
            }
        }
    };
    if !loading() {
        keep_recent(&cron);
    }
    Ok(cron)
}

/// croner's parse of `pattern`, outside the cache.
fn parse_form(pattern: &str) -> Result<Form, Invalid> {
    #[cfg(test)]
    PARSES_HERE.with(|count| count.set(count.get() + 1));
    CronParser::builder()
        .seconds(Seconds::Required)
        .year(Year::Required)
        .dom_and_dow(!dialect::days_match_either(pattern))
        .build()
        .parse(&spelled_out(&dialect::with_open_steps(pattern)))
        .map(Form::new)
        .map_err(|err| Invalid(fields::explain(pattern).unwrap_or_else(|| describe(&err))))
}

#[cfg(test)]
thread_local! {
    /// Parses made on this thread: tests tell by it whether an answer
    /// needed one.
    static PARSES_HERE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Loads and holds in progress (a [`Warm`] or a [`Hold`] alive). While any
/// is, the forms it parses or finds are held by it, and none is kept among
/// the recent ones: a load of 10,000 rare patterns left its last 256 there
/// (1.3 MB), which no occurrence needed. The recent ones are those that
/// fire: a pattern is parsed once more at its first occurrence after a load.
static LOADING: AtomicUsize = AtomicUsize::new(0);

fn loading() -> bool {
    LOADING.load(Ordering::Relaxed) > 0
}

/// Forms parsed while a [`Hold`] is alive, held by it.
static HELD: LazyLock<Mutex<Option<Vec<Arc<Form>>>>> = LazyLock::new(Mutex::default);

/// Keeps every form parsed from now on until it is dropped: for a command
/// that loads a config and then walks every job's schedule (`check` lists
/// three occurrences a job), so that the patterns are not parsed twice. A
/// daemon never holds one (it must not keep 10,000 forms).
pub struct Hold(());

impl Hold {
    /// Starts holding (one hold at a time: a second one shares the first).
    pub fn start() -> Hold {
        LOADING.fetch_add(1, Ordering::Relaxed);
        lock(&HELD).get_or_insert_with(Vec::new);
        Hold(())
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        LOADING.fetch_sub(1, Ordering::Relaxed);
        lock(&HELD).take();
        forget_unheld();
    }
}

/// What a config load found on every core ([`parse_in_parallel`]), alive
/// while the loader builds its jobs: [`Schedule::parse`] and
/// [`Schedule::with_timezone`] take their answers from it ([`WARM_HINTS`]).
pub struct Warm {
    /// How many (pattern, zone) answers it made.
    found: usize,
    /// Whether it counts in [`WARMS`] and [`LOADING`].
    counted: bool,
}

impl Drop for Warm {
    /// The last load to end forgets what the loads found, and the cache
    /// entries of the forms nobody holds (a [`Hold`]'s load parses into
    /// the cache).
    fn drop(&mut self) {
        if self.counted {
            LOADING.fetch_sub(1, Ordering::Relaxed);
            if WARMS.fetch_sub(1, Ordering::Relaxed) == 1 {
                let mut hints = lock(&WARM_HINTS);
                hints.clear();
                hints.shrink_to_fit();
            }
        }
        forget_unheld();
    }
}

/// Drops the cache entries whose forms nobody holds, and their memory.
/// An entry (its key and the `Weak`, which keeps its form's allocation)
/// outlives the form, and entries left behind by a load, spread among the
/// freed forms' pages, would keep those pages resident.
fn forget_unheld() {
    let mut cache = lock(&PARSED);
    cache.retain(|_, cron| cron.strong_count() > 0);
    cache.shrink_to_fit();
}

impl Warm {
    /// How many (pattern, zone) answers were found.
    pub fn len(&self) -> usize {
        self.found
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.found == 0
    }
}

/// Parses the distinct expressions of `exprs` on every core (no more
/// threads than malloc arenas: one in the daemon) and finds each one's
/// next occurrence in each zone it is paired with (and in UTC, where the
/// loader checks that it fires), so that the loader's own parse of each
/// job finds the answer made: with many distinct expressions, parsing is
/// most of a config load. Invalid expressions are skipped here, for the
/// loader to report with their position. Hold the result until the loader
/// is done.
///
/// Each thread drops a parsed form (~7 KB, most of it croner's year table)
/// as soon as it has searched it, and reuses its memory for the next one,
/// so a load does not fault in fresh pages for every form. Under a
/// [`Hold`] (`check`, which lists more occurrences of every job) the
/// forms are parsed into the cache and held by it instead.
pub fn parse_in_parallel<'a>(exprs: impl Iterator<Item = (&'a str, Tz)>) -> Warm {
    // No more threads than malloc arenas: two parsing threads on one arena
    // wait for each other on its lock more than they gain.
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(crate::memory::parallel_allocators().unwrap_or(usize::MAX));
    parse_on(threads, exprs)
}

/// [`parse_in_parallel`] on `threads` threads (1: on this one).
fn parse_on<'a>(threads: usize, exprs: impl Iterator<Item = (&'a str, Tz)>) -> Warm {
    let mut pairs: Vec<(&str, Tz)> = exprs
        .flat_map(|(expr, tz)| [(expr, Tz::UTC), (expr, tz)])
        .collect();
    pairs.sort_unstable_by(|a, b| a.0.cmp(b.0).then_with(|| a.1.name().cmp(b.1.name())));
    pairs.dedup();
    if pairs.len() < 256 {
        // Nothing found: the loader parses each pattern itself, and the
        // recent forms share one parse between the jobs of a pattern.
        return Warm {
            found: 0,
            counted: false,
        };
    }
    // Counted as a load from here, so that the threads keep nothing among
    // the recent forms.
    LOADING.fetch_add(1, Ordering::Relaxed);
    WARMS.fetch_add(1, Ordering::Relaxed);
    let mut warm = Warm {
        found: 0,
        counted: true,
    };
    let holding = lock(&HELD).is_some();
    // A pattern whose zones fall on both sides of a chunk's end is parsed
    // by both threads: no harm.
    let chunk = pairs.len().div_ceil(threads.max(1));
    let now = Utc::now().trunc_subsecs(0);
    let found: Vec<(&str, Tz, Option<Hint>)> = if threads < 2 {
        search_each(&pairs, holding, now)
    } else {
        std::thread::scope(|scope| {
            let workers: Vec<_> = pairs
                .chunks(chunk)
                .map(|part| scope.spawn(move || search_each(part, holding, now)))
                .collect();
            workers
                .into_iter()
                .flat_map(|worker| worker.join().unwrap_or_default())
                .collect()
        })
    };
    warm.found = found.len();
    let mut hints = lock(&WARM_HINTS);
    for (pattern, tz, hint) in found {
        hints
            .entry(pattern.to_string())
            .or_default()
            .push((tz, hint));
    }
    warm
}

/// One thread of [`parse_in_parallel`]: each pair's pattern and its hint
/// in the pair's zone at `now` (`None`: it never fires). `pairs` are sorted
/// by expression, so a pattern's zones follow each other and share a parse.
fn search_each<'a>(
    pairs: &[(&'a str, Tz)],
    holding: bool,
    now: DateTime<Utc>,
) -> Vec<(&'a str, Tz, Option<Hint>)> {
    let mut found = Vec::with_capacity(pairs.len());
    let mut current: Option<(&str, Option<Arc<Form>>)> = None;
    for &(expr, tz) in pairs {
        let Ok(pattern) = expand_macro(expr.trim()) else {
            continue;
        };
        if current
            .as_ref()
            .is_none_or(|(parsed_pattern, _)| *parsed_pattern != pattern)
        {
            // Dropping the form before parsing the next one lets the
            // allocator hand its memory straight back.
            drop(current.take());
            let form = if holding {
                parsed(pattern).ok()
            } else {
                parse_form(pattern).ok().map(Arc::new)
            };
            current = Some((pattern, form));
        }
        if let Some((_, Some(form))) = &current {
            found.push((pattern, tz, hint_at(form, tz, now)));
        }
    }
    found
}

/// The macros we accept, as the 6-field patterns they stand for (croner's
/// and Vixie cron's meaning; `@midnight` = `@daily`).
const MACROS: [(&str, &str); 7] = [
    ("@hourly", "0 0 * * * *"),
    ("@daily", "0 0 0 * * *"),
    ("@midnight", "0 0 0 * * *"),
    ("@weekly", "0 0 0 * * 0"),
    ("@monthly", "0 0 0 1 * *"),
    ("@yearly", "0 0 0 1 1 *"),
    ("@annually", "0 0 0 1 1 *"),
];

/// The years croner is told a pattern may fire in. Left open (`*`), croner
/// fills its year table one entry at a time up to the year 5000, which
/// would be most of a config load; occurrences after 2199
/// are not computed (a schedule then has no further occurrences).
const YEARS: &str = "1970-2199";

/// `pattern` (5 or 6 fields) with seconds and years spelled out, the form
/// croner parses without filling a 5,000-year table: a 5-field pattern gets
/// second 0, as croner itself gives it.
fn spelled_out(pattern: &str) -> String {
    match pattern.split_whitespace().count() {
        5 => format!("0 {pattern} {YEARS}"),
        _ => format!("{pattern} {YEARS}"),
    }
}

/// Checks the field count (croner would take 7) and maps macros to the
/// patterns they stand for, so that croner's errors never have to be
/// explained.
fn expand_macro(expr: &str) -> Result<&str, String> {
    if expr.starts_with('@') {
        return MACROS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(expr))
            .map(|(_, pattern)| *pattern)
            .ok_or_else(|| {
                "unknown macro; use `@hourly`, `@daily`, `@weekly`, `@monthly` or `@yearly`"
                    .to_string()
            });
    }
    match expr.split_whitespace().count() {
        0 => Err("the expression is empty".to_string()),
        5 | 6 => Ok(expr),
        n => Err(format!(
            "expected 5 fields (minute first) or 6 (seconds first), found {n}"
        )),
    }
}

/// croner's messages are sentences ("Component error: Number out of
/// bounds."); ours are lowercase without a trailing period.
fn describe(err: &croner::errors::CronError) -> String {
    let text = err.to_string();
    let text = text.trim_end_matches('.');
    let text = text.strip_prefix("Component error: ").unwrap_or(text);
    let text = text
        .strip_prefix("Pattern contains illegal characters: CronPattern contains ")
        .unwrap_or(text);
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

mod dialect;
mod fields;
mod occurrence;

pub use occurrence::{Occurrence, rfc3339};

#[cfg(test)]
mod tests;
