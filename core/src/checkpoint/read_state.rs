//! Reading one operator's keyed state out of a checkpoint or savepoint
//! (`ed.read_state`; API.md "Reading state from checkpoints and
//! savepoints"; DESIGN.md "Checkpoints").
//!
//! [`read_keyed_state`] loads and verifies a checkpoint like a restore does,
//! finds the operator by uid and gathers every key group's blob across all
//! subtasks (so the result does not depend on the parallelism that wrote
//! it). Native blobs are decoded here into Arrow record batches by the
//! format's own decoder ([`NATIVE_FORMATS`]: the keyed aggregates and the
//! windows); blobs the core does not own (the Python runners' pickles) are
//! handed back as bytes, by key group, for the binding's side to decode.
//!
//! Extension point: a new native keyed operator makes its blobs readable by
//! adding `(name, is_state_schema, state_table)` to [`NATIVE_FORMATS`] (the
//! joins, whose blob holds two IPC streams behind a header, are recognized
//! by [`join::is_state_blob`]); until then its state is refused with an
//! error naming the operator, never shown wrongly.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::Schema;
use arrow::ipc::reader::StreamReader;

use super::manifest::KeyColumn;
use super::storage::{CheckpointStorage, RestoredCheckpoint, MANIFEST_FILE};
use crate::error::{Error, Result};
use crate::operator::{join, keyed_agg, session, window};
use crate::store::{is_object_store_uri, StorageOptions, Store};

/// Decodes one key group's blob into the rows `read_state` shows.
type Decoder = fn(&[u8], u32) -> Result<Vec<RecordBatch>>;

/// Whether a blob's Arrow schema (its metadata) is a format's.
type Recognizer = fn(&Schema) -> bool;

/// The native keyed-state formats: their name, whether a blob's Arrow schema
/// is theirs, and their decoder.
const NATIVE_FORMATS: &[(&str, Recognizer, Decoder)] = &[
    (
        "keyed aggregate",
        keyed_agg::is_state_schema,
        keyed_agg::state_table,
    ),
    (
        "keyed aggregates",
        keyed_agg::multi::is_state_schema,
        keyed_agg::multi::state_table,
    ),
    ("window", window::is_state_schema, window::state_table),
    (
        "window aggregates",
        window::multi::is_state_schema,
        window::multi::state_table,
    ),
    (
        "session window",
        session::is_state_schema,
        session::state_table,
    ),
    (
        "session window aggregates",
        window::session_multi::is_state_schema,
        window::session_multi::state_table,
    ),
];

/// The first byte of a pickle of protocol 2 or later (the Python runners'
/// keyed state).
const PICKLE_PROTO: u8 = 0x80;

/// What [`read_keyed_state`] found.
#[derive(Debug)]
pub struct KeyedStateRead {
    /// The id of the checkpoint read.
    pub checkpoint_id: u64,
    /// Its directory (a local path or a URI).
    pub path: PathBuf,
    pub uid: String,
    /// The operator's name.
    pub name: String,
    /// The key columns the manifest records (empty in version-1 manifests).
    pub key_columns: Vec<KeyColumn>,
    pub content: KeyedStateContent,
}

/// An operator's keyed state, decoded or not.
#[derive(Debug)]
pub enum KeyedStateContent {
    /// Native state, decoded: batches of one schema (key columns, then the
    /// state's columns), in key-group order.
    Native(Vec<RecordBatch>),
    /// State in a format the core does not own (Python pickles): each key
    /// group's blob, sorted by key group.
    Foreign(Vec<(u32, Arc<Vec<u8>>)>),
    /// A keyed operator that held no key at this checkpoint.
    Empty,
}

/// Loads the checkpoint at `path` (a `chk-<id>` or savepoint directory,
/// its manifest, or a storage root, whose newest completed checkpoint is
/// read) and reads the keyed state of operator `uid`.
///
/// Errors (all `Checkpoint` errors naming the path): `path` is not a
/// checkpoint; no operator has `uid` (the message lists the uids there);
/// the operator has no keyed state, or recomputes it instead of storing it
/// (in any checkpoint but the final one of a bounded job);
/// a blob is in a format no decoder knows.
pub fn read_keyed_state(
    path: &Path,
    options: &StorageOptions,
    uid: &str,
) -> Result<KeyedStateRead> {
    read_from(&load(path, options)?, uid)
}

/// The checkpoint at `path`, or the newest completed one under it when it
/// is a storage root.
pub fn load(path: &Path, options: &StorageOptions) -> Result<RestoredCheckpoint> {
    let is_uri = is_object_store_uri(path);
    let direct = path.file_name().is_some_and(|n| n == MANIFEST_FILE)
        || if is_uri {
            Store::open(path, options)?
                .exists(MANIFEST_FILE)
                .unwrap_or(false)
        } else {
            path.join(MANIFEST_FILE).is_file()
        };
    if !direct && (is_uri || path.is_dir()) {
        let root = CheckpointStorage::open_read_only(path, options)?;
        // A corrupt newest checkpoint is an error, never skipped silently.
        if let Some(latest) = root.latest_valid()? {
            return Ok(latest);
        }
    }
    CheckpointStorage::load_path_with(path, options)
}

