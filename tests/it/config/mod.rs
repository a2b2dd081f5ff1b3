//! The config: loading `jobs.toml` (the example, the broken corpus in
//! `bad-configs/`, property tests), reloads, renames and the drift guard.

mod bad_configs;
mod cron_as_cronie;
mod drift;
mod drift_cost;
mod load;
mod prop_config;
mod prop_schedule;
mod reload;
mod rename;
mod secret_files;
