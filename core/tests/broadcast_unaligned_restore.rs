//! Restoring an unaligned checkpoint (FLIP-76; DESIGN.md "Unaligned
//! checkpoints") of a broadcast edge whose consumers sat at different
//! offsets of the broadcast stream when they took the checkpoint.
//!
//! Every subtask writes its own copy of the broadcast state, as in Flink's
//! broadcast state pattern. A restored subtask `i` gets the copy of old
//! subtask `i mod` the old parallelism (`checkpoint/restore.rs`
//! `broadcast_for`, `broadcast_source`) and replays that same old subtask's
//! broadcast rows in flight (`runtime/spawn.rs` `restored_channels`,
//! `checkpoint/channel_rescale.rs`), so state and replay agree; with
//! subtask 0's copy everywhere, a subtask that was ahead of subtask 0 would
//! emit the rows between the two offsets a second time.
//!
//! The offsets are forced, not hoped for: a gated source (parallelism 1)
//! hands out exactly the rows the test allows, subtask 0 of the broadcast
//! consumer blocks inside one batch until the test releases it, and the
//! checkpoint is triggered by hand. Subtask 1 takes the checkpoint with
//! nothing in flight, ahead of subtask 0, which then takes it with the rows
//! behind its blocked batch in flight. The job is cancelled (the crash) and
//! restored at 2, 3 and 1 subtasks; the test checks the exact output.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use arrow::array::{AsArray, Int64Array};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use eddyline_core::checkpoint::channel_state::{channel_state_uid, decode};
use eddyline_core::checkpoint::{CheckpointConfig, CheckpointStorage};
use eddyline_core::error::{Error, Result};
use eddyline_core::graph::{Edge, JobGraph, NodeKind, Role};
use eddyline_core::operator::{
    CheckpointedState, Collector, Operator, OperatorContext, OperatorFactory,
};
use eddyline_core::partition::Partitioning;
use eddyline_core::runtime::{JobConfig, JobHandle, RestoreFrom};
use eddyline_core::sink::collect::{CollectSinkFactory, CollectStore};
use eddyline_core::source::{SourceFactory, SourcePoll, SourceReader};
use eddyline_core::state::{OperatorState, Redistribution, StateBlob};

use common::node;

/// Rows the first run lets the source emit before the checkpoint.
const BEFORE: i64 = 10;
/// The row at which subtask 0 of the first run is held back.
const HELD_AT: i64 = 3;
/// Rows of the whole broadcast stream.
const TOTAL: i64 = 20;
/// A generous bound on every wait of the test (a hang guard only).
const HANG: Duration = Duration::from_secs(60);

/// Waits until `done` holds; a hang is a failure.
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < HANG, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn value_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "value",
        DataType::Int64,
        false,
    )]))
}

/// A source at parallelism 1 emitting `value` from 0 to `TOTAL`, one row a
/// batch, never past `allowed`; `emitted` is how far it got.
struct GatedSource {
    allowed: Arc<AtomicI64>,
    emitted: Arc<AtomicI64>,
}

impl SourceFactory for GatedSource {
    fn create(&self, _ctx: &OperatorContext, _batch_size: usize) -> Result<Box<dyn SourceReader>> {
        Ok(Box::new(GatedReader {
            next: 0,
            allowed: self.allowed.clone(),
            emitted: self.emitted.clone(),
        }))
    }

    fn schema(&self) -> Option<SchemaRef> {
        Some(value_schema())
    }
}

struct GatedReader {
    next: i64,
    allowed: Arc<AtomicI64>,
    emitted: Arc<AtomicI64>,
}

impl SourceReader for GatedReader {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        if self.next >= TOTAL {
            return Ok(SourcePoll::End);
        }
        if self.next >= self.allowed.load(Ordering::SeqCst) {
            return Ok(SourcePoll::Idle);
        }
        let batch = RecordBatch::try_new(
            value_schema(),
            vec![Arc::new(Int64Array::from(vec![self.next]))],
        )
        .expect("one int64 column");
        self.next += 1;
        self.emitted.store(self.next, Ordering::SeqCst);
        Ok(SourcePoll::Batch(batch))
    }

    fn offset(&self) -> Vec<u8> {
        self.next.to_le_bytes().to_vec()
    }

    fn seek(&mut self, offset: &[u8]) -> Result<()> {
        let bytes: [u8; 8] = offset
            .try_into()
            .map_err(|_| Error::checkpoint(None, "the gated source's offset is malformed"))?;
        self.next = i64::from_le_bytes(bytes);
        self.emitted.store(self.next, Ordering::SeqCst);
        Ok(())
    }
}

