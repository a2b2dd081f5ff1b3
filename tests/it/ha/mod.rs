//! The multi-member coordinators: Sentinel, Cluster and Redlock, with TLS,
//! passwords, misconfiguration and the harness's own self-tests.

mod abort;
mod cluster;
mod fleet_ops;
mod harness;
mod misconfig;
mod probe;
mod redlock;
mod security;
mod sentinel;
mod sentinel_stale;
mod wait;
