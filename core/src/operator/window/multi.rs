//! Tumbling and sliding windows of multi-aggregates:
//! `keyed.window(ed.Tumbling("1m")).agg(F.count("*"), F.approx_percentile("lat", 0.99))`
//! (DESIGN.md "Aggregates"), on the accumulators of [`AggregateSlots`]; a
//! slot is a (key, window).
//!
//! # Semantics
//!
//! Those of the parent module's windows: epoch-aligned windows, a window is
//! over when the watermark reaches its last millisecond, a record whose
//! windows are all over is late (counted, dropped or sent to [`LATE_PORT`]),
//! late by its own key group's watermark after a restore
//! ([`KeyGroupWatermarks`]). When the watermark passes a window's end it
//! emits one row per key: the key columns, `window_start`, `window_end` (of
//! the event-time column's type), then every aggregate under its name; rows
//! ordered by `window_end`, then by the order in which the (key, window)
//! pair was first seen. Fired slots are released.
//!
//! # Serialization format (version 1)
//!
//! ```text
//! byte 0      format version, currently 1
//! bytes 1..   an Arrow IPC stream; schema metadata:
//!               "eddyline.window_aggs"            "<name>=<function>,..."
//!               "eddyline.window_aggs.assigner"   as the parent module writes it
//!               "eddyline.window_aggs.watermark"  the key group's watermark (decimal)
//!             columns: the key columns (nullable), window_start (Int64 ms),
//!               __eddyline_seq (UInt64), every aggregate's current value
//!               under its name, then the accumulators' states
//! ```
//!
//! Every owned key group is written once the operator has a watermark (its
//! watermark is state); `read_state` shows keys, `window_start` and the values.
//!
//! The operator is a [`SlotWindowsOperator`] (the shared part of both
//! windowed multi-aggregates) over this factory's windows.
//!
//! [`LATE_PORT`]: crate::operator::LATE_PORT
//! [`KeyGroupWatermarks`]: crate::state::group_watermarks::KeyGroupWatermarks

use std::collections::BTreeMap;

use arrow::datatypes::{Schema, SchemaRef};
use rustc_hash::FxHashMap;

use super::slot_windows::{
    self, Assigned, EachWindow, Fired, SlotWindows, SlotWindowsOperator, WindowedAggs,
};
use super::WindowAssigner;
use crate::error::Result;
use crate::event::MAX_WATERMARK;
use crate::expr::{AggregateSlots, ExprResult};
use crate::operator::{Operator, OperatorContext, OperatorFactory};

/// The version byte that opens every serialized key-group blob.
pub const MULTI_FORMAT_VERSION: u8 = 1;

/// Builds the operators of tumbling and sliding window multi-aggregates.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowAggsFactory {
    pub aggs: WindowedAggs,
    pub assigner: WindowAssigner,
}

impl WindowAggsFactory {
    /// The output schema for `input`: keys, `window_start`, `window_end`,
    /// then one field per aggregate. Errors name `operator`.
    pub fn output_schema(&self, operator: &str, input: &SchemaRef) -> Result<SchemaRef> {
        slot_windows::output_schema(self, operator, input)
    }
}

impl OperatorFactory for WindowAggsFactory {
    fn create(&self, ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        SlotWindowsOperator::create(self, ctx)
    }
}

/// One key group: window start -> key bytes -> (first-seen sequence, slot).
type Windows = BTreeMap<i64, FxHashMap<Box<[u8]>, (u64, u32)>>;

