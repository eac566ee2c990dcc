//! The storage layer (DESIGN.md "Where the data lives"): one blocking API
//! over a local directory or a prefix of an object store (S3, GCS, Azure
//! through the Arrow project's `object_store` crate), for checkpoints and
//! savepoints today and the file sources and sinks next.
//!
//! A [`Store`] is a "directory": a local directory, or every object under a
//! key prefix. Names inside it are single path segments. What each backend
//! promises:
//!
//! | operation | local directory | object store |
//! | --- | --- | --- |
//! | [`Store::put_atomic`] | temporary file, fsync, rename, fsync of the directory | one PUT (atomic: readers see all or nothing) |
//! | [`Store::create`] | `create_new` file, fsynced by [`ObjectWriter::finish`] | one PUT, or a multipart upload past [`PART_BYTES`] |
//! | [`Store::create_uncached`] | the same, written past the page cache once over a MiB (`store/uncached.rs`) | as `create` |
//! | [`Store::dirs`] | sub-directories | common prefixes of a delimited listing |
//! | [`Store::remove_all`] | `remove_dir_all` | every object under the prefix |
//!
//! Object stores are reached with `storage_options` (the keys `object_store`
//! accepts, e.g. `aws_endpoint_url`, `aws_access_key_id`, `aws_allow_http`)
//! over the standard environment variables (`AWS_ENDPOINT_URL`, ...).
//! Requests are retried with backoff a few times (a transient error does not
//! fail a checkpoint) and then fail with an error naming the URI.
//!
//! Blocking calls run on one small tokio runtime shared by the process; they
//! are made from task, writer and driver threads, never from inside it.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::TryStreamExt;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig,
    WriteMultipart,
};

use crate::error::{Error, Result};

mod uncached;
use uncached::UncachedFile;

/// Options of an object store (`storage_options` in the Python API).
pub type StorageOptions = BTreeMap<String, String>;

/// Objects larger than this are uploaded in parts of this size.
pub const PART_BYTES: usize = 8 << 20;
/// Parts of one object uploaded at once.
const PARTS_IN_FLIGHT: usize = 4;

/// The runtime that drives object store requests.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("eddyline-io")
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("cannot start the storage I/O runtime: {e}"))
    })
}

/// The scheme and the rest of `text` if it is a URI (`scheme://rest`).
pub(crate) fn uri_scheme(text: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some((scheme, rest))
}

/// Whether `path` is a URI of an object store this build serves.
pub fn is_object_store_uri(path: &Path) -> bool {
    path.to_str()
        .and_then(uri_scheme)
        .is_some_and(|(s, _)| object_store_kind(s).is_some())
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    S3,
    Gcs,
    Azure,
}

fn object_store_kind(scheme: &str) -> Option<Kind> {
    match scheme.to_ascii_lowercase().as_str() {
        "s3" | "s3a" => Some(Kind::S3),
        "gs" | "gcs" => Some(Kind::Gcs),
        "az" | "azure" | "abfs" | "abfss" | "adl" => Some(Kind::Azure),
        _ => None,
    }
}

/// The local path `path` names: itself, or the path of a `file://` URI
/// (`file:///dir` or `file://localhost/dir`). Any other URI is a
/// `StorageError` naming it, so that a URI never becomes a local directory
/// named `s3:`.
pub fn local_path(path: &Path) -> Result<PathBuf> {
    let Some(text) = path.to_str() else {
        return Ok(path.to_path_buf());
    };
    let Some((scheme, rest)) = uri_scheme(text) else {
        return Ok(path.to_path_buf());
    };
    if scheme.eq_ignore_ascii_case("file") {
        let local = rest.strip_prefix("localhost").unwrap_or(rest);
        if local.starts_with('/') {
            return Ok(PathBuf::from(local));
        }
        return Err(Error::storage(
            text,
            "a file:// URI must name an absolute path on this host, e.g. file:///data/out",
        ));
    }
    let served = if object_store_kind(scheme).is_some() {
        "this location takes local paths and file:// URIs only"
    } else {
        "eddyline reads and writes local paths, file:// URIs and object store URIs \
         (s3://, gs://, az://, abfss://)"
    };
    Err(Error::storage(
        text,
        format!("the URI scheme '{scheme}' is not supported here: {served}"),
    ))
}

