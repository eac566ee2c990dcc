//! The checkpoint manifest: what a completed checkpoint contains, and its
//! on-disk encoding (DESIGN.md "Checkpoints": completion is a manifest written
//! after all state files; the seed flink-fault-tolerance-mechanism.txt says a
//! snapshot holds the source positions and a pointer to each operator's state).
//!
//! The encoding is a small, strict subset of JSON written and read by hand
//! (no serde): objects, arrays, strings, `true`/`false`/`null` and unsigned
//! 64-bit integers only. Keys are written in a fixed order; the decoder
//! rejects unknown and duplicate keys, trailing data, and versions it does not
//! know. The last member is `"checksum": "xxh3:<16 hex digits>"`, the xxh3-64
//! of every byte before the line that holds it, so any flipped byte is
//! caught. Format version 5 (version 1, written before keyed identities
//! were recorded, is still read: its operators have no `"key"`; version 2,
//! written before incremental checkpoints, has no `"shared"` and no
//! `"reused"` members; version 3 has no `"final"`; version 4 has no
//! `"schema"`):
//!
//! ```text
//! {
//!   "format": "eddyline-checkpoint-manifest",
//!   "version": 5,
//!   "id": 7,
//!   "kind": "checkpoint",                        // or "savepoint"
//!   "trigger_ms": 1700000000000,
//!   "completion_ms": 1700000000042,
//!   "duration_ms": 42,
//!   "final": false,
//!   "alignments": [{"task": "join", "subtask": 0, "alignment_us": 1500}],
//!   "operators": [
//!     {"uid": "count", "name": "count", "finished": false,
//!      "null_state_checkpoint": null,            // or an id (FLINK-4120)
//!      "key": {"key_groups": 128,                // null for a non-keyed operator
//!              "inputs": [[{"name": "k", "type": "Int64"}]]},
//!      "schema": "ffffffff...",                  // or null
//!      "subtasks": [
//!        {"subtask": 0,
//!         "state": {"file": "count-1a2b3c4d-0.state", "size": 1234,
//!                   "xxh3": "0123456789abcdef", "key_groups": [[0, 64]],
//!                   "shared": false},
//!         "reused": [{"file": "count-1a2b3c4d-0-5.state", "size": 999,
//!                     "xxh3": "0123456789abcdef", "key_groups": [[0, 64]],
//!                     "shared": true, "use": [[3, 9]], "use_bytes": 420}],
//!         "source_offsets": [{"split": "part-0", "offset": 17}]}]}],
//!   "checksum": "xxh3:0123456789abcdef"
//! }
//! ```
//!
//! `final` is `true` for the final checkpoint of a bounded job, taken after
//! every task finished (FLIP-147): it also stores the full state of the
//! operators that recompute (`null_state_checkpoint` set), which no other
//! checkpoint holds, so `read_state` can read it; a restore from it loads
//! that state and replays nothing (nothing is left to recompute).
//!
//! `state` is `null` for a subtask without state; `key_groups` lists
//! half-open ranges `[start, end)` of the key groups in the state file.
//! `shared` says where the file lies: `false` in the checkpoint's own
//! `chk-<id>/` directory, `true` in the storage root's `shared/` directory
//! (incremental checkpoints, DESIGN.md "Checkpoints": files there are
//! shared by later checkpoints and deleted only when no retained manifest
//! names them). `reused` lists the files of earlier checkpoints this one
//! takes unchanged key groups from: each names the whole file (its size,
//! checksum and key groups, verified on restore like any state file) and,
//! in `use`, the key groups taken from it (`use_bytes`: their sections'
//! bytes). A key group is in exactly one of `state` and the `use` ranges.
//!
//! `key` is a keyed operator's identity: the number of key groups its keys
//! were hashed into (`max_parallelism`) and, per keyed input in input order,
//! the key columns with their Arrow types (`null` when the type was not
//! known when the graph was built). State restored under another key or
//! another number of key groups would silently be wrong, so a restore
//! compares it.
//!
//! `schema` is the output schema the operator's subtasks agreed on when the
//! graph did not declare one (DESIGN.md "One schema per operator"), as the
//! hex digits of an Arrow IPC stream holding only the schema; `null` when
//! none was agreed yet or the graph declares it. A restore keeps it, so the
//! restored job writes what the checkpointed one wrote.

use std::fmt::{self, Write as _};
use std::ops::Range;

use super::json::{parse_hex16, quote, Fields, Parser, Value};
use crate::event::BarrierKind;
use crate::state::{decode_entries, decode_positions};

/// The manifest format this build writes (it reads this and versions 1
/// to 3).
pub const MANIFEST_VERSION: u64 = 5;

/// The oldest manifest format this build reads.
const OLDEST_VERSION: u64 = 1;

