//! The operator that runs Python code: it calls a runner object of the
//! `eddyline` package (the executor protocol of `eddyline/_exec/base.py`,
//! DESIGN.md "Runtime") with the GIL taken once
//! per batch, handing batches over zero-copy. Key groups of keyed Python
//! operators are computed here in Rust, without the GIL, with the engine's
//! stable key hash.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use eddyline_core::error::{Error, ForOperator, Result};
use eddyline_core::keygroup::{hash_keys, key_group};
use eddyline_core::operator::{
    CheckpointedState, Collector, Operator, OperatorContext, OperatorFactory, ProcessingTimers,
    Recompute,
};
use eddyline_core::state::{decode_entries, OperatorState, Redistribution, StateBlob};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use eddyline_core::schemas::SchemaAgreement;

use crate::arrow::{array_to_py, batch_from_py, batch_to_py, schema_from_py, schema_to_py};
use crate::entries::entries_from_py;
use crate::errors::{from_py, to_py};
use crate::gil::detached;

/// Builds a runner per subtask by calling the node's Python factory.
pub struct PyRunnerFactory {
    factory: Py<PyAny>,
    /// The key columns per logical input (one list: the same for every input).
    keys: Option<Vec<Vec<String>>>,
    /// Unique per job run (one `execute`), shared by all subtasks and attempts.
    run_tag: String,
    /// The factory's properties, read once when the graph is built.
    recomputable: bool,
    replayable_from_earlier: bool,
    redistributable: bool,
    /// Its runners hold broadcast state (`Redistribution::Broadcast`).
    broadcast_state: bool,
    /// Its runners' operator state is union list state: at another
    /// parallelism every subtask gets the entries of all old subtasks (a
    /// keyed process function's watermark per subtask).
    union_state: bool,
    /// Which optional hooks its runners have (`Runner` class flags).
    hooks: Hooks,
}

/// The optional parts of the executor protocol a runner class has.
#[derive(Clone, Copy)]
struct Hooks {
    on_watermark: bool,
    end_input: bool,
    late_records: bool,
    /// Its runners have processing-time timers (`processing_timer()` and
    /// `on_processing_time()`).
    processing_time: bool,
    /// Its runners emit what they make of a batch in the call that got it,
    /// and only there (`passes_source_progress`): the source's progress goes
    /// on through them (DESIGN.md "Event time per split").
    source_progress: bool,
}

impl PyRunnerFactory {
    /// Wraps the Python factory of operator `operator`, reading its
    /// `recomputable` and `replayable_from_earlier` (FLINK-4120) and
    /// `redistributable` (FLIP-147: its runners' operator state is a list of
    /// entries that may be dealt to the subtasks of another parallelism)
    /// properties, `broadcast_state` and `union_state` (how its operator state
    /// is redistributed), and which optional hooks its runners have
    /// (`handles_watermarks`, `handles_end_input`, `counts_late_records`,
    /// `passes_source_progress`: false for a factory without it). A property
    /// that raises (or is not a bool) is an error naming the operator, with
    /// the Python exception as its cause.
    pub fn new(
        py: Python<'_>,
        operator: &str,
        factory: Py<PyAny>,
        keys: Option<Vec<Vec<String>>>,
        run_tag: String,
    ) -> Result<Self> {
        let read = |attr: &str| {
            factory
                .getattr(py, attr)
                .and_then(|v| v.extract::<bool>(py))
                .map_err(|e| from_py(py, operator, e))
        };
        Ok(Self {
            recomputable: read("recomputable")?,
            replayable_from_earlier: read("replayable_from_earlier")?,
            redistributable: read("redistributable")?,
            broadcast_state: read("broadcast_state")?,
            union_state: read("union_state")?,
            hooks: Hooks {
                on_watermark: read("handles_watermarks")?,
                end_input: read("handles_end_input")?,
                late_records: read("counts_late_records")?,
                processing_time: read("handles_processing_time")?,
                source_progress: factory
                    .bind(py)
                    .hasattr("passes_source_progress")
                    .map_err(|e| from_py(py, operator, e))?
                    && read("passes_source_progress")?,
            },
            factory,
            keys,
            run_tag,
        })
    }
}

impl OperatorFactory for PyRunnerFactory {
    fn recomputable(&self) -> bool {
        self.recomputable
    }

    fn replayable_from_earlier(&self) -> bool {
        self.replayable_from_earlier
    }

