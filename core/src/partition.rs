//! Partitioners: how a producer subtask spreads its output over the consumer
//! subtasks of an edge (forward, rebalance, broadcast, hash by key into key
//! groups).
//!
//! A batch is only split (copied) by the hash partitioner, and only when its
//! rows go to more than one consumer; every other path sends the batch
//! itself, shared by reference count.

use std::sync::Arc;

use arrow::array::{ArrayRef, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::error::{Error, ForOperator, Result};
use crate::keygroup::{hash_keys, key_group, subtask_for_key_group};

/// How records of an edge are distributed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partitioning {
    /// Producer subtask i feeds consumer subtask i (equal parallelism).
    Forward,
    /// Batches go round-robin to every consumer.
    Rebalance,
    /// Every batch goes to every consumer.
    Broadcast,
    /// Rows go to the consumer owning the key group of their key.
    Hash { keys: Vec<String> },
}

/// The routing state of one producer subtask for one edge.
pub struct Partitioner {
    /// The consuming operator, named in errors (a missing key column).
    consumer: String,
    kind: Partitioning,
    consumers: usize,
    max_parallelism: usize,
    next: usize,
    key_indices: Vec<usize>,
    key_schema: Option<SchemaRef>,
    hashes: Vec<u64>,
    routes: Vec<Vec<u32>>,
}

impl Partitioner {
    /// A partitioner for `consumers` consumer channels of operator
    /// `consumer`.
    pub fn new(
        consumer: &str,
        kind: Partitioning,
        consumers: usize,
        max_parallelism: usize,
        start: usize,
    ) -> Self {
        Partitioner {
            consumer: consumer.to_string(),
            kind,
            consumers,
            max_parallelism,
            next: start % consumers.max(1),
            key_indices: Vec::new(),
            key_schema: None,
            hashes: Vec::new(),
            routes: vec![Vec::new(); consumers],
        }
    }

    /// The partitioning scheme.
    pub fn kind(&self) -> &Partitioning {
        &self.kind
    }

    /// Routes `batch`, calling `send(consumer, part)` once per non-empty part.
    pub fn route(
        &mut self,
        batch: RecordBatch,
        mut send: impl FnMut(usize, RecordBatch) -> Result<()>,
    ) -> Result<()> {
        match &self.kind {
            Partitioning::Forward => send(0, batch),
            Partitioning::Rebalance => {
                let target = self.next;
                self.next = (self.next + 1) % self.consumers;
                send(target, batch)
            }
            Partitioning::Broadcast => {
                for c in 0..self.consumers {
                    send(c, batch.clone())?;
                }
                Ok(())
            }
            Partitioning::Hash { .. } => self.route_hash(batch, send),
        }
    }

    fn resolve_keys(&mut self, schema: &SchemaRef) -> Result<()> {
        if self
            .key_schema
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, schema) || s == schema)
        {
            return Ok(());
        }
        let Partitioning::Hash { keys } = &self.kind else {
            return Ok(());
        };
        self.key_indices.clear();
        for k in keys {
            let idx = schema.index_of(k).map_err(|_| {
                Error::graph(
                    &self.consumer,
                    format!(
                        "key column '{k}' does not exist; available columns: {}",
                        column_list(schema)
                    ),
                )
            })?;
            self.key_indices.push(idx);
        }
        self.key_schema = Some(schema.clone());
        Ok(())
    }

    fn route_hash(
        &mut self,
        batch: RecordBatch,
        mut send: impl FnMut(usize, RecordBatch) -> Result<()>,
    ) -> Result<()> {
        self.resolve_keys(&batch.schema())?;
        let cols: Vec<ArrayRef> = self
            .key_indices
            .iter()
            .map(|i| batch.column(*i).clone())
            .collect();
        hash_keys(&cols, &mut self.hashes).for_operator(&self.consumer)?;
        if self.consumers == 1 {
            return send(0, batch);
        }
        for r in &mut self.routes {
            r.clear();
        }
        for (row, h) in self.hashes.iter().enumerate() {
            let kg = key_group(*h, self.max_parallelism);
            let target = subtask_for_key_group(kg, self.consumers, self.max_parallelism);
            self.routes[target].push(row as u32);
        }
        let rows = batch.num_rows();
        for (target, route) in self.routes.iter().enumerate() {
            if route.is_empty() {
                continue;
            }
            if route.len() == rows {
                // Every row goes to one consumer: send the batch itself.
                return send(target, batch);
            }
            let indices = UInt32Array::from(route.clone());
            let part = take_record_batch(&batch, &indices).for_operator(&self.consumer)?;
            send(target, part)?;
        }
        Ok(())
    }
}

