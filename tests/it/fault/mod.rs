//! Faults: clock skew, crashes, network cuts, Redis paused or restarted,
//! signals under load, broken logging, the nodes in line for an occurrence
//! failing together; `audit` checks the audit itself.

mod audit;
mod clock;
mod crash;
mod groups;
mod history;
mod in_line;
mod logging;
mod network;
mod redis;
mod signals;
mod stop;
