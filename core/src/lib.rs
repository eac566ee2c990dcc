//! eddyline-core: the engine of eddyline, without Python.
//!
//! A job graph of operators is expanded into subtasks that run on threads and
//! exchange [`event::Event`]s (Arrow record batches and control events) over
//! bounded channels. See DESIGN.md for the architecture and the five Flink
//! designs (ABS, FLIP-15, FLIP-16, FLIP-147, FLINK-4120) it implements.

pub mod barrier;
pub mod checkpoint;
pub mod error;
pub mod event;
pub mod expr;
pub mod feedback;
pub mod sql;

pub mod keygroup;
pub(crate) mod message;
pub mod net;
pub mod operator;
pub mod state;
pub mod store;

pub use error::{Error, Result};
pub mod channel;
pub mod graph;
pub mod partition;
pub mod runtime;
pub mod schemas;
pub mod scope;
pub mod sink;
pub mod source;
pub mod termination;
