//! Node tags and a job's `run_on` (guarantee 13, docs/guarantees.md).
//!
//! A node's tags (`role=db,zone=eu-west`) are its own, given by `--tags` /
//! `SOLOCRON_TAGS` of `run`, never in the shared `jobs.toml`; every node
//! also has `node=<id>`. A job's `run_on` lists terms `key=value` that must
//! all match; a value ending in `*` matches every value starting with what
//! comes before it (`node=web-*`, and `zone=*`: the tag is set at all).
//!
//! Failure model: pure parsing and matching. Tags published by another
//! node are read leniently ([`Tags::from_published`]: a malformed pair is
//! left out, so that node is eligible for less, never for more).

use std::collections::BTreeMap;
use std::fmt;

/// The implicit tag every node has.
pub const NODE_KEY: &str = "node";

/// One node's tags, `node=<id>` included; sorted by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tags(BTreeMap<String, String>);

/// One term of a job's `run_on`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    pub key: String,
    /// The value, without a trailing `*`.
    pub value: String,
    /// Whether the value ended in `*` (a prefix).
    pub prefix: bool,
}

/// A job's `run_on`: every term must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOn(Vec<Term>);

/// Whether `key` may be a tag's key: 1 to 64 of `A-Z a-z 0-9 _ . -`.
fn valid_key(key: &str) -> bool {
    (1..=64).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Whether `value` may be a tag's value: 1 to 128 of `A-Z a-z 0-9 _ . - : /`.
fn valid_value(value: &str) -> bool {
    (1..=128).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b':' | b'/'))
}

impl Tags {
    /// The tags of node `node` from `--tags` text (`role=db,zone=eu-west`;
    /// empty: none but `node=<id>`). Errors say which pair and why.
    pub fn parse(text: &str, node: &str) -> Result<Tags, String> {
        let mut tags = BTreeMap::new();
        for pair in text
            .split(',')
            .map(str::trim)
            .filter(|pair| !pair.is_empty())
        {
            let Some((key, value)) = pair.split_once('=') else {
                return Err(format!(
                    "`{pair}` is not `key=value` (tags look like `role=db,zone=eu-west`)"
                ));
            };
            let (key, value) = (key.trim(), value.trim());
            if !valid_key(key) {
                return Err(format!(
                    "`{pair}`: a key is 1 to 64 letters, digits, `_`, `.` or `-`"
                ));
            }
            if !valid_value(value) {
                return Err(format!(
                    "`{pair}`: a value is 1 to 128 letters, digits, `_`, `.`, `-`, `:` or `/`"
                ));
            }
            if key == NODE_KEY {
                return Err(format!(
                    "`{pair}`: `node` is every node's own id (`node={node}` here); set it with --node-id"
                ));
            }
            if tags.insert(key.to_string(), value.to_string()).is_some() {
                return Err(format!("`{key}` is given twice"));
            }
        }
        tags.insert(NODE_KEY.to_string(), node.to_string());
        Ok(Tags(tags))
    }

    /// Only `node=<id>`: a node that published no tags.
    pub fn node_only(node: &str) -> Tags {
        Tags(BTreeMap::from([(NODE_KEY.to_string(), node.to_string())]))
    }

    /// Tags another node published ([`Tags::published`]); `node=<id>` is
    /// always `node`'s, whatever the text says.
    pub fn from_published(text: &str, node: &str) -> Tags {
        let mut tags = BTreeMap::new();
        for (key, value) in text.split(',').filter_map(|pair| pair.split_once('=')) {
            if valid_key(key) && valid_value(value) && key != NODE_KEY {
                tags.insert(key.to_string(), value.to_string());
            }
        }
        tags.insert(NODE_KEY.to_string(), node.to_string());
        Tags(tags)
    }

