//! What a run is a run of: a scheduled occurrence of a job, or a manual run
//! (`trigger`), and the name the run, the logs and the history give it.
//!
//! A scheduled occurrence is named by its instant in RFC 3339 UTC with
//! whole seconds (`2026-11-30T21:00:00Z`); a manual run by `manual-` and
//! its start instant in milliseconds, so that it never looks like, and
//! never consumes, a scheduled occurrence.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};

/// One occurrence of a job, or a manual run of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Occurrence {
    /// The job's schedule fires at this instant.
    Scheduled(DateTime<Utc>),
    /// An operator ran the job by hand (`trigger`), starting at this instant.
    Manual(DateTime<Utc>),
}

impl Occurrence {
    /// The scheduled instant; `None` for a manual run.
    pub fn scheduled(self) -> Option<DateTime<Utc>> {
        match self {
            Occurrence::Scheduled(at) => Some(at),
            Occurrence::Manual(_) => None,
        }
    }

    /// The instant: scheduled, or the manual run's start.
    pub fn at(self) -> DateTime<Utc> {
        match self {
            Occurrence::Scheduled(at) | Occurrence::Manual(at) => at,
        }
    }
}

/// The name of an occurrence (`SOLOCRON_OCCURRENCE`, the logs, the history).
impl fmt::Display for Occurrence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Occurrence::Scheduled(at) => f.write_str(&rfc3339(*at)),
            Occurrence::Manual(at) => {
                write!(
                    f,
                    "manual-{}",
                    at.to_rfc3339_opts(SecondsFormat::Millis, true)
                )
            }
        }
    }
}

/// RFC 3339 UTC with whole seconds and `Z`: the name of a scheduled
/// occurrence at `at`.
pub fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scheduled_occurrence_is_named_by_its_second_and_a_manual_run_by_its_millisecond() {
        let at = DateTime::parse_from_rfc3339("2026-11-30T21:00:00.250Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            Occurrence::Scheduled(at).to_string(),
            "2026-11-30T21:00:00Z"
        );
        assert_eq!(
            Occurrence::Manual(at).to_string(),
            "manual-2026-11-30T21:00:00.250Z"
        );
        assert_eq!(Occurrence::Scheduled(at).scheduled(), Some(at));
        assert_eq!(Occurrence::Manual(at).scheduled(), None);
    }
}
