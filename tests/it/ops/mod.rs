//! What an operator sees and does: the fleet commands, `status` and
//! `history`, the status page, logs, journald, systemd notifications and
//! the monitoring rules. `metrics.rs` builds as its own test binary (`tests/metrics/`).

mod abort;
mod audit;
mod booked;
mod controls_read;
mod daemon_logs;
mod fleet_ops;
mod import_crontab;
mod inspect;
mod journald;
mod operate;
mod prometheus_rules;
mod security;
mod status_page;
mod systemd;