/// What the first run's broadcast consumers let the test see and steer.
#[derive(Default)]
struct Probe {
    /// Subtask 0 is blocked inside its batch of row `HELD_AT`.
    blocked: AtomicBool,
    /// Set by the test to let subtask 0 go on.
    released: Mutex<bool>,
    wake: Condvar,
    /// Rows applied to its broadcast state, per subtask.
    applied: Mutex<BTreeMap<usize, usize>>,
    /// (subtask, checkpoint, rows applied) at each snapshot.
    snapshots: Mutex<Vec<(usize, u64, usize)>>,
}

impl Probe {
    fn applied(&self, subtask: usize) -> usize {
        self.applied
            .lock()
            .unwrap()
            .get(&subtask)
            .copied()
            .unwrap_or(0)
    }

    fn snapshotted(&self, subtask: usize) -> Option<usize> {
        let snaps = self.snapshots.lock().unwrap();
        snaps.iter().find(|s| s.0 == subtask).map(|s| s.2)
    }

    fn release(&self) {
        *self.released.lock().unwrap() = true;
        self.wake.notify_all();
    }
}

fn out_schema() -> SchemaRef {
    Arc::new(Schema::new(
        ["kind", "subtask", "value", "seen"]
            .map(|c| Field::new(c, DataType::Int64, false))
            .to_vec(),
    ))
}

/// Kinds of the consumer's output rows.
const EMITTED: i64 = 0;
const FINAL_STATE: i64 = 1;

/// The broadcast consumer: its broadcast state is the list of rows it
/// applied. Per row it emits `(EMITTED, subtask, value, seen)`, `seen`
/// being how often its state held the value already; when its input ends
/// it emits its whole state as `FINAL_STATE` rows.
struct MarkFactory {
    probe: Option<Arc<Probe>>,
    /// Subtask 0 alone writes the broadcast state, as checkpoints written
    /// before every subtask wrote its own copy.
    legacy: bool,
}

impl OperatorFactory for MarkFactory {
    fn create(&self, ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(Mark {
            subtask: ctx.subtask_index,
            state: Vec::new(),
            probe: self.probe.clone(),
            legacy: self.legacy,
        }))
    }

    fn redistribution(&self) -> Redistribution {
        Redistribution::Broadcast
    }
}

struct Mark {
    subtask: usize,
    state: Vec<i64>,
    probe: Option<Arc<Probe>>,
    legacy: bool,
}

impl Mark {
    fn rows(&self, kind: i64, values: &[i64], seen: &[i64]) -> RecordBatch {
        let n = values.len();
        let col = |v: Vec<i64>| Arc::new(Int64Array::from(v)) as arrow::array::ArrayRef;
        RecordBatch::try_new(
            out_schema(),
            vec![
                col(vec![kind; n]),
                col(vec![self.subtask as i64; n]),
                col(values.to_vec()),
                col(seen.to_vec()),
            ],
        )
        .expect("four int64 columns")
    }
}

impl Operator for Mark {
    fn process_batch(&mut self, _i: usize, b: RecordBatch, out: &mut dyn Collector) -> Result<()> {
        let values = b.column(0).as_primitive::<Int64Type>().values().to_vec();
        if let Some(probe) = self.probe.as_ref().filter(|_| self.subtask == 0) {
            if values.contains(&HELD_AT) {
                probe.blocked.store(true, Ordering::SeqCst);
                let mut released = probe.released.lock().unwrap();
                while !*released {
                    released = probe.wake.wait(released).unwrap();
                }
            }
        }
        let mut seen = Vec::with_capacity(values.len());
        for v in &values {
            seen.push(self.state.iter().filter(|s| *s == v).count() as i64);
            self.state.push(*v);
        }
        if let Some(probe) = &self.probe {
            *probe
                .applied
                .lock()
                .unwrap()
                .entry(self.subtask)
                .or_default() += values.len();
        }
        out.emit(self.rows(EMITTED, &values, &seen))
    }

    fn finish(&mut self, out: &mut dyn Collector) -> Result<()> {
        let state = self.state.clone();
        out.emit(self.rows(FINAL_STATE, &state, &vec![0; state.len()]))
    }

    fn state(&mut self) -> Option<&mut dyn CheckpointedState> {
        Some(self)
    }
}

impl CheckpointedState for Mark {
    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<OperatorState> {
        if let Some(probe) = &self.probe {
            let snap = (self.subtask, checkpoint_id, self.state.len());
            probe.snapshots.lock().unwrap().push(snap);
        }
        // Broadcast state: every subtask writes its own copy (the copies
        // differ when the subtasks snapshot at different offsets of the
        // broadcast stream, as in an unaligned checkpoint).
        if self.legacy && self.subtask != 0 {
            return Ok(OperatorState::default());
        }
        let bytes = self.state.iter().flat_map(|v| v.to_le_bytes()).collect();
        Ok(OperatorState {
            operator: Some(StateBlob::Bytes(Arc::new(bytes))),
            keyed: Vec::new(),
        })
    }