    fn redistribution(&self) -> Redistribution {
        if self.broadcast_state {
            Redistribution::Broadcast
        } else if self.union_state {
            Redistribution::Union
        } else if self.redistributable {
            Redistribution::EvenSplit
        } else {
            Redistribution::unsupported()
        }
    }

    fn create(&self, ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
        let runner = Python::attach(|py| {
            self.factory
                .call0(py)
                .map_err(|e| from_py(py, &ctx.name, e))
        })?;
        Ok(Box::new(PyRunner {
            name: ctx.name.clone(),
            runner,
            keys: self.keys.clone(),
            run_tag: self.run_tag.clone(),
            key_indices: Vec::new(),
            hashes: Vec::new(),
            max_parallelism: ctx.max_parallelism,
            results: Vec::new(),
            hooks: self.hooks,
            late: 0,
            timer: None,
            agreement: None,
        }))
    }
}

/// One subtask of a Python operator.
pub struct PyRunner {
    name: String,
    runner: Py<PyAny>,
    /// The key columns per logical input (see [`PyRunnerFactory`]).
    keys: Option<Vec<Vec<String>>>,
    run_tag: String,
    key_indices: Vec<usize>,
    hashes: Vec<u64>,
    max_parallelism: usize,
    /// What the runner returned, with the output port of each batch.
    results: Vec<(u8, RecordBatch)>,
    hooks: Hooks,
    late: u64,
    /// The runner's next processing-time timer as it last said: (due, its
    /// clock's now, when it said so), all by the runner's clock (ms).
    timer: Option<(i64, i64, std::time::Instant)>,
    /// How the runner agrees its inferred output schema with the other
    /// subtasks (given to it as `ctx["agree_schema"]`).
    agreement: Option<SchemaAgreement>,
}

/// `ctx["agree_schema"]`: called with the schema a runner inferred from its
/// first output, returns the schema every subtask of the operator uses
/// (DESIGN.md "One schema per operator"). The wait (a worker process asks
/// its driver) runs without the GIL.
#[pyclass(name = "SchemaAgreement", module = "eddyline._core", frozen)]
pub struct PySchemaAgreement {
    inner: SchemaAgreement,
}

#[pymethods]
impl PySchemaAgreement {
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        schema: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let proposed = schema_from_py(schema)?;
        let agreed = detached(py, || self.inner.agree(&proposed)).map_err(|e| to_py(py, &e))?;
        schema_to_py(py, &agreed)
    }
}

impl PyRunner {
    fn key_groups(&mut self, input: usize, batch: &RecordBatch) -> Result<Option<ArrayRef>> {
        let Some(keys) = self.keys.as_ref().and_then(|k| k.get(input).or(k.last())) else {
            return Ok(None);
        };
        if keys.is_empty() {
            // An input without keys (the broadcast input of a keyed broadcast
            // function): its rows belong to no key group.
            return Ok(None);
        }
        let schema = batch.schema();
        self.key_indices.clear();
        for k in keys {
            let idx = schema.index_of(k).map_err(|_| {
                Error::graph(
                    self.name.clone(),
                    format!("key column '{k}' does not exist in the operator's input"),
                )
            })?;
            self.key_indices.push(idx);
        }
        let cols: Vec<ArrayRef> = self
            .key_indices
            .iter()
            .map(|i| batch.column(*i).clone())
            .collect();
        hash_keys(&cols, &mut self.hashes).for_operator(&self.name)?;
        let max_p = self.max_parallelism;
        let kgs: UInt32Array = self
            .hashes
            .iter()
            .map(|h| key_group(*h, max_p) as u32)
            .collect();
        Ok(Some(Arc::new(kgs)))
    }

    /// Converts what a runner returned: None, a batch, or a list of
    /// batches, where a `(port, batch)` tuple emits on an output port (a
    /// window's late records go to port 1).
    fn collect_results(&mut self, obj: &Bound<'_, PyAny>) -> PyResult<()> {
        if obj.is_none() {
            return Ok(());
        }
        if let Ok(list) = obj.cast::<PyList>() {
            for item in list.iter() {
                self.results.push(port_batch(&item)?);
            }
            return Ok(());
        }
        self.results.push(port_batch(obj)?);
        Ok(())
    }

    /// After a call into the runner: reads its running count of late
    /// records (if it keeps one) and its next processing-time timer (if it
    /// has timers), under the same GIL acquisition.
    fn read_late(&mut self, runner: &Bound<'_, PyAny>) -> PyResult<()> {
        if self.hooks.late_records {
            self.late = runner.getattr("late_records")?.extract::<u64>()?;
        }
        if self.hooks.processing_time {
            let next: Option<(i64, i64)> = runner.call_method0("processing_timer")?.extract()?;
            self.timer = next.map(|(due, now)| (due, now, std::time::Instant::now()));
        }
        Ok(())
    }

