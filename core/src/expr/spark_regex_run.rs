//! The cheapest capture search of `regexp_extract` (`spark_regex.rs`;
//! DESIGN.md "Expressions"): a pattern of the shape `literal(class+)` — a
//! literal, then one capture group of a greedy, unbounded repetition of one
//! character class (`/item/(\d+)`, `id=([a-z]*)`, `user:(\w{2,})`), the
//! commonest extraction pattern there is.
//!
//! For that shape the leftmost match starts at the first place the literal
//! occurs that is followed by at least `min` characters of the class, and the
//! greedy repetition takes all of the class's characters that follow. So the
//! search is a `memchr` for the literal and a byte loop over a table of the
//! class's ASCII members, with no automaton at all. The shape is recognised
//! from the pattern as the `regex` crate parses it (its HIR), so flags are
//! taken into account: `(?i)` turns the literal into classes and the shape no
//! longer fits.
//!
//! Only ASCII is decided here. A run that stops at a non-ASCII character the
//! class may contain (`\d` is Unicode in the `regex` crate's syntax, so `٣`
//! is a digit) leaves the row to the general search, which gives the answer
//! for it; a class with no non-ASCII member stops at such a character.

use memchr::memmem;
use regex_syntax::hir::{Class, Hir, HirKind};

/// A compiled `literal(class{min,})` search.
#[derive(Debug)]
pub(super) struct LiteralRun {
    literal: memmem::Finder<'static>,
    /// The literal's length in bytes.
    literal_len: usize,
    /// Which bytes are ASCII members of the class (no byte of 0x80 or more
    /// is one).
    members: [bool; 256],
    /// Whether a non-ASCII character may belong to the class.
    non_ascii_members: bool,
    /// The fewest characters of the class the group takes.
    min: usize,
}

/// Where a [`LiteralRun`] matched in a value: the byte offsets of the
/// match's start, of the group's start (the end of the literal) and of the
/// end of both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RunMatch {
    pub(super) start: usize,
    pub(super) group_start: usize,
    pub(super) end: usize,
}

impl RunMatch {
    /// Group `group` (0 or 1) of the match in `value`.
    pub(super) fn group<'v>(&self, value: &'v str, group: usize) -> &'v str {
        let start = if group == 0 {
            self.start
        } else {
            self.group_start
        };
        // The offsets are at character boundaries: after a whole literal and
        // after ASCII bytes.
        value.get(start..self.end).unwrap_or("")
    }
}

impl LiteralRun {
    /// The search of `hir` (parsed as `Regex::new` parses it), if the
    /// pattern has the shape `literal(class{min,})`.
    pub(super) fn new(hir: &Hir) -> Option<LiteralRun> {
        let HirKind::Concat(parts) = hir.kind() else {
            return None;
        };
        let [literal, group] = parts.as_slice() else {
            return None;
        };
        let HirKind::Literal(literal) = literal.kind() else {
            return None;
        };
        let HirKind::Capture(group) = group.kind() else {
            return None;
        };
        let HirKind::Repetition(repetition) = group.sub.kind() else {
            return None;
        };
        if group.index != 1 || !repetition.greedy || repetition.max.is_some() {
            return None;
        }
        let mut members = [false; 256];
        let non_ascii_members = match repetition.sub.kind() {
            // One ASCII character (`a+`): a class of one.
            HirKind::Literal(one) => match one.0.as_ref() {
                [b] if b.is_ascii() => {
                    members[usize::from(*b)] = true;
                    false
                }
                _ => return None,
            },
            HirKind::Class(Class::Unicode(class)) => {
                for range in class.ranges() {
                    for c in range.start()..=range.end().min('\x7f') {
                        members[c as usize] = true;
                    }
                }
                class.ranges().iter().any(|r| !r.end().is_ascii())
            }
            HirKind::Class(Class::Bytes(class)) => {
                // A byte class only takes part with Unicode off; one that
                // takes bytes of UTF-8 sequences is left to the regex crate.
                if class.ranges().iter().any(|r| !r.end().is_ascii()) {
                    return None;
                }
                for range in class.ranges() {
                    for b in range.start()..=range.end() {
                        members[usize::from(b)] = true;
                    }
                }
                false
            }
            _ => return None,
        };
        if literal.0.is_empty() {
            return None;
        }
        Some(LiteralRun {
            literal: memmem::Finder::new(&literal.0).into_owned(),
            literal_len: literal.0.len(),
            members,
            non_ascii_members,
            min: usize::try_from(repetition.min).ok()?,
        })
    }

