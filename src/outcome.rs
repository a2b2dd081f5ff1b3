//! How an occurrence ends: the twelve outcomes and the words they are
//! written as.
//!
//! A run ends `succeeded`, `failed`, `timed_out`, `lock_lost`,
//! `interrupted` or `aborted` (`exec` classifies it); an occurrence that runs nothing is
//! `skipped` (overlap), `paused`, `missed` (nobody claimed it),
//! `abandoned` (its runner stopped renewing the lock) or `throttled` (every
//! node that looked at it was at its `max_running`). [`Outcome::as_str`]
//! is the one spelling of each word that Redis, the logs, `history`, the
//! metrics' labels and notifiers (`SOLOCRON_OUTCOME`) see; the Lua scripts
//! write the same words (a test in `lock::scripts` checks them).
//!
//! The words are the contract, not the enum: a history entry keeps the
//! word it was written with, and a word this version does not know (a
//! newer daemon's) is shown as written; [`Outcome::parse`] answers `None`
//! for it.

use std::fmt;

/// How an occurrence ended. A failing command is an outcome, not an `Err`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Exit 0, or a 2xx response.
    Succeeded,
    /// Non-zero exit, killed by a signal nobody sent, non-2xx, or could not start.
    Failed,
    /// The job's (or the hook's) timeout fired first.
    TimedOut,
    /// Stopped because the lease could not be confirmed (`on_lock_lost = "kill"`).
    LockLost,
    /// Stopped because the daemon's shutdown grace was over.
    Interrupted,
    /// Not run: the previous run still held the lock (overlap).
    Skipped,
    /// Not run: the job was paused fleet-wide.
    Paused,
    /// Not run: nobody claimed it in time (Redis away, every node down).
    Missed,
    /// The run's lock expired without a release: its node died or lost Redis.
    Abandoned,
    /// Not run: every node that looked at it was at its `max_running`
    /// until its `starting_deadline`, or its group had no room.
    Throttled,
    /// Stopped by an operator (`solocron abort`), or a pending retry
    /// cancelled so.
    Aborted,
    /// Not run: a calendar of the job (`skip_during`, `only_during`)
    /// excludes it.
    Excluded,
}

impl Outcome {
    /// Every outcome, in the order `history --outcome` lists them.
    pub const ALL: [Outcome; 12] = [
        Outcome::Succeeded,
        Outcome::Failed,
        Outcome::TimedOut,
        Outcome::LockLost,
        Outcome::Interrupted,
        Outcome::Skipped,
        Outcome::Paused,
        Outcome::Missed,
        Outcome::Abandoned,
        Outcome::Throttled,
        Outcome::Aborted,
        Outcome::Excluded,
    ];

