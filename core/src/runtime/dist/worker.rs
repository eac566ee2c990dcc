//! The worker side of a distributed job: connecting to the driver, running
//! this worker's subtasks of each attempt ([`crate::runtime::spawn`]) and
//! sending their reports and metric deltas back.

use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{select, Sender};
use parking_lot::Mutex;

use super::{metric_values, net_err, subtask_values, SentMetrics};
use crate::barrier::AlignmentMode;
use crate::checkpoint::CheckpointStorage;
use crate::error::{Error, Result};
use crate::graph::JobGraph;
use crate::message::{Control, TaskReport};
use crate::net::auth::{client_handshake, Secret};
use crate::net::control::{
    decode_control, encode_collect, encode_report, Hello, Start, TAG_CANCEL, TAG_COLLECT,
    TAG_CONTROL, TAG_DONE, TAG_HELLO, TAG_METRICS, TAG_REPORT, TAG_SCHEMA, TAG_START,
};
use crate::net::data::DataPlane;
use crate::net::wire::{read_frame, write_frame, Enc};
use crate::runtime::config::JobConfig;
use crate::runtime::metrics::{OperatorMetrics, SubtaskMetrics};
use crate::runtime::plan::Plan;
use crate::runtime::replay::AttemptRecompute;
use crate::runtime::spawn::{build_attempt, Attempt, Placement};
use crate::runtime::status::Shared;
use crate::schemas::{decode_schema, encode_schema, SchemaBoard};
use crate::sink::collect::CollectStore;

/// A worker process's connection to its driver.
pub struct WorkerSession {
    control: TcpStream,
    secret: Secret,
    listener: TcpListener,
    start: Start,
}

impl WorkerSession {
    /// Binds a data port on `bind_host`, connects to the driver, says hello
    /// as worker `index` of `attempt` (`u64::MAX`: whichever attempt the
    /// driver runs) and waits for the job. The peers reach the data port at
    /// `advertise_host` (by default the address it is bound to; a host with
    /// several interfaces, or one behind a NAT, binds one address and
    /// advertises another).
    pub fn connect(
        driver: &str,
        secret_hex: &str,
        index: usize,
        attempt: u64,
        bind_host: &str,
        advertise_host: Option<&str>,
    ) -> Result<WorkerSession> {
        let secret = Secret::from_hex(secret_hex)?;
        let listener = TcpListener::bind((bind_host, 0))
            .map_err(|e| net_err(&format!("cannot bind a data port on {bind_host}"), e))?;
        let bound = listener
            .local_addr()
            .map_err(|e| net_err("no local address", e))?;
        let data_addr = match advertise_host {
            Some(host) if host.contains(':') => format!("[{host}]:{}", bound.port()),
            Some(host) => format!("{host}:{}", bound.port()),
            None if bound.ip().is_unspecified() => {
                return Err(Error::runtime(format!(
                    "worker {index} binds its data port on {bind_host}, every interface: \
                     name the address its peers reach it at (advertise host)"
                )))
            }
            None => bound.to_string(),
        };
        let addr = driver
            .to_socket_addrs()
            .map_err(|e| net_err(&format!("bad driver address {driver}"), e))?
            .next()
            .ok_or_else(|| Error::runtime(format!("bad driver address {driver}")))?;
        let mut control = TcpStream::connect_timeout(&addr, Duration::from_secs(30))
            .map_err(|e| net_err(&format!("cannot reach the driver at {driver}"), e))?;
        client_handshake(&mut control, &secret)?;
        // Latency only: a socket without it still carries every frame.
        let _ = control.set_nodelay(true);
        let hello = Hello {
            index,
            attempt,
            data_addr,
        };
        write_frame(&mut control, TAG_HELLO, 0, &[&hello.encode()])
            .map_err(|e| net_err("cannot greet the driver", e))?;
        let frame = read_frame(&mut control)
            .map_err(|e| net_err("the driver did not start this worker", e))?
            .ok_or_else(|| {
                Error::runtime("the driver turned this worker away (another attempt runs)")
            })?;
        if frame.tag != TAG_START {
            return Err(Error::runtime("unexpected first message from the driver"));
        }
        let start = Start::decode(&frame.payload)?;
        Ok(WorkerSession {
            control,
            secret,
            listener,
            start,
        })
    }