const FORMAT_NAME: &str = "eddyline-checkpoint-manifest";
const CHECKSUM_LINE: &str = "\n  \"checksum\": \"xxh3:";

/// Everything a completed checkpoint records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub id: u64,
    pub kind: BarrierKind,
    /// When the coordinator triggered it, ms since the epoch.
    pub trigger_ms: u64,
    /// When it completed, ms since the epoch.
    pub completion_ms: u64,
    /// `completion_ms - trigger_ms`.
    pub duration_ms: u64,
    /// Taken after every task finished (FLIP-147): recomputing operators
    /// stored their full state too (`false` before version 4).
    pub final_state: bool,
    /// Alignment time of each task that aligned barriers.
    pub alignments: Vec<TaskAlignment>,
    pub operators: Vec<OperatorEntry>,
}

/// How long one subtask aligned barriers for this checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskAlignment {
    pub task: String,
    pub subtask: u32,
    pub alignment_us: u64,
}

/// One operator (by uid) of the checkpointed job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorEntry {
    pub uid: String,
    pub name: String,
    /// All its subtasks had finished (FLIP-147).
    pub finished: bool,
    /// The checkpoint whose state it keeps when it has none of its own
    /// (FLINK-4120).
    pub null_state_checkpoint: Option<u64>,
    /// A keyed operator's key identity; `None` for non-keyed operators and
    /// in manifests of version 1.
    pub key: Option<KeyIdentity>,
    /// The output schema its subtasks agreed on (`None` in manifests
    /// before version 5, or when none was agreed).
    pub schema: Option<arrow::datatypes::SchemaRef>,
    pub subtasks: Vec<SubtaskEntry>,
}

/// What a keyed operator's state is keyed by: restoring it under other key
/// columns, other key types or another number of key groups would put the
/// state of one key under another (or lose it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyIdentity {
    /// How many key groups keys were hashed into (`max_parallelism`).
    pub key_groups: u32,
    /// The key columns of each keyed input, in input order.
    pub inputs: Vec<Vec<KeyColumn>>,
}

/// One key column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyColumn {
    pub name: String,
    /// Its Arrow type, when the graph knew it when it was built.
    pub data_type: Option<String>,
}

impl KeyIdentity {
    /// The key columns, readable: `k: Int64`, inputs separated by ` | `.
    pub fn describe_key(&self) -> String {
        let inputs: Vec<String> = self
            .inputs
            .iter()
            .map(|cols| {
                let cols: Vec<String> = cols
                    .iter()
                    .map(|c| match &c.data_type {
                        Some(t) => format!("'{}': {t}", c.name),
                        None => format!("'{}'", c.name),
                    })
                    .collect();
                format!("({})", cols.join(", "))
            })
            .collect();
        inputs.join(" | ")
    }

    /// Whether `self` (recorded) and `other` (the new graph) key state the
    /// same way by their columns: same names per input, and the same types
    /// wherever both know them.
    pub fn same_key(&self, other: &KeyIdentity) -> bool {
        self.inputs.len() == other.inputs.len()
            && self.inputs.iter().zip(&other.inputs).all(|(a, b)| {
                a.len() == b.len()
                    && a.iter().zip(b).all(|(x, y)| {
                        x.name == y.name
                            && match (&x.data_type, &y.data_type) {
                                (Some(t), Some(u)) => t == u,
                                _ => true,
                            }
                    })
            })
    }
}

/// One subtask of an operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubtaskEntry {
    pub subtask: u32,
    /// The state file this checkpoint wrote for it, `None` if it wrote
    /// none (no state, or every key group reused).
    pub state: Option<StateFileEntry>,
    /// Key groups taken unchanged from state files of earlier checkpoints
    /// (incremental checkpoints; empty in manifests before version 3).
    pub reused: Vec<ReusedState>,
    /// The read positions of a source subtask.
    pub source_offsets: Vec<SourceOffset>,
    /// The subtask's task had finished when it answered this checkpoint
    /// (FLIP-147: it sent no barrier, its channels had ended): a recompute
    /// replay re-injects the barrier after the end of the input, where the
    /// consumers saw it (written only when true).
    pub finished: bool,
}

/// A state file as the manifest records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateFileEntry {
    /// File name inside the checkpoint directory.
    pub file: String,
    /// Exact size in bytes.
    pub size: u64,
    /// xxh3-64 of the whole file.
    pub checksum: u64,
    /// Key groups whose keyed state the file holds, as sorted, disjoint,
    /// non-adjacent half-open ranges.
    pub key_groups: Vec<Range<u32>>,
    /// The file lies in the storage root's `shared/` directory rather than
    /// in the checkpoint's own directory (always `false` before version 3).
    pub shared: bool,
}