    /// The text other nodes read: `key=value` pairs by key, `node` left
    /// out (each reader knows the id).
    pub fn published(&self) -> String {
        self.0
            .iter()
            .filter(|(key, _)| key.as_str() != NODE_KEY)
            .map(|(key, value)| format!("{key}={value}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }
}

impl fmt::Display for Tags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pairs: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        f.write_str(&pairs.join(","))
    }
}

impl Term {
    /// One `run_on` term; errors say what a term looks like.
    pub fn parse(text: &str) -> Result<Term, String> {
        let Some((key, value)) = text.split_once('=') else {
            return Err(format!(
                "`{text}` is not `key=value` (terms look like `role=db` or `node=web-*`)"
            ));
        };
        if !valid_key(key) {
            return Err(format!(
                "`{text}`: a key is 1 to 64 letters, digits, `_`, `.` or `-`"
            ));
        }
        let (value, prefix) = match value.strip_suffix('*') {
            Some(stem) => (stem, true),
            None => (value, false),
        };
        if !(valid_value(value) || prefix && value.is_empty()) {
            return Err(format!(
                "`{text}`: a value is 1 to 128 letters, digits, `_`, `.`, `-`, `:` or `/`, \
                 and may end in `*`"
            ));
        }
        Ok(Term {
            key: key.to_string(),
            value: value.to_string(),
            prefix,
        })
    }

    fn matches(&self, tags: &Tags) -> bool {
        match tags.get(&self.key) {
            Some(value) if self.prefix => value.starts_with(&self.value),
            Some(value) => value == self.value,
            None => false,
        }
    }
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}={}{}",
            self.key,
            self.value,
            if self.prefix { "*" } else { "" }
        )
    }
}

impl RunOn {
    pub fn new(terms: Vec<Term>) -> RunOn {
        RunOn(terms)
    }

    /// Whether a node with `tags` may run the job: every term matches.
    pub fn matches(&self, tags: &Tags) -> bool {
        self.0.iter().all(|term| term.matches(tags))
    }

    pub fn terms(&self) -> &[Term] {
        &self.0
    }
}

impl fmt::Display for RunOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let terms: Vec<String> = self.0.iter().map(Term::to_string).collect();
        f.write_str(&terms.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_on(terms: &[&str]) -> RunOn {
        RunOn::new(
            terms
                .iter()
                .map(|t| Term::parse(t).expect("a term"))
                .collect(),
        )
    }

    #[test]
    fn tags_parse_with_the_node_id_and_publish_without_it() {
        let tags = Tags::parse(" zone=eu-west , role=db", "db-1").expect("tags");
        assert_eq!(tags.to_string(), "node=db-1,role=db,zone=eu-west");
        assert_eq!(tags.published(), "role=db,zone=eu-west");
        assert_eq!(Tags::from_published(&tags.published(), "db-1"), tags);
        assert_eq!(Tags::parse("", "n").expect("none"), Tags::node_only("n"));
    }

    #[test]
    fn bad_tags_are_refused_with_the_pair_named() {
        for (text, says) in [
            ("role", "`role` is not `key=value`"),
            ("role=", "a value is"),
            ("=db", "a key is"),
            ("role=a b", "a value is"),
            ("role=db*", "a value is"),
            ("node=x", "`node` is every node's own id"),
            ("role=db,role=web", "`role` is given twice"),
        ] {
            let err = Tags::parse(text, "n1").expect_err(text);
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn every_term_must_match_and_a_star_matches_a_prefix() {
        let db_eu = Tags::parse("role=db,zone=eu-west", "db-1").expect("tags");
        let web = Tags::parse("role=web", "web-2").expect("tags");
        assert!(run_on(&["role=db"]).matches(&db_eu));
        assert!(!run_on(&["role=db"]).matches(&web));
        assert!(run_on(&["role=db", "zone=eu-*"]).matches(&db_eu));
        assert!(!run_on(&["role=db", "zone=us-*"]).matches(&db_eu));
        assert!(run_on(&["node=web-*"]).matches(&web));
        assert!(run_on(&["zone=*"]).matches(&db_eu));
        assert!(!run_on(&["zone=*"]).matches(&web));
        assert!(run_on(&[]).matches(&web));
    }

    #[test]
    fn a_published_text_never_makes_a_node_eligible_for_more() {
        let tags = Tags::from_published("role=db,node=db-9,bad pair,zone=a b", "web-1");
        assert_eq!(tags.to_string(), "node=web-1,role=db");
    }

    #[test]
    fn bad_terms_are_refused() {
        assert!(Term::parse("role").is_err());
        assert!(Term::parse("=db").is_err());
        assert!(Term::parse("role=").is_err());
        assert!(Term::parse("role=d b").is_err());
        assert_eq!(
            Term::parse("node=web-*").expect("term").to_string(),
            "node=web-*"
        );
    }
}
