//! Property test of unaligned checkpoints' channel-state capture (FLIP-76;
//! DESIGN.md "Unaligned checkpoints"): real bounded channels, barriers sent
//! overtaking ([`EventSender::send_overtaking`]) or found in-band, and the
//! consumer steps of `runtime/task/unaligned.rs` (priority slot first, the
//! overtaken queue drained to the marker, a [`ChannelCapture`] from the
//! first barrier), interleaved at random with the producers' sends.
//!
//! For every interleaving: the operator snapshot holds exactly the records
//! processed before the first barrier; the channel state of each channel is
//! exactly the records sent before its barrier that were not processed
//! before the snapshot, in order (so snapshot + channel state replays each
//! channel's prefix in order); no record sent after a barrier is captured;
//! and the captured batches are the sent ones, not copies.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow::array::{Array, Int64Array};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use eddyline_core::channel::{bounded, EventReceiver, EventSender, Item};
use eddyline_core::checkpoint::channel_state::{decode, encode, ChannelCapture};
use eddyline_core::event::{Barrier, BarrierKind, Event};
use proptest::prelude::*;

const CHECKPOINT: u64 = 1;

fn batch(channel: usize, seq: i64) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
    let id = channel as i64 * 1_000_000 + seq;
    RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![id]))]).expect("valid batch")
}

fn id_of(b: &RecordBatch) -> i64 {
    b.column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .expect("int64")
        .value(0)
}

fn barrier() -> Barrier {
    Barrier {
        id: CHECKPOINT,
        kind: BarrierKind::Checkpoint,
        aligned: false,
        timestamp_ms: 0,
    }
}

/// One producer: `before` records, the barrier (overtaking or in-band),
/// then `after` records.
struct Producer {
    tx: EventSender,
    before: i64,
    after: i64,
    overtaking: bool,
    next: i64,
    sent_barrier: bool,
    sent: Vec<RecordBatch>,
}

impl Producer {
    fn done(&self) -> bool {
        self.sent_barrier && self.next >= self.before + self.after
    }

    fn step(&mut self, channel: usize) {
        if !self.sent_barrier && self.next == self.before {
            self.sent_barrier = true;
            if self.overtaking {
                self.tx.send_overtaking(barrier()).expect("consumer alive");
            } else {
                self.tx
                    .send(Event::Barrier(barrier()))
                    .expect("consumer alive");
            }
            return;
        }
        if self.next < self.before + self.after {
            let b = batch(channel, self.next);
            self.sent.push(b.clone());
            self.tx.send(Event::Data(b)).expect("consumer alive");
            self.next += 1;
        }
    }
}

/// The consumer side of a task, as `unaligned.rs` runs it.
struct Consumer {
    rx: Vec<EventReceiver>,
    /// Overtaken items, still holding their space in the channel.
    pending: Vec<VecDeque<Item>>,
    last_barrier: Vec<u64>,
    capture: Option<ChannelCapture>,
    /// Records processed before the snapshot (the operator state).
    snapshot: Option<Vec<i64>>,
    processed: Vec<i64>,
    /// Per channel: records processed in total, in order.
    per_channel: Vec<Vec<RecordBatch>>,
    complete: bool,
}

impl Consumer {
    fn on_barrier(&mut self, c: usize, overtaken: Vec<RecordBatch>) {
        self.last_barrier[c] = CHECKPOINT;
        if self.complete {
            return;
        }
        if self.capture.is_none() {
            self.snapshot = Some(self.processed.clone());
            self.capture = Some(ChannelCapture::new(CHECKPOINT, &vec![false; self.rx.len()]));
        }
        if let Some(cap) = self.capture.as_mut() {
            self.complete = cap.on_barrier(c, overtaken);
        }
    }

