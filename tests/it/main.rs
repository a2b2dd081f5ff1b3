//! The integration tests, one binary: real `redis-server`s on free loopback
//! ports and the real `solocron` binary, grouped by topic. `common` is the
//! harness every topic shares. Run one topic or test with a filter, e.g.
//! `cargo test --test it fault::` or `cargo test --test it ha::redlock::`.

mod common;

mod config;
mod docs;
mod fault;
mod ha;
mod jobs;
mod module_graph;
mod ops;
mod package;