    fn emit_results(&mut self, out: &mut dyn Collector) -> Result<()> {
        for (port, b) in self.results.drain(..) {
            out.emit_to_port(port, b)?;
        }
        Ok(())
    }

    /// Reads what a runner's `snapshot()` returned: `None`; `{key_group:
    /// bytes}` (keyed state); a list of bytes (operator state as entries);
    /// bytes (operator state); or a tuple `(bytes | [bytes] | None, {key_group:
    /// bytes})`, both (a keyed broadcast function: its broadcast state and its
    /// keyed state; a keyed process function: its watermark entry and its
    /// keyed state).
    fn state_from_py(&self, res: &Bound<'_, PyAny>) -> Result<OperatorState> {
        {
            if res.is_none() {
                return Ok(OperatorState::default());
            }
            if let Ok(t) = res.cast::<PyTuple>() {
                let parts = (t.len() == 2)
                    .then(|| (t.get_item(0), t.get_item(1)))
                    .and_then(|(a, b)| a.ok().zip(b.ok()));
                let Some((operator, keyed)) = parts else {
                    return Err(Error::operator(
                        self.name.clone(),
                        "the runner's snapshot() returned a tuple that is not \
                         (operator state, keyed state)",
                    ));
                };
                if keyed.cast::<PyDict>().is_err() {
                    return Err(Error::operator(
                        self.name.clone(),
                        "the second part of the runner's snapshot() is not {key_group: bytes}",
                    ));
                }
                let operator = self.state_from_py(&operator)?;
                let keyed = self.state_from_py(&keyed)?;
                return Ok(OperatorState {
                    operator: operator.operator,
                    keyed: keyed.keyed,
                });
            }
            if let Ok(d) = res.cast::<PyDict>() {
                // Keyed state: one blob per key group.
                let mut keyed = Vec::with_capacity(d.len());
                for (k, v) in d.iter() {
                    let kg: u32 = k.extract().map_err(|_| {
                        Error::operator(
                            self.name.clone(),
                            "the runner's keyed snapshot has a non-integer key group",
                        )
                    })?;
                    let b = v.cast::<PyBytes>().map_err(|_| {
                        Error::operator(
                            self.name.clone(),
                            "the runner's keyed snapshot holds a value that is not bytes",
                        )
                    })?;
                    keyed.push((kg, StateBlob::Bytes(Arc::new(b.as_bytes().to_vec()))));
                }
                keyed.sort_by_key(|(kg, _)| *kg);
                return Ok(OperatorState {
                    operator: None,
                    keyed,
                });
            }
            if let Ok(l) = res.cast::<PyList>() {
                // Operator state as a list of entries (redistributable),
                // referenced here and copied on a writer thread (entries.rs).
                return Ok(OperatorState {
                    operator: Some(entries_from_py(&self.name, l)?),
                    keyed: Vec::new(),
                });
            }
            let bytes: Vec<u8> = res
                .cast::<PyBytes>()
                .map(|b| b.as_bytes().to_vec())
                .map_err(|_| {
                    Error::operator(
                        self.name.clone(),
                        "the runner's snapshot() did not return bytes",
                    )
                })?;
            Ok(OperatorState {
                operator: Some(StateBlob::Bytes(Arc::new(bytes))),
                keyed: Vec::new(),
            })
        }
    }
}