/// Key groups a checkpoint takes from a state file an earlier checkpoint
/// wrote (incremental checkpoints).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReusedState {
    /// The whole file, as it was written.
    pub file: StateFileEntry,
    /// The key groups taken from it (a subset of `file.key_groups`).
    pub key_groups: Vec<Range<u32>>,
    /// The bytes of those key groups' sections.
    pub bytes: u64,
}

/// The position of a source in one split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceOffset {
    pub split: String,
    pub offset: u64,
}

impl Manifest {
    /// The operator with `uid`.
    pub fn operator(&self, uid: &str) -> Option<&OperatorEntry> {
        self.operators.iter().find(|o| o.uid == uid)
    }

    /// The size of the whole state: the bytes of the state files this
    /// checkpoint wrote plus those of the sections it reuses from earlier
    /// ones (what a full checkpoint of the same state would about write).
    pub fn state_size(&self) -> u64 {
        self.written_size()
            + self
                .operators
                .iter()
                .flat_map(|o| &o.subtasks)
                .flat_map(|s| &s.reused)
                .map(|r| r.bytes)
                .sum::<u64>()
    }

    /// Total bytes of the state files this checkpoint wrote.
    pub fn written_size(&self) -> u64 {
        self.operators
            .iter()
            .flat_map(|o| &o.subtasks)
            .filter_map(|s| s.state.as_ref())
            .map(|s| s.size)
            .sum()
    }

    /// The names of the files in the `shared/` directory this checkpoint
    /// refers to (written by it or reused), each once.
    pub fn shared_files(&self) -> std::collections::BTreeSet<&str> {
        self.operators
            .iter()
            .flat_map(|o| &o.subtasks)
            .flat_map(|s| s.state.iter().chain(s.reused.iter().map(|r| &r.file)))
            .filter(|f| f.shared)
            .map(|f| f.file.as_str())
            .collect()
    }

    /// Encodes the manifest (see the module docs for the format).
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(512);
        self.write_json(&mut out)
            .expect("invariant: formatting into a String never fails");
        out
    }

    fn write_json(&self, out: &mut String) -> fmt::Result {
        out.push_str("{\n");
        writeln!(out, "  \"format\": {},", quote(FORMAT_NAME))?;
        writeln!(out, "  \"version\": {MANIFEST_VERSION},")?;
        writeln!(out, "  \"id\": {},", self.id)?;
        writeln!(out, "  \"kind\": {},", quote(kind_name(self.kind)))?;
        writeln!(out, "  \"trigger_ms\": {},", self.trigger_ms)?;
        writeln!(out, "  \"completion_ms\": {},", self.completion_ms)?;
        writeln!(out, "  \"duration_ms\": {},", self.duration_ms)?;
        writeln!(out, "  \"final\": {},", self.final_state)?;
        out.push_str("  \"alignments\": [");
        for (i, a) in self.alignments.iter().enumerate() {
            out.push_str(if i == 0 { "\n    " } else { ",\n    " });
            write!(
                out,
                "{{\"task\": {}, \"subtask\": {}, \"alignment_us\": {}}}",
                quote(&a.task),
                a.subtask,
                a.alignment_us
            )?;
        }
        out.push_str(if self.alignments.is_empty() {
            "],\n"
        } else {
            "\n  ],\n"
        });
        out.push_str("  \"operators\": [");
        for (i, op) in self.operators.iter().enumerate() {
            out.push_str(if i == 0 { "\n    " } else { ",\n    " });
            encode_operator(out, op)?;
        }
        out.push_str(if self.operators.is_empty() {
            "]"
        } else {
            "\n  ]"
        });
        let sum = xxhash_rust::xxh3::xxh3_64(out.as_bytes());
        write!(out, ",{CHECKSUM_LINE}{sum:016x}\"\n}}\n")
    }

    /// Decodes and verifies a manifest. The error is a sentence fragment
    /// saying what is wrong; the caller adds the file name.
    pub fn decode(text: &str) -> Result<Manifest, String> {
        let cut = text.rfind(CHECKSUM_LINE).ok_or_else(|| {
            "has no checksum line (it is truncated or not a manifest)".to_string()
        })?;
        let body = text.get(..cut.saturating_sub(1)).unwrap_or("");
        let value = Parser::new(text).document()?;
        let mut top = Fields::new(value, "the top level")?;
        let format = top.string("format")?;
        if format != FORMAT_NAME {
            return Err(format!(
                "is not a manifest: its format is '{format}', not '{FORMAT_NAME}'"
            ));
        }
        let version = top.u64("version")?;
        if !(OLDEST_VERSION..=MANIFEST_VERSION).contains(&version) {
            return Err(format!(
                "has format version {version}; this build of eddyline reads versions \
                 {OLDEST_VERSION} to {MANIFEST_VERSION}"
            ));
        }
        let recorded = top.string("checksum")?;
        let actual = format!("xxh3:{:016x}", xxhash_rust::xxh3::xxh3_64(body.as_bytes()));
        if recorded != actual {
            return Err(format!(
                "is corrupt: its checksum is {recorded} but its content hashes to {actual}"
            ));
        }
        let kind = match top.string("kind")?.as_str() {
            "checkpoint" => BarrierKind::Checkpoint,
            "savepoint" => BarrierKind::Savepoint,
            other => {
                return Err(format!(
                    "is invalid: field 'kind' is '{other}', not checkpoint or savepoint"
                ))
            }
        };
        let manifest = Manifest {
            id: top.u64("id")?,
            kind,
            trigger_ms: top.u64("trigger_ms")?,
            completion_ms: top.u64("completion_ms")?,
            duration_ms: top.u64("duration_ms")?,
            // Version 3 and older stored no state of recomputing operators.
            final_state: version >= 4 && top.bool("final")?,
            alignments: top
                .array("alignments")?
                .into_iter()
                .map(|v| {
                    let mut f = Fields::new(v, "an alignment")?;
                    let a = TaskAlignment {
                        task: f.string("task")?,
                        subtask: f.u32("subtask")?,
                        alignment_us: f.u64("alignment_us")?,
                    };
                    f.finish()?;
                    Ok(a)
                })
                .collect::<Result<_, String>>()?,
            operators: top
                .array("operators")?
                .into_iter()
                .map(|v| decode_operator(v, version))
                .collect::<Result<_, String>>()?,
        };
        top.finish()?;
        Ok(manifest)
    }
}

