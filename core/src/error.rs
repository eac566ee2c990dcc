//! The one error type of eddyline-core.
//!
//! Every variant names the operator (or checkpoint path) it concerns and its
//! message is a full sentence, so the binding can map it to one Python
//! exception class (`SchemaError`, `CheckpointError`, `JobFailedError`, ...)
//! without rewording it.

use std::any::Any;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// An opaque payload carried by an error, e.g. the Python exception object a
/// user function raised. Core never looks inside it.
#[derive(Clone)]
pub struct Opaque(pub Arc<dyn Any + Send + Sync>);

impl fmt::Debug for Opaque {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Opaque(..)")
    }
}

/// Result alias used throughout the core crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the engine.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// A batch, expression or function output does not fit the schema expected.
    #[error("schema error in operator '{operator}': {message}")]
    Schema { operator: String, message: String },

    /// A user function raised (or returned something unusable).
    #[error("user function of operator '{operator}' failed: {message}")]
    UserFunction {
        operator: String,
        message: String,
        /// The formatted traceback of the user's exception, when there is one.
        traceback: Option<String>,
        /// The original exception object (kept by the binding as `__cause__`).
        cause: Option<Opaque>,
    },

    /// A checkpoint or savepoint is missing, corrupt or incompatible, or
    /// checkpoint storage cannot be used.
    #[error("checkpoint error{}: {message}", path.as_ref().map(|p| format!(" at '{}'", p.display())).unwrap_or_default())]
    Checkpoint {
        path: Option<PathBuf>,
        message: String,
    },

    /// Streams of different loop scopes were combined.
    #[error("scope error: {message}")]
    Scope { message: String },

    /// The job graph is invalid (unknown column, bad parallelism, ...).
    #[error("invalid job graph at operator '{operator}': {message}")]
    Graph { operator: String, message: String },

    /// An I/O failure inside an operator, source or sink.
    #[error("operator '{operator}' failed on '{}': {message}", path.display())]
    Io {
        operator: String,
        path: PathBuf,
        message: String,
    },

    /// Any other failure inside an operator, including a caught panic.
    #[error("operator '{operator}' failed: {message}")]
    Operator { operator: String, message: String },

    /// A failure of the job's machinery that belongs to no single operator:
    /// the driver, the data plane between worker processes, a lost worker.
    #[error("the job's runtime failed: {message}")]
    Runtime { message: String },

    /// A path or URI that storage cannot serve (an object store scheme not
    /// supported yet, a malformed `file://` URI).
    #[error("storage error at '{uri}': {message}")]
    Storage { uri: String, message: String },

    /// The job was cancelled by the user.
    #[error("the job was cancelled")]
    Cancelled,
}

impl Error {
    /// An operator failure with a message.
    pub fn operator(operator: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Operator {
            operator: operator.into(),
            message: message.into(),
        }
    }

    /// A failure of the job's machinery outside every operator.
    pub fn runtime(message: impl Into<String>) -> Self {
        Error::Runtime {
            message: message.into(),
        }
    }

    /// A path or URI storage cannot serve.
    pub fn storage(uri: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Storage {
            uri: uri.into(),
            message: message.into(),
        }
    }

    /// A schema error in `operator`.
    pub fn schema(operator: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Schema {
            operator: operator.into(),
            message: message.into(),
        }
    }

    /// A graph error at `operator`.
    pub fn graph(operator: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Graph {
            operator: operator.into(),
            message: message.into(),
        }
    }

    /// A scope error at `operator`.
    pub fn scope(operator: &str, message: impl Into<String>) -> Self {
        Error::Scope {
            message: format!("operator '{operator}': {}", message.into()),
        }
    }

    /// A checkpoint error about `path`.
    pub fn checkpoint(path: Option<PathBuf>, message: impl Into<String>) -> Self {
        Error::Checkpoint {
            path,
            message: message.into(),
        }
    }

    /// An I/O error in `operator` on `path`.
    pub fn io(operator: impl Into<String>, path: impl Into<PathBuf>, err: &std::io::Error) -> Self {
        Error::Io {
            operator: operator.into(),
            path: path.into(),
            message: err.to_string(),
        }
    }

    /// An Arrow error raised while `operator` processed data.
    pub fn arrow(operator: impl Into<String>, err: &arrow::error::ArrowError) -> Self {
        Error::Operator {
            operator: operator.into(),
            message: err.to_string(),
        }
    }

    /// The operator this error names, if any.
    pub fn operator_name(&self) -> Option<&str> {
        match self {
            Error::Schema { operator, .. }
            | Error::UserFunction { operator, .. }
            | Error::Graph { operator, .. }
            | Error::Io { operator, .. }
            | Error::Operator { operator, .. } => Some(operator),
            _ => None,
        }
    }

    /// Fills in the operator name where the error was raised without one
    /// (helpers below the operator level leave it empty).
    pub fn in_operator(mut self, name: &str) -> Self {
        match &mut self {
            Error::Schema { operator, .. }
            | Error::UserFunction { operator, .. }
            | Error::Graph { operator, .. }
            | Error::Io { operator, .. }
            | Error::Operator { operator, .. }
                if operator.is_empty() =>
            {
                *operator = name.to_string();
            }
            _ => {}
        }
        self
    }

    /// Whether retrying the job cannot help (schema and graph errors are
    /// deterministic and end the job once the restart strategy is exhausted).
    pub fn is_deterministic(&self) -> bool {
        matches!(
            self,
            Error::Schema { .. }
                | Error::Storage { .. }
                | Error::Graph { .. }
                | Error::Scope { .. }
                | Error::Checkpoint { .. }
        )
    }
}

impl From<arrow::error::ArrowError> for Error {
    fn from(err: arrow::error::ArrowError) -> Self {
        Error::arrow("", &err)
    }
}

/// Formats a panic payload as a message.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_string()
    }
}