#[derive(Clone)]
enum Backend {
    Local(PathBuf),
    Object {
        store: Arc<dyn ObjectStore>,
        prefix: ObjectPath,
    },
}

/// A directory on a local disk or under an object store prefix.
#[derive(Clone)]
pub struct Store {
    /// How it is named to users: the local path, or the URI.
    location: PathBuf,
    backend: Backend,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({})", self.location.display())
    }
}

fn build_object_store(
    kind: Kind,
    uri: &str,
    options: &StorageOptions,
) -> Result<Arc<dyn ObjectStore>> {
    let bad = |e: &dyn std::fmt::Display| Error::storage(uri, e.to_string());
    let retry = RetryConfig {
        backoff: BackoffConfig::default(),
        max_retries: 4,
        retry_timeout: Duration::from_secs(60),
    };
    let store: Arc<dyn ObjectStore> = match kind {
        Kind::S3 => {
            let mut b = AmazonS3Builder::from_env().with_url(uri).with_retry(retry);
            for (k, v) in options {
                let key: AmazonS3ConfigKey = k.parse().map_err(|e| bad(&e))?;
                b = b.with_config(key, v);
            }
            Arc::new(b.build().map_err(|e| bad(&e))?)
        }
        Kind::Gcs => {
            let mut b = GoogleCloudStorageBuilder::from_env()
                .with_url(uri)
                .with_retry(retry);
            for (k, v) in options {
                let key: GoogleConfigKey = k.parse().map_err(|e| bad(&e))?;
                b = b.with_config(key, v);
            }
            Arc::new(b.build().map_err(|e| bad(&e))?)
        }
        Kind::Azure => {
            let mut b = MicrosoftAzureBuilder::from_env()
                .with_url(uri)
                .with_retry(retry);
            for (k, v) in options {
                let key: AzureConfigKey = k.parse().map_err(|e| bad(&e))?;
                b = b.with_config(key, v);
            }
            Arc::new(b.build().map_err(|e| bad(&e))?)
        }
    };
    Ok(store)
}

fn not_found(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::NotFound { .. })
}

fn io_err(e: object_store::Error) -> io::Error {
    io::Error::other(e.to_string())
}

impl Store {
    /// The store at `location`: a local path, a `file://` URI or an object
    /// store URI (`s3://bucket/prefix`, ...). Nothing is read or written.
    pub fn open(location: &Path, options: &StorageOptions) -> Result<Store> {
        let text = location.to_str().unwrap_or_default();
        if let Some((scheme, rest)) = uri_scheme(text) {
            if let Some(kind) = object_store_kind(scheme) {
                let store = build_object_store(kind, text, options)?;
                let key = rest.split_once('/').map_or("", |(_, key)| key);
                let prefix = ObjectPath::parse(key.trim_end_matches('/'))
                    .map_err(|e| Error::storage(text, e.to_string()))?;
                let location = PathBuf::from(text.trim_end_matches('/'));
                return Ok(Store {
                    location,
                    backend: Backend::Object { store, prefix },
                });
            }
        }
        let dir = local_path(location)?;
        Ok(Store {
            location: dir.clone(),
            backend: Backend::Local(dir),
        })
    }

    /// The path or URI users know it by.
    pub fn location(&self) -> &Path {
        &self.location
    }

    /// Whether it is a local directory.
    pub fn is_local(&self) -> bool {
        matches!(self.backend, Backend::Local(_))
    }

    /// The path or URI of `name` inside it.
    pub fn location_of(&self, name: &str) -> PathBuf {
        self.location.join(name)
    }

    /// The sub-directory `name`.
    pub fn child(&self, name: &str) -> Store {
        let backend = match &self.backend {
            Backend::Local(dir) => Backend::Local(dir.join(name)),
            Backend::Object { store, prefix } => Backend::Object {
                store: Arc::clone(store),
                prefix: prefix.clone().join(name),
            },
        };
        Store {
            location: self.location_of(name),
            backend,
        }
    }

    /// The directory it lies in (`None` at a filesystem root or a bucket).
    pub fn parent(&self) -> Option<Store> {
        let location = self.location.parent()?.to_path_buf();
        let backend = match &self.backend {
            Backend::Local(dir) => Backend::Local(dir.parent()?.to_path_buf()),
            Backend::Object { store, prefix } => {
                let mut parts: Vec<_> = prefix.parts().collect();
                parts.pop()?;
                Backend::Object {
                    store: Arc::clone(store),
                    prefix: ObjectPath::from_iter(parts),
                }
            }
        };
        Some(Store { location, backend })
    }