    /// Reports that this worker cannot run the job it was given (e.g. its
    /// spec cannot be loaded here); the driver fails the job with `error`.
    pub fn fail(mut self, error: Error) -> Result<()> {
        let bytes = encode_report(&TaskReport::Failed { task: 0, error })?;
        write_frame(&mut self.control, TAG_REPORT, 0, &[&bytes])
            .map_err(|e| net_err("the driver connection broke", e))?;
        // The report is written; the driver reads it whether or not the
        // write half closes cleanly (dropping the socket closes it too).
        let _ = self.control.shutdown(Shutdown::Write);
        Ok(())
    }

    /// What the driver sent: the job spec, attempt, addresses.
    pub fn start(&self) -> &Start {
        &self.start
    }

    /// Runs this worker's subtasks of `graph` until the attempt ends.
    /// `collect_stores` are this process's stores of collect sinks: their
    /// operations are forwarded to the driver.
    /// An error (say, a checkpoint this worker cannot restore) is reported
    /// to the driver, which fails or restarts the job with it.
    pub fn run(
        self,
        graph: JobGraph,
        config: JobConfig,
        collect_stores: HashMap<usize, Arc<CollectStore>>,
    ) -> Result<()> {
        let report = self.control.try_clone().ok();
        let result = self.run_tasks(graph, config, collect_stores);
        if let (Err(error), Some(mut stream)) = (&result, report) {
            if let Ok(bytes) = encode_report(&TaskReport::Failed {
                task: 0,
                error: error.clone(),
            }) {
                // `result` below returns the error in this process too; a
                // broken driver link loses only the copy sent to the driver,
                // which then reports this worker as lost.
                let _ = write_frame(&mut stream, TAG_REPORT, 0, &[&bytes]);
            }
        }
        result
    }

    fn run_tasks(
        self,
        graph: JobGraph,
        config: JobConfig,
        collect_stores: HashMap<usize, Arc<CollectStore>>,
    ) -> Result<()> {
        graph.validate()?;
        let WorkerSession {
            control,
            secret,
            listener,
            start,
        } = self;
        let writer = Arc::new(Mutex::new(
            control
                .try_clone()
                .map_err(|e| net_err("cannot clone a socket", e))?,
        ));
        forward_collects(&writer, &collect_stores);
        let mut plane = DataPlane::new(
            start.index,
            start.attempt,
            secret,
            listener,
            config.channel_capacity,
        );
        let mut shared = Shared::new(&graph);
        // Output schemas are agreed by the driver, for every worker's subtasks.
        let ask = writer.clone();
        let board = Arc::new(SchemaBoard::remote(Box::new(move |node, proposal| {
            let bytes = encode_schema(proposal)?;
            write_frame(&mut *ask.lock(), TAG_SCHEMA, node as u32, &[&bytes])
                .map_err(|e| net_err("the driver connection broke", e))
        })));
        shared.schemas = board.clone();
        let run = build_worker_attempt(&graph, &config, &start, &shared, &mut plane)?;
        let mut addrs = Vec::with_capacity(start.addrs.len());
        for a in &start.addrs {
            addrs.push(
                a.parse::<SocketAddr>()
                    .map_err(|e| net_err(&format!("bad peer address {a}"), e))?,
            );
        }
        let locals = run.local_controls();
        if let Err(e) = plane.start(&addrs) {
            // Tasks may wait for a link that will never connect: fail the
            // links first, or joining them would wait forever.
            plane.shutdown();
            run.cancel_and_join();
            return Err(e);
        }
        // Control messages from the driver go to the local tasks.
        let reader = control
            .try_clone()
            .map_err(|e| net_err("cannot clone a socket", e))?;
        let driver_gone = Arc::new(AtomicBool::new(false));
        let cancelled = Arc::new(AtomicBool::new(false));
        let (gone, cancel) = (driver_gone.clone(), cancelled.clone());
        let ctl_locals = locals.clone();
        std::thread::Builder::new()
            .name("eddyline-worker-control".into())
            .spawn(move || read_driver(reader, ctl_locals, &board, gone, cancel))
            .map_err(|e| net_err("cannot start a thread", e))?;
        let node_metrics: Vec<Arc<OperatorMetrics>> =
            shared.metrics.nodes.iter().map(|n| n.2.clone()).collect();
        let mut sent = vec![SentMetrics::default(); node_metrics.len()];
        let send = |tag: u8, payload: &[u8]| -> Result<()> {
            write_frame(&mut *writer.lock(), tag, 0, &[payload])
                .map_err(|e| net_err("the driver connection broke", e))
        };
        let failure = relay(&run, &send, &node_metrics, &mut sent);
        if failure.is_some() || driver_gone.load(Ordering::SeqCst) {
            for c in locals.iter().flatten() {
                // Err: that task ended already; there is nothing to cancel.
                let _ = c.send(Control::Cancel);
            }
        }
        let queues_ok = run.join_local();
        plane.shutdown();
        if cancelled.load(Ordering::SeqCst) {
            // The driver ended the attempt; it expects nothing more.
            return Ok(());
        }
        if let Some(e) = failure {
            return Err(e);
        }
        queues_ok?;
        send(TAG_METRICS, &metric_deltas(&node_metrics, &mut sent))?;
        send(TAG_DONE, &[])?;
        // `done` is written; closing the write half only hurries the driver.
        let _ = control.shutdown(Shutdown::Write);
        Ok(())
    }
}

