//! `on_failure = { ... }` and `on_success = { ... }` of a job (or of
//! `[defaults]`): exactly one action (`command`, `argv` or `http`, read by
//! the same rules as a job's own) and an optional `timeout`.
//!
//! Like the job's keys, every key is checked even after another one
//! failed; an error leaves the notifier unset and the file refused.

use std::time::Duration;

use super::context::Context;
use super::http::http_action;
use super::job::{read_argv, read_command};
use super::keys::NOTIFIER as NOTIFIER_KEYS;
use super::model::{Action, DEFAULT_NOTIFIER_TIMEOUT, Notifier};
use super::table::Table;

/// Reads `key` (`on_failure` or `on_success`) of `table`, if set. `None`
/// when unset or after an error (which went to `ctx`).
pub(super) fn read_notifier(
    table: &Table<'_, '_>,
    key: &str,
    ctx: &Context<'_>,
) -> Option<Notifier> {
    let notifier = ctx.keep(table.table(key)).flatten()?;
    let before = ctx.error_count();
    notifier.check_keys(NOTIFIER_KEYS, ctx);
    let mut actions = Vec::new();
    if let Some(command) = ctx.keep(notifier.string("command")).flatten()
        && let Some(text) = read_command(&notifier, command.get_ref(), command.span(), ctx)
    {
        actions.push(Action::Command(text));
    }
    if let Some(value) = notifier.get("argv")
        && let Some(argv) = ctx.keep(read_argv(&notifier, value))
    {
        actions.push(Action::Argv(argv));
    }
    if let Some(http) = ctx.keep(notifier.table("http")).flatten()
        && let Some(http) = http_action(&http, ctx)
    {
        actions.push(Action::Http(Box::new(http)));
    }
    let timeout = ctx
        .keep(notifier.duration("timeout", Duration::from_secs(1)))
        .flatten()
        .unwrap_or(DEFAULT_NOTIFIER_TIMEOUT);
    if ctx.error_count() > before {
        return None;
    }
    if actions.len() != 1 {
        let found = if actions.is_empty() {
            "none"
        } else {
            "more than one"
        };
        let message = format!(
            "needs exactly one of `command`, `argv` or `http`, found {found}: e.g. {key} = {{ command = \"/usr/local/bin/page-oncall\" }}"
        );
        let error = match table.get(key) {
            Some(value) => table.error(value.span(), key, message),
            None => notifier.error_here(message),
        };
        ctx.error(error);
        return None;
    }
    let action = actions.pop()?;
    Some(Notifier { action, timeout })
}