    /// The bytes of `name`, `None` if it does not exist.
    pub fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        match &self.backend {
            Backend::Local(dir) => match fs::read(dir.join(name)) {
                Ok(b) => Ok(Some(b)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            },
            Backend::Object { store, prefix } => {
                let path = prefix.clone().join(name);
                runtime().block_on(async {
                    match store.get(&path).await {
                        Ok(r) => r.bytes().await.map(|b| Some(b.to_vec())).map_err(io_err),
                        Err(e) if not_found(&e) => Ok(None),
                        Err(e) => Err(io_err(e)),
                    }
                })
            }
        }
    }

    /// Whether the file or object `name` exists.
    pub fn exists(&self, name: &str) -> io::Result<bool> {
        match &self.backend {
            Backend::Local(dir) => Ok(dir.join(name).is_file()),
            Backend::Object { store, prefix } => {
                let path = prefix.clone().join(name);
                runtime().block_on(async {
                    match store.head(&path).await {
                        Ok(_) => Ok(true),
                        Err(e) if not_found(&e) => Ok(false),
                        Err(e) => Err(io_err(e)),
                    }
                })
            }
        }
    }

    /// Writes `name` so that readers see the old content or all of `bytes`.
    pub fn put_atomic(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        match &self.backend {
            Backend::Local(dir) => {
                let tmp = dir.join(format!("{name}.tmp"));
                let mut f = File::create(&tmp)?;
                f.write_all(bytes)?;
                f.sync_all()?;
                fs::rename(&tmp, dir.join(name))?;
                File::open(dir)?.sync_all()
            }
            Backend::Object { store, prefix } => {
                let path = prefix.clone().join(name);
                let payload = PutPayload::from(bytes.to_vec());
                runtime()
                    .block_on(store.put(&path, payload))
                    .map(|_| ())
                    .map_err(io_err)
            }
        }
    }

    /// Writes `name` only if nothing has that name yet: `Ok(false)` (and
    /// nothing written) when it exists. Of concurrent writers of one name,
    /// exactly one gets `Ok(true)`; readers see all of `bytes` or nothing.
    /// On a disk: a complete, fsynced temporary file hard-linked to `name`
    /// (the link fails if `name` exists); on an object store: one PUT with
    /// `If-None-Match: *` (object_store's `PutMode::Create`; AWS S3, MinIO,
    /// R2 and moto honour it). A store that ignored the condition would
    /// overwrite: callers relying on it check the store once (see
    /// `SparkTableSink`'s location probe in python/eddyline/spark/sink.py).
    pub fn put_if_absent(&self, name: &str, bytes: &[u8]) -> io::Result<bool> {
        match &self.backend {
            Backend::Local(dir) => {
                let tmp = dir.join(format!(".{name}.{}.tmp", unique_suffix()));
                let written = (|| {
                    let mut f = File::create(&tmp)?;
                    f.write_all(bytes)?;
                    f.sync_all()?;
                    match fs::hard_link(&tmp, dir.join(name)) {
                        Ok(()) => File::open(dir)?.sync_all().map(|()| true),
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
                        Err(e) => Err(e),
                    }
                })();
                // `written` is the outcome: `name` exists (or not) now. A
                // temporary file left is a hidden leftover, not a failure.
                let _ = fs::remove_file(&tmp);
                written
            }
            Backend::Object { store, prefix } => {
                let path = prefix.clone().join(name);
                let payload = PutPayload::from(bytes.to_vec());
                let opts = PutOptions::from(PutMode::Create);
                match runtime().block_on(store.put_opts(&path, payload, opts)) {
                    Ok(_) => Ok(true),
                    Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
                    Err(e) => Err(io_err(e)),
                }
            }
        }
    }