/// Collect sinks of this worker send their operations to the driver.
fn forward_collects(
    writer: &Arc<Mutex<TcpStream>>,
    collect_stores: &HashMap<usize, Arc<CollectStore>>,
) {
    for (node, store) in collect_stores {
        let w = writer.clone();
        let node = *node as u32;
        store.forward_to(Arc::new(move |op| {
            let bytes = encode_collect(&op)?;
            write_frame(&mut *w.lock(), TAG_COLLECT, node, &[&bytes])
                .map_err(|e| net_err("the driver connection broke", e))
        }));
    }
}

/// This worker's tasks of the attempt `start` names, restored from its
/// checkpoint, connected to the other workers through `plane`.
fn build_worker_attempt(
    graph: &JobGraph,
    config: &JobConfig,
    start: &Start,
    shared: &Shared,
    plane: &mut DataPlane,
) -> Result<Attempt> {
    let restored = match &start.restore {
        Some(p) => {
            let options =
                crate::checkpoint::CheckpointConfig::storage_options_of(config.checkpoint.as_ref());
            Some(CheckpointStorage::load_path_with(p, &options)?)
        }
        None => None,
    };
    let mode = config
        .checkpoint
        .as_ref()
        .map(|c| c.mode)
        .unwrap_or(AlignmentMode::ExactlyOnce);
    let recovery = config
        .checkpoint
        .as_ref()
        .map(|c| c.recovery)
        .unwrap_or_default();
    let recompute = AttemptRecompute::prepare(graph, recovery, restored.as_ref())?;
    // The driver chains for the same checkpoint (`job.rs` `drive`).
    let plan = Plan::for_restore(graph, restored.as_ref());
    let mut place = Placement {
        workers: start.workers,
        me: Some(start.index),
        plane: Some(plane),
    };
    build_attempt(
        graph,
        &plan,
        config,
        shared,
        start.attempt as u32,
        mode,
        restored.as_ref(),
        &recompute,
        &mut place,
    )
}

