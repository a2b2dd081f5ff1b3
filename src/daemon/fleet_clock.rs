//! The instant this node fires occurrences by: with `[daemon] clock =
//! "redis"`, Redis's `TIME` as last measured ([`super::clock`]), carried
//! forward by the monotonic clock; with `clock = "local"`, or before the
//! first measurement, this node's wall clock.
//!
//! Reading it takes no lock (atomics), so every task asks it freely. A
//! step of the wall clock between two measurements changes nothing: only
//! the monotonic clock moves Redis's instant forward.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use chrono::{DateTime, Utc};

use crate::config::ClockSource;

/// The fleet's clock as this node knows it (see the module doc).
pub struct FleetClock {
    /// This node's wall clock minus Redis's instant at the last
    /// measurement, µs; `i64::MIN` = unknown.
    offset_us: AtomicI64,
    /// Redis's clock at `base`, µs since the epoch, as estimated from the
    /// last 30 s of round trips ([`super::redis_instant::RedisInstant`]);
    /// `i64::MIN` = unknown. Redis's instant is this plus the monotonic
    /// time elapsed since `base`.
    redis_at_base_us: AtomicI64,
    base: std::time::Instant,
    /// `[daemon] clock = "redis"`: fire by Redis's instant.
    from_redis: AtomicBool,
    /// Woken when the offset is first measured, to publish it at once.
    pub measured: tokio::sync::Notify,
    /// Woken when the offset is first measured and this node's wall clock,
    /// which the schedule was computed by until then, is off by more than
    /// [`super::clock::REBASE_ABOVE_MS`]: the main loop computes the
    /// schedule again by Redis's instant
    /// ([`super::timetable::Timetable::rebase`]).
    pub rebase: tokio::sync::Notify,
}

impl FleetClock {
    /// A clock firing by `source`, not measured yet.
    pub fn new(source: ClockSource) -> FleetClock {
        FleetClock {
            offset_us: AtomicI64::new(i64::MIN),
            redis_at_base_us: AtomicI64::new(i64::MIN),
            base: std::time::Instant::now(),
            from_redis: AtomicBool::new(source == ClockSource::Redis),
            measured: tokio::sync::Notify::new(),
            rebase: tokio::sync::Notify::new(),
        }
    }

    /// The instant occurrences are fired by (see the module doc).
    pub fn now(&self) -> DateTime<Utc> {
        if self.fires_by_redis()
            && let Some(redis) = self.redis_now()
        {
            return redis;
        }
        Utc::now()
    }

    /// The monotonic instant at which this clock will read `at` (now,
    /// if `at` is past).
    pub fn instant_of(&self, at: DateTime<Utc>) -> tokio::time::Instant {
        tokio::time::Instant::now() + (at - self.now()).to_std().unwrap_or_default()
    }

    /// Whether occurrences fire by Redis's clock (`[daemon] clock`).
    pub fn fires_by_redis(&self) -> bool {
        self.from_redis.load(Ordering::Relaxed)
    }

    /// After a reload: fire by `source` from now on.
    pub fn set_source(&self, source: ClockSource) {
        self.from_redis
            .store(source == ClockSource::Redis, Ordering::Relaxed);
    }

    /// Fires by `base_us` from now on (Redis's instant at the monotonic
    /// origin, [`super::redis_instant::RedisInstant::base_us`]) and stores
    /// this node's wall clock minus Redis's instant now, µs, which it
    /// answers.
    pub fn set_redis_base_us(&self, base_us: i64) -> i64 {
        self.redis_at_base_us.store(base_us, Ordering::Relaxed);
        let redis_now = base_us.saturating_add(self.micros_since_base());
        let offset = Utc::now().timestamp_micros().saturating_sub(redis_now);
        self.offset_us.store(offset, Ordering::Relaxed);
        offset
    }

    /// µs of the monotonic clock since its origin (the base of Redis's
    /// instant).
    pub fn micros_since_base(&self) -> i64 {
        i64::try_from(self.base.elapsed().as_micros()).unwrap_or(i64::MAX)
    }

    /// The last measured offset in ms, if any.
    pub fn offset_ms(&self) -> Option<i64> {
        self.offset_us().map(|us| us.div_euclid(1000))
    }

    fn offset_us(&self) -> Option<i64> {
        Some(self.offset_us.load(Ordering::Relaxed)).filter(|us| *us != i64::MIN)
    }

    /// Redis's instant now, from the last measurement carried forward by
    /// the monotonic clock; `None` before the first measurement.
    fn redis_now(&self) -> Option<DateTime<Utc>> {
        let at_base = self.redis_at_base_us.load(Ordering::Relaxed);
        if at_base == i64::MIN {
            return None;
        }
        DateTime::from_timestamp_micros(at_base.saturating_add(self.micros_since_base()))
    }

    /// How far this node's wall clock moved against Redis's since the last
    /// measurement, µs (a step of the local clock, or NTP slewing it):
    /// `None` before the first measurement.
    pub fn moved_us(&self) -> Option<i64> {
        let offset = self.offset_us()?;
        let redis = self.redis_now()?;
        let local_minus_redis = Utc::now()
            .signed_duration_since(redis)
            .num_microseconds()
            .unwrap_or(i64::MAX);
        Some(local_minus_redis.saturating_sub(offset))
    }

    /// Puts `report`'s start and end on the clock occurrences fire by
    /// (the executor reads the wall clock): with `clock = "redis"`, a run
    /// on a node whose clock is off is shown at Redis's instants, beside
    /// the other nodes' entries.
    pub fn shift_report(&self, report: &mut crate::exec::Report) {
        let ahead = Utc::now().signed_duration_since(self.now());
        let shift = |at: DateTime<Utc>| at.checked_sub_signed(ahead).unwrap_or(at);
        report.started_at = shift(report.started_at);
        report.finished_at = shift(report.finished_at);
    }
}
