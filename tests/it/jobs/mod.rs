//! Scheduling, claiming and running jobs: the lock scripts, the watchdog,
//! what a run sees, and fleets of daemons on one Redis.

mod actions;
mod alerts;
mod bad_jobs;
mod calendars;
mod cluster;
mod daemon;
mod first_in_line;
mod groups;
mod life;
mod lock;
mod lock_cost;
mod memory;
mod node_cap;
mod redis_data_lost;
mod tags;
mod trigger;
mod watchdog;
