//! Checkpoints: durable snapshots of every operator's state (the seed
//! flink-fault-tolerance-mechanism.txt, "asynchronous state snapshots" and
//! what "the snapshot now contains"; DESIGN.md "Checkpoints").
//!
//! This module holds the storage side: [`storage::CheckpointStorage`] writes
//! state files and an atomic manifest and reads them back, verified.
//!
//! # On-disk layout
//!
//! ```text
//! DIR/                                  the storage root
//!   _started_ids                        the highest checkpoint id ever started
//!                                       (decimal; written atomically before
//!                                       each checkpoint begins, so ids are
//!                                       never reused after a crash)
//!   chk-<id>/                           one directory per checkpoint id (decimal)
//!     <uid>-<uid xxh3 hex>-<subtask>.state   one state file per (operator uid, subtask)
//!     _manifest.json                    written LAST, atomically; its presence
//!                                       is what makes the checkpoint complete
//!   shared/                             state files of incremental checkpoints,
//!     <id>-<uid>-<uid xxh3 hex>-<subtask>.state   shared by later checkpoints
//!                                       and deleted by retention once no
//!                                       retained manifest names them
//!                                       (see [`incremental`])
//! ```
//!
//! The `<uid>` part of a state file name is the uid with every character
//! other than ASCII letters, digits, `_` and `-` replaced by `_`, cut to 48
//! characters; the hash of the full uid keeps names unique. The manifest
//! maps each (uid, subtask) to its file, so readers never derive names.
//!
//! A checkpoint is written as: `begin(id)` creates `chk-<id>/`; each subtask
//! writes its state file (`create_new`, then fsync); `complete` writes
//! `_manifest.json.tmp`, fsyncs it, renames it to `_manifest.json` and fsyncs
//! the directory. A directory without `_manifest.json` (in progress, aborted
//! or crashed mid-write) is never listed nor loaded, and `retain` deletes it
//! once a newer checkpoint completed. Deleting a checkpoint removes the
//! manifest first.
//!
//! # State file format (version 1, little-endian)
//!
//! ```text
//! header:   "EDDYSTAT" (8 bytes) | version u32 = 1 | subtask u32
//!           | uid length u32 | uid (UTF-8) | section count u32
//!           | xxh3-64 u64 of the header bytes before it
//! sections: tag u8 (0 = operator state, 1 = keyed state of one key group)
//!           | key group u32 (0 for operator state) | payload length u64
//!           | xxh3-64 u64 of the 13 bytes before it and the payload
//!           | payload
//! ```
//!
//! The manifest also records each file's exact size and the xxh3-64 of the
//! whole file, so a truncated, extended or altered file is refused before it
//! is parsed. The manifest format is described in [`manifest`].

pub mod channel_rescale;
pub mod channel_state;
pub mod config;
pub mod coordinator;
pub mod feedback_rescale;
pub mod incremental;
mod json;
pub mod manifest;
pub(crate) mod messages;
mod pending;
pub mod read_state;
pub mod recompute;
pub mod restore;
mod state_file;
pub mod stats;
pub mod storage;
pub(crate) mod writer;

pub use config::CheckpointConfig;
pub use manifest::{
    KeyColumn, KeyIdentity, Manifest, OperatorEntry, ReusedState, SourceOffset, StateFileEntry,
    SubtaskEntry, TaskAlignment, MANIFEST_VERSION,
};
pub use recompute::{NullStateLedger, Recovery, ReplayPlan, SourceReplay};
pub use stats::{CheckpointDone, CheckpointFailure, CheckpointFailures, CheckpointStats};
pub use storage::{
    CheckpointInfo, CheckpointStorage, CheckpointSummary, CompletedCheckpoint, PendingCheckpoint,
    RestoredCheckpoint, StateHandle, StateWriter, SummaryInfo, MANIFEST_FILE, STARTED_FILE,
};
