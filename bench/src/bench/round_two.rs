//! The "round two" part of the table: every figure of issue #12 items 1,
//! 2, 5 and 6 with its target and met / not met, gathered from the rows
//! the scenarios wrote (t, e / f / g, c with its machine limit, s). A
//! figure whose scenario did not run in this invocation says so, and
//! counts as not met.

use std::fmt::Write as _;

use crate::report::{Met, Report};

/// (issue item, scenario, start of the figure's text) of every figure.
const FIGURES: &[(&str, &str, &str)] = &[
    ("1 clock", "t clock skew", "issue #12 item 1"),
    (
        "1 clock",
        "t clock skew",
        "`clock = \"redis\"`: runs started",
    ),
    ("1 clock", "t clock skew", "`clock = \"redis\"`: wins"),
    (
        "1 clock",
        "t clock skew",
        "the same with `clock = \"local\"`",
    ),
    ("2 memory", "e idle 10,000 jobs", "RSS with 10,000 distinct"),
    ("2 memory", "f start-up", "spawn → READY=1"),
    ("2 memory", "g check", "`solocron check`"),
    ("5 burst", "c machine limit", "issue #12 item 5"),
    ("5 burst", "c machine limit", "solocron, 3 nodes"),
    ("5 burst", "c machine limit", "minimal spawner"),
    ("5 burst", "c machine limit", "same minimal spawner"),
    ("5 burst", "c machine limit", "scripts Redis ran"),
    ("6 splay", "s splay", "1,000 jobs on one instant, no splay"),
    ("6 splay", "s splay", "issue #12 item 6"),
    ("6 splay", "s splay", "splay 30 s: peak"),
    ("6 splay", "s splay", "splay 30 s: lag"),
    ("6 splay", "s splay", "splay 30 s: runs started"),
];

/// The markdown of the round-two table, for `Report::extra`.
pub fn summary(report: &Report) -> String {
    let mut text = String::from(
        "\n### Round two (issue #12 items 1, 2, 5, 6)\n\n| item | figure | target | measured | met |\n|---|---|---|---|---|\n",
    );
    for (item, scenario, figure) in FIGURES {
        let row = report
            .rows
            .iter()
            .find(|row| row.scenario == *scenario && row.figure.starts_with(figure));
        let _ = match row {
            Some(row) => writeln!(
                text,
                "| {item} | {} | {} | {} | {} |",
                row.figure,
                row.target,
                row.measured.replace('|', "\\|"),
                match row.met {
                    Met::Yes => "yes",
                    Met::No => "**no**",
                    Met::Info => "—",
                }
            ),
            None => writeln!(
                text,
                "| {item} | {figure}… ({scenario}) | — | not run in this invocation | **no** |"
            ),
        };
    }
    text
}