/// A batch, or a `(port, batch)` tuple, with its output port.
fn port_batch(item: &Bound<'_, PyAny>) -> PyResult<(u8, RecordBatch)> {
    if let Ok(t) = item.cast::<PyTuple>() {
        let (port, batch): (u8, Bound<'_, PyAny>) = t.extract()?;
        return Ok((port, batch_from_py(&batch)?));
    }
    Ok((0, batch_from_py(item)?))
}

impl Operator for PyRunner {
    fn set_schema_agreement(&mut self, agreement: SchemaAgreement) {
        self.agreement = Some(agreement);
    }

    fn open(&mut self, ctx: &OperatorContext) -> Result<()> {
        Python::attach(|py| {
            let d = PyDict::new(py);
            d.set_item("name", &ctx.name)?;
            d.set_item("subtask_index", ctx.subtask_index)?;
            d.set_item("parallelism", ctx.parallelism)?;
            d.set_item("max_parallelism", ctx.max_parallelism)?;
            d.set_item("attempt", ctx.attempt)?;
            d.set_item("run_tag", &self.run_tag)?;
            if let Some(a) = &self.agreement {
                d.set_item("agree_schema", PySchemaAgreement { inner: a.clone() })?;
            }
            let runner = self.runner.bind(py).clone();
            runner.call_method1("open", (d,))?;
            // Restored processing-time timers (also ones due while the job
            // was down) need a wake-up.
            self.read_late(&runner)
        })
        .map_err(|e| Python::attach(|py| from_py(py, &self.name, e)))
    }

    fn process_batch(
        &mut self,
        input: usize,
        batch: RecordBatch,
        out: &mut dyn Collector,
    ) -> Result<()> {
        let kgs = self.key_groups(input, &batch)?;
        let name = self.name.clone();
        Python::attach(|py| {
            let r: PyResult<()> = (|| {
                let pb = batch_to_py(py, &batch)?;
                let pk = match &kgs {
                    Some(a) => Some(array_to_py(py, a)?),
                    None => None,
                };
                let runner = self.runner.bind(py).clone();
                let res = runner.call_method1("process", (input, pb, pk))?;
                self.read_late(&runner)?;
                self.collect_results(&res)
            })();
            r.map_err(|e| from_py(py, &name, e))
        })?;
        self.emit_results(out)
    }

    fn process_watermark(&mut self, watermark: i64, out: &mut dyn Collector) -> Result<()> {
        if self.hooks.on_watermark {
            let name = self.name.clone();
            Python::attach(|py| {
                let r: PyResult<()> = (|| {
                    let runner = self.runner.bind(py).clone();
                    let res = runner.call_method1("on_watermark", (watermark,))?;
                    self.read_late(&runner)?;
                    self.collect_results(&res)
                })();
                r.map_err(|e| from_py(py, &name, e))
            })?;
            self.emit_results(out)?;
        }
        out.emit_watermark(watermark)
    }

    fn end_input(&mut self, input: usize, out: &mut dyn Collector) -> Result<()> {
        if !self.hooks.end_input {
            return Ok(());
        }
        let name = self.name.clone();
        Python::attach(|py| {
            let r: PyResult<()> = (|| {
                let res = self.runner.bind(py).call_method1("end_input", (input,))?;
                self.collect_results(&res)
            })();
            r.map_err(|e| from_py(py, &name, e))
        })?;
        self.emit_results(out)
    }

    fn late_records(&self) -> u64 {
        self.late
    }

    /// A runner that emits each batch's rows in the call that got it
    /// (`passes_source_progress`: map, filter, flat_map, map_batches) passes
    /// the source's progress on, as the native filters and projections do,
    /// so an `assign_timestamps` chained behind it keeps one watermark per
    /// split (DESIGN.md "Event time per split"). The worker processes of
    /// per-record functions keep this: a call waits for all of a batch's
    /// slices and returns their outputs in order.
    fn on_source_progress(
        &mut self,
        split: Option<u64>,
        open: &[u64],
        out: &mut dyn Collector,
    ) -> Result<()> {
        if self.hooks.source_progress {
            out.source_progress(split, open)?;
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut dyn Collector) -> Result<()> {
        let name = self.name.clone();
        Python::attach(|py| {
            let r: PyResult<()> = (|| {
                let res = self.runner.bind(py).call_method0("finish")?;
                self.collect_results(&res)
            })();
            r.map_err(|e| from_py(py, &name, e))
        })?;
        self.emit_results(out)
    }

    fn close(&mut self) -> Result<()> {
        Python::attach(|py| {
            self.runner
                .bind(py)
                .call_method0("close")
                .map(|_| ())
                .map_err(|e| from_py(py, &self.name, e))
        })
    }

    fn state(&mut self) -> Option<&mut dyn CheckpointedState> {
        Some(self)
    }

    fn recompute(&mut self) -> Option<&mut dyn Recompute> {
        Some(self)
    }

    fn timers(&mut self) -> Option<&mut dyn ProcessingTimers> {
        Some(self)
    }
}

impl CheckpointedState for PyRunner {
    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<OperatorState> {
        Python::attach(|py| {
            let res = self
                .runner
                .bind(py)
                .call_method1("snapshot", (checkpoint_id,))
                .map_err(|e| from_py(py, &self.name, e))?;
            self.state_from_py(&res)
        })
    }

    fn restore_state(&mut self, state: OperatorState) -> Result<()> {
        if let (Some(blob), false) = (&state.operator, state.keyed.is_empty()) {
            // Both (a keyed broadcast function: `restore((bytes, {key_group: bytes}))`;
            // a keyed process function: `restore(([bytes], {key_group: bytes}))`,
            // its operator state an entry list).
            let bytes = blob.to_bytes()?;
            let entries = decode_entries(&bytes);
            let mut blobs = Vec::with_capacity(state.keyed.len());
            for (kg, blob) in &state.keyed {
                blobs.push((*kg, blob.to_bytes()?));
            }
            return Python::attach(|py| {
                let r: PyResult<()> = (|| {
                    let d = PyDict::new(py);
                    for (kg, b) in &blobs {
                        d.set_item(kg, PyBytes::new(py, b))?;
                    }
                    let operator = match &entries {
                        Some(entries) => {
                            let list: Vec<Bound<'_, PyBytes>> =
                                entries.iter().map(|e| PyBytes::new(py, e)).collect();
                            PyList::new(py, list)?.into_any()
                        }
                        None => PyBytes::new(py, &bytes).into_any(),
                    };
                    let both = PyTuple::new(py, [operator, d.into_any()])?;
                    self.runner.bind(py).call_method1("restore", (both,))?;
                    Ok(())
                })();
                r.map_err(|e| from_py(py, &self.name, e))
            });
        }
        if let Some(blob) = state.operator {
            let bytes = blob.to_bytes()?;
            return Python::attach(|py| {
                let runner = self.runner.bind(py);
                let done = match decode_entries(&bytes) {
                    Some(entries) => {
                        let list: Vec<Bound<'_, PyBytes>> =
                            entries.iter().map(|e| PyBytes::new(py, e)).collect();
                        runner.call_method1("restore", (list,))
                    }
                    None => runner.call_method1("restore", (PyBytes::new(py, &bytes),)),
                };
                done.map(|_| ()).map_err(|e| from_py(py, &self.name, e))
            });
        }
        let mut blobs = Vec::with_capacity(state.keyed.len());
        for (kg, blob) in state.keyed {
            blobs.push((kg, blob.to_bytes()?));
        }
        Python::attach(|py| {
            let r: PyResult<()> = (|| {
                let d = PyDict::new(py);
                for (kg, bytes) in &blobs {
                    d.set_item(kg, PyBytes::new(py, bytes))?;
                }
                self.runner.bind(py).call_method1("restore", (d,))?;
                Ok(())
            })();
            r.map_err(|e| from_py(py, &self.name, e))
        })
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        Python::attach(|py| {
            self.runner
                .bind(py)
                .call_method1("notify_checkpoint_complete", (checkpoint_id,))
                .map(|_| ())
                .map_err(|e| from_py(py, &self.name, e))
        })
    }
}

impl Recompute for PyRunner {
    /// The runner's `null_state_watermark(checkpoint_id)` (FLINK-4120); a
    /// failure (e.g. the user's `null_state_watermark` raising) fails the
    /// checkpoint.
    fn null_state_watermark(&self, checkpoint_id: u64) -> Result<Option<u64>> {
        Python::attach(|py| {
            self.runner
                .call_method1(py, "null_state_watermark", (checkpoint_id,))
                .and_then(|v| v.extract::<Option<u64>>(py))
                .map_err(|e| from_py(py, &self.name, e))
        })
    }

    /// The runner's `on_barrier(checkpoint_id)`: a failure (e.g. a
    /// `ProcessFunction.on_barrier` raising) fails the checkpoint and the
    /// task, with the user's traceback.
    fn on_barrier(&mut self, checkpoint_id: u64) -> Result<()> {
        Python::attach(|py| {
            self.runner
                .call_method1(py, "on_barrier", (checkpoint_id,))
                .map(|_| ())
                .map_err(|e| from_py(py, &self.name, e))
        })
    }
}

impl ProcessingTimers for PyRunner {
    fn processing_timer_delay(&self) -> Option<i64> {
        let (due, now, at) = self.timer?;
        Some(due - now - at.elapsed().as_millis() as i64)
    }

    fn on_processing_time(&mut self, out: &mut dyn Collector) -> Result<()> {
        if !self.hooks.processing_time {
            return Ok(());
        }
        let name = self.name.clone();
        Python::attach(|py| {
            let r: PyResult<()> = (|| {
                let runner = self.runner.bind(py).clone();
                let res = runner.call_method0("on_processing_time")?;
                self.read_late(&runner)?;
                self.collect_results(&res)
            })();
            r.map_err(|e| from_py(py, &name, e))
        })?;
        self.emit_results(out)
    }
}