/// Reads the keyed state of `uid` out of the loaded checkpoint `rc`.
pub fn read_from(rc: &RestoredCheckpoint, uid: &str) -> Result<KeyedStateRead> {
    let manifest = rc.manifest();
    let dir = rc.dir().to_path_buf();
    let what = format!("checkpoint {} at '{}'", manifest.id, dir.display());
    let fail = |msg: String| Error::checkpoint(Some(dir.clone()), msg);
    let Some(op) = manifest.operators.iter().find(|o| o.uid == uid) else {
        let mut uids: Vec<&str> = manifest.operators.iter().map(|o| o.uid.as_str()).collect();
        uids.sort_unstable();
        return Err(fail(format!(
            "{what} holds no operator with uid '{uid}'; the uids it holds: {}",
            uids.join(", ")
        )));
    };
    let named = format!("operator '{}' (uid '{uid}') in {what}", op.name);
    let blobs = rc.keyed_state(uid, 0..u32::MAX);
    let is_source = op.subtasks.iter().any(|s| !s.source_offsets.is_empty());
    if blobs.is_empty() {
        // A recomputing operator whose null-state checkpoint is this one
        // holds an empty state: rebuilding it replays nothing. The final
        // checkpoint of a bounded job stores a recomputing operator's state
        // (FLIP-147; `coordinator.rs`): none there is an empty state.
        let replayed = op
            .null_state_checkpoint
            .filter(|&from| from < manifest.id && !manifest.final_state);
        if let (Some(from), false) = (replayed, is_source) {
            return Err(fail(format!(
                "{named} stores no state: it recomputes its state on restore by replaying \
                 the input since checkpoint {from} (recovery=\"recompute\"); read a \
                 savepoint instead, savepoints always hold full state"
            )));
        }
        if op.key.is_none() {
            let holds = if rc.operator_blobs(uid).is_empty() {
                "holds no state"
            } else {
                "holds only non-keyed state (source offsets, sink transactions, ...)"
            };
            return Err(fail(format!("{named} has no keyed state: it {holds}")));
        }
    }
    let mut native = Vec::new();
    let mut foreign = Vec::new();
    for (kg, blob) in blobs {
        let bytes = blob.to_bytes()?;
        if bytes.first() == Some(&PICKLE_PROTO) {
            foreign.push((kg, bytes));
            continue;
        }
        let decode = native_decoder(&bytes).ok_or_else(|| {
            fail(format!(
                "{named} holds keyed state (key group {kg}) in a format read_state cannot \
                 decode yet (it reads keyed aggregates, windows, joins and process functions)"
            ))
        })?;
        let batches = decode(&bytes, kg).map_err(|e| fail(format!("{named}: {e}")))?;
        native.extend(batches);
    }
    if !native.is_empty() && !foreign.is_empty() {
        return Err(fail(format!(
            "{named} holds keyed state in two formats (native and pickled key groups)"
        )));
    }
    if let Some(first) = native.first() {
        let schema = first.schema();
        if let Some(other) = native
            .iter()
            .find(|b| b.schema().fields() != schema.fields())
        {
            return Err(fail(format!(
                "{named} holds key groups of different layouts: {} and {}",
                schema,
                other.schema()
            )));
        }
    }
    let content = if !native.is_empty() {
        KeyedStateContent::Native(native)
    } else if !foreign.is_empty() {
        KeyedStateContent::Foreign(foreign)
    } else {
        KeyedStateContent::Empty
    };
    Ok(KeyedStateRead {
        checkpoint_id: manifest.id,
        path: dir.clone(),
        uid: uid.to_string(),
        name: op.name.clone(),
        key_columns: op
            .key
            .as_ref()
            .and_then(|k| k.inputs.first().cloned())
            .unwrap_or_default(),
        content,
    })
}

