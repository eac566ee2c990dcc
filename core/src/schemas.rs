//! One output schema per operator, agreed by all its subtasks (DESIGN.md
//! "One schema per operator").
//!
//! An operator whose graph node declares no output schema learns it from its
//! first output. At parallelism 1 the first batch fixes it and every later
//! batch must convert to it; with several subtasks each would otherwise fix
//! its own, and one operator would emit `v: int64` in one subtask and
//! `v: string` in another. A [`SchemaBoard`] holds the job's agreed schema
//! per node: the first subtask to propose one wins and every other subtask
//! gets it back, so they all convert to it (or fail as the single subtask
//! would on a later batch).
//!
//! The driver owns the board (it outlives attempts and is written into each
//! checkpoint's manifest, so a restore at any parallelism keeps the schema).
//! A worker process of a distributed job holds a remote board: it forwards a
//! proposal to the driver and waits for the answer, once per node; only a
//! subtask's first output batch ever waits.

use std::collections::HashMap;
use std::io::Cursor;
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};

/// Sends a worker's proposal for a node's schema to the driver.
pub type AskDriver = Box<dyn Fn(usize, &SchemaRef) -> Result<()> + Send + Sync>;

/// The agreed output schema of each node of one job.
pub struct SchemaBoard {
    slots: Mutex<Slots>,
    answered: Condvar,
    /// `None` on the driver (and in-process): the board decides.
    ask: Option<AskDriver>,
}

#[derive(Default)]
struct Slots {
    agreed: HashMap<usize, SchemaRef>,
    asked: std::collections::HashSet<usize>,
    /// Why no answer can come any more (the driver connection closed).
    closed: Option<String>,
}

impl Default for SchemaBoard {
    fn default() -> Self {
        SchemaBoard {
            slots: Mutex::new(Slots::default()),
            answered: Condvar::new(),
            ask: None,
        }
    }
}

impl std::fmt::Debug for SchemaBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchemaBoard")
            .field("remote", &self.ask.is_some())
            .finish()
    }
}

impl SchemaBoard {
    /// A board that asks the driver (through `ask`) and waits for
    /// [`SchemaBoard::answer`].
    pub fn remote(ask: AskDriver) -> SchemaBoard {
        SchemaBoard {
            ask: Some(ask),
            ..SchemaBoard::default()
        }
    }

    /// The schema of node `node`'s output: the one agreed before, or else
    /// `proposed`, which every later call then gets.
    pub fn agree(&self, node: usize, proposed: &SchemaRef) -> Result<SchemaRef> {
        let mut slots = self.slots.lock();
        if let Some(s) = slots.agreed.get(&node) {
            return Ok(s.clone());
        }
        let Some(ask) = &self.ask else {
            slots.agreed.insert(node, proposed.clone());
            return Ok(proposed.clone());
        };
        if slots.asked.insert(node) {
            // Sent under the lock: the answer is recorded under it too, so
            // it cannot arrive before this subtask waits for it.
            ask(node, proposed)?;
        }
        loop {
            if let Some(s) = slots.agreed.get(&node) {
                return Ok(s.clone());
            }
            if let Some(why) = &slots.closed {
                return Err(Error::runtime(format!(
                    "the driver did not answer which output schema the operator's subtasks \
                     agreed on: {why}"
                )));
            }
            // Woken by `answer` or `close`; the timeout only re-checks.
            self.answered
                .wait_for(&mut slots, Duration::from_millis(500));
        }
    }

    /// The driver's answer for `node` (a remote board).
    pub fn answer(&self, node: usize, schema: SchemaRef) {
        self.slots.lock().agreed.insert(node, schema);
        self.answered.notify_all();
    }

    /// No answers will come any more: waiting subtasks fail with `why`.
    pub fn close(&self, why: &str) {
        self.slots.lock().closed = Some(why.to_string());
        self.answered.notify_all();
    }

    /// The schema agreed for `node`, if any.
    pub fn get(&self, node: usize) -> Option<SchemaRef> {
        self.slots.lock().agreed.get(&node).cloned()
    }

