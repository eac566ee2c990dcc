//! The compiled patterns of Spark's regular-expression functions
//! (`regexp_extract` here, `split` in `spark_nested.rs`; DESIGN.md
//! "Expressions"), and the fast capture search `regexp_extract` runs per row.
//!
//! A pattern is compiled once per task thread and kept (a job's functions see
//! the same few literal patterns batch after batch), not once per batch.
//!
//! Capture groups are what makes a regular expression slow per row: the
//! `regex` crate finds the match's end with a forward DFA, its start with a
//! reverse one, and only then runs a capture engine over the span. When every
//! match of a pattern must begin with a known literal (`/item/(\d+)`), or at
//! the start of the string (`^https?://([^/]+)`), and the pattern is one-pass
//! (at each byte at most one way through it, as most extraction patterns
//! are), [`Pattern::extract`] instead looks for the literal with `memchr` and
//! runs the one-pass DFA anchored at each place it occurs, in order: the first
//! place that matches is the leftmost match, and the one-pass DFA gives the
//! leftmost-first captures there, so the answer is the `regex` crate's (and
//! Java's `Matcher.find`, for the syntax the two share). A pattern of the
//! shape `literal(class+)` needs no automaton at all: see
//! `spark_regex_run.rs`. Other patterns take the `regex` crate's capture
//! search.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use datafusion_common::{exec_err, DataFusionError, Result};
use memchr::memmem;
use regex::{CaptureLocations, Regex};
use regex_automata::dfa::onepass;
use regex_automata::util::captures::Captures;
use regex_automata::{Anchored, Input};
use regex_syntax::hir::literal::{ExtractKind, Extractor};
use regex_syntax::hir::{Hir, Look};

use super::spark_regex_run::LiteralRun;

/// How many places of the literal one row may try before the row falls back
/// to the `regex` crate's search (a string full of the literal would
/// otherwise cost a one-pass attempt at each).
const MAX_ATTEMPTS: usize = 32;

/// The most patterns a thread keeps compiled; past it the table starts over
/// (patterns taken from a column can be as many as the rows).
const MAX_KEPT: usize = 256;

/// A compiled pattern: the `regex` crate's, and the faster capture searches
/// the pattern allows.
#[derive(Debug)]
pub(super) struct Pattern {
    regex: Regex,
    /// For `literal(class+)`.
    run: Option<LiteralRun>,
    anchored: Option<AnchoredCaptures>,
}

/// Where a match of a one-pass pattern can start.
#[derive(Debug)]
enum Start {
    /// Only at the start of the string (`^...`).
    AtZero,
    /// Only where this literal occurs.
    AtLiteral(Box<memmem::Finder<'static>>),
}

#[derive(Debug)]
struct AnchoredCaptures {
    start: Start,
    dfa: onepass::DFA,
}

impl Pattern {
    fn compile(function: &str, pattern: &str) -> Result<Pattern> {
        let regex = Regex::new(pattern).map_err(|e| {
            DataFusionError::Execution(format!("{function}: invalid pattern '{pattern}': {e}"))
        })?;
        // Parsed as `Regex::new` parses it (Unicode on, UTF-8 only).
        let hir = regex_syntax::Parser::new().parse(pattern).ok();
        Ok(Pattern {
            regex,
            run: hir.as_ref().and_then(LiteralRun::new),
            anchored: hir.and_then(|hir| AnchoredCaptures::new(pattern, &hir)),
        })
    }

    /// The pattern compiled for this thread, compiling it on first use.
    /// `function` names the function in the error of a pattern that does not
    /// compile (the pattern is compiled again on the next call then).
    pub(super) fn get(function: &str, pattern: &str) -> Result<Arc<Pattern>> {
        thread_local! {
            static COMPILED: RefCell<HashMap<String, Arc<Pattern>>> =
                RefCell::new(HashMap::new());
        }
        if let Some(found) = COMPILED.with(|c| c.borrow().get(pattern).cloned()) {
            return Ok(found);
        }
        let compiled = Arc::new(Pattern::compile(function, pattern)?);
        COMPILED.with(|c| {
            let mut c = c.borrow_mut();
            if c.len() >= MAX_KEPT {
                c.clear();
            }
            c.insert(pattern.to_string(), Arc::clone(&compiled));
        });
        Ok(compiled)
    }

    pub(super) fn regex(&self) -> &Regex {
        &self.regex
    }

    /// The number of capture groups (group 0, the whole match, not counted).
    pub(super) fn groups(&self) -> usize {
        self.regex.captures_len() - 1
    }

    /// The scratch space of [`Pattern::extract`] (one per caller, reused
    /// across rows).
    pub(super) fn searcher(&self) -> Searcher {
        Searcher {
            locations: self.regex.capture_locations(),
            onepass: self
                .anchored
                .as_ref()
                .map(|a| (a.dfa.create_cache(), a.dfa.create_captures())),
        }
    }

