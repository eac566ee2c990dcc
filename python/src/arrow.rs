//! Zero-copy hand-off of Arrow data between Rust and pyarrow through the
//! Arrow C data interface (arrow-rs' `pyarrow` bridge). Data coming from
//! Python is validated at this boundary.

use arrow::array::{Array, ArrayRef};
use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow_pyarrow::{FromPyArrow, ToPyArrow};
use pyo3::prelude::*;
use std::sync::Arc;

/// A Rust batch as a `pyarrow.RecordBatch` (buffers shared, not copied).
pub fn batch_to_py<'py>(py: Python<'py>, batch: &RecordBatch) -> PyResult<Bound<'py, PyAny>> {
    batch.to_pyarrow(py)
}

/// A `pyarrow.RecordBatch` as a Rust batch (buffers shared, validated).
pub fn batch_from_py(obj: &Bound<'_, PyAny>) -> PyResult<RecordBatch> {
    RecordBatch::from_pyarrow_bound(obj)
}

/// A Rust array as a `pyarrow.Array`.
pub fn array_to_py<'py>(py: Python<'py>, array: &ArrayRef) -> PyResult<Bound<'py, PyAny>> {
    array.to_data().to_pyarrow(py)
}

/// A `pyarrow.Schema` as a Rust schema.
pub fn schema_from_py(obj: &Bound<'_, PyAny>) -> PyResult<SchemaRef> {
    Ok(Arc::new(Schema::from_pyarrow_bound(obj)?))
}

/// A Rust schema as a `pyarrow.Schema`.
pub fn schema_to_py<'py>(py: Python<'py>, schema: &SchemaRef) -> PyResult<Bound<'py, PyAny>> {
    schema.as_ref().to_pyarrow(py)
}