    /// Sets `node`'s schema (restored from a checkpoint) unless one was
    /// agreed already.
    pub fn preset(&self, node: usize, schema: SchemaRef) {
        self.slots.lock().agreed.entry(node).or_insert(schema);
    }
}

/// What a subtask of one node agrees with the others through.
#[derive(Clone, Debug)]
pub struct SchemaAgreement {
    node: usize,
    board: Arc<SchemaBoard>,
}

impl SchemaAgreement {
    pub fn new(node: usize, board: Arc<SchemaBoard>) -> SchemaAgreement {
        SchemaAgreement { node, board }
    }

    /// The node's agreed output schema, `proposed` if this subtask is the
    /// first to ask (see [`SchemaBoard::agree`]). May block (a worker asks
    /// its driver): call it only for a subtask's first output.
    pub fn agree(&self, proposed: &SchemaRef) -> Result<SchemaRef> {
        self.board.agree(self.node, proposed)
    }
}

/// `schema` as Arrow IPC stream bytes (a schema message, no batches).
pub fn encode_schema(schema: &SchemaRef) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut w = StreamWriter::try_new(&mut out, schema)
        .map_err(|e| Error::runtime(format!("cannot encode a schema: {e}")))?;
    w.finish()
        .map_err(|e| Error::runtime(format!("cannot encode a schema: {e}")))?;
    drop(w);
    Ok(out)
}

/// The schema of [`encode_schema`]'s bytes.
pub fn decode_schema(bytes: &[u8]) -> Result<SchemaRef> {
    StreamReader::try_new(Cursor::new(bytes), None)
        .map(|r| r.schema())
        .map_err(|e| Error::runtime(format!("cannot decode a schema: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};

    fn schema(t: DataType) -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("v", t, true)]))
    }

    #[test]
    fn the_first_proposal_wins_for_every_subtask() {
        let board = Arc::new(SchemaBoard::default());
        let a = SchemaAgreement::new(3, board.clone());
        assert_eq!(
            a.agree(&schema(DataType::Int64)).unwrap(),
            schema(DataType::Int64)
        );
        assert_eq!(
            a.agree(&schema(DataType::Utf8)).unwrap(),
            schema(DataType::Int64)
        );
        let other = SchemaAgreement::new(4, board.clone());
        assert_eq!(
            other.agree(&schema(DataType::Utf8)).unwrap(),
            schema(DataType::Utf8)
        );
        board.preset(3, schema(DataType::Float64));
        assert_eq!(board.get(3), Some(schema(DataType::Int64)));
    }

    #[test]
    fn a_remote_board_asks_once_and_waits_for_the_answer() {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        let board = Arc::new(SchemaBoard::remote(Box::new(move |node, s| {
            log.lock().push((node, s.clone()));
            Ok(())
        })));
        let b = board.clone();
        let waiter = std::thread::spawn(move || b.agree(1, &schema(DataType::Utf8)));
        while asked.lock().is_empty() {
            std::thread::yield_now();
        }
        board.answer(1, schema(DataType::Int64));
        assert_eq!(waiter.join().unwrap().unwrap(), schema(DataType::Int64));
        assert_eq!(
            board.agree(1, &schema(DataType::Utf8)).unwrap(),
            schema(DataType::Int64)
        );
        assert_eq!(asked.lock().len(), 1);
        board.close("gone");
        let err = board.agree(2, &schema(DataType::Utf8)).unwrap_err();
        assert!(err.to_string().contains("gone"), "{err}");
    }

    #[test]
    fn a_schema_survives_its_encoding() {
        let s = Arc::new(Schema::new(vec![
            Field::new("v", DataType::Int64, true),
            Field::new(
                "s",
                DataType::Struct(vec![Field::new("x", DataType::Utf8, true)].into()),
                true,
            ),
        ]));
        assert_eq!(decode_schema(&encode_schema(&s).unwrap()).unwrap(), s);
    }
}
