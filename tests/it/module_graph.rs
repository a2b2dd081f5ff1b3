//! Dependencies between the crate's top-level modules point one way.
//!
//! Reads every file under `src/` (except `lib.rs` and `main.rs`), finds which
//! other top-level modules it refers to (`crate::Y`, `use crate::{Y, ..}`
//! groups, `super::` paths that leave the module) and fails naming a cycle
//! if the graph of top-level modules has one. Comments and string literals
//! are skipped, so a doc that mentions `crate::y` is not an edge.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Top-level module -> the top-level modules it refers to.
type Graph = BTreeMap<String, BTreeSet<String>>;

#[test]
fn top_level_modules_have_no_cycle() {
    let graph = module_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    for (module, uses) in &graph {
        let uses: Vec<&str> = uses.iter().map(String::as_str).collect();
        println!("{module} -> {}", uses.join(", "));
    }
    let cycles = cycles(&graph);
    assert!(
        cycles.is_empty(),
        "top-level modules of src/ depend on each other in a circle; move the \
         shared thing into a module both can use:\n{}",
        cycles
            .iter()
            .map(|cycle| format!("  {}", cycle.join(" -> ")))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_check_finds_crate_super_and_grouped_paths_and_skips_comments() {
    let refs = |text: &str, path: &[&str]| {
        let path: Vec<String> = path.iter().map(|s| s.to_string()).collect();
        referenced_modules(text, &path)
    };
    let set = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(
        refs("use crate::{lock::Lease, exec, self};", &["daemon"]),
        set(&["lock", "exec"])
    );
    assert_eq!(
        refs(
            "let x = crate::history::Entry::default();",
            &["daemon", "a"]
        ),
        set(&["history"])
    );
    assert_eq!(
        refs(
            "use super::super::lock::Claim; use super::Thing;",
            &["daemon", "a"]
        ),
        set(&["lock"])
    );
    assert_eq!(refs("use super::exec;", &["daemon"]), set(&["exec"]));
    assert_eq!(
        refs(
            "// crate::lock\n/* crate::exec */ let s = \"crate::cli\"; let c = '\"';",
            &["daemon"]
        ),
        set(&[])
    );
    let mut graph = Graph::new();
    graph.entry("a".into()).or_default().insert("b".into());
    graph.entry("b".into()).or_default().insert("c".into());
    graph.entry("c".into()).or_default().insert("a".into());
    assert_eq!(cycles(&graph), vec![vec!["a", "b", "c", "a"]]);
}

fn module_graph(src: &Path) -> Graph {
    let mut graph = Graph::new();
    for file in rust_files(src) {
        let relative = file.strip_prefix(src).unwrap();
        let mut path: Vec<String> = relative
            .iter()
            .map(|part| part.to_string_lossy().into_owned())
            .collect();
        let last = path.pop().unwrap();
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" {
            path.push(stem.to_string());
        }
        if path.len() == 1 && (path[0] == "lib" || path[0] == "main") {
            continue;
        }
        let text = fs::read_to_string(&file).unwrap();
        let top = path[0].clone();
        let uses = graph.entry(top.clone()).or_default();
        for module in referenced_modules(&text, &path) {
            if module != top {
                uses.insert(module);
            }
        }
    }
    let known: BTreeSet<String> = graph.keys().cloned().collect();
    for uses in graph.values_mut() {
        uses.retain(|module| known.contains(module));
    }
    graph
}

pub(crate) fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files
}

#[derive(Debug, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Other,
}

/// The tokens that matter for paths; comments, strings and chars dropped.
fn tokens(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(Token::Other);
        } else if c == 'r' && matches!(next, Some('#') | Some('"')) && raw_string_start(&chars, i) {
            let mut hashes = 0;
            i += 1;
            while chars[i] == '#' {
                hashes += 1;
                i += 1;
            }
            i += 1;
            let end: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let end: Vec<char> = end.chars().collect();
            while i < chars.len() && !chars[i..].starts_with(&end) {
                i += 1;
            }
            i += end.len();
            out.push(Token::Other);
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
            out.push(Token::Other);
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c == ':' && next == Some(':') {
            i += 2;
            out.push(Token::PathSep);
        } else {
            i += 1;
            if !c.is_whitespace() {
                out.push(match c {
                    '{' => Token::Open,
                    '}' => Token::Close,
                    ',' => Token::Comma,
                    _ => Token::Other,
                });
            }
        }
    }
    out
}