fn kind_name(kind: BarrierKind) -> &'static str {
    match kind {
        BarrierKind::Checkpoint => "checkpoint",
        BarrierKind::Savepoint => "savepoint",
    }
}

fn encode_key(key: Option<&KeyIdentity>) -> String {
    let Some(key) = key else {
        return "null".to_string();
    };
    let inputs: Vec<String> = key
        .inputs
        .iter()
        .map(|cols| {
            let cols: Vec<String> = cols
                .iter()
                .map(|c| {
                    format!(
                        "{{\"name\": {}, \"type\": {}}}",
                        quote(&c.name),
                        c.data_type.as_deref().map_or_else(|| "null".into(), quote)
                    )
                })
                .collect();
            format!("[{}]", cols.join(", "))
        })
        .collect();
    format!(
        "{{\"key_groups\": {}, \"inputs\": [{}]}}",
        key.key_groups,
        inputs.join(", ")
    )
}

fn decode_key(v: Value, what: &str) -> Result<Option<KeyIdentity>, String> {
    if v == Value::Null {
        return Ok(None);
    }
    let mut f = Fields::new(v, &format!("{what}: 'key'"))?;
    let key_groups = f.u32("key_groups")?;
    let inputs = f
        .array("inputs")?
        .into_iter()
        .map(|cols| match cols {
            Value::Arr(cols) => cols
                .into_iter()
                .map(|c| {
                    let mut c = Fields::new(c, &format!("{what}: a key column"))?;
                    let name = c.string("name")?;
                    let data_type = match c.take("type")? {
                        Value::Null => None,
                        Value::Str(t) => Some(t),
                        _ => {
                            return Err(format!(
                                "is invalid: {what}: a key column's 'type' is not a string or null"
                            ))
                        }
                    };
                    c.finish()?;
                    Ok(KeyColumn { name, data_type })
                })
                .collect::<Result<Vec<_>, String>>(),
            _ => Err(format!("is invalid: {what}: a keyed input is not an array")),
        })
        .collect::<Result<Vec<_>, String>>()?;
    f.finish()?;
    Ok(Some(KeyIdentity { key_groups, inputs }))
}

/// An agreed schema as a JSON string of hex digits (or `null`).
fn encode_schema_member(schema: Option<&arrow::datatypes::SchemaRef>) -> String {
    let Some(bytes) = schema.and_then(|s| crate::schemas::encode_schema(s).ok()) else {
        return "null".to_string();
    };
    let mut hex = String::with_capacity(2 * bytes.len() + 2);
    hex.push('"');
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        hex.push(char::from(DIGITS[usize::from(b >> 4)]));
        hex.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    hex.push('"');
    hex
}