impl SlotWindows for WindowAggsFactory {
    type Group = Windows;
    type Batch = ();
    const WHAT: &'static str = "window agg()";
    const UNIT: &'static str = "window";
    const VERSION: u8 = MULTI_FORMAT_VERSION;
    const META_AGGS: &'static str = "eddyline.window_aggs";
    const META_WINDOWS: &'static str = "eddyline.window_aggs.assigner";
    const META_WATERMARK: &'static str = "eddyline.window_aggs.watermark";
    const WINDOW_COLUMNS: &'static [&'static str] = &["window_start"];

    fn aggs(&self) -> &WindowedAggs {
        &self.aggs
    }

    fn validate(&self, operator: &str) -> Result<()> {
        self.assigner.validate(operator)
    }

    fn describe(&self) -> String {
        self.assigner.describe()
    }

    fn windows_text(described: &str) -> String {
        format!("{described} windows")
    }

    fn is_empty(group: &Windows) -> bool {
        group.is_empty()
    }

    fn assign(
        &self,
        group: &mut Windows,
        key: &[u8],
        row: u32,
        t: i64,
        watermark: i64,
        slots: &mut AggregateSlots,
        next_seq: &mut u64,
        _batch: &mut (),
        out: &mut Assigned,
    ) -> ExprResult<()> {
        let (size, slide) = (self.assigner.size_ms(), self.assigner.slide_ms());
        let mut start = t - t.rem_euclid(slide);
        let mut any = false;
        while start > t.saturating_sub(size) {
            // Over: start + size - 1 <= watermark.
            if i128::from(start) + i128::from(size) - 1 > i128::from(watermark) {
                let window = group.entry(start).or_default();
                let slot = match window.get(key) {
                    Some(&(_, slot)) => slot,
                    None => {
                        let slot = slots.allocate()?;
                        window.insert(Box::from(key), (*next_seq, slot));
                        *next_seq += 1;
                        slot
                    }
                };
                out.rows.push(row);
                out.slots.push(slot);
                any = true;
            }
            start -= slide;
        }
        if !any {
            out.late[row as usize] = true;
        }
        Ok(())
    }

    fn finish_batch(&self, _: &mut AggregateSlots, _: (), _: &mut Assigned) -> ExprResult<()> {
        Ok(())
    }

    fn fire(&self, groups: &mut [Windows], watermark: i64) -> Vec<Fired> {
        let size = self.assigner.size_ms();
        // (end, seq, key bytes, slot) of every window that is over.
        let mut fired: Vec<(i64, u64, Box<[u8]>, u32)> = Vec::new();
        for windows in groups {
            while let Some(entry) = windows.first_entry() {
                let start = *entry.key();
                let over = watermark == MAX_WATERMARK
                    || i128::from(start) + i128::from(size) - 1 <= i128::from(watermark);
                if !over {
                    break;
                }
                for (key, (seq, slot)) in entry.remove() {
                    fired.push((start.saturating_add(size), seq, key, slot));
                }
            }
        }
        fired.sort_unstable_by_key(|f| (f.0, f.1));
        fired
            .into_iter()
            .map(|(end, _, key, slot)| Fired {
                key,
                start: end - size,
                end,
                slot,
            })
            .collect()
    }

    fn entries<'a>(group: &'a Windows, each: &mut EachWindow<'a, '_>) {
        for (window, entries) in group {
            for (key, (seq, slot)) in entries {
                each(&key[..], &[*window], *seq, *slot);
            }
        }
    }

    fn restore(
        group: &mut Windows,
        key: &[u8],
        window: &[i64],
        seq: u64,
        slot: u32,
    ) -> std::result::Result<(), String> {
        let entries = group.entry(window[0]).or_default();
        if entries.insert(Box::from(key), (seq, slot)).is_some() {
            return Err("holds a key and window twice".to_string());
        }
        Ok(())
    }
}

/// Whether a decoded blob schema is a window multi-aggregate's.
pub(crate) fn is_state_schema(schema: &Schema) -> bool {
    slot_windows::is_state_schema::<WindowAggsFactory>(schema)
}

/// One key-group blob as `read_state` shows it: the keys, `window_start`
/// (ms) and every aggregate's current value.
pub(crate) fn state_table(bytes: &[u8], kg: u32) -> Result<Vec<arrow::array::RecordBatch>> {
    slot_windows::state_table::<WindowAggsFactory>(bytes, kg)
}

#[cfg(test)]
#[path = "multi_tests.rs"]
mod tests;