    /// Group `group` (at most [`Pattern::groups`]) of the leftmost match in
    /// `value`: `None` without a match, `Some("")` for a group that took no
    /// part in it.
    pub(super) fn extract<'v>(
        &self,
        searcher: &mut Searcher,
        value: &'v str,
        group: usize,
    ) -> Option<&'v str> {
        if let Some(found) = self.run.as_ref().and_then(|run| run.search(value)) {
            return found.map(|m| m.group(value, group));
        }
        if let (Some(anchored), Some((cache, captures))) =
            (&self.anchored, searcher.onepass.as_mut())
        {
            if let Some(found) = anchored.search(cache, captures, value) {
                return found.then(|| {
                    captures
                        .get_group(group)
                        .map_or("", |span| &value[span.range()])
                });
            }
        }
        let locations = &mut searcher.locations;
        self.regex.captures_read(locations, value)?;
        Some(
            locations
                .get(group)
                .map_or("", |(start, end)| &value[start..end]),
        )
    }
}

/// `pattern` compiled without the literal run's search (for timing it
/// against the one-pass search).
#[cfg(test)]
pub(super) fn compile_without_run(pattern: &str) -> Pattern {
    Pattern {
        run: None,
        ..Pattern::compile("t", pattern).expect("a valid pattern")
    }
}

/// `pattern` compiled with every search it allows.
#[cfg(test)]
pub(super) fn compile(pattern: &str) -> Pattern {
    Pattern::compile("t", pattern).expect("a valid pattern")
}

/// Per-caller scratch space of a [`Pattern`]'s searches.
#[derive(Debug)]
pub(super) struct Searcher {
    locations: CaptureLocations,
    onepass: Option<(onepass::Cache, Captures)>,
}

impl AnchoredCaptures {
    /// The one-pass search of `pattern`, if it is one-pass and its matches
    /// start at the start of the string or at a literal.
    fn new(pattern: &str, hir: &Hir) -> Option<AnchoredCaptures> {
        let start = if hir.properties().look_set_prefix().contains(Look::Start) {
            Start::AtZero
        } else {
            // Every match begins with one of these literals, so with their
            // longest common prefix; none (an infinite set, or a pattern that
            // can match the empty string) leaves the pattern to the regex
            // crate.
            let prefixes = Extractor::new().kind(ExtractKind::Prefix).extract(hir);
            let common = prefixes.longest_common_prefix()?;
            if common.is_empty() {
                return None;
            }
            Start::AtLiteral(Box::new(memmem::Finder::new(common).into_owned()))
        };
        let dfa = onepass::DFA::new(pattern).ok()?;
        Some(AnchoredCaptures { start, dfa })
    }

    /// Whether `value` has a match, its captures in `captures`; `None` when
    /// the row is left to the `regex` crate.
    fn search(
        &self,
        cache: &mut onepass::Cache,
        captures: &mut Captures,
        value: &str,
    ) -> Option<bool> {
        let mut at_start = |start: usize| {
            let input = Input::new(value).range(start..).anchored(Anchored::Yes);
            self.dfa.captures(cache, input, captures);
            captures.is_match()
        };
        match &self.start {
            Start::AtZero => Some(at_start(0)),
            Start::AtLiteral(finder) => {
                let bytes = value.as_bytes();
                let mut from = 0;
                for _ in 0..MAX_ATTEMPTS {
                    let Some(found) = finder.find(&bytes[from..]) else {
                        return Some(false);
                    };
                    if at_start(from + found) {
                        return Some(true);
                    }
                    from += found + 1;
                }
                None
            }
        }
    }
}

/// The pattern of the row before, reused while rows repeat it (a literal
/// pattern: once per batch, and compiled once per thread, see
/// [`Pattern::get`]).
#[derive(Debug, Default)]
pub(super) struct PatternCache(Option<(String, Arc<Pattern>)>);

