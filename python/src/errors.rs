//! The one error table: every core error variant maps to one exception class
//! of `eddyline.errors`, and a Python exception raised by user code maps to
//! a core error that keeps the exception (for `__cause__`) and its
//! traceback.

use std::sync::Arc;

use eddyline_core::error::{Error, Opaque};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

fn errors_module(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    py.import("eddyline.errors")
}

/// The Python exception for a core error.
pub fn to_py(py: Python<'_>, err: &Error) -> PyErr {
    match build(py, err) {
        Ok(e) => e,
        Err(e) => e,
    }
}

fn build(py: Python<'_>, err: &Error) -> PyResult<PyErr> {
    let module = errors_module(py)?;
    let (class, operator, traceback, cause) = match err {
        Error::Schema { operator, .. } => ("SchemaError", Some(operator.clone()), None, None),
        Error::Checkpoint { .. } => ("CheckpointError", None, None, None),
        Error::Scope { .. } => ("ScopeError", None, None, None),
        Error::Graph { operator, .. } => ("GraphError", Some(operator.clone()), None, None),
        Error::JobGraph { .. } => ("GraphError", None, None, None),
        Error::UserFunction {
            operator,
            traceback,
            cause,
            ..
        } => (
            "JobFailedError",
            Some(operator.clone()),
            traceback.clone(),
            cause.clone(),
        ),
        Error::Io { operator, .. } | Error::Operator { operator, .. } => {
            ("JobFailedError", Some(operator.clone()), None, None)
        }
        Error::Runtime { .. } => ("JobFailedError", None, None, None),
        Error::Storage { .. } => ("StorageError", None, None, None),
        Error::Cancelled => ("JobCancelledError", None, None, None),
    };
    let kwargs = PyDict::new(py);
    kwargs.set_item("operator", operator.filter(|o| !o.is_empty()))?;
    kwargs.set_item("user_traceback", traceback)?;
    let exc = module
        .getattr(class)?
        .call((err.to_string(),), Some(&kwargs))?;
    if let Error::Storage { uri, .. } = err {
        exc.setattr("uri", uri)?;
    }
    if let Some(Opaque(any)) = cause {
        if let Some(original) = any.downcast_ref::<PyErr>() {
            exc.setattr("__cause__", original.value(py))?;
        }
    }
    Ok(PyErr::from_value(exc))
}

/// A core error for an exception raised while operator `operator` ran
/// Python code. eddyline's own `SchemaError` keeps its class; anything else
/// is the user function failing. An eddyline error that names an operator
/// itself (a stage fused into the node `operator`) keeps that name.
pub fn from_py(py: Python<'_>, operator: &str, err: PyErr) -> Error {
    let message = err
        .value(py)
        .str()
        .map(|s| s.to_string())
        .unwrap_or_else(|_| "<unprintable exception>".into());
    if let Ok(module) = errors_module(py) {
        let is = |name: &str| {
            module
                .getattr(name)
                .ok()
                .is_some_and(|cls| err.value(py).is_instance(&cls).unwrap_or(false))
        };
        let own_operator = if is("EddylineError") {
            err.value(py)
                .getattr("operator")
                .ok()
                .and_then(|o| o.extract::<Option<String>>().ok())
                .flatten()
                .filter(|o| !o.is_empty())
        } else {
            None
        };
        let operator = own_operator.as_deref().unwrap_or(operator);
        if is("SchemaError") {
            return Error::schema(operator, message);
        }
        if is("CheckpointError") {
            return Error::checkpoint(None, message);
        }
        if is("StorageError") {
            let uri = err
                .value(py)
                .getattr("uri")
                .ok()
                .and_then(|u| u.extract::<Option<String>>().ok())
                .flatten()
                .unwrap_or_default();
            return Error::storage(uri, message);
        }
        if is("ScopeError") {
            return Error::Scope { message };
        }
        if is("GraphError") {
            return Error::graph(operator, message);
        }
        if is("JobFailedError") {
            // Raised by an executor that already wrapped the user's exception
            // (adding the offending row): unwrap it to keep one layer.
            let value = err.value(py);
            let message = user_function_reason(py, value).unwrap_or(message);
            let traceback = value
                .getattr("user_traceback")
                .ok()
                .and_then(|t| t.extract::<Option<String>>().ok())
                .flatten()
                .or_else(|| format_traceback(py, &err));
            let cause = value
                .getattr("__cause__")
                .ok()
                .filter(|c| !c.is_none())
                .map(|c| Opaque(Arc::new(PyErr::from_value(c))));
            return Error::UserFunction {
                operator: operator.to_string(),
                message,
                traceback,
                cause,
            };
        }
    }
    let type_name = err
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".into());
    let traceback = format_traceback(py, &err);
    Error::UserFunction {
        operator: operator.to_string(),
        message: format!("{type_name}: {message}"),
        traceback,
        cause: Some(Opaque(Arc::new(err))),
    }
}

/// The message of a `UserFunctionError` (`eddyline._exec.user_code`), the
/// error an executor raises for user code that failed: its `reason`, the
/// failure without the operator's name (the core error names the operator).
/// A stage fused into another node keeps its whole message, which names the
/// node. `None` for any other exception.
fn user_function_reason(py: Python<'_>, value: &Bound<'_, PyAny>) -> Option<String> {
    let class = py
        .import("eddyline._exec.user_code")
        .and_then(|m| m.getattr("UserFunctionError"))
        .ok()?;
    if !value.is_instance(&class).unwrap_or(false) {
        return None;
    }
    let fused_into: Option<String> = value.getattr("fused_into").ok()?.extract().ok()?;
    if fused_into.is_some() {
        return value.str().ok().map(|s| s.to_string());
    }
    value.getattr("reason").ok()?.extract().ok()
}

fn format_traceback(py: Python<'_>, err: &PyErr) -> Option<String> {
    let tb = py.import("traceback").ok()?;
    let lines = tb
        .call_method1(
            "format_exception",
            (err.get_type(py), err.value(py), err.traceback(py)),
        )
        .ok()?;
    let joined = PyString::new(py, "").call_method1("join", (lines,)).ok()?;
    joined.extract::<String>().ok()
}