    fn restore_state(&mut self, state: OperatorState) -> Result<()> {
        if let Some(blob) = state.operator {
            let bytes = blob.to_bytes()?;
            self.state = bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("chunks of 8")))
                .collect();
        }
        Ok(())
    }
}

/// `source` (1) -broadcast-> `mark` (p) -forward-> `collect` (p).
fn graph(p: usize, source: GatedSource, mark: MarkFactory, store: &Arc<CollectStore>) -> JobGraph {
    JobGraph {
        nodes: vec![
            node(
                0,
                "source",
                1,
                vec![],
                NodeKind::Source(Arc::new(source)),
                Role::Source,
            ),
            node(
                1,
                "mark",
                p,
                vec![Edge::new(0, Partitioning::Broadcast, 0)],
                NodeKind::Operator(Arc::new(mark)),
                Role::Operator,
            ),
            node(
                2,
                "collect",
                p,
                vec![Edge::new(1, Partitioning::Forward, 0)],
                NodeKind::Operator(Arc::new(CollectSinkFactory::new(store.clone()))),
                Role::Sink,
            ),
        ],
        max_parallelism: 128,
        loops: vec![],
    }
}

fn config(dir: &std::path::Path, restore: bool) -> JobConfig {
    let mut c = CheckpointConfig::new(dir);
    // Checkpoints are triggered by hand only.
    c.interval = Duration::from_secs(3600);
    c.unaligned = true;
    JobConfig {
        batch_size: 1,
        // Room for every row of the first run in each channel: the source
        // never blocks, so it takes the trigger as soon as it comes.
        channel_capacity: 64,
        in_flight_target: Duration::from_secs(3600),
        checkpoint: Some(c),
        restore_from: restore.then_some(RestoreFrom::Latest),
        ..JobConfig::default()
    }
}

/// Runs the first job up to its one checkpoint, taken with subtask 0 of
/// `mark` at row `HELD_AT` and subtask 1 at row `BEFORE`, and cancels it;
/// `legacy`: subtask 0 alone writes the broadcast state.
fn checkpoint_at_different_offsets(dir: &std::path::Path, store: &Arc<CollectStore>, legacy: bool) {
    let allowed = Arc::new(AtomicI64::new(BEFORE));
    let emitted = Arc::new(AtomicI64::new(0));
    let probe = Arc::new(Probe::default());
    let source = GatedSource {
        allowed: allowed.clone(),
        emitted: emitted.clone(),
    };
    let mark = MarkFactory {
        probe: Some(probe.clone()),
        legacy,
    };
    let job = JobHandle::start(graph(2, source, mark, store), config(dir, false)).unwrap();
    // Subtask 0 holds back at row HELD_AT (the rows after it queue in its
    // channel), subtask 1 applied every row, the source sent them all.
    wait_until("the consumers sit at different offsets", || {
        probe.blocked.load(Ordering::SeqCst)
            && probe.applied(1) == BEFORE as usize
            && emitted.load(Ordering::SeqCst) == BEFORE
    });
    let id = std::thread::scope(|s| {
        let trigger = s.spawn(|| job.trigger_checkpoint());
        // The source sends the unaligned barrier to its channels in subtask
        // order, so once subtask 1 snapshotted, the barrier waits in
        // subtask 0's priority slot: released, subtask 0 finishes its batch,
        // finds the barrier and snapshots with the rows behind it in flight.
        wait_until("subtask 1 snapshotted", || probe.snapshotted(1).is_some());
        probe.release();
        trigger.join().expect("the trigger thread")
    })
    .unwrap();
    assert_eq!(id, 1);
    // The precondition, held: subtask 0's state holds rows 0..=HELD_AT,
    // subtask 1's every row; subtask 0 captured the rest in flight.
    assert_eq!(probe.snapshotted(0), Some(HELD_AT as usize + 1));
    assert_eq!(probe.snapshotted(1), Some(BEFORE as usize));
    let rc = CheckpointStorage::open(dir).unwrap().load(1).unwrap();
    let in_flight = |subtask: u32| -> Vec<i64> {
        let Some(blob) = rc
            .state(&channel_state_uid("mark"), subtask)
            .and_then(|s| s.operator.as_ref())
        else {
            return Vec::new();
        };
        let channels = decode("mark", &blob.to_bytes().unwrap()).unwrap();
        let batches = channels.iter().flatten();
        batches
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect()
    };
    assert_eq!(in_flight(0), (HELD_AT + 1..BEFORE).collect::<Vec<_>>());
    assert_eq!(in_flight(1), Vec::<i64>::new());
    job.cancel();
    assert!(matches!(job.result(), Err(Error::Cancelled)));
}