/// Sends the tasks' reports and (every 250 ms) the metric deltas to the
/// driver until every task closed; the send failure, if one ended it.
fn relay(
    run: &Attempt,
    send: &dyn Fn(u8, &[u8]) -> Result<()>,
    node_metrics: &[Arc<OperatorMetrics>],
    sent: &mut [SentMetrics],
) -> Option<Error> {
    let ticker = crossbeam_channel::tick(Duration::from_millis(250));
    loop {
        select! {
            recv(run.reports) -> r => match r {
                Ok(report) => {
                    let bytes = match encode_report(&report) {
                        Ok(b) => b,
                        Err(e) => {
                            let task = match &report {
                                TaskReport::Snapshot { task, .. } => *task,
                                _ => 0,
                            };
                            match encode_report(&TaskReport::Failed { task, error: e }) {
                                Ok(b) => b,
                                Err(e) => return Some(e),
                            }
                        }
                    };
                    if let Err(e) = send(TAG_REPORT, &bytes) {
                        return Some(e);
                    }
                }
                Err(_) => return None,
            },
            recv(ticker) -> _ => {
                if let Err(e) = send(TAG_METRICS, &metric_deltas(node_metrics, sent)) {
                    return Some(e);
                }
            }
        }
    }
}

/// Per node: the operator counters' deltas, then the subtasks that changed
/// since the last frame (index, deltas of rows and times, watermark, then
/// a loop head's termination round and feedback queue events and bytes,
/// and whether the subtask finished).
pub(super) fn metric_deltas(metrics: &[Arc<OperatorMetrics>], sent: &mut [SentMetrics]) -> Vec<u8> {
    let mut e = Enc::default();
    e.u32(metrics.len() as u32);
    for (node, (m, last)) in metrics.iter().zip(sent.iter_mut()).enumerate() {
        let now = metric_values(m);
        e.u32(node as u32);
        for (now, before) in now.iter().zip(&last.op) {
            e.u64(now.saturating_sub(*before));
        }
        last.op = now;
        // A subtask this worker never touched equals a fresh one (watermark
        // "none", not 0): its first frame must not send it, or the gauges
        // of the worker running it would be overwritten.
        let fresh = SubtaskMetrics::default().snapshot();
        last.subtasks.resize(m.subtasks.len(), fresh);
        let changed: Vec<usize> = (0..m.subtasks.len())
            .filter(|&i| m.subtasks[i].snapshot() != last.subtasks[i])
            .collect();
        e.u32(changed.len() as u32);
        for i in changed {
            let now = m.subtasks[i].snapshot();
            let (a, b) = (subtask_values(&now), subtask_values(&last.subtasks[i]));
            e.u32(i as u32);
            for (now, before) in a.iter().zip(&b) {
                e.u64(now.saturating_sub(*before));
            }
            e.i64(now.watermark);
            // Loop heads' gauges go as they are (DESIGN.md "Dashboard").
            e.u64(now.termination_round);
            e.u64(now.feedback_events);
            e.u64(now.feedback_bytes);
            e.u64(u64::from(now.finished));
            last.subtasks[i] = now;
        }
    }
    e.0
}

fn read_driver(
    mut stream: TcpStream,
    locals: Vec<Option<Sender<Control>>>,
    schemas: &SchemaBoard,
    gone: Arc<AtomicBool>,
    cancelled: Arc<AtomicBool>,
) {
    loop {
        match read_frame(&mut stream) {
            Ok(Some(f)) if f.tag == TAG_CONTROL => {
                if let (Ok(c), Some(Some(tx))) =
                    (decode_control(&f.payload), locals.get(f.channel as usize))
                {
                    // Err: that task ended already; the control is moot.
                    let _ = tx.send(c);
                }
            }
            Ok(Some(f)) if f.tag == TAG_SCHEMA => match decode_schema(&f.payload) {
                Ok(s) => schemas.answer(f.channel as usize, s),
                Err(e) => {
                    schemas.close(&e.to_string());
                    gone.store(true, Ordering::SeqCst);
                    break;
                }
            },
            Ok(Some(f)) if f.tag == TAG_CANCEL => {
                cancelled.store(true, Ordering::SeqCst);
                break;
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => {
                gone.store(true, Ordering::SeqCst);
                break;
            }
        }
    }
    schemas.close("the connection to the driver closed");
    for tx in locals.iter().flatten() {
        // Err: that task ended already; there is nothing to cancel.
        let _ = tx.send(Control::Cancel);
    }
}