/// `a, b, c` for error messages.
pub fn column_list(schema: &SchemaRef) -> String {
    schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keygroup::key_group_range;
    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::Int64Type;

    fn batch(keys: Vec<i64>) -> RecordBatch {
        let k: ArrayRef = Arc::new(Int64Array::from(keys.clone()));
        let v: ArrayRef = Arc::new(Int64Array::from_iter_values(0..keys.len() as i64));
        RecordBatch::try_from_iter([("key", k), ("value", v)]).unwrap()
    }

    #[test]
    fn every_key_lands_in_the_subtask_owning_its_key_group() {
        for consumers in [1usize, 2, 3, 4, 7] {
            let max_p = 128;
            let mut p = Partitioner::new(
                "sum",
                Partitioning::Hash {
                    keys: vec!["key".into()],
                },
                consumers,
                max_p,
                0,
            );
            let keys: Vec<i64> = (0..5000).map(|i| (i * 7919) % 1013 - 500).collect();
            let mut got = vec![Vec::new(); consumers];
            p.route(batch(keys.clone()), |c, b| {
                got[c].push(b);
                Ok(())
            })
            .unwrap();
            let mut total = 0;
            for (c, parts) in got.iter().enumerate() {
                let range = key_group_range(c, consumers, max_p);
                for part in parts {
                    total += part.num_rows();
                    let col: ArrayRef = part.column(0).clone();
                    let mut h = Vec::new();
                    hash_keys(&[col], &mut h).unwrap();
                    for hv in h {
                        assert!(range.contains(&key_group(hv, max_p)));
                    }
                }
            }
            assert_eq!(total, keys.len());
        }
    }

    #[test]
    fn hash_routing_keeps_row_order_within_a_consumer() {
        let mut p = Partitioner::new(
            "sum",
            Partitioning::Hash {
                keys: vec!["key".into()],
            },
            2,
            128,
            0,
        );
        let mut got = vec![Vec::new(); 2];
        p.route(batch((0..100).collect()), |c, b| {
            got[c].push(b);
            Ok(())
        })
        .unwrap();
        for parts in got {
            for part in parts {
                let v = part.column(1).as_primitive::<Int64Type>();
                assert!(v.values().windows(2).all(|w| w[0] < w[1]));
            }
        }
    }

    #[test]
    fn rebalance_round_robins_and_broadcast_shares_the_batch() {
        let mut p = Partitioner::new("sum", Partitioning::Rebalance, 3, 128, 0);
        let mut targets = Vec::new();
        for _ in 0..6 {
            p.route(batch(vec![1]), |c, _| {
                targets.push(c);
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(targets, vec![0, 1, 2, 0, 1, 2]);
        let b = batch(vec![1, 2]);
        let ptr = b.column(0).to_data().buffers()[0].as_ptr();
        let mut p = Partitioner::new("sum", Partitioning::Broadcast, 2, 128, 0);
        let mut n = 0;
        p.route(b, |_, got| {
            assert_eq!(got.column(0).to_data().buffers()[0].as_ptr(), ptr);
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 2);
    }

    #[test]
    fn unknown_key_column_is_a_graph_error() {
        let mut p = Partitioner::new(
            "sum",
            Partitioning::Hash {
                keys: vec!["nope".into()],
            },
            2,
            128,
            0,
        );
        let err = p.route(batch(vec![1]), |_, _| Ok(())).unwrap_err();
        assert!(err.to_string().contains("'nope'"), "{err}");
    }
}
