//! The one place the GIL is released: blocking calls into the engine run
//! detached from the interpreter so other Python threads (and the engine's
//! own Python operators) can run.

use pyo3::prelude::*;

/// Runs `f` with the GIL released.
pub fn detached<T, F>(py: Python<'_>, f: F) -> T
where
    F: Send + FnOnce() -> T,
    T: Send,
{
    py.detach(f)
}