/// The decoder of a native blob: a version byte, then an Arrow IPC stream
/// whose schema metadata names its format.
fn native_decoder(bytes: &[u8]) -> Option<Decoder> {
    if join::is_state_blob(bytes) {
        return Some(join::state_table);
    }
    let (_, body) = bytes.split_first()?;
    let reader = StreamReader::try_new(std::io::Cursor::new(body), None).ok()?;
    let schema = reader.schema();
    NATIVE_FORMATS
        .iter()
        .find(|(_, is_mine, _)| is_mine(&schema))
        .map(|(_, _, decode)| *decode)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::checkpoint::manifest::{KeyIdentity, OperatorEntry, SubtaskEntry};
    use crate::checkpoint::CheckpointInfo;
    use crate::event::BarrierKind;
    use crate::state::keyed::AggKind;
    use crate::state::{OperatorState, StateBlob};
    use arrow::array::{ArrayRef, AsArray, Int64Array};
    use arrow::datatypes::{DataType, Field, Int64Type};

    fn sum_blob(keys: &[i64], sums: &[i64]) -> StateBlob {
        let field = Arc::new(Field::new("k", DataType::Int64, true));
        let keys: ArrayRef = Arc::new(Int64Array::from(keys.to_vec()));
        let sums: ArrayRef = Arc::new(Int64Array::from(sums.to_vec()));
        let bytes = keyed_agg::encode_state(AggKind::Sum, "v", &[field], vec![keys], sums).unwrap();
        StateBlob::Bytes(Arc::new(bytes))
    }

    fn entry(uid: &str, keyed: bool, subtasks: u32) -> OperatorEntry {
        OperatorEntry {
            uid: uid.into(),
            name: format!("{uid}-name"),
            finished: true,
            null_state_checkpoint: None,
            schema: None,
            key: keyed.then(|| KeyIdentity {
                key_groups: 128,
                inputs: vec![vec![KeyColumn {
                    name: "k".into(),
                    data_type: Some("Int64".into()),
                }]],
            }),
            subtasks: (0..subtasks)
                .map(|subtask| SubtaskEntry {
                    subtask,
                    state: None,
                    reused: vec![],
                    source_offsets: vec![],
                    finished: false,
                })
                .collect(),
        }
    }

    /// A checkpoint of "sums" (two subtasks), "src" (operator state only)
    /// and "odd" (a blob no decoder knows, one that is a pickle).
    fn checkpoint(dir: &Path) -> PathBuf {
        let storage = CheckpointStorage::open(dir).unwrap();
        let pending = storage.begin(4).unwrap();
        let keyed = |groups: Vec<(u32, StateBlob)>| OperatorState {
            operator: None,
            keyed: groups,
        };
        let write = |uid: &str, subtask: u32, state: OperatorState| {
            pending.write_state(uid, subtask, &state).unwrap();
        };
        write("sums", 0, keyed(vec![(3, sum_blob(&[1, 8], &[10, 80]))]));
        write("sums", 1, keyed(vec![(70, sum_blob(&[2], &[20]))]));
        let offsets = StateBlob::Bytes(Arc::new(vec![0; 8]));
        write(
            "src",
            0,
            OperatorState {
                operator: Some(offsets),
                keyed: vec![],
            },
        );
        let odd = StateBlob::Bytes(Arc::new(b"\x01not arrow".to_vec()));
        let pickle = StateBlob::Bytes(Arc::new(b"\x80\x05N.".to_vec()));
        write("odd", 0, keyed(vec![(1, odd), (2, pickle.clone())]));
        write("py", 0, keyed(vec![(5, pickle)]));
        let done = pending
            .complete(CheckpointInfo {
                kind: BarrierKind::Checkpoint,
                trigger_ms: 0,
                final_state: false,
                completion_ms: Some(1),
                alignments: vec![],
                operators: vec![
                    entry("sums", true, 2),
                    entry("src", false, 1),
                    entry("odd", true, 1),
                    entry("py", true, 1),
                ],
            })
            .unwrap();
        done.dir
    }

    #[test]
    fn test_read_state_gathers_key_groups_of_every_subtask() {
        let tmp = tempfile::tempdir().unwrap();
        let chk = checkpoint(tmp.path());
        let read = read_keyed_state(&chk, &StorageOptions::new(), "sums").unwrap();
        assert_eq!(read.checkpoint_id, 4);
        assert_eq!(read.name, "sums-name");
        assert_eq!(read.key_columns[0].name, "k");
        let KeyedStateContent::Native(batches) = read.content else {
            panic!("not native: {:?}", read.content)
        };
        let schema = batches[0].schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["k", "v"]);
        let col = |i: usize| -> Vec<i64> {
            batches
                .iter()
                .flat_map(|b| b.column(i).as_primitive::<Int64Type>().values().to_vec())
                .collect()
        };
        assert_eq!(col(0), [1, 8, 2]);
        assert_eq!(col(1), [10, 80, 20]);
        // the storage root reads its newest checkpoint
        let root = read_keyed_state(tmp.path(), &StorageOptions::new(), "py").unwrap();
        assert!(matches!(root.content, KeyedStateContent::Foreign(ref b) if b[0].0 == 5));
    }

    #[test]
    fn test_read_state_refuses_what_it_cannot_show() {
        let tmp = tempfile::tempdir().unwrap();
        let chk = checkpoint(tmp.path());
        let err = |uid: &str| {
            read_keyed_state(&chk, &StorageOptions::new(), uid)
                .unwrap_err()
                .to_string()
        };
        let e = err("nope");
        assert!(
            e.contains("no operator with uid 'nope'") && e.contains("odd, py, src, sums"),
            "{e}"
        );
        let e = err("src");
        assert!(
            e.contains("has no keyed state") && e.contains("non-keyed"),
            "{e}"
        );
        let e = err("odd");
        assert!(
            e.contains("cannot decode") && e.contains("key group 1"),
            "{e}"
        );
        let missing = tmp.path().join("nothing");
        let e = read_keyed_state(&missing, &StorageOptions::new(), "sums")
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a checkpoint"), "{e}");
    }
}
