//! Sinks. The built-in sinks are transactional (two-phase commit): records
//! are staged per transaction, pre-committed when a checkpoint's barrier
//! passes (`snapshot_state`), and made visible only on
//! `notify_checkpoint_complete` of that checkpoint. Commits are idempotent.
//! Without checkpointing, the runtime drives one final pseudo-checkpoint
//! ([`END_OF_JOB`]) after every task finished, so a job that fails and
//! restarts from scratch never leaves partial output behind.

pub mod collect;
pub mod discard;
pub mod parquet;

/// The id of the pseudo-checkpoint that commits everything at the end of a
/// job that runs without checkpointing.
pub const END_OF_JOB: u64 = u64::MAX;
