//! The estimate of Redis's instant that occurrences fire by, from this
//! node's `TIME` round trips.
//!
//! Each round trip bounds Redis's clock: it was read after the request
//! left and before the answer came, so against this node's monotonic clock
//! Redis's instant at the monotonic origin (the *base*) lies between
//! `TIME − answered` (low) and `TIME − sent` (high). Firing by the low
//! bound is never early and at most that round trip late. The estimate is
//! the highest low bound among the round trips of the last [`WINDOW_US`]:
//! the tightest of them, so one slow round trip (the node busy loading its
//! jobs at start, a loaded machine) does not make the node fire late until
//! the next measurement.
//!
//! Failure model: the monotonic clock and Redis's advance at the same rate
//! (both NTP-disciplined; a drift of 10 ppm moves a bound 0.3 ms in the
//! 30 s window). A round trip whose bounds do not meet the window's (Redis's
//! clock was stepped, another server answers after a failover, or drift
//! beyond that) starts the window again from it alone, so an old bound can
//! never keep the node firing early; so does [`RedisInstant::restart`],
//! called after an outage.

use std::collections::VecDeque;

/// How long a round trip's bound counts (µs of the monotonic clock).
pub const WINDOW_US: i64 = 30_000_000;

/// One `TIME` answer: Redis's clock and this node's monotonic clock (µs
/// since its origin) when the request left and when the answer came.
#[derive(Debug, Clone, Copy)]
pub struct RoundTrip {
    pub redis_us: i64,
    pub sent_us: i64,
    pub answered_us: i64,
}

#[derive(Debug, Clone, Copy)]
struct Bound {
    answered_us: i64,
    low: i64,
    high: i64,
}

/// The bounds of the last [`WINDOW_US`] of round trips.
#[derive(Debug, Default)]
pub struct RedisInstant {
    bounds: VecDeque<Bound>,
}

/// What one round trip did to the estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// It agrees with the window (the base may have tightened).
    Agreed,
    /// It contradicts the window: the window starts again from it.
    Restarted,
}

impl RedisInstant {
    /// Adds `trip`, forgets the bounds older than the window, and answers
    /// whether it agreed with them.
    pub fn add(&mut self, trip: RoundTrip) -> Added {
        let bound = Bound {
            answered_us: trip.answered_us,
            low: trip.redis_us.saturating_sub(trip.answered_us),
            high: trip.redis_us.saturating_sub(trip.sent_us),
        };
        self.bounds
            .retain(|old| bound.answered_us.saturating_sub(old.answered_us) <= WINDOW_US);
        let agrees = match (self.low(), self.high()) {
            (Some(low), Some(high)) => bound.high >= low && bound.low <= high,
            _ => true,
        };
        if !agrees {
            self.bounds.clear();
        }
        self.bounds.push_back(bound);
        if agrees {
            Added::Agreed
        } else {
            Added::Restarted
        }
    }

    /// Forgets every bound (Redis was unreachable: it may be another
    /// server, with another clock, now).
    pub fn restart(&mut self) {
        self.bounds.clear();
    }

    /// Redis's instant at the monotonic origin, µs since the epoch: the
    /// highest low bound of the window. `None` before the first round trip.
    pub fn base_us(&self) -> Option<i64> {
        self.low()
    }

    fn low(&self) -> Option<i64> {
        self.bounds.iter().map(|bound| bound.low).max()
    }

    fn high(&self) -> Option<i64> {
        self.bounds.iter().map(|bound| bound.high).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis's clock is the monotonic one plus 1,000,000 µs; a round trip
    /// from `sent` of `rtt` in which Redis read its clock `read_after` in.
    fn trip(sent: i64, rtt: i64, read_after: i64) -> RoundTrip {
        RoundTrip {
            redis_us: 1_000_000 + sent + read_after,
            sent_us: sent,
            answered_us: sent + rtt,
        }
    }

    #[test]
    fn one_round_trip_fires_at_most_its_round_trip_late() {
        let mut instant = RedisInstant::default();
        assert_eq!(instant.base_us(), None);
        assert_eq!(instant.add(trip(0, 4_000, 100)), Added::Agreed);
        // The true base is 1,000,000: the estimate is 3,900 µs behind it.
        assert_eq!(instant.base_us(), Some(1_000_000 - 3_900));
    }

    #[test]
    fn a_later_quicker_round_trip_tightens_the_estimate_and_a_slow_one_does_not_loosen_it() {
        let mut instant = RedisInstant::default();
        instant.add(trip(0, 4_000, 100));
        assert_eq!(instant.add(trip(1_000_000, 200, 100)), Added::Agreed);
        assert_eq!(instant.base_us(), Some(1_000_000 - 100));
        assert_eq!(instant.add(trip(2_000_000, 9_000, 8_000)), Added::Agreed);
        assert_eq!(instant.base_us(), Some(1_000_000 - 100));
    }

    #[test]
    fn a_bound_older_than_the_window_stops_counting() {
        let mut instant = RedisInstant::default();
        instant.add(trip(0, 200, 100));
        instant.add(trip(WINDOW_US + 1_000, 3_000, 0));
        assert_eq!(instant.base_us(), Some(1_000_000 - 3_000));
    }

    #[test]
    fn redis_stepped_back_restarts_the_window_so_no_old_bound_fires_early() {
        let mut instant = RedisInstant::default();
        instant.add(trip(0, 200, 100));
        // Redis's clock now 50 ms behind where it was.
        let mut back = trip(1_000_000, 200, 100);
        back.redis_us -= 50_000;
        assert_eq!(instant.add(back), Added::Restarted);
        assert_eq!(instant.base_us(), Some(1_000_000 - 100 - 50_000));
    }

    #[test]
    fn redis_stepped_forward_restarts_the_window_at_the_new_clock() {
        let mut instant = RedisInstant::default();
        instant.add(trip(0, 200, 100));
        let mut ahead = trip(1_000_000, 200, 100);
        ahead.redis_us += 50_000;
        assert_eq!(instant.add(ahead), Added::Restarted);
        assert_eq!(instant.base_us(), Some(1_000_000 - 100 + 50_000));
        // The old bound is gone: a later agreeing trip is compared with the new one only.
        let mut next = trip(2_000_000, 300, 100);
        next.redis_us += 50_000;
        assert_eq!(instant.add(next), Added::Agreed);
    }

    #[test]
    fn restart_forgets_every_bound() {
        let mut instant = RedisInstant::default();
        instant.add(trip(0, 200, 100));
        instant.restart();
        assert_eq!(instant.base_us(), None);
        instant.add(trip(1_000_000, 5_000, 0));
        assert_eq!(instant.base_us(), Some(1_000_000 - 5_000));
    }
}
