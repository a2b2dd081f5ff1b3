//! The Prometheus endpoint tests, in a binary of their own: the global
//! metrics recorder is installed once per process, and in the `it` binary
//! the library code other tests run in-process would count into it.

#[path = "../it/common/mod.rs"]
mod common;

#[path = "../it/ops/metrics.rs"]
mod metrics;
