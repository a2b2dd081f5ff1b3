//! Faults: clock skew, crashes, network cuts, Redis paused or restarted,
//! signals under load, broken logging; `audit` checks the audit itself.

mod audit;
mod clock;
mod crash;
mod history;
mod logging;
mod network;
mod redis;
mod signals;
mod stop;
