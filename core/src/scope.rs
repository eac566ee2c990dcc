//! `StreamScope`: the loop context of an operator.
//!
//! Implements section "I - Introduce StreamScope" of the seed
//! `FLIP-15-scoped-loops-and-termination.txt`: a scope is immutable, one per
//! loop, and holds the chain of its outer scopes. Operators outside every loop
//! have the root scope (level 0); every `iterate` nests a new scope in the
//! scope of its input; `unnest` gives the outer scope back. The "API
//! Restrictions" paragraph of the same seed decides [`check_same_scope`]:
//! binary operations (union, connect, join, ...) may only combine streams of
//! the same scope, which the graph builder checks when the graph is built.
//!
//! Two scopes are equal when they name the same loop at the same place of the
//! nesting, i.e. when their chains of loop ids are equal; loop ids are unique
//! within a job, so this is equality by loop identity.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::error::{Error, Result};

/// The loop context of a stream: the loop it belongs to and all loops around
/// it. Cloning is cheap (one reference count).
#[derive(Clone, Default)]
pub struct StreamScope(Option<Arc<ScopeNode>>);

struct ScopeNode {
    loop_id: u32,
    level: u32,
    outer: StreamScope,
}

impl StreamScope {
    /// The scope of every operator outside all loops (level 0).
    pub fn root() -> Self {
        StreamScope(None)
    }

    /// The scope of a loop `loop_id` nested directly in `self`.
    pub fn nest(&self, loop_id: u32) -> StreamScope {
        StreamScope(Some(Arc::new(ScopeNode {
            loop_id,
            level: self.level() + 1,
            outer: self.clone(),
        })))
    }

    /// The scope directly around this one; `None` for the root scope.
    pub fn unnest(&self) -> Option<StreamScope> {
        self.0.as_ref().map(|n| n.outer.clone())
    }

    /// Number of outer scopes, i.e. how many loops enclose the stream
    /// (0 for the root scope).
    pub fn level(&self) -> u32 {
        self.0.as_ref().map_or(0, |n| n.level)
    }

    /// The loop this scope belongs to; `None` for the root scope.
    pub fn loop_id(&self) -> Option<u32> {
        self.0.as_ref().map(|n| n.loop_id)
    }

    /// Whether this is the root scope.
    pub fn is_root(&self) -> bool {
        self.0.is_none()
    }

    /// The ids of the loops from the outermost to this one (empty for root).
    pub fn loop_path(&self) -> Vec<u32> {
        let mut path: Vec<u32> = self.iter_loops().collect();
        path.reverse();
        path
    }

    fn iter_loops(&self) -> impl Iterator<Item = u32> + '_ {
        let mut cur = self.0.as_deref();
        std::iter::from_fn(move || {
            let node = cur?;
            cur = node.outer.0.as_deref();
            Some(node.loop_id)
        })
    }

    /// All scopes strictly around this one, innermost first, ending with the
    /// root scope (empty for the root scope itself).
    pub fn outer_scopes(&self) -> Vec<StreamScope> {
        let mut out = Vec::with_capacity(self.level() as usize);
        let mut cur = self.unnest();
        while let Some(scope) = cur {
            cur = scope.unnest();
            out.push(scope);
        }
        out
    }

    /// The enclosing scope at `level` (`self` at its own level, the root at
    /// 0); `None` when `level` is deeper than this scope.
    pub fn scope_at_level(&self, level: u32) -> Option<StreamScope> {
        if level > self.level() {
            return None;
        }
        let mut cur = self.clone();
        while cur.level() > level {
            cur = cur.unnest()?;
        }
        Some(cur)
    }

    /// Whether `self` is nested (at any depth) inside `other`.
    pub fn is_inner_of(&self, other: &StreamScope) -> bool {
        self.level() > other.level()
            && self
                .scope_at_level(other.level())
                .is_some_and(|s| &s == other)
    }

    /// Whether `other` is nested (at any depth) inside `self`.
    pub fn is_outer_of(&self, other: &StreamScope) -> bool {
        other.is_inner_of(self)
    }
}

impl PartialEq for StreamScope {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                Arc::ptr_eq(a, b)
                    || (a.level == b.level && a.loop_id == b.loop_id && a.outer == b.outer)
            }
            _ => false,
        }
    }
}

impl Eq for StreamScope {}

impl Hash for StreamScope {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.level().hash(state);
        for id in self.iter_loops() {
            id.hash(state);
        }
    }
}