fn decode_schema_member(
    v: Value,
    what: &str,
) -> Result<Option<arrow::datatypes::SchemaRef>, String> {
    let hex = match v {
        Value::Null => return Ok(None),
        Value::Str(s) => s,
        _ => {
            return Err(format!(
                "is invalid: {what}: 'schema' is not a string or null"
            ))
        }
    };
    let bad = || format!("is invalid: {what}: 'schema' is not an encoded Arrow schema");
    if hex.len() % 2 != 0 {
        return Err(bad());
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(bad)?;
    crate::schemas::decode_schema(&bytes)
        .map(Some)
        .map_err(|_| bad())
}

fn encode_operator(out: &mut String, op: &OperatorEntry) -> fmt::Result {
    write!(
        out,
        "{{\"uid\": {}, \"name\": {}, \"finished\": {}, \"null_state_checkpoint\": {},\n     \"key\": {},\n     \"schema\": {},\n     \"subtasks\": [",
        quote(&op.uid),
        quote(&op.name),
        op.finished,
        op.null_state_checkpoint
            .map_or_else(|| "null".to_string(), |id| id.to_string()),
        encode_key(op.key.as_ref()),
        encode_schema_member(op.schema.as_ref())
    )?;
    for (i, s) in op.subtasks.iter().enumerate() {
        out.push_str(if i == 0 { "\n      " } else { ",\n      " });
        write!(out, "{{\"subtask\": {}, \"state\": ", s.subtask)?;
        match &s.state {
            None => out.push_str("null"),
            Some(f) => {
                encode_file(out, f)?;
                out.push('}');
            }
        }
        out.push_str(", \"reused\": [");
        for (j, r) in s.reused.iter().enumerate() {
            if j > 0 {
                out.push_str(", ");
            }
            encode_file(out, &r.file)?;
            write!(
                out,
                ", \"use\": {}, \"use_bytes\": {}}}",
                encode_ranges(&r.key_groups),
                r.bytes
            )?;
        }
        out.push(']');
        let offsets: Vec<String> = s
            .source_offsets
            .iter()
            .map(|o| {
                format!(
                    "{{\"split\": {}, \"offset\": {}}}",
                    quote(&o.split),
                    o.offset
                )
            })
            .collect();
        write!(out, ", \"source_offsets\": [{}]", offsets.join(", "))?;
        out.push_str(if s.finished {
            ", \"finished\": true}"
        } else {
            "}"
        });
    }
    out.push_str(if op.subtasks.is_empty() {
        "]}"
    } else {
        "\n     ]}"
    });
    Ok(())
}

/// Writes a file entry's members, leaving its object open.
fn encode_file(out: &mut String, f: &StateFileEntry) -> fmt::Result {
    write!(
        out,
        "{{\"file\": {}, \"size\": {}, \"xxh3\": \"{:016x}\", \"key_groups\": {}, \"shared\": {}",
        quote(&f.file),
        f.size,
        f.checksum,
        encode_ranges(&f.key_groups),
        f.shared
    )
}

fn encode_ranges(ranges: &[Range<u32>]) -> String {
    let groups: Vec<String> = ranges
        .iter()
        .map(|r| format!("[{}, {}]", r.start, r.end))
        .collect();
    format!("[{}]", groups.join(", "))
}

fn decode_ranges(v: Value, what: &str) -> Result<Vec<Range<u32>>, String> {
    let Value::Arr(items) = v else {
        return Err(format!(
            "is invalid: {what}: key-group ranges are not an array"
        ));
    };
    items
        .into_iter()
        .map(|r| match r {
            Value::Arr(pair) => match pair.as_slice() {
                [Value::Num(a), Value::Num(b)] if a < b && *b <= u64::from(u32::MAX) => {
                    Ok(*a as u32..*b as u32)
                }
                _ => Err(format!(
                    "is invalid: {what}: a key-group range is not [start, end) with start < end"
                )),
            },
            _ => Err(format!(
                "is invalid: {what}: a key-group range is not an array"
            )),
        })
        .collect()
}

/// Reads a file entry's members (`shared` only from version 3 on).
fn decode_file(s: &mut Fields, what: &str, version: u64) -> Result<StateFileEntry, String> {
    let checksum_hex = s.string("xxh3")?;
    let checksum = parse_hex16(&checksum_hex)
        .ok_or_else(|| format!("is invalid: {what}: 'xxh3' is not 16 hex digits"))?;
    let key_groups = decode_ranges(s.take("key_groups")?, what)?;
    Ok(StateFileEntry {
        file: s.string("file")?,
        size: s.u64("size")?,
        checksum,
        key_groups,
        shared: if version >= 3 {
            s.bool("shared")?
        } else {
            false
        },
    })
}

fn decode_operator(v: Value, version: u64) -> Result<OperatorEntry, String> {
    let mut f = Fields::new(v, "an operator")?;
    let uid = f.string("uid")?;
    let what = format!("operator '{uid}'");
    let op = OperatorEntry {
        name: f.string("name")?,
        finished: f.bool("finished")?,
        null_state_checkpoint: match f.take("null_state_checkpoint")? {
            Value::Null => None,
            Value::Num(n) => Some(n),
            _ => {
                return Err(format!(
                    "is invalid: {what}: 'null_state_checkpoint' is not null or an id"
                ))
            }
        },
        // Version 1 did not record keyed identities.
        key: if version >= 2 {
            decode_key(f.take("key")?, &what)?
        } else {
            None
        },
        schema: if version >= 5 {
            decode_schema_member(f.take("schema")?, &what)?
        } else {
            None
        },
        subtasks: f
            .array("subtasks")?
            .into_iter()
            .map(|v| decode_subtask(v, &what, version))
            .collect::<Result<_, String>>()?,
        uid,
    };
    f.finish()?;
    Ok(op)
}

fn decode_subtask(v: Value, what: &str, version: u64) -> Result<SubtaskEntry, String> {
    let mut f = Fields::new(v, what)?;
    let subtask = f.u32("subtask")?;
    let sub_what = format!("{what} subtask {subtask}");
    let state = match f.take("state")? {
        Value::Null => None,
        v => {
            let mut s = Fields::new(v, &sub_what)?;
            let entry = decode_file(&mut s, &sub_what, version)?;
            s.finish()?;
            Some(entry)
        }
    };
    let reused = if version >= 3 {
        f.array("reused")?
            .into_iter()
            .map(|v| {
                let mut r = Fields::new(v, &sub_what)?;
                let file = decode_file(&mut r, &sub_what, version)?;
                let key_groups = decode_ranges(r.take("use")?, &sub_what)?;
                let bytes = r.u64("use_bytes")?;
                r.finish()?;
                Ok(ReusedState {
                    file,
                    key_groups,
                    bytes,
                })
            })
            .collect::<Result<Vec<_>, String>>()?
    } else {
        Vec::new()
    };
    let source_offsets = f
        .array("source_offsets")?
        .into_iter()
        .map(|v| {
            let mut o = Fields::new(v, "a source offset")?;
            let off = SourceOffset {
                split: o.string("split")?,
                offset: o.u64("offset")?,
            };
            o.finish()?;
            Ok(off)
        })
        .collect::<Result<_, String>>()?;
    let finished = f.has("finished") && f.bool("finished")?;
    f.finish()?;
    Ok(SubtaskEntry {
        subtask,
        state,
        reused,
        source_offsets,
        finished,
    })
}

/// The offsets a source subtask reports, as the manifest lists them. An
/// entry list gives one line per split left: the split named by its
/// leading u64 fields, the offset its last field (built-in sources), or by
/// its position in the list with the entry's size (other sources); a
/// subtask with nothing left lists `<subtask>/done`. Older offsets list
/// their u64 positions.
pub(crate) fn source_offsets(subtask: usize, offset: &[u8]) -> Vec<SourceOffset> {
    let Some(entries) = decode_entries(offset) else {
        let positions = decode_positions(offset, offset.len() / 8).unwrap_or_default();
        return positions
            .iter()
            .enumerate()
            .map(|(i, p)| SourceOffset {
                split: format!("{subtask}/{i}"),
                offset: *p,
            })
            .collect();
    };
    if entries.is_empty() {
        return vec![SourceOffset {
            split: format!("{subtask}/done"),
            offset: 0,
        }];
    }
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| match decode_positions(e, e.len() / 8) {
            Some(fields) if e.len() % 8 == 0 && fields.len() >= 2 => {
                let (last, split) = fields.split_last().expect("invariant: two fields or more");
                let split: Vec<String> = split.iter().map(u64::to_string).collect();
                SourceOffset {
                    split: format!("{subtask}/{}", split.join(":")),
                    offset: *last,
                }
            }
            _ => SourceOffset {
                split: format!("{subtask}/{i}"),
                offset: e.len() as u64,
            },
        })
        .collect()
}

