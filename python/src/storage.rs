//! Storage for the Python front end: what `from_parquet` needs to know of
//! files on an object store before the job graph is built (their list and
//! schema), read through the core storage layer (`eddyline_core::store`).

use std::path::PathBuf;

use eddyline_core::error::Error;
use eddyline_core::source::parquet::ParquetSource;
use eddyline_core::source::SourceFactory;
use eddyline_core::store::{list_data_files, StorageOptions, Store};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

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

/// One directory of the core storage layer (`eddyline_core::store::Store`):
/// a local directory or an object store prefix, for the Python sinks that
/// publish files themselves (`SparkTableSink`'s staging and its
/// `_spark_metadata` log, `from_spark`'s pins). Every call blocks with the
/// GIL released; a failed request is a `StorageError` naming the object.
#[pyclass(name = "StoreDir", module = "eddyline._core", frozen)]
pub struct PyStoreDir {
    store: Store,
}

fn failed(store: &Store, name: &str, what: &str, e: &std::io::Error) -> Error {
    let uri = store.location_of(name).display().to_string();
    Error::storage(&uri, format!("cannot {what} '{uri}': {e}"))
}

#[pymethods]
impl PyStoreDir {
    #[new]
    #[pyo3(signature = (location, storage_options=None))]
    fn new(
        py: Python<'_>,
        location: PathBuf,
        storage_options: Option<StorageOptions>,
    ) -> PyResult<Self> {
        let options = storage_options.unwrap_or_default();
        let store = Store::open(&location, &options).map_err(|e| to_py(py, &e))?;
        Ok(PyStoreDir { store })
    }

    /// Its path or URI.
    #[getter]
    fn location(&self) -> String {
        self.store.location().display().to_string()
    }

    /// The sub-directory `name` (nothing is read or written).
    fn child(&self, name: &str) -> PyStoreDir {
        PyStoreDir {
            store: self.store.child(name),
        }
    }

    /// The bytes of `name`, or None.
    fn read<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let read = detached(py, || self.store.read(name));
        match read {
            Ok(bytes) => Ok(bytes.map(|b| PyBytes::new(py, &b))),
            Err(e) => Err(to_py(py, &failed(&self.store, name, "read", &e))),
        }
    }

    /// Writes `name` whole (readers see the old content or all of `data`).
    fn put(&self, py: Python<'_>, name: &str, data: &[u8]) -> PyResult<()> {
        let store = &self.store;
        detached(py, || {
            store.make_dir().and_then(|()| store.put_atomic(name, data))
        })
        .map_err(|e| to_py(py, &failed(store, name, "write", &e)))
    }

    /// Writes `name` only if it does not exist; False (nothing written) if it did.
    fn put_if_absent(&self, py: Python<'_>, name: &str, data: &[u8]) -> PyResult<bool> {
        let store = &self.store;
        detached(py, || {
            store
                .make_dir()
                .and_then(|()| store.put_if_absent(name, data))
        })
        .map_err(|e| to_py(py, &failed(store, name, "create", &e)))
    }

    /// Uploads the local file `path` as `name` (in parts when large).
    fn upload(&self, py: Python<'_>, name: &str, path: PathBuf) -> PyResult<()> {
        let store = &self.store;
        detached(py, || -> std::io::Result<()> {
            store.make_dir()?;
            let mut file = std::fs::File::open(&path)?;
            let mut writer = store.create(name)?;
            std::io::copy(&mut file, &mut writer)?;
            writer.finish()
        })
        .map_err(|e| to_py(py, &failed(store, name, "upload to", &e)))
    }

    /// Copies `from_name` of `source` (same disk or bucket) to `name` here,
    /// server-side on an object store. False when the source is missing.
    fn copy_from(
        &self,
        py: Python<'_>,
        source: &PyStoreDir,
        from_name: &str,
        name: &str,
    ) -> PyResult<bool> {
        let store = &self.store;
        match detached(py, || store.copy_from(&source.store, from_name, name)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(to_py(py, &failed(store, name, "copy to", &e))),
        }
    }

    /// `(size, modified_ms)` of `name`, or None.
    fn stat(&self, py: Python<'_>, name: &str) -> PyResult<Option<(u64, i64)>> {
        detached(py, || self.store.stat(name))
            .map_err(|e| to_py(py, &failed(&self.store, name, "look up", &e)))
    }

    /// The names of the files (objects) directly in it; empty when it is missing.
    fn files(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        match detached(py, || self.store.files()) {
            Ok(names) => Ok(names),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(to_py(py, &failed(&self.store, "", "list", &e))),
        }
    }

    /// The names of its sub-directories; empty when it is missing.
    fn dirs(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        match detached(py, || self.store.dirs()) {
            Ok(names) => Ok(names),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(to_py(py, &failed(&self.store, "", "list", &e))),
        }
    }

    /// Removes `name`; a missing one is not an error.
    fn remove(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        detached(py, || self.store.remove(name))
            .map_err(|e| to_py(py, &failed(&self.store, name, "remove", &e)))
    }

    /// Removes it and everything in it; a missing one is not an error.
    fn remove_all(&self, py: Python<'_>) -> PyResult<()> {
        detached(py, || self.store.remove_all())
            .map_err(|e| to_py(py, &failed(&self.store, "", "remove", &e)))
    }

    fn __repr__(&self) -> String {
        format!("StoreDir({:?})", self.location())
    }
}
