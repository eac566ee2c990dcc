//! Channels between subtasks (DESIGN.md "Runtime").
//!
//! Regular channels are bounded: a full channel blocks its writer, which is
//! how backpressure travels upstream. Each (producer subtask, consumer
//! subtask) pair of an edge gets its own channel, so a consumer can block one
//! channel during barrier alignment and track EndOfData per channel.

use crossbeam_channel::{Receiver, Sender};

use crate::event::Event;

/// Default number of events a regular channel holds before its writer blocks.
pub const DEFAULT_CHANNEL_CAPACITY: usize = 8;

/// Writing end of a channel.
pub type EventSender = Sender<Event>;
/// Reading end of a channel.
pub type EventReceiver = Receiver<Event>;

/// A bounded channel of events.
pub fn bounded(capacity: usize) -> (EventSender, EventReceiver) {
    crossbeam_channel::bounded(capacity.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int64Array};
    use arrow::record_batch::RecordBatch;
    use std::sync::Arc;
    use std::time::Duration;

    fn batch(n: i64) -> RecordBatch {
        let a: ArrayRef = Arc::new(Int64Array::from_iter_values(0..n));
        RecordBatch::try_from_iter([("value", a)]).unwrap()
    }

    #[test]
    fn events_arrive_in_order_and_batches_are_shared_not_copied() {
        let (tx, rx) = bounded(4);
        let b = batch(10);
        let ptr = b.column(0).to_data().buffers()[0].as_ptr();
        tx.send(Event::Data(b.clone())).unwrap();
        tx.send(Event::Watermark(5)).unwrap();
        tx.send(Event::EndOfData { drain: true }).unwrap();
        match rx.recv().unwrap() {
            Event::Data(got) => assert_eq!(got.column(0).to_data().buffers()[0].as_ptr(), ptr),
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(rx.recv().unwrap(), Event::Watermark(5)));
        assert!(matches!(
            rx.recv().unwrap(),
            Event::EndOfData { drain: true }
        ));
    }

    #[test]
    fn full_channel_blocks_the_writer() {
        let (tx, rx) = bounded(2);
        tx.send(Event::Watermark(1)).unwrap();
        tx.send(Event::Watermark(2)).unwrap();
        assert!(tx
            .send_timeout(Event::Watermark(3), Duration::from_millis(20))
            .is_err());
        rx.recv().unwrap();
        tx.send_timeout(Event::Watermark(3), Duration::from_millis(20))
            .unwrap();
    }
}