    /// Gives the file or object `from_name` of `from` (a store of the same
    /// disk or bucket) a second name, `name` here: a hard link on a disk, a
    /// server-side copy on an object store (the new object appears whole).
    /// An existing `name` is replaced (disk: kept; it has the same bytes
    /// when the caller names files uniquely). A missing source is
    /// `ErrorKind::NotFound`.
    pub fn copy_from(&self, from: &Store, from_name: &str, name: &str) -> io::Result<()> {
        match (&self.backend, &from.backend) {
            (Backend::Local(dir), Backend::Local(src)) => {
                match fs::hard_link(src.join(from_name), dir.join(name)) {
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
                    other => other,
                }
            }
            (Backend::Object { store, prefix }, Backend::Object { prefix: src, .. }) => {
                let (source, target) = (src.clone().join(from_name), prefix.clone().join(name));
                runtime()
                    .block_on(store.copy(&source, &target))
                    .map_err(|e| {
                        if not_found(&e) {
                            io::Error::new(io::ErrorKind::NotFound, e.to_string())
                        } else {
                            io_err(e)
                        }
                    })
            }
            _ => Err(io::Error::other(format!(
                "cannot copy from {} to {}: not on the same store",
                from.location.display(),
                self.location.display()
            ))),
        }
    }

    /// The size in bytes and the modification time (ms since the epoch) of
    /// the file or object `name`, `None` if it does not exist.
    pub fn stat(&self, name: &str) -> io::Result<Option<(u64, i64)>> {
        match &self.backend {
            Backend::Local(dir) => match fs::metadata(dir.join(name)) {
                Ok(meta) => {
                    let modified = meta
                        .modified()?
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
                    Ok(Some((meta.len(), modified)))
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            },
            Backend::Object { store, prefix } => {
                let path = prefix.clone().join(name);
                match runtime().block_on(store.head(&path)) {
                    Ok(meta) => Ok(Some((meta.size, meta.last_modified.timestamp_millis()))),
                    Err(e) if not_found(&e) => Ok(None),
                    Err(e) => Err(io_err(e)),
                }
            }
        }
    }

    /// Starts writing the new file or object `name`; it exists once
    /// [`ObjectWriter::finish`] returned.
    pub fn create(&self, name: &str) -> io::Result<ObjectWriter> {
        let target = match &self.backend {
            Backend::Local(dir) => {
                let file = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(dir.join(name))?;
                Target::File(io::BufWriter::new(file))
            }
            Backend::Object { store, prefix } => Target::Object {
                store: Arc::clone(store),
                path: prefix.clone().join(name),
                buffer: Vec::new(),
                upload: None,
            },
        };
        Ok(ObjectWriter { target })
    }

    /// Starts writing the new file or object `name` as [`Store::create`]
    /// does, for a file written once and rarely read (a checkpoint's state
    /// file): a local file past one MiB bypasses the page cache
    /// (`O_DIRECT`, see `store/uncached.rs`); an object is uploaded alike.
    pub fn create_uncached(&self, name: &str) -> io::Result<ObjectWriter> {
        match &self.backend {
            Backend::Local(dir) => {
                let file = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(dir.join(name))?;
                Ok(ObjectWriter {
                    target: Target::Uncached(UncachedFile::new(file)),
                })
            }
            Backend::Object { .. } => self.create(name),
        }
    }

    /// The names of its sub-directories (object stores: the common prefixes
    /// below it), in no particular order.
    pub fn dirs(&self) -> io::Result<Vec<String>> {
        self.entries(true)
    }

    /// The names of the files (objects) directly in it, in no particular order.
    pub fn files(&self) -> io::Result<Vec<String>> {
        self.entries(false)
    }

    /// The names of its sub-directories (`dirs`) or of its files.
    fn entries(&self, dirs: bool) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        match &self.backend {
            Backend::Local(dir) => {
                for entry in fs::read_dir(dir)? {
                    let entry = entry?;
                    let kind = entry.file_type()?;
                    if (dirs && kind.is_dir()) || (!dirs && kind.is_file()) {
                        out.extend(entry.file_name().to_str().map(str::to_string));
                    }
                }
            }
            Backend::Object { store, prefix } => {
                let listed = runtime()
                    .block_on(store.list_with_delimiter(Some(prefix)))
                    .map_err(io_err)?;
                let paths: Vec<&ObjectPath> = if dirs {
                    listed.common_prefixes.iter().collect()
                } else {
                    listed.objects.iter().map(|m| &m.location).collect()
                };
                out.extend(
                    paths
                        .iter()
                        .filter_map(|p| p.filename().map(str::to_string)),
                );
            }
        }
        Ok(out)
    }

