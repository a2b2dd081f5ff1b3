//! What every request of the status page shares: the config as last
//! loaded, the page's Redis connection, the turns ([`Page::turn`]) and
//! whether Redis answered the last read ([`Page::failed`]).
//!
//! Failure model: Redis failing is an [`Outage`] to show (503), with since
//! when: the earlier of the daemon's own finding and the page's first
//! failed read; the next read that succeeds ends it. Locks are held for a
//! swap, never across an `.await`; a poisoned one is taken over.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{Semaphore, SemaphorePermit, watch};

use super::Setup;
use crate::config::Config;
use crate::coordinator::Coordinator;
use crate::inspect::Source;

/// When the daemon found Redis unreachable, if it is now.
pub type OutageSince = Arc<dyn Fn() -> Option<DateTime<Utc>> + Send + Sync>;

/// Redis did not answer a read, or failed it.
pub struct Outage {
    /// Since when Redis fails, as this node knows it.
    pub since: DateTime<Utc>,
    /// The error, its URL redacted.
    pub error: String,
}

/// The state of the page.
pub struct Page {
    pub node: String,
    config: watch::Receiver<Arc<Config>>,
    pub coordinator: Coordinator,
    outage_since: OutageSince,
    /// The first failed read of the page's, until one succeeds.
    down_since: Mutex<Option<DateTime<Utc>>>,
    turns: Semaphore,
    reach_limit: Duration,
}

impl Page {
    pub fn new(setup: Setup, concurrent: usize, reach_limit: Duration) -> Page {
        Page {
            node: setup.node,
            config: setup.config,
            coordinator: setup.coordinator,
            outage_since: setup.outage_since,
            down_since: Mutex::new(None),
            turns: Semaphore::new(concurrent),
            reach_limit,
        }
    }

    /// A turn to be served (see [`super::CONCURRENT`]); `None` only if the
    /// turns were closed, which they never are.
    pub async fn turn(&self) -> Option<SemaphorePermit<'_>> {
        self.turns.acquire().await.ok()
    }

    /// What the reads of one request read: the config's jobs and groups,
    /// under its `[redis]`.
    pub fn source(&self) -> Source {
        let config = Arc::clone(&self.config.borrow());
        Source {
            redis: config.redis.clone(),
            config: Some(Config::clone(&config)),
        }
    }

    /// Redis `TIME` (UTC epoch ms) within the reach limit.
    pub async fn now_ms(&self, source: &Source) -> Result<i64, Outage> {
        crate::inspect::reach(&self.coordinator, &source.redis, self.reach_limit)
            .await
            .map_err(|err| self.failed(&err))
    }

    /// A read failed with `err`: the outage to show.
    pub fn failed(&self, err: &anyhow::Error) -> Outage {
        let now = Utc::now();
        let mine = *self
            .down_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(now);
        let since = (self.outage_since)().map_or(mine, |daemon| daemon.min(mine));
        Outage {
            since,
            error: format!("{err:#}"),
        }
    }

    /// A read succeeded: any outage is over.
    pub fn answered(&self) {
        *self
            .down_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
    }
}
