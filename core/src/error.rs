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

/// The underlying error a failure was built from (an I/O or Arrow error),
/// kept as the error's `source()` so no cause is dropped. Shared, so the
/// error stays `Clone`; it does not cross process boundaries (the message
/// that quotes it does).
pub type Cause = Arc<dyn std::error::Error + Send + Sync>;

/// The text of an Arrow error kept as a source (`ArrowError` cannot be
/// cloned).
#[derive(Debug, Clone)]
pub struct ArrowCause(pub String);

impl fmt::Display for ArrowCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "arrow error: {}", self.0)
    }
}

impl std::error::Error for ArrowCause {}

/// Names the operator of a failed Arrow call where it is made:
/// `arrow_call().for_operator(name)?` (there is no unnamed conversion).
pub trait ForOperator<T> {
    /// The result, its Arrow error an [`Error::Operator`] of `operator`.
    fn for_operator(self, operator: &str) -> Result<T>;
}

impl<T> ForOperator<T> for std::result::Result<T, arrow::error::ArrowError> {
    fn for_operator(self, operator: &str) -> Result<T> {
        self.map_err(|e| Error::arrow(operator, &e))
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

    /// The job graph as a whole is invalid (max_parallelism, loops, workers),
    /// not one of its operators.
    #[error("invalid job graph: {message}")]
    JobGraph { message: String },

    /// An I/O failure inside an operator, source or sink.
    #[error("operator '{operator}' failed on '{}': {message}", path.display())]
    Io {
        operator: String,
        path: PathBuf,
        message: String,
        #[source]
        source: Option<Cause>,
    },

    /// Any other failure inside an operator, including a caught panic.
    #[error("operator '{operator}' failed: {message}")]
    Operator {
        operator: String,
        message: String,
        #[source]
        source: Option<Cause>,
    },

    /// A failure of the job's machinery that belongs to no single operator:
    /// the driver, the data plane between worker processes, a lost worker.
    #[error("the job's runtime failed: {message}")]
    Runtime {
        message: String,
        #[source]
        source: Option<Cause>,
    },

    /// A path or URI that storage cannot serve (an object store scheme not
    /// supported yet, a malformed `file://` URI).
    #[error("storage error at '{uri}': {message}")]
    Storage { uri: String, message: String },

    /// The job was cancelled by the user.
    #[error("the job was cancelled")]
    Cancelled,
}

/// The operator name an error is built with. Every error that names an
/// operator is built where the operator is known (else users would read
/// `operator '' failed`); an empty name is a bug in the caller, caught
/// by the debug builds the tests run. Failures outside every operator are
/// [`Error::Runtime`].
fn named(operator: impl Into<String>) -> String {
    let operator = operator.into();
    debug_assert!(
        !operator.is_empty(),
        "invariant: an error naming an operator is built with its name"
    );
    operator
}

impl Error {
    /// An operator failure with a message.
    pub fn operator(operator: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Operator {
            operator: named(operator),
            message: message.into(),
            source: None,
        }
    }

    /// An operator failure caused by `source` (kept as the error's source).
    pub fn operator_caused(
        operator: impl Into<String>,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::Operator {
            operator: named(operator),
            message: message.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// A failure of the job's machinery outside every operator.
    pub fn runtime(message: impl Into<String>) -> Self {
        Error::Runtime {
            message: message.into(),
            source: None,
        }
    }

    /// A failure of the job's machinery caused by `source` (kept as the
    /// error's source).
    pub fn runtime_caused(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::Runtime {
            message: message.into(),
            source: Some(Arc::new(source)),
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
            operator: named(operator),
            message: message.into(),
        }
    }

    /// A graph error at `operator`.
    pub fn graph(operator: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Graph {
            operator: named(operator),
            message: message.into(),
        }
    }

    /// An error of the job graph as a whole (no single operator).
    pub fn job_graph(message: impl Into<String>) -> Self {
        Error::JobGraph {
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
            operator: named(operator),
            path: path.into(),
            message: err.to_string(),
            // The same kind and text (an io::Error cannot be cloned).
            source: Some(Arc::new(std::io::Error::new(err.kind(), err.to_string()))),
        }
    }

    /// An Arrow error raised while `operator` processed data (its text kept
    /// as the error's source).
    pub fn arrow(operator: impl Into<String>, err: &arrow::error::ArrowError) -> Self {
        Error::Operator {
            operator: named(operator),
            message: err.to_string(),
            source: Some(Arc::new(ArrowCause(err.to_string()))),
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

    /// Names `name` as the operator of an error built by a struct literal
    /// without one (e.g. decoded from a peer). Every constructor above takes
    /// the operator, so errors built through them are returned unchanged.
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
                | Error::JobGraph { .. }
                | Error::Scope { .. }
                | Error::Checkpoint { .. }
        )
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