    /// Gives `from` the name `to`, replacing what `to` named. On a disk this
    /// is one atomic rename; on an object store a server-side copy (the new
    /// object appears whole) and then the deletion of `from`.
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        match &self.backend {
            Backend::Local(dir) => fs::rename(dir.join(from), dir.join(to)),
            Backend::Object { store, prefix } => {
                let (from, to) = (prefix.clone().join(from), prefix.clone().join(to));
                runtime().block_on(async {
                    store.copy(&from, &to).await.map_err(|e| {
                        if not_found(&e) {
                            io::Error::new(io::ErrorKind::NotFound, e.to_string())
                        } else {
                            io_err(e)
                        }
                    })?;
                    match store.delete(&from).await {
                        Err(e) if !not_found(&e) => Err(io_err(e)),
                        _ => Ok(()),
                    }
                })
            }
        }
    }

    /// Makes sure it exists (object stores have no directories: nothing to do).
    pub fn make_dir(&self) -> io::Result<()> {
        match &self.backend {
            Backend::Local(dir) => fs::create_dir_all(dir),
            Backend::Object { .. } => Ok(()),
        }
    }

    /// Makes the creation or removal of its entries durable (an fsync of a
    /// local directory; object stores: nothing to do).
    pub fn sync(&self) -> io::Result<()> {
        match &self.backend {
            Backend::Local(dir) => File::open(dir)?.sync_all(),
            Backend::Object { .. } => Ok(()),
        }
    }

    /// Removes the file or object `name`; a missing one is not an error.
    pub fn remove(&self, name: &str) -> io::Result<()> {
        let result = match &self.backend {
            Backend::Local(dir) => fs::remove_file(dir.join(name)),
            Backend::Object { store, prefix } => {
                let path = prefix.clone().join(name);
                match runtime().block_on(store.delete(&path)) {
                    Err(e) if !not_found(&e) => Err(io_err(e)),
                    _ => Ok(()),
                }
            }
        };
        match result {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    /// Removes it and everything in it; a missing one is not an error.
    pub fn remove_all(&self) -> io::Result<()> {
        match &self.backend {
            Backend::Local(dir) => match fs::remove_dir_all(dir) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                other => other,
            },
            Backend::Object { store, prefix } => runtime().block_on(async {
                let objects: Vec<_> = store
                    .list(Some(prefix))
                    .map_ok(|m| m.location)
                    .try_collect()
                    .await
                    .map_err(io_err)?;
                for path in objects {
                    match store.delete(&path).await {
                        Err(e) if !not_found(&e) => return Err(io_err(e)),
                        _ => {}
                    }
                }
                Ok(())
            }),
        }
    }
}

/// A suffix no other temporary file of this process or another one has.
fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// One file or object read by byte ranges (the Parquet source reads its
/// footer and column chunks this way; nothing downloads whole files).
pub struct ObjectFile {
    location: PathBuf,
    size: u64,
    backend: FileBackend,
}

enum FileBackend {
    Local(File),
    Object {
        store: Arc<dyn ObjectStore>,
        path: ObjectPath,
    },
}

impl ObjectFile {
    /// Opens the file or object at `location` (a local path or a URI).
    pub fn open(location: &Path, options: &StorageOptions) -> io::Result<ObjectFile> {
        let (dir, name) = match (
            location.parent(),
            location.file_name().and_then(|n| n.to_str()),
        ) {
            (Some(dir), Some(name)) => (dir, name),
            _ => return Err(io::Error::other("not a file name")),
        };
        let store = Store::open(dir, options).map_err(io::Error::other)?;
        match store.backend {
            Backend::Local(dir) => {
                let file = File::open(dir.join(name))?;
                let size = file.metadata()?.len();
                Ok(ObjectFile {
                    location: location.to_path_buf(),
                    size,
                    backend: FileBackend::Local(file),
                })
            }
            Backend::Object { store, prefix } => {
                let path = prefix.join(name);
                let meta = runtime().block_on(store.head(&path)).map_err(|e| {
                    if not_found(&e) {
                        io::Error::new(io::ErrorKind::NotFound, e.to_string())
                    } else {
                        io_err(e)
                    }
                })?;
                Ok(ObjectFile {
                    location: location.to_path_buf(),
                    size: meta.size,
                    backend: FileBackend::Object { store, path },
                })
            }
        }
    }

