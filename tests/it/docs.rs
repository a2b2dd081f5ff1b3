//! The docs name files that exist.
//!
//! Reads README.md, CONTRIBUTING.md and docs/*.md (not CHANGELOG.md, whose
//! older entries name files as they were then) and checks two kinds of
//! reference: a relative Markdown link `[..](path)`, and a path in
//! backticks (`src/run.rs`, `scripts/bench --only p`, or a file of `src/`
//! written without it, `daemon/slots.rs`). A path with a placeholder or a
//! glob (`<NAME>`, `*`, `{..}`) is not checked. And the README and the
//! performance page stay within their length.

use std::fs;
use std::path::{Path, PathBuf};

use crate::module_graph::rust_files;

/// The repository's top-level folders a path in backticks may start with.
const ROOTS: &[&str] = &[
    "src/",
    "tests/",
    "bench/",
    "docs/",
    "scripts/",
    "examples/",
    "packaging/",
    "contrib/",
    ".ci/",
];

#[test]
fn docs_name_files_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
    let mut in_docs: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .expect("docs/ is readable")
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    in_docs.sort();
    docs.extend(in_docs);

    let mut checked = 0;
    let mut missing = Vec::new();
    for doc in &docs {
        let text = fs::read_to_string(doc).expect("a doc is readable");
        let name = doc.strip_prefix(root).unwrap_or(doc).display().to_string();
        let here = doc.parent().unwrap_or(root);
        for (line_no, line) in text.lines().enumerate() {
            for target in links(line) {
                checked += 1;
                if !here.join(target).exists() {
                    missing.push(format!("{name}:{}: link to {target}", line_no + 1));
                }
            }
            for path in backticked_paths(line) {
                checked += 1;
                if !path_exists(root, path) {
                    missing.push(format!("{name}:{}: `{path}`", line_no + 1));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the docs name files that do not exist; fix the path or the doc:\n{}",
        missing.join("\n")
    );
    // The docs name well over a hundred files: a parser that finds none
    // would pass the check above without checking anything.
    assert!(checked > 100, "only {checked} references found in the docs");
}

/// The README is the front door and docs/performance.md today's figures:
/// both stay short (the reference goes to docs/, dated runs to
/// bench/results/).
#[test]
fn the_readme_and_the_performance_page_stay_short() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (doc, most) in [("README.md", 400), ("docs/performance.md", 300)] {
        let text = fs::read_to_string(root.join(doc)).expect("a doc is readable");
        let lines = text.lines().count();
        assert!(
            lines <= most,
            "{doc} has {lines} lines, at most {most}: move reference text to docs/ \
             and dated measurements to bench/results/"
        );
    }
}

/// A relative link's path: not a URL, not an anchor of the same page.
fn links(line: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = rest[..end].split('#').next().unwrap_or_default();
        if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
            found.push(target);
        }
        rest = &rest[end..];
    }
    found
}

/// The paths in backticks: the first word of a span that starts with one
/// of [`ROOTS`] or is a `.rs` file, without a `:LINE` or punctuation after.
fn backticked_paths(line: &str) -> Vec<&str> {
    line.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|span| span.split_whitespace().next())
        .map(|word| {
            let word = word.split(':').next().unwrap_or_default();
            word.trim_end_matches([',', ';', ')', '.'])
        })
        .filter(|word| ROOTS.iter().any(|root| word.starts_with(root)) || word.ends_with(".rs"))
        .filter(|word| !word.contains(['*', '<', '>', '{', '}', '…', '$']))
        .filter(|word| !word.starts_with("tests/X") && !word.contains("NAME"))
        .collect()
}

/// `path` from the repository's root; a `.rs` path outside [`ROOTS`] may
/// also be the end of a file of `src/` (`daemon/slots.rs`, `launch.rs`).
fn path_exists(root: &Path, path: &str) -> bool {
    if root.join(path).exists() {
        return true;
    }
    if ROOTS.iter().any(|prefix| path.starts_with(prefix)) || !path.ends_with(".rs") {
        return false;
    }
    rust_files(&root.join("src"))
        .iter()
        .any(|file| file.ends_with(path))
}
