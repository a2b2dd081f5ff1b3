//! Man pages and shell completions, generated from the clap definitions in
//! [`crate::cli::Cli`], so they can never describe options the binary does
//! not have.
//!
//! The hidden `solocron generate-docs DIR` writes them; `scripts/package`
//! runs it with the binary it is about to package, and nothing
//! generated is committed. Layout under `DIR`:
//! `man/solocron.1` (with FILES and SEE ALSO sections clap has no notion
//! of) and one `man/solocron-SUBCOMMAND.1` per visible subcommand;
//! `completions/solocron.bash`, `completions/_solocron` (zsh) and
//! `completions/solocron.fish`.
//!
//! Failure model: the first file that cannot be created or written stops
//! the run with an error naming that path; files written before it stay
//! (the caller removes `DIR` first for a clean set).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::CommandFactory as _;
use clap_complete::Shell;

use crate::cli::Cli;

/// The shells that get a completion file, and the file name each one's
/// vendor directory expects.
pub const SHELLS: [(Shell, &str); 3] = [
    (Shell::Bash, "solocron.bash"),
    (Shell::Zsh, "_solocron"),
    (Shell::Fish, "solocron.fish"),
];

/// Writes the man pages to `dir/man` and the completions to
/// `dir/completions`; returns every file written, man pages first.
pub fn generate(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let man = dir.join("man");
    create_dir(&man)?;
    // The top page and one per visible subcommand (`solocron-run.1`, ...;
    // the hidden `generate-docs` gets none), named and cross-referenced by
    // clap_mangen itself.
    clap_mangen::generate_to(Cli::command(), &man)
        .with_context(|| format!("cannot write the man pages into {}", man.display()))?;
    append_files_section(&man.join("solocron.1"))?;
    let mut pages = std::fs::read_dir(&man)
        .and_then(|entries| {
            entries
                .map(|entry| entry.map(|e| e.path()))
                .collect::<Result<Vec<_>, _>>()
        })
        .with_context(|| format!("cannot list the man pages written to {}", man.display()))?;
    pages.sort();
    written.extend(pages);

    let completions = dir.join("completions");
    create_dir(&completions)?;
    for (shell, file) in SHELLS {
        let path = completions.join(file);
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut visible_only(), "solocron", &mut script);
        write(&path, &script)?;
        written.push(path);
    }
    Ok(written)
}

/// [`Cli`] without its hidden subcommands: clap_complete offers hidden
/// subcommands too (clap_mangen skips them), and clap cannot remove one,
/// so this is a new command with the same name, version, about and the
/// visible subcommands (the top level has no arguments of its own).
fn visible_only() -> clap::Command {
    let cli = Cli::command();
    let about = cli.get_about().cloned().unwrap_or_default();
    clap::Command::new("solocron")
        .version(env!("CARGO_PKG_VERSION"))
        .about(about)
        .subcommand_required(true)
        .subcommands(
            cli.get_subcommands()
                .filter(|sub| !sub.is_hide_set())
                .cloned(),
        )
}

/// The files `solocron` reads, for the top page's FILES section.
const FILES: [(&str, &str); 4] = [
    (
        "/etc/solocron/jobs.toml",
        "The jobs and the fleet's Redis (--config, SOLOCRON_CONFIG); the same file on every server. \
         As installed it is refused until [redis] and a job are added.",
    ),
    (
        "/etc/solocron/daemon.env",
        "Optional SOLOCRON_* settings of the daemon (e.g. SOLOCRON_NODE_ID), read by the unit at start.",
    ),
    (
        "/etc/solocron/env",
        "NAME=value lines for ${VAR} in jobs.toml, when [daemon] env_file names it; read at start and at every reload.",
    ),
    (
        "/usr/lib/systemd/system/solocron.service",
        "The unit of the Debian package (installed by hand: /etc/systemd/system/solocron.service). \
         systemctl enable --now solocron starts the daemon; systemctl reload solocron checks and re-reads jobs.toml.",
    ),
];

/// Adds FILES and SEE ALSO to the top page (clap knows neither).
fn append_files_section(page: &Path) -> anyhow::Result<()> {
    use clap_mangen::roff::{Roff, bold, roman};
    let mut roff = Roff::new();
    roff.control("SH", ["FILES"]);
    for (path, what) in FILES {
        roff.control("TP", []);
        roff.text([bold(path)]);
        roff.text([roman(what)]);
    }
    roff.control("SH", ["SEE ALSO"]);
    let mut see_also: Vec<String> = Cli::command()
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set())
        .map(|sub| format!("solocron-{}(1)", sub.get_name()))
        .collect();
    see_also.push("systemctl(1); /usr/share/doc/solocron/README.md and docs/ there.".into());
    roff.text([roman(see_also.join(", "))]);
    let mut text = std::fs::read(page)
        .with_context(|| format!("cannot read the man page {} just written", page.display()))?;
    roff.to_writer(&mut text)
        .with_context(|| format!("cannot render the FILES section of {}", page.display()))?;
    write(page, &text)
}

fn create_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| {
        format!(
            "cannot create the directory {}; give a directory you may write to",
            dir.display()
        )
    })
}

fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, bytes).with_context(|| {
        format!(
            "cannot write {}; check that its directory is writable and the disk is not full",
            path.display()
        )
    })
}