    /// The leftmost match in `value`: `Some(None)` for no match, `None` when
    /// the row is left to the general search (its run met a non-ASCII
    /// character the class may contain).
    pub(super) fn search(&self, value: &str) -> Option<Option<RunMatch>> {
        let bytes = value.as_bytes();
        let mut from = 0;
        while let Some(found) = self.literal.find(&bytes[from..]) {
            let start = from + found;
            let group_start = start + self.literal_len;
            let run = bytes[group_start..]
                .iter()
                .position(|b| !self.members[usize::from(*b)]);
            let end = run.map_or(bytes.len(), |r| group_start + r);
            if self.non_ascii_members && end < bytes.len() && !bytes[end].is_ascii() {
                return None;
            }
            if end - group_start >= self.min {
                return Some(Some(RunMatch {
                    start,
                    group_start,
                    end,
                }));
            }
            from = start + 1;
        }
        Some(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(pattern: &str) -> Option<LiteralRun> {
        LiteralRun::new(&regex_syntax::Parser::new().parse(pattern).unwrap())
    }

    /// Group 1 as the run finds it: `Some(None)` for no match, `None` for a
    /// row left to the general search.
    fn group(pattern: &str, value: &str) -> Option<Option<String>> {
        let found = run(pattern).unwrap().search(value)?;
        Some(found.map(|m| m.group(value, 1).to_string()))
    }

    #[test]
    fn the_literal_run_shapes_are_recognised() {
        for pattern in [
            r"/item/(\d+)",
            r"key=(\d*)",
            r"id:([a-z]{2,})",
            r"é=([^;]+)",
            r"(?-u)x=([a-f]+)",
            r"aa(b+)",
        ] {
            assert!(run(pattern).is_some(), "{pattern}");
        }
    }

    #[test]
    fn other_shapes_are_left_to_the_general_search() {
        for pattern in [
            // Flags that change the literal, anchors, alternation.
            r"(?i)/item/(\d+)",
            r"^/item/(\d+)",
            r"/item/(\d+)$",
            r"/item/(\d+)|/x",
            r"(?:/item/|/x/)(\d+)",
            // Not one greedy, unbounded repetition of one class.
            r"/item/(\d+?)",
            r"(?U)/item/(\d+)",
            r"/item/(\d{1,3})",
            r"/item/(\d)",
            r"/item/(\d+)(x)",
            r"/item/(\d+x)",
            r"/item/\d+",
            r"/item/(?:\d+)",
            // No literal first.
            r"(\d+)",
            r"\w(\d+)",
            // A repetition of more than one character.
            r"x=(ab+)",
            r"x=((?:ab)+)",
            r"x=(é+)",
        ] {
            assert!(run(pattern).is_none(), "{pattern}");
        }
    }

    #[test]
    fn the_run_finds_the_leftmost_literal_with_enough_of_the_class() {
        let some = |s: &str| Some(Some(s.to_string()));
        assert_eq!(group(r"/item/(\d+)", "/item/x/item/42?/item/7"), some("42"));
        assert_eq!(group(r"/item/(\d+)", "https://a/item/4850"), some("4850"));
        assert_eq!(group(r"/item/(\d+)", "/item/"), Some(None));
        assert_eq!(group(r"/item/(\d+)", ""), Some(None));
        assert_eq!(group(r"/item/(\d+)", "no item"), Some(None));
        assert_eq!(group(r"key=(\d*)", "key=x;key=1"), some(""));
        assert_eq!(group(r"id:([a-z]{2,})", "id:a id:bc"), some("bc"));
        // Overlapping places of the literal.
        assert_eq!(group(r"aa(b+)", "aaab"), some("b"));
        // A non-ASCII literal, and a run that stops at a character the class
        // cannot contain.
        assert_eq!(group(r"é=([a-z]+)", "é=abç"), some("ab"));
        assert_eq!(group(r"=([0-9]+)", "=12é"), some("12"));
    }

    #[test]
    fn a_run_that_meets_a_non_ascii_member_is_left_to_the_general_search() {
        // `\d` has non-ASCII members (`٣`), `[^/]` almost only.
        assert_eq!(group(r"/item/(\d+)", "/item/12٣"), None);
        assert_eq!(group(r"/item/(\d+)", "/item/٣"), None);
        assert_eq!(group(r"/item/([^/]+)", "/item/bü/"), None);
        // Before any match is found: the general search decides the row.
        assert_eq!(group(r"/item/(\d+)", "/item/٣ /item/5"), None);
    }
}