impl fmt::Display for StreamScope {
    /// `root scope` or `scope loop 1 > loop 4` (outermost first).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_root() {
            return f.write_str("root scope");
        }
        f.write_str("scope ")?;
        for (i, id) in self.loop_path().iter().enumerate() {
            if i > 0 {
                f.write_str(" > ")?;
            }
            write!(f, "loop {id}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for StreamScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StreamScope({self})")
    }
}

/// Checks that all inputs of the binary (or n-ary) operation `op_name` are of
/// one scope; otherwise an [`Error::Scope`] naming the operator and the first
/// two scopes that differ.
pub fn check_same_scope(op_name: &str, scopes: &[&StreamScope]) -> Result<()> {
    let Some((first, rest)) = scopes.split_first() else {
        return Ok(());
    };
    match rest.iter().find(|s| **s != *first) {
        None => Ok(()),
        Some(other) => Err(Error::Scope {
            message: format!(
                "operator '{op_name}' combines streams of different loop scopes ({first} and \
                 {other}); binary operations are only allowed within one scope, so bring the \
                 streams into the same loop (or out of it) first"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn test_root_scope_has_level_zero_and_no_outer() {
        let root = StreamScope::root();
        assert_eq!(root.level(), 0);
        assert!(root.is_root());
        assert_eq!(root.unnest(), None);
        assert!(root.outer_scopes().is_empty());
        assert_eq!(root.loop_id(), None);
        assert_eq!(root, StreamScope::default());
    }

    #[test]
    fn test_nest_and_unnest_track_levels() {
        let root = StreamScope::root();
        let a = root.nest(1);
        let b = a.nest(2);
        let c = b.nest(3);
        assert_eq!((a.level(), b.level(), c.level()), (1, 2, 3));
        assert_eq!(c.unnest(), Some(b.clone()));
        assert_eq!(c.unnest().and_then(|s| s.unnest()), Some(a.clone()));
        assert_eq!(c.outer_scopes(), vec![b.clone(), a.clone(), root.clone()]);
        assert_eq!(c.scope_at_level(1), Some(a.clone()));
        assert_eq!(c.scope_at_level(3), Some(c.clone()));
        assert_eq!(a.scope_at_level(2), None);
        assert_eq!(c.loop_path(), vec![1, 2, 3]);
        assert_eq!(c.to_string(), "scope loop 1 > loop 2 > loop 3");
    }

    #[test]
    fn test_inner_and_outer_relations() {
        let root = StreamScope::root();
        let a = root.nest(1);
        let b = a.nest(2);
        let sibling = a.nest(3);
        let other = root.nest(4);
        assert!(b.is_inner_of(&a) && b.is_inner_of(&root));
        assert!(a.is_outer_of(&b) && root.is_outer_of(&b));
        assert!(!a.is_inner_of(&a) && !a.is_outer_of(&a));
        assert!(!b.is_inner_of(&sibling) && !sibling.is_outer_of(&b));
        assert!(!b.is_inner_of(&other));
        assert!(!root.is_inner_of(&a));
    }

    #[test]
    fn test_equality_is_by_loop_identity() {
        let root = StreamScope::root();
        let a1 = root.nest(1);
        let a2 = root.nest(1);
        assert_eq!(a1, a2, "same loop, separately built");
        assert_ne!(root.nest(1), root.nest(2));
        assert_ne!(root.nest(1).nest(2), root.nest(3).nest(2));
        let set: HashSet<StreamScope> = [a1.clone(), a2, a1.nest(5), root.clone()]
            .into_iter()
            .collect();
        assert_eq!(set.len(), 3);
    }

    #[test]
    fn test_check_same_scope_accepts_one_scope() {
        let a = StreamScope::root().nest(1);
        assert!(check_same_scope("union", &[&a, &a.clone()]).is_ok());
        assert!(check_same_scope("union", &[]).is_ok());
    }

    #[test]
    fn test_check_same_scope_rejects_mixed_scopes_naming_both() {
        let root = StreamScope::root();
        let inner = root.nest(7);
        let err = check_same_scope("join_orders", &[&root, &inner]).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Scope { .. }));
        assert!(msg.contains("operator 'join_orders'"), "{msg}");
        assert!(
            msg.contains("root scope") && msg.contains("scope loop 7"),
            "{msg}"
        );
        assert!(err.is_deterministic());
    }
}
