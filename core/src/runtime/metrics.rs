//! Per-operator counters (records and batches in and out), summed over the
//! operator's subtasks with relaxed atomics: one add per batch, none per
//! record.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::graph::Role;

/// Live counters of one operator.
#[derive(Debug, Default)]
pub struct OperatorMetrics {
    pub records_in: AtomicU64,
    pub records_out: AtomicU64,
    pub batches_in: AtomicU64,
    pub batches_out: AtomicU64,
    /// Late records dropped (summed over subtasks).
    pub late_records: AtomicU64,
    /// Loop heads: bytes of feedback spilled to disk.
    pub spilled_bytes: AtomicU64,
    /// Loop heads: feedback spill files written.
    pub spill_files: AtomicU64,
}

impl OperatorMetrics {
    /// Counts an input batch of `rows` rows.
    #[inline]
    pub fn add_in(&self, rows: usize) {
        self.records_in.fetch_add(rows as u64, Ordering::Relaxed);
        self.batches_in.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an output batch of `rows` rows.
    #[inline]
    pub fn add_out(&self, rows: usize) {
        self.records_out.fetch_add(rows as u64, Ordering::Relaxed);
        self.batches_out.fetch_add(1, Ordering::Relaxed);
    }
}

/// A copy of one operator's counters.
#[derive(Debug, Clone)]
pub struct OperatorMetricsSnapshot {
    pub name: String,
    pub role: Role,
    pub records_in: u64,
    pub records_out: u64,
    pub batches_in: u64,
    pub batches_out: u64,
    pub late_records: u64,
    pub spilled_bytes: u64,
    pub spill_files: u64,
}

/// A copy of a job's counters.
#[derive(Debug, Clone)]
pub struct MetricsSnapshot {
    pub wall_time_s: f64,
    pub operators: Vec<OperatorMetricsSnapshot>,
}

/// The named counters of every node of a job.
#[derive(Debug, Default)]
pub(crate) struct JobMetrics {
    pub nodes: Vec<(String, Role, Arc<OperatorMetrics>)>,
}

impl JobMetrics {
    pub fn snapshot(&self, wall_time_s: f64) -> MetricsSnapshot {
        MetricsSnapshot {
            wall_time_s,
            operators: self
                .nodes
                .iter()
                .map(|(name, role, m)| OperatorMetricsSnapshot {
                    name: name.clone(),
                    role: *role,
                    records_in: m.records_in.load(Ordering::Relaxed),
                    records_out: m.records_out.load(Ordering::Relaxed),
                    batches_in: m.batches_in.load(Ordering::Relaxed),
                    batches_out: m.batches_out.load(Ordering::Relaxed),
                    late_records: m.late_records.load(Ordering::Relaxed),
                    spilled_bytes: m.spilled_bytes.load(Ordering::Relaxed),
                    spill_files: m.spill_files.load(Ordering::Relaxed),
                })
                .collect(),
        }
    }
}
