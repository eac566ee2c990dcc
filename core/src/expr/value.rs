//! The value a sub-expression evaluates to (see `eval.rs`): a column, or a
//! single value for anything computed from literals only. Both the evaluator
//! and the kernels (`kernels.rs`) take it, so it lives apart from either.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Datum, Scalar};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::DataType;
use arrow::error::ArrowError;

/// The result of evaluating a sub-expression.
#[derive(Debug, Clone)]
pub(crate) enum Value {
    /// One value per row of the batch.
    Array(ArrayRef),
    /// One value for every row: an array of length 1.
    Scalar(ArrayRef),
}

impl Value {
    pub(crate) fn data_type(&self) -> &DataType {
        match self {
            Value::Array(a) | Value::Scalar(a) => a.data_type(),
        }
    }

    pub(crate) fn is_scalar(&self) -> bool {
        matches!(self, Value::Scalar(_))
    }

    /// The value with its type changed to `to`; a no-op when it already has it.
    pub(crate) fn cast_to(&self, to: &DataType) -> std::result::Result<Value, ArrowError> {
        if self.data_type() == to {
            return Ok(self.clone());
        }
        let options = CastOptions::default();
        Ok(match self {
            Value::Array(a) => Value::Array(cast_with_options(a, to, &options)?),
            Value::Scalar(a) => Value::Scalar(cast_with_options(a, to, &options)?),
        })
    }

    /// Wraps a kernel result: a scalar if both operands were scalars.
    pub(crate) fn from_result(array: ArrayRef, l: &Value, r: &Value) -> Value {
        if l.is_scalar() && r.is_scalar() {
            Value::Scalar(array)
        } else {
            Value::Array(array)
        }
    }
}

/// Calls `kernel` with the operands as Arrow datums (literals as scalars).
pub(crate) fn with_datums<T>(
    l: &Value,
    r: &Value,
    kernel: impl FnOnce(&dyn Datum, &dyn Datum) -> std::result::Result<T, ArrowError>,
) -> std::result::Result<T, ArrowError> {
    match (l, r) {
        (Value::Array(a), Value::Array(b)) => kernel(a, b),
        (Value::Array(a), Value::Scalar(b)) => kernel(a, &Scalar::new(Arc::clone(b))),
        (Value::Scalar(a), Value::Array(b)) => kernel(&Scalar::new(Arc::clone(a)), b),
        (Value::Scalar(a), Value::Scalar(b)) => {
            kernel(&Scalar::new(Arc::clone(a)), &Scalar::new(Arc::clone(b)))
        }
    }
}