/// `r"`, `r#"`, `r##"` … not preceded by an identifier character.
fn raw_string_start(chars: &[char], i: usize) -> bool {
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return false;
    }
    let mut j = i + 1;
    while chars.get(j) == Some(&'#') {
        j += 1;
    }
    chars.get(j) == Some(&'"')
}

/// Top-level modules a file at `path` (module path inside the crate) names.
fn referenced_modules(text: &str, path: &[String]) -> BTreeSet<String> {
    let tokens = tokens(text);
    let mut found = BTreeSet::new();
    let mut i = 0;
    while i < tokens.len() {
        let start = match &tokens[i] {
            Token::Ident(word) if word == "crate" => Some((0, i + 1)),
            Token::Ident(word) if word == "super" && !after_path_sep(&tokens, i) => {
                let mut depth = path.len();
                let mut j = i;
                while matches!(&tokens.get(j), Some(Token::Ident(w)) if w == "super")
                    && tokens.get(j + 1) == Some(&Token::PathSep)
                {
                    depth = depth.saturating_sub(1);
                    j += 2;
                }
                (depth == 0).then_some((0, j - 1))
            }
            _ => None,
        };
        if let Some((_, sep)) = start
            && tokens.get(sep) == Some(&Token::PathSep)
        {
            match tokens.get(sep + 1) {
                Some(Token::Ident(module)) => {
                    found.insert(module.clone());
                }
                Some(Token::Open) => found.extend(group_heads(&tokens, sep + 1)),
                _ => {}
            }
        }
        i += 1;
    }
    found.retain(|module| module != "self" && module != "super" && module != "crate");
    found
}

fn after_path_sep(tokens: &[Token], i: usize) -> bool {
    i > 0 && tokens[i - 1] == Token::PathSep
}

/// The first name of each item in the `{ .. }` group opening at `open`.
fn group_heads(tokens: &[Token], open: usize) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut item_start = true;
    for token in &tokens[open..] {
        match token {
            Token::Open => {
                depth += 1;
                if depth == 1 {
                    item_start = true;
                }
            }
            Token::Close => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            Token::Comma if depth == 1 => item_start = true,
            Token::Ident(name) if depth == 1 && item_start => {
                heads.push(name.clone());
                item_start = false;
            }
            _ if depth == 1 => item_start = false,
            _ => {}
        }
    }
    heads
}

/// One cycle per strongly connected group of modules, as `a -> b -> a`.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut reported: BTreeSet<String> = BTreeSet::new();
    for start in graph.keys() {
        if reported.contains(start) {
            continue;
        }
        if let Some(cycle) = shortest_cycle(graph, start) {
            reported.extend(cycle.iter().cloned());
            found.push(cycle);
        }
    }
    found
}

/// The shortest path from `start` back to itself, by breadth-first search.
fn shortest_cycle(graph: &Graph, start: &str) -> Option<Vec<String>> {
    let mut came_from: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start.to_string()]);
    while let Some(module) = queue.pop_front() {
        for next in graph.get(&module).into_iter().flatten() {
            if next == start {
                // Walk back from `module` to `start`, then turn it round.
                let mut path = vec![start.to_string(), module.clone()];
                let mut at = module.clone();
                while let Some(prev) = came_from.get(&at) {
                    path.push(prev.clone());
                    at = prev.clone();
                }
                path.reverse();
                return Some(path);
            }
            if next != start && !came_from.contains_key(next) {
                came_from.insert(next.clone(), module.clone());
                queue.push_back(next.clone());
            }
        }
    }
    None
}