    /// Looks at channel `c`'s priority slot, then takes one event of it.
    fn step(&mut self, c: usize) {
        if let Some(b) = self.rx[c].take_priority() {
            if b.id > self.last_barrier[c] {
                let mut drained = VecDeque::new();
                assert!(self.rx[c].drain_to_marker(b.id, &mut drained));
                self.pending[c].extend(drained);
                let overtaken = self.pending[c]
                    .iter()
                    .filter_map(|(e, _)| match e {
                        Event::Data(b) => Some(b.clone()),
                        _ => None,
                    })
                    .collect();
                self.on_barrier(c, overtaken);
            }
            return;
        }
        let ev = match self.pending[c].pop_front() {
            Some(item) => self.rx[c].taken(item).0,
            None => match self.rx[c].try_recv() {
                Ok((ev, _)) => ev,
                Err(_) => return,
            },
        };
        match ev {
            Event::Data(b) => {
                if !self.complete {
                    if let Some(cap) = self.capture.as_mut() {
                        cap.on_data(c, &b);
                    }
                }
                self.processed.push(id_of(&b));
                self.per_channel[c].push(b);
            }
            Event::Barrier(b) if b.id > self.last_barrier[c] => self.on_barrier(c, Vec::new()),
            _ => {}
        }
    }
}

/// Per channel: records before the barrier, after it, and whether the
/// barrier overtakes.
type Shape = Vec<(i64, i64, bool)>;
/// The interleaving: (a producer's step or the consumer's, on which channel).
type Schedule = Vec<(bool, usize)>;

fn scenario() -> impl Strategy<Value = (Shape, Schedule)> {
    (
        prop::collection::vec((0i64..8, 0i64..6, any::<bool>()), 1..4),
        prop::collection::vec((any::<bool>(), 0usize..4), 0..120),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn channel_state_is_exactly_what_the_barrier_overtook((shape, schedule) in scenario()) {
        let n = shape.len();
        let mut producers = Vec::new();
        let mut receivers = Vec::new();
        for &(before, after, overtaking) in &shape {
            // Room for everything (at most 14 records and a barrier): sends
            // never block in one thread.
            let (tx, rx) = bounded(16, usize::MAX / 2);
            producers.push(Producer {
                tx, before, after, overtaking, next: 0, sent_barrier: false, sent: Vec::new(),
            });
            receivers.push(rx);
        }
        let mut consumer = Consumer {
            rx: receivers,
            pending: vec![VecDeque::new(); n],
            last_barrier: vec![0; n],
            capture: None,
            snapshot: None,
            processed: Vec::new(),
            per_channel: vec![Vec::new(); n],
            complete: false,
        };
        // The random interleaving, then everyone runs to the end.
        for (produce, c) in schedule {
            let c = c % n;
            if produce { producers[c].step(c) } else { consumer.step(c) }
        }
        for (c, p) in producers.iter_mut().enumerate() {
            while !p.done() { p.step(c) }
        }
        for _ in 0..64 {
            for c in 0..n { consumer.step(c) }
        }
        prop_assert!(consumer.complete, "every barrier arrived");
        let snapshot = consumer.snapshot.clone().unwrap_or_default();
        let cap = consumer.capture.take().expect("a capture started");
        let state = cap.batches().to_vec();
        for (c, p) in producers.iter().enumerate() {
            let before: Vec<i64> = p.sent[..p.before as usize].iter().map(id_of).collect();
            let in_snapshot: Vec<i64> = snapshot
                .iter().copied().filter(|id| id / 1_000_000 == c as i64).collect();
            let captured: Vec<i64> = state[c].iter().map(id_of).collect();
            // Snapshot then channel state: the channel's prefix, in order.
            let mut replay = in_snapshot.clone();
            replay.extend(&captured);
            prop_assert_eq!(&replay, &before, "channel {}", c);
            // Captured batches are the sent ones (shared buffers, no copy).
            for (got, sent) in state[c].iter().zip(&p.sent[in_snapshot.len()..]) {
                prop_assert_eq!(
                    got.column(0).to_data().buffers()[0].as_ptr(),
                    sent.column(0).to_data().buffers()[0].as_ptr()
                );
            }
            // Everything sent was processed exactly once, in channel order.
            let all: Vec<i64> = consumer.per_channel[c].iter().map(id_of).collect();
            let sent: Vec<i64> = p.sent.iter().map(id_of).collect();
            prop_assert_eq!(all, sent);
        }
        let back = decode("op", &encode("op", &state).expect("encodes")).expect("decodes");
        prop_assert_eq!(back, state);
    }
}