/// Compresses sorted, distinct key groups into ranges.
pub fn key_group_ranges(sorted: &[u32]) -> Vec<Range<u32>> {
    let mut ranges: Vec<Range<u32>> = Vec::new();
    for &g in sorted {
        match ranges.last_mut() {
            Some(r) if r.end == g => r.end = g + 1,
            _ => ranges.push(g..g + 1),
        }
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            id: 7,
            kind: BarrierKind::Savepoint,
            trigger_ms: 1_700_000_000_000,
            completion_ms: 1_700_000_000_042,
            duration_ms: 42,
            final_state: true,
            alignments: vec![TaskAlignment {
                task: "join \"x\"".into(),
                subtask: 1,
                alignment_us: 1500,
            }],
            operators: vec![
                OperatorEntry {
                    uid: "count/é\n\u{1}".into(),
                    name: "count".into(),
                    finished: true,
                    null_state_checkpoint: Some(3),
                    schema: None,
                    key: Some(KeyIdentity {
                        key_groups: 128,
                        inputs: vec![
                            vec![
                                KeyColumn {
                                    name: "k".into(),
                                    data_type: Some("Int64".into()),
                                },
                                KeyColumn {
                                    name: "g\"".into(),
                                    data_type: None,
                                },
                            ],
                            vec![],
                        ],
                    }),
                    subtasks: vec![
                        SubtaskEntry {
                            subtask: 0,
                            state: Some(StateFileEntry {
                                file: "count-0.state".into(),
                                size: 99,
                                checksum: u64::MAX,
                                key_groups: vec![0..4, 9..10],
                                shared: true,
                            }),
                            reused: vec![ReusedState {
                                file: StateFileEntry {
                                    file: "count-0-2.state".into(),
                                    size: 1000,
                                    checksum: 7,
                                    key_groups: vec![4..9, 11..12],
                                    shared: true,
                                },
                                key_groups: vec![4..9, 11..12],
                                bytes: 640,
                            }],
                            source_offsets: vec![SourceOffset {
                                split: "p0".into(),
                                offset: 17,
                            }],
                            finished: true,
                        },
                        SubtaskEntry {
                            subtask: 1,
                            state: None,
                            reused: vec![],
                            source_offsets: vec![],
                            finished: false,
                        },
                    ],
                },
                OperatorEntry {
                    uid: "empty".into(),
                    name: "e".into(),
                    finished: false,
                    null_state_checkpoint: None,
                    schema: None,
                    key: None,
                    subtasks: vec![],
                },
            ],
        }
    }

    #[test]
    fn test_manifest_round_trip() {
        let m = sample();
        let text = m.encode();
        assert_eq!(Manifest::decode(&text), Ok(m));
        let empty = Manifest {
            alignments: vec![],
            operators: vec![],
            ..sample()
        };
        assert_eq!(Manifest::decode(&empty.encode()), Ok(empty));
    }

    #[test]
    fn test_manifest_flipped_byte_is_refused() {
        let text = sample().encode();
        let pos = text.find("\"size\": 99").expect("size field") + 9;
        let mut bytes = text.into_bytes();
        bytes[pos] = b'8';
        let bad = String::from_utf8(bytes).expect("utf8");
        let err = Manifest::decode(&bad).expect_err("corrupt");
        assert!(err.contains("corrupt"), "{err}");
    }

    #[test]
    fn test_manifest_truncated_is_refused() {
        let text = sample().encode();
        for cut in [0, 10, text.len() / 2, text.len() - 3] {
            assert!(Manifest::decode(&text[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn test_manifest_newer_version_is_refused() {
        let text = sample()
            .encode()
            .replace("\"version\": 5", "\"version\": 6");
        let err = Manifest::decode(&text).expect_err("version");
        assert!(err.contains("version 6"), "{err}");
    }

    #[test]
    fn test_key_identity_compares_names_and_known_types() {
        let key = |name: &str, t: Option<&str>| KeyIdentity {
            key_groups: 128,
            inputs: vec![vec![KeyColumn {
                name: name.into(),
                data_type: t.map(Into::into),
            }]],
        };
        let k64 = key("k", Some("Int64"));
        assert!(k64.same_key(&key("k", Some("Int64"))));
        assert!(k64.same_key(&key("k", None)), "an unknown type matches");
        assert!(!k64.same_key(&key("k", Some("Utf8"))), "another type");
        assert!(!k64.same_key(&key("g", Some("Int64"))), "another column");
        let two = KeyIdentity {
            inputs: vec![k64.inputs[0].clone(), k64.inputs[0].clone()],
            ..k64.clone()
        };
        assert!(!k64.same_key(&two), "another number of keyed inputs");
        assert_eq!(k64.describe_key(), "('k': Int64)");
    }

    /// The sample without what versions 3 and 4 added (shared files, reused
    /// key groups, the final flag), as version `version` wrote it,
    /// re-checksummed.
    fn older_text(version: u64, drop_key: bool) -> (String, Manifest) {
        let mut m = sample();
        m.final_state = false;
        for sub in m.operators.iter_mut().flat_map(|o| &mut o.subtasks) {
            sub.reused.clear();
            if let Some(f) = &mut sub.state {
                f.shared = false;
            }
        }
        let text = m.encode();
        let cut = text.rfind(CHECKSUM_LINE).expect("checksum line");
        let mut body = text[..cut - 1]
            .replace("\"version\": 5", &format!("\"version\": {version}"))
            .replace("\n     \"schema\": null,", "")
            .replace("  \"final\": false,\n", "")
            .replace(", \"shared\": false", "")
            .replace(", \"reused\": []", "");
        if drop_key {
            while let Some(start) = body.find("\n     \"key\": ") {
                let end = start
                    + body[start..]
                        .find(",\n     \"subtasks\"")
                        .expect("subtasks");
                body.replace_range(start..end + 1, "");
            }
            assert!(!body.contains("\"key\""), "{body}");
            for op in &mut m.operators {
                op.key = None;
            }
        }
        let sum = xxhash_rust::xxh3::xxh3_64(body.as_bytes());
        (format!("{body},{CHECKSUM_LINE}{sum:016x}\"\n}}\n"), m)
    }

    /// A manifest of version 1 (before keyed identities) still restores;
    /// its operators have no key identity.
    #[test]
    fn test_manifest_version_1_is_read_without_key_identity() {
        let (v1, expected) = older_text(1, true);
        assert_eq!(Manifest::decode(&v1), Ok(expected));
        // Version 2 requires the member.
        let v2 = v1.replace("\"version\": 1", "\"version\": 2");
        let cut = v2.rfind(CHECKSUM_LINE).expect("checksum line");
        let body = &v2[..cut - 1];
        let sum = xxhash_rust::xxh3::xxh3_64(body.as_bytes());
        let v2 = format!("{body},{CHECKSUM_LINE}{sum:016x}\"\n}}\n");
        let err = Manifest::decode(&v2).expect_err("key missing");
        assert!(err.contains("'key' is missing"), "{err}");
    }

    /// A manifest of version 2 (before incremental checkpoints) still
    /// restores: its files lie in the checkpoint directory and nothing is
    /// reused; version 3 requires both members.
    #[test]
    fn test_manifest_version_2_is_read_without_shared_files() {
        let (v2, expected) = older_text(2, false);
        assert_eq!(Manifest::decode(&v2), Ok(expected));
        let cut = v2.rfind(CHECKSUM_LINE).expect("checksum line");
        let body = v2[..cut - 1].replace("\"version\": 2", "\"version\": 3");
        let sum = xxhash_rust::xxh3::xxh3_64(body.as_bytes());
        let v3 = format!("{body},{CHECKSUM_LINE}{sum:016x}\"\n}}\n");
        let err = Manifest::decode(&v3).expect_err("shared missing");
        assert!(err.contains("'shared' is missing"), "{err}");
    }

    /// A manifest of version 3 (before final checkpoints stored the state
    /// of recomputing operators) is read as not final; version 4 requires
    /// the member.
    #[test]
    fn test_manifest_version_3_is_read_as_not_final() {
        let mut m = sample();
        m.final_state = false;
        let text = m.encode();
        let cut = text.rfind(CHECKSUM_LINE).expect("checksum line");
        let rewrite = |version: &str| {
            let body = text[..cut - 1]
                .replace("\"version\": 5", version)
                .replace("\n     \"schema\": null,", "")
                .replace("  \"final\": false,\n", "");
            let sum = xxhash_rust::xxh3::xxh3_64(body.as_bytes());
            format!("{body},{CHECKSUM_LINE}{sum:016x}\"\n}}\n")
        };
        assert_eq!(Manifest::decode(&rewrite("\"version\": 3")), Ok(m));
        let err = Manifest::decode(&rewrite("\"version\": 4")).expect_err("final missing");
        assert!(err.contains("'final' is missing"), "{err}");
    }

    /// An operator's agreed output schema survives the manifest; a
    /// manifest of version 4 (before schemas were agreed) has none, and
    /// version 5 requires the member.
    #[test]
    fn test_manifest_keeps_the_agreed_schema_and_reads_version_4_without() {
        use arrow::datatypes::{DataType, Field, Schema};
        let mut m = sample();
        m.operators[0].schema = Some(std::sync::Arc::new(Schema::new(vec![
            Field::new("v", DataType::Int64, true),
            Field::new("s", DataType::Utf8, false),
        ])));
        assert_eq!(Manifest::decode(&m.encode()), Ok(m.clone()));
        m.operators[0].schema = None;
        let text = m.encode();
        let cut = text.rfind(CHECKSUM_LINE).expect("checksum line");
        let rewrite = |version: &str| {
            let body = text[..cut - 1]
                .replace("\"version\": 5", version)
                .replace("\n     \"schema\": null,", "");
            let sum = xxhash_rust::xxh3::xxh3_64(body.as_bytes());
            format!("{body},{CHECKSUM_LINE}{sum:016x}\"\n}}\n")
        };
        assert_eq!(Manifest::decode(&rewrite("\"version\": 4")), Ok(m));
        let err = Manifest::decode(&rewrite("\"version\": 5")).expect_err("schema missing");
        assert!(err.contains("'schema' is missing"), "{err}");
    }

    #[test]
    fn test_manifest_sizes_and_shared_files() {
        let m = sample();
        assert_eq!(m.written_size(), 99);
        assert_eq!(m.state_size(), 99 + 640);
        let shared: Vec<&str> = m.shared_files().into_iter().collect();
        assert_eq!(shared, vec!["count-0-2.state", "count-0.state"]);
    }

    #[test]
    fn test_key_group_ranges_compress_runs() {
        assert_eq!(
            key_group_ranges(&[0, 1, 2, 5, 7, 8]),
            vec![0..3, 5..6, 7..9]
        );
        assert!(key_group_ranges(&[]).is_empty());
    }
}