    /// Its path or URI.
    pub fn location(&self) -> &Path {
        &self.location
    }

    /// Whether it is a local file (read with `pread`, no request costs).
    pub fn is_local(&self) -> bool {
        matches!(self.backend, FileBackend::Local(_))
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The bytes `start .. start + len` (fewer at the end of the file).
    pub fn read_range(&self, start: u64, len: usize) -> io::Result<bytes::Bytes> {
        let end = start.saturating_add(len as u64).min(self.size);
        if start >= end {
            return Ok(bytes::Bytes::new());
        }
        match &self.backend {
            FileBackend::Local(file) => {
                use std::os::unix::fs::FileExt;
                let mut buf = vec![0u8; (end - start) as usize];
                file.read_exact_at(&mut buf, start)?;
                Ok(bytes::Bytes::from(buf))
            }
            FileBackend::Object { store, path } => runtime()
                .block_on(store.get_range(path, start..end))
                .map_err(io_err),
        }
    }
}

/// Data files under `location`, sorted: the file itself, or every file of a
/// directory (object store: every object under the prefix), recursively,
/// skipping names that start with `_` or `.` at any level (uncommitted or
/// hidden files, as `pyarrow.dataset` does).
pub fn list_data_files(location: &Path, options: &StorageOptions) -> io::Result<Vec<PathBuf>> {
    let store = Store::open(location, options).map_err(io::Error::other)?;
    let visible = |rel: &str| {
        !rel.split('/')
            .any(|p| p.starts_with('_') || p.starts_with('.'))
    };
    match &store.backend {
        Backend::Local(dir) => {
            if dir.is_file() {
                return Ok(vec![dir.clone()]);
            }
            let mut found = Vec::new();
            let mut stack = vec![dir.clone()];
            while let Some(d) = stack.pop() {
                for entry in fs::read_dir(&d)? {
                    let entry = entry?;
                    let name = entry.file_name();
                    let Some(name) = name.to_str() else { continue };
                    if !visible(name) {
                        continue;
                    }
                    if entry.file_type()?.is_dir() {
                        stack.push(entry.path());
                    } else {
                        found.push(entry.path());
                    }
                }
            }
            found.sort();
            Ok(found)
        }
        Backend::Object { store: os, prefix } => {
            let objects: Vec<_> = runtime()
                .block_on(os.list(Some(prefix)).try_collect::<Vec<_>>())
                .map_err(io_err)?;
            let base = prefix.as_ref();
            let mut found: Vec<PathBuf> = objects
                .iter()
                .filter_map(|m| {
                    let key = m.location.as_ref();
                    let rel = key.strip_prefix(base)?.trim_start_matches('/');
                    (!rel.is_empty() && visible(rel)).then(|| store.location_of(rel))
                })
                .collect();
            if found.is_empty() && !base.is_empty() {
                // The URI may name one object rather than a prefix.
                if let Some(parent) = store.parent() {
                    if let Some(name) = prefix.filename() {
                        if parent.exists(name)? {
                            found.push(store.location().to_path_buf());
                        }
                    }
                }
            }
            found.sort();
            Ok(found)
        }
    }
}

enum Target {
    File(io::BufWriter<File>),
    Uncached(UncachedFile),
    Object {
        store: Arc<dyn ObjectStore>,
        path: ObjectPath,
        /// Bytes not uploaded yet (at most one part).
        buffer: Vec<u8>,
        /// The multipart upload, once more than one part was written.
        upload: Option<WriteMultipart>,
    },
}

/// A file or object being written ([`Store::create`]).
pub struct ObjectWriter {
    target: Target,
}

impl Write for ObjectWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.target {
            Target::File(f) => f.write(buf),
            Target::Uncached(f) => f.write(buf),
            Target::Object {
                store,
                path,
                buffer,
                upload,
            } => {
                buffer.extend_from_slice(buf);
                if buffer.len() >= PART_BYTES {
                    let rt = runtime();
                    let up = match upload {
                        Some(up) => up,
                        None => {
                            let parts = rt.block_on(store.put_multipart(path)).map_err(io_err)?;
                            upload.insert(WriteMultipart::new_with_chunk_size(parts, PART_BYTES))
                        }
                    };
                    rt.block_on(up.wait_for_capacity(PARTS_IN_FLIGHT))
                        .map_err(io_err)?;
                    let _entered = rt.enter();
                    up.put(bytes::Bytes::from(std::mem::take(buffer)));
                }
                Ok(buf.len())
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.target {
            Target::File(f) => f.flush(),
            Target::Uncached(f) => f.flush(),
            Target::Object { .. } => Ok(()),
        }
    }
}

impl ObjectWriter {
    /// Finishes the write: a local file is flushed and fsynced, an object
    /// uploaded (or its multipart upload completed).
    pub fn finish(self) -> io::Result<()> {
        match self.target {
            Target::File(f) => {
                let file = f.into_inner().map_err(io::IntoInnerError::into_error)?;
                file.sync_all()
            }
            Target::Uncached(f) => f.finish(),
            Target::Object {
                store,
                path,
                buffer,
                upload,
            } => {
                let rt = runtime();
                match upload {
                    None => rt
                        .block_on(store.put(&path, PutPayload::from(buffer)))
                        .map(|_| ())
                        .map_err(io_err),
                    Some(mut up) => {
                        let _entered = rt.enter();
                        up.put(bytes::Bytes::from(buffer));
                        rt.block_on(up.finish()).map(|_| ()).map_err(io_err)
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_uri_kinds_and_local_paths() {
        assert!(is_object_store_uri(Path::new("s3://bucket/x")));
        assert!(is_object_store_uri(Path::new(
            "abfss://c@acct.dfs.core.windows.net/x"
        )));
        assert!(!is_object_store_uri(Path::new("/tmp/x")));
        assert!(!is_object_store_uri(Path::new("file:///tmp/x")));
        assert_eq!(
            local_path(Path::new("file:///tmp/x")).ok(),
            Some(PathBuf::from("/tmp/x"))
        );
        let err = local_path(Path::new("hdfs://nn/x")).expect_err("hdfs");
        assert!(err.to_string().contains("'hdfs'"), "{err}");
    }

    #[test]
    fn test_local_store_round_trip() -> io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let root = Store::open(tmp.path(), &StorageOptions::new()).map_err(io::Error::other)?;
        let chk = root.child("chk-1");
        chk.make_dir()?;
        let mut w = chk.create("a.state")?;
        w.write_all(b"abc")?;
        w.finish()?;
        assert!(chk.create("a.state").is_err(), "create never overwrites");
        chk.put_atomic("_manifest.json", b"{}")?;
        assert_eq!(chk.read("a.state")?, Some(b"abc".to_vec()));
        assert_eq!(chk.read("missing")?, None);
        assert!(chk.exists("_manifest.json")?);
        assert_eq!(root.dirs()?, vec!["chk-1".to_string()]);
        chk.remove("a.state")?;
        chk.remove("a.state")?;
        chk.remove_all()?;
        assert!(root.dirs()?.is_empty());
        Ok(())
    }

    #[test]
    fn test_local_put_if_absent_copy_and_stat() -> io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let root = Store::open(tmp.path(), &StorageOptions::new()).map_err(io::Error::other)?;
        assert!(root.put_if_absent("0", b"first")?);
        assert!(
            !root.put_if_absent("0", b"second")?,
            "an existing name is kept"
        );
        assert_eq!(root.read("0")?, Some(b"first".to_vec()));
        assert_eq!(
            root.files()?,
            vec!["0".to_string()],
            "no temporary file is left"
        );
        let staged = root.child("staging");
        staged.make_dir()?;
        staged.put_atomic("part", b"12345")?;
        root.copy_from(&staged, "part", "final")?;
        root.copy_from(&staged, "part", "final")?; // a repeated commit
        assert_eq!(root.read("final")?, Some(b"12345".to_vec()));
        assert_eq!(root.stat("final")?.map(|(size, _)| size), Some(5));
        assert_eq!(root.stat("missing")?, None);
        let err = root
            .copy_from(&staged, "missing", "x")
            .expect_err("missing source");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        Ok(())
    }

    #[test]
    fn test_unknown_storage_option_names_the_uri() {
        let mut options = StorageOptions::new();
        options.insert("aws_no_such_key".into(), "1".into());
        let err = Store::open(Path::new("s3://bucket/p"), &options).expect_err("unknown key");
        let msg = err.to_string();
        assert!(
            msg.contains("s3://bucket/p") && msg.contains("aws_no_such_key"),
            "{msg}"
        );
    }
}