impl PatternCache {
    /// `pattern` compiled, and whether it differs from the row before's (or
    /// there was none). `function` names the function in the error of a
    /// pattern that does not compile.
    pub(super) fn get(&mut self, function: &str, pattern: &str) -> Result<(&Pattern, bool)> {
        let fresh = !matches!(&self.0, Some((p, _)) if p == pattern);
        if fresh {
            self.0 = Some((pattern.to_string(), Pattern::get(function, pattern)?));
        }
        match &self.0 {
            Some((_, compiled)) => Ok((compiled, fresh)),
            None => exec_err!("{function}: no compiled pattern"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pattern with only the `regex` crate's search.
    fn plain(pattern: &str) -> Pattern {
        Pattern {
            regex: Regex::new(pattern).unwrap(),
            run: None,
            anchored: None,
        }
    }

    /// The fast searches agree with the `regex` crate's on every group: all
    /// of them as compiled, and the one-pass search without the literal run
    /// in front of it.
    fn agree(pattern: &str, values: &[&str]) {
        let compiled = Pattern::compile("t", pattern).unwrap();
        let without_run = Pattern {
            run: None,
            ..Pattern::compile("t", pattern).unwrap()
        };
        let plain = plain(pattern);
        let mut searchers = [
            compiled.searcher(),
            without_run.searcher(),
            plain.searcher(),
        ];
        for value in values {
            for group in 0..=compiled.groups() {
                let [a, b, c] = &mut searchers;
                let expected = plain.extract(c, value, group);
                for (name, pattern, searcher) in
                    [("all", &compiled, a), ("one-pass", &without_run, b)]
                {
                    assert_eq!(
                        pattern.extract(searcher, value, group),
                        expected,
                        "{name}: pattern {:?}, value {value:?}, group {group}",
                        pattern.regex.as_str()
                    );
                }
            }
        }
    }

    const VALUES: &[&str] = &[
        "",
        "https://shop.example.com/item/4850?ref=12",
        "/item//item/12",
        "/item/x/item/7/item/8",
        "no match here",
        "/item/",
        "Ünïcödé /item/٣٤ done",
        "http://www.a.b:80/x",
        "HTTP://WWW.A.B/x",
        "ftp://host",
        "a-b a_b ab",
        "key=1;key=;key=3",
        "/item/12٣",
        "/item/٣ /item/5",
        "/item/5٣",
        "é=abç; é=x",
        "/item/ab?c/item/x",
    ];

    #[test]
    fn one_pass_search_agrees_with_the_regex_crate() {
        for pattern in [
            r"/item/(\d+)",
            r"^https?://([^/:?#]+)",
            r"^[a-z]+://(?:www\.)?([^/:?#]+)",
            r"key=(\d*)",
            r"key=(\d)?;",
            r"(a)-(b)|(a)_(b)",
            r"\bab\b",
            r"/item/(\d+)|/x",
            r"(\d+)",
            r"(?i)item/(\d+)",
            r"é(.)",
            r"^",
            // The literal run's shape.
            r"=([^;]+)",
            r"é=(\w+)",
            r"/item/([^/?]{2,})",
            r"(?-u)/item/([0-9]+)",
        ] {
            agree(pattern, VALUES);
        }
    }

    #[test]
    fn one_pass_search_agrees_on_random_strings() {
        // Strings over an alphabet that makes near-misses of the literal
        // common, from a fixed-seed linear congruential generator.
        let alphabet: Vec<char> = "/item/0123 ;=kéy:/٣".chars().collect();
        let mut state = 42u64;
        let mut next = |bound: usize| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as usize % bound
        };
        let values: Vec<String> = (0..2_000)
            .map(|_| {
                (0..next(40))
                    .map(|_| alphabet[next(alphabet.len())])
                    .collect()
            })
            .collect();
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        for pattern in [
            r"/item/(\d+)",
            r"item/(\d*)(;)?",
            r"^/(i)?(\w+)",
            r"ké(y)?=([^;]*)",
            r"/(?:item|it)/(\d)",
            r"=([^;]*)",
            r"/(\d{2,})",
            r"é(\w+)",
            r"y(\d*)",
        ] {
            agree(pattern, &values);
        }
    }

    #[test]
    fn the_literal_run_shape_takes_the_run_search() {
        let compiled = Pattern::compile("t", r"/item/(\d+)").unwrap();
        assert!(compiled.run.is_some());
        let compiled = Pattern::compile("t", r"(?i)/item/(\d+)").unwrap();
        assert!(compiled.run.is_none());
    }

    #[test]
    fn literal_and_start_patterns_take_the_one_pass_search() {
        for pattern in [r"/item/(\d+)", r"^https?://([^/:?#]+)", r"key=(\d)?;"] {
            let compiled = Pattern::compile("t", pattern).unwrap();
            assert!(compiled.anchored.is_some(), "{pattern}");
        }
        // No literal every match starts with, or not one-pass.
        for pattern in [
            r"(\d+)",
            r"(?i)item/(\d+)",
            r"^[a-z]+://(?:www\.)?([^/:?#]+)",
        ] {
            let compiled = Pattern::compile("t", pattern).unwrap();
            assert!(compiled.anchored.is_none(), "{pattern}");
        }
    }

    #[test]
    fn a_row_full_of_the_literal_falls_back_to_the_regex_crate() {
        // Not the literal run's shape: the one-pass search tries each place.
        let value = format!("{}/item/5?", "/item/x".repeat(MAX_ATTEMPTS + 3));
        let compiled = Pattern::compile("t", r"/item/(\d+)\?").unwrap();
        assert!(compiled.run.is_none() && compiled.anchored.is_some());
        let mut searcher = compiled.searcher();
        assert_eq!(compiled.extract(&mut searcher, &value, 1), Some("5"));
    }
}