/// Restores the checkpoint at `p` subtasks and runs the stream to its end;
/// the committed rows `(kind, subtask, value, seen)`.
fn restore_and_finish(dir: &std::path::Path, store: &Arc<CollectStore>, p: usize) -> Vec<[i64; 4]> {
    let source = GatedSource {
        allowed: Arc::new(AtomicI64::new(TOTAL)),
        emitted: Arc::new(AtomicI64::new(0)),
    };
    let job = JobHandle::start(
        graph(
            p,
            source,
            MarkFactory {
                probe: None,
                legacy: false,
            },
            store,
        ),
        config(dir, true),
    )
    .unwrap();
    job.result().unwrap();
    let mut rows = Vec::new();
    for b in store.committed() {
        let col = |c: &str| {
            b.column_by_name(c)
                .expect("an output column")
                .as_primitive::<Int64Type>()
                .values()
                .to_vec()
        };
        let (k, s, v, n) = (col("kind"), col("subtask"), col("value"), col("seen"));
        rows.extend((0..b.num_rows()).map(|i| [k[i], s[i], v[i], n[i]]));
    }
    rows
}

/// The sorted values of `rows` of `kind` from `subtask`.
fn values(rows: &[[i64; 4]], kind: i64, subtask: i64) -> Vec<i64> {
    let mut out: Vec<i64> = rows
        .iter()
        .filter(|r| r[0] == kind && r[1] == subtask)
        .map(|r| r[2])
        .collect();
    out.sort_unstable();
    out
}

#[test]
fn test_broadcast_channel_state_restores_consumers_checkpointed_at_different_offsets() {
    let every: Vec<i64> = (0..TOTAL).collect();
    for p in [2, 3, 1] {
        let dir = tempfile::tempdir().unwrap();
        let store = CollectStore::new();
        checkpoint_at_different_offsets(dir.path(), &store, false);
        let rows = restore_and_finish(dir.path(), &store, p);
        // No subtask applied a row twice to its broadcast state...
        let twice: Vec<_> = rows
            .iter()
            .filter(|r| r[0] == EMITTED && r[3] > 0)
            .collect();
        assert!(twice.is_empty(), "p={p}: rows applied twice: {twice:?}");
        for s in 0..p as i64 {
            // ...and every subtask's state ends with every row, once: it
            // restored the copy of old subtask `s mod 2` and replayed that
            // subtask's rows in flight (with subtask 1's copy and subtask
            // 0's rows, or the other way round, it would apply rows twice
            // or miss the rows between the two offsets).
            assert_eq!(
                values(&rows, FINAL_STATE, s),
                every,
                "p={p}: state of subtask {s}"
            );
        }
        // Every old subtask emitted every row exactly once across the
        // crash: it resumed from its own copy and its own rows in flight.
        // A new subtask (p=3: subtask 2) took old subtask `2 mod 2 = 0`'s
        // copy (rows 0..=HELD_AT) and replayed its rows in flight: it emits
        // every row after HELD_AT once.
        for s in 0..p as i64 {
            let want: Vec<i64> = if s < 2 {
                every.clone()
            } else {
                (HELD_AT + 1..TOTAL).collect()
            };
            assert_eq!(
                values(&rows, EMITTED, s),
                want,
                "p={p}: rows of subtask {s}"
            );
        }
        if p == 1 {
            // Old subtask 1's rows before the checkpoint were committed;
            // it has no new subtask, so it emitted nothing after.
            assert_eq!(
                values(&rows, EMITTED, 1),
                (0..BEFORE).collect::<Vec<_>>(),
                "p={p}: rows of old subtask 1"
            );
        }
    }
}

#[test]
fn test_broadcast_state_written_by_subtask_0_alone_still_restores_its_copy_everywhere() {
    // Checkpoints written before every subtask wrote its copy: every new
    // subtask restores subtask 0's copy and replays subtask 0's rows in
    // flight, so its state is right (every row, once); subtask 1, which was
    // ahead of subtask 0, emits the rows between the offsets again.
    let every: Vec<i64> = (0..TOTAL).collect();
    for p in [2, 3, 1] {
        let dir = tempfile::tempdir().unwrap();
        let store = CollectStore::new();
        checkpoint_at_different_offsets(dir.path(), &store, true);
        let rows = restore_and_finish(dir.path(), &store, p);
        for s in 0..p as i64 {
            assert_eq!(
                values(&rows, FINAL_STATE, s),
                every,
                "p={p}: state of subtask {s}"
            );
        }
        assert_eq!(values(&rows, EMITTED, 0), every, "p={p}: rows of subtask 0");
        if p >= 2 {
            let mut want = every.clone();
            want.extend(HELD_AT + 1..BEFORE);
            want.sort_unstable();
            assert_eq!(values(&rows, EMITTED, 1), want, "p={p}: rows of subtask 1");
        }
    }
}