    /// The word written to Redis, logs, JSON and metrics: `succeeded`,
    /// `failed`, `timed_out`, `lock_lost`, `interrupted`, `skipped`,
    /// `paused`, `missed`, `abandoned`, `throttled`, `aborted`, `excluded`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::TimedOut => "timed_out",
            Outcome::LockLost => "lock_lost",
            Outcome::Interrupted => "interrupted",
            Outcome::Skipped => "skipped",
            Outcome::Paused => "paused",
            Outcome::Missed => "missed",
            Outcome::Abandoned => "abandoned",
            Outcome::Throttled => "throttled",
            Outcome::Aborted => "aborted",
            Outcome::Excluded => "excluded",
        }
    }

    /// The outcome written as `word` (exactly, as [`Outcome::as_str`]
    /// gives it); `None` for any other word, such as one a newer version
    /// writes.
    pub fn parse(word: &str) -> Option<Outcome> {
        Outcome::ALL
            .into_iter()
            .find(|outcome| outcome.as_str() == word)
    }

    /// Whether a run ended so: the action was started (the six `exec`
    /// classifies).
    pub fn is_run(self) -> bool {
        matches!(
            self,
            Outcome::Succeeded
                | Outcome::Failed
                | Outcome::TimedOut
                | Outcome::LockLost
                | Outcome::Interrupted
                | Outcome::Aborted
        )
    }

    /// Whether the occurrence was decided without running anything:
    /// `skipped`, `paused`, `missed`, `throttled`, `excluded`.
    pub fn ran_nothing(self) -> bool {
        matches!(
            self,
            Outcome::Skipped
                | Outcome::Paused
                | Outcome::Missed
                | Outcome::Throttled
                | Outcome::Excluded
        )
    }

    /// Whether it needs a look (`history --outcome bad`): every outcome but
    /// `succeeded` and those meant not to run (`skipped`, `paused`).
    pub fn is_bad(self) -> bool {
        !matches!(
            self,
            Outcome::Succeeded | Outcome::Skipped | Outcome::Paused | Outcome::Excluded
        )
    }

    /// Whether it is a failure of the job: `on_failure` is sent for it and
    /// it sets `solocron_last_failure_timestamp_seconds`. Every bad outcome
    /// but `interrupted` (the daemon was stopped, not the job) and
    /// `aborted` (an operator stopped it, and knows).
    pub fn is_failure(self) -> bool {
        self.is_bad() && !matches!(self, Outcome::Interrupted | Outcome::Aborted)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::Outcome;

    #[test]
    fn all_lists_every_outcome_once_in_order() {
        for (position, outcome) in Outcome::ALL.into_iter().enumerate() {
            // A new variant fails to compile here until `ALL` lists it.
            let index = match outcome {
                Outcome::Succeeded => 0,
                Outcome::Failed => 1,
                Outcome::TimedOut => 2,
                Outcome::LockLost => 3,
                Outcome::Interrupted => 4,
                Outcome::Skipped => 5,
                Outcome::Paused => 6,
                Outcome::Missed => 7,
                Outcome::Abandoned => 8,
                Outcome::Throttled => 9,
                Outcome::Aborted => 10,
                Outcome::Excluded => 11,
            };
            assert_eq!(index, position, "{outcome:?}");
        }
    }

    #[test]
    fn each_word_reads_back_as_its_outcome_and_no_other_word_does() {
        let words: Vec<&str> = Outcome::ALL.into_iter().map(Outcome::as_str).collect();
        assert_eq!(
            words,
            [
                "succeeded",
                "failed",
                "timed_out",
                "lock_lost",
                "interrupted",
                "skipped",
                "paused",
                "missed",
                "abandoned",
                "throttled",
                "aborted",
                "excluded"
            ]
        );
        for outcome in Outcome::ALL {
            assert_eq!(Outcome::parse(outcome.as_str()), Some(outcome));
            assert_eq!(outcome.to_string(), outcome.as_str());
        }
        for word in ["", "Failed", "failed ", "cancelled", "running", "bad"] {
            assert_eq!(Outcome::parse(word), None, "{word:?}");
        }
    }

    #[test]
    fn the_predicates_sort_the_outcomes_as_the_docs_say() {
        let which = |keep: fn(Outcome) -> bool| -> Vec<&str> {
            Outcome::ALL
                .into_iter()
                .filter(|outcome| keep(*outcome))
                .map(Outcome::as_str)
                .collect()
        };
        assert_eq!(
            which(Outcome::is_run),
            [
                "succeeded",
                "failed",
                "timed_out",
                "lock_lost",
                "interrupted",
                "aborted"
            ]
        );
        assert_eq!(
            which(Outcome::ran_nothing),
            ["skipped", "paused", "missed", "throttled", "excluded"]
        );
        assert_eq!(
            which(Outcome::is_bad),
            [
                "failed",
                "timed_out",
                "lock_lost",
                "interrupted",
                "missed",
                "abandoned",
                "throttled",
                "aborted"
            ]
        );
        assert_eq!(
            which(Outcome::is_failure),
            [
                "failed",
                "timed_out",
                "lock_lost",
                "missed",
                "abandoned",
                "throttled"
            ]
        );
    }
}
