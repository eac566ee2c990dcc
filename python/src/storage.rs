//! Storage for the Python front end: what `from_parquet` needs to know of
//! files on an object store before the job graph is built (their list and
//! schema), read through the core storage layer (`eddyline_core::store`).

use std::path::PathBuf;

use eddyline_core::error::Error;
use eddyline_core::source::parquet::ParquetSource;
use eddyline_core::source::SourceFactory;
use eddyline_core::store::{list_data_files, StorageOptions};
use pyo3::prelude::*;

use crate::arrow::schema_to_py;
use crate::errors::to_py;
use crate::gil::detached;

/// The data files under `location` (a file, a directory or an object store
/// prefix; names starting with `_` or `.` skipped) and their common schema,
/// read from the footers by byte ranges. Raises `StorageError` naming the
/// location when it cannot be listed, `GraphError` when it holds no files.
#[pyfunction]
#[pyo3(signature = (location, storage_options, what))]
pub fn parquet_files<'py>(
    py: Python<'py>,
    location: PathBuf,
    storage_options: StorageOptions,
    what: &str,
) -> PyResult<(Vec<String>, Bound<'py, PyAny>)> {
    let shown = location.display().to_string();
    let listed = detached(py, || list_data_files(&location, &storage_options));
    let files = listed.map_err(|e| {
        to_py(
            py,
            &Error::storage(&shown, format!("{what}: cannot list '{shown}': {e}")),
        )
    })?;
    if files.is_empty() {
        return Err(to_py(
            py,
            &Error::graph(what, format!("no data files in '{shown}'")),
        ));
    }
    let source = detached(py, || {
        ParquetSource::new_with(what, files.clone(), storage_options)
    })
    .map_err(|e| to_py(py, &e))?;
    let schema = source
        .schema()
        .ok_or_else(|| to_py(py, &Error::graph(what, "the Parquet files have no schema")))?;
    let names = files.iter().map(|p| p.display().to_string()).collect();
    Ok((names, schema_to_py(py, &schema)?))
}
