//! Running one job's subtasks in several worker processes.
//!
//! Subtask `s` of every chain runs in worker `s % workers`, so forward
//! edges stay inside a process and only repartitioning edges cross the data
//! plane ([`crate::net::data`]). The driver keeps the checkpoint
//! coordinator and the supervision loop of [`crate::runtime::job`]
//! unchanged: its control messages go to the owning worker over an
//! authenticated connection, and the workers' task reports (with their
//! snapshot bytes), metric deltas and collect-sink operations come back on
//! it. A worker that exits or loses its connection fails the attempt; the
//! driver then stops every worker and starts a new attempt from the latest
//! completed checkpoint (flink-fault-tolerance-mechanism.txt, "recovery").
//!
//! How workers are started is the front end's business ([`Launcher`]):
//! local processes for `ProcessRunner`, Spark barrier tasks for
//! `SparkRunner`.

use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, unbounded, Receiver, Sender};
use parking_lot::Mutex;

use crate::barrier::AlignmentMode;
use crate::checkpoint::coordinator::TaskInfo;
use crate::checkpoint::{CheckpointStorage, RestoredCheckpoint};
use crate::error::{Error, Result};
use crate::graph::JobGraph;
use crate::message::{Control, TaskReport};
use crate::net::auth::{client_handshake, server_handshake, Secret};
use crate::net::control::{
    decode_collect, decode_control, decode_report, encode_collect, encode_control, encode_report,
    Hello, Start, TAG_CANCEL, TAG_COLLECT, TAG_CONTROL, TAG_DONE, TAG_HELLO, TAG_METRICS,
    TAG_REPORT, TAG_START,
};
use crate::net::data::DataPlane;
use crate::net::wire::{read_frame, write_frame, Dec, Enc};
use crate::runtime::job::{build_attempt, JobConfig, Placement, Shared};
use crate::runtime::metrics::OperatorMetrics;
use crate::runtime::plan::Plan;
use crate::runtime::replay::AttemptRecompute;
use crate::sink::collect::CollectStore;

/// Starts and stops the worker processes of a distributed job.
pub trait Launcher: Send {
    /// Starts the `workers` workers of `attempt`; each connects to `driver`
    /// and proves it knows `secret` (hex).
    fn launch(&mut self, attempt: u64, workers: usize, driver: &str, secret: &str) -> Result<()>;
    /// An error once the launched workers cannot all come up (a process
    /// exited, the cluster gave up).
    fn check(&mut self) -> Result<()>;
    /// Stops whatever the last launch started and waits for it.
    fn stop(&mut self);
}

/// How a job runs distributed.
pub struct Distribution {
    pub workers: usize,
    pub launcher: Box<dyn Launcher>,
    /// The job as the front end serialized it; workers rebuild the graph
    /// from it (opaque to the core).
    pub spec: Arc<Vec<u8>>,
    /// The driver's collect stores (workers forward to them).
    pub collect_stores: HashMap<usize, Arc<CollectStore>>,
    /// The address the driver listens on for its workers.
    pub bind: String,
    /// How long the workers of an attempt may take to connect.
    pub start_timeout: Duration,
}

fn net_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::runtime(format!("{what}: {e}"))
}

/// One connected worker, seen from the driver.
pub(crate) struct WorkerLink {
    index: usize,
    writer: Mutex<TcpStream>,
    ending: AtomicBool,
}

impl WorkerLink {
    pub(crate) fn send_control(&self, task: usize, control: &Control) {
        let mut w = self.writer.lock();
        // A broken link is noticed by its reader, which fails the attempt.
        let _ = write_frame(
            &mut *w,
            TAG_CONTROL,
            task as u32,
            &[&encode_control(control)],
        );
    }

    fn cancel(&self) {
        self.ending.store(true, Ordering::SeqCst);
        let mut w = self.writer.lock();
        let _ = write_frame(&mut *w, TAG_CANCEL, 0, &[]);
        let _ = w.shutdown(Shutdown::Both);
    }
}

/// The workers of the current attempt.
pub(crate) struct RemoteAttempt {
    pub links: Vec<Arc<WorkerLink>>,
    pub reports: Receiver<TaskReport>,
    readers: Vec<JoinHandle<()>>,
}

/// The driver's side: listens for workers and starts attempts on them.
pub(crate) struct DistDriver {
    pub dist: Distribution,
    secret: Secret,
    addr: String,
    hellos: Receiver<(Hello, TcpStream)>,
    closed: Arc<AtomicBool>,
    local_addr: SocketAddr,
}

impl DistDriver {
    pub fn new(dist: Distribution) -> Result<DistDriver> {
        if dist.workers == 0 {
            return Err(Error::job_graph(
                "a distributed job needs at least one worker",
            ));
        }
        let secret = Secret::generate()?;
        let listener = TcpListener::bind(&dist.bind)
            .map_err(|e| net_err(&format!("cannot listen for workers on {}", dist.bind), e))?;
        let local_addr = listener
            .local_addr()
            .map_err(|e| net_err("no local address", e))?;
        let (tx, rx) = unbounded();
        let closed = Arc::new(AtomicBool::new(false));
        let s = secret.clone();
        let c = closed.clone();
        std::thread::Builder::new()
            .name("eddyline-driver-accept".into())
            .spawn(move || accept_workers(listener, s, tx, c))
            .map_err(|e| net_err("cannot start a thread", e))?;
        Ok(DistDriver {
            dist,
            secret,
            addr: local_addr.to_string(),
            hellos: rx,
            closed,
            local_addr,
        })
    }

    /// Launches the workers of `attempt`, waits until each said hello and
    /// hands them the job.
    #[allow(clippy::too_many_arguments)]
    pub fn start_attempt(
        &mut self,
        attempt: u64,
        tasks: &[TaskInfo],
        restored: Option<&RestoredCheckpoint>,
        metrics: Vec<Arc<OperatorMetrics>>,
        cancel: &dyn Fn() -> bool,
    ) -> Result<RemoteAttempt> {
        let n = self.dist.workers;
        // Hellos of earlier attempts still queued are stale.
        while self.hellos.try_recv().is_ok() {}
        self.dist
            .launcher
            .launch(attempt, n, &self.addr, &self.secret.to_hex())?;
        let deadline = Instant::now() + self.dist.start_timeout;
        let mut joined: Vec<Option<(Hello, TcpStream)>> = (0..n).map(|_| None).collect();
        while joined.iter().any(Option::is_none) {
            if cancel() {
                self.dist.launcher.stop();
                return Err(Error::Cancelled);
            }
            if let Err(e) = self.dist.launcher.check() {
                self.dist.launcher.stop();
                return Err(e);
            }
            if Instant::now() > deadline {
                self.dist.launcher.stop();
                let missing: Vec<String> = joined
                    .iter()
                    .enumerate()
                    .filter(|(_, j)| j.is_none())
                    .map(|(i, _)| i.to_string())
                    .collect();
                return Err(Error::runtime(format!(
                    "worker(s) {} did not connect to the driver within {:?}",
                    missing.join(", "),
                    self.dist.start_timeout
                )));
            }
            match self.hellos.recv_timeout(Duration::from_millis(100)) {
                Ok((hello, stream)) => {
                    // Fencing: a worker of another attempt, or a second
                    // worker with the same index, is turned away.
                    let fits = hello.index < n
                        && (hello.attempt == attempt || hello.attempt == u64::MAX)
                        && joined[hello.index].is_none();
                    if fits {
                        let i = hello.index;
                        joined[i] = Some((hello, stream));
                    } else {
                        let _ = stream.shutdown(Shutdown::Both);
                    }
                }
                Err(_) => continue,
            }
        }
        let addrs: Vec<String> = joined
            .iter()
            .flatten()
            .map(|(h, _)| h.data_addr.clone())
            .collect();
        let restore = restored.map(|rc| rc.dir().to_string_lossy().into_owned());
        let (report_tx, report_rx) = unbounded();
        let mut links = Vec::with_capacity(n);
        let mut readers = Vec::with_capacity(n);
        let first_task_of: Vec<usize> = (0..n)
            .map(|w| tasks.iter().position(|t| t.subtask % n == w).unwrap_or(0))
            .collect();
        for (i, j) in joined.into_iter().enumerate() {
            let Some((_, mut stream)) = j else {
                continue;
            };
            let start = Start {
                attempt,
                workers: n,
                index: i,
                addrs: addrs.clone(),
                spec: self.dist.spec.clone(),
                restore: restore.clone(),
            };
            write_frame(&mut stream, TAG_START, 0, &[&start.encode()])
                .map_err(|e| net_err(&format!("cannot start worker {i}"), e))?;
            let reader = stream
                .try_clone()
                .map_err(|e| net_err("cannot clone a socket", e))?;
            let link = Arc::new(WorkerLink {
                index: i,
                writer: Mutex::new(stream),
                ending: AtomicBool::new(false),
            });
            let l = link.clone();
            let tx = report_tx.clone();
            let m = metrics.clone();
            let stores = self.dist.collect_stores.clone();
            let first_task = first_task_of[i];
            readers.push(
                std::thread::Builder::new()
                    .name(format!("eddyline-worker-{i}"))
                    .spawn(move || read_worker(reader, l, tx, m, stores, first_task))
                    .map_err(|e| net_err("cannot start a thread", e))?,
            );
            links.push(link);
        }
        Ok(RemoteAttempt {
            links,
            reports: report_rx,
            readers,
        })
    }

    /// Ends an attempt: with `cancel`, tells every worker to stop; waits
    /// for the workers' last messages and stops them.
    pub fn end_attempt(&mut self, remote: RemoteAttempt, cancel: bool) {
        if cancel {
            for l in &remote.links {
                l.cancel();
            }
        } else {
            for l in &remote.links {
                l.ending.store(true, Ordering::SeqCst);
            }
        }
        if !cancel {
            // The workers send their last metrics and `done`, then exit.
            for r in remote.readers {
                let _ = r.join();
            }
        }
        self.dist.launcher.stop();
        for l in &remote.links {
            let _ = l.writer.lock().shutdown(Shutdown::Both);
        }
    }
}

impl Drop for DistDriver {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.local_addr, Duration::from_millis(200));
        self.dist.launcher.stop();
    }
}

fn accept_workers(
    listener: TcpListener,
    secret: Secret,
    tx: Sender<(Hello, TcpStream)>,
    closed: Arc<AtomicBool>,
) {
    for stream in listener.incoming() {
        if closed.load(Ordering::SeqCst) {
            return;
        }
        let Ok(mut stream) = stream else { continue };
        let secret = secret.clone();
        let tx = tx.clone();
        // Handshakes run on their own thread: a silent peer cannot hold up
        // the workers behind it.
        let _ = std::thread::Builder::new()
            .name("eddyline-driver-hello".into())
            .spawn(move || {
                if server_handshake(&mut stream, &secret).is_err() {
                    return;
                }
                let Ok(Some(f)) = read_frame(&mut stream) else {
                    return;
                };
                if f.tag != TAG_HELLO {
                    return;
                }
                if let Ok(h) = Hello::decode(&f.payload) {
                    let _ = stream.set_nodelay(true);
                    let _ = tx.send((h, stream));
                }
            });
    }
}

fn read_worker(
    mut stream: TcpStream,
    link: Arc<WorkerLink>,
    reports: Sender<TaskReport>,
    metrics: Vec<Arc<OperatorMetrics>>,
    stores: HashMap<usize, Arc<CollectStore>>,
    first_task: usize,
) {
    let i = link.index;
    let why: String = loop {
        let frame = match read_frame(&mut stream) {
            Ok(Some(f)) => f,
            Ok(None) => break "it closed its connection without finishing".into(),
            Err(e) => break format!("its connection broke ({e})"),
        };
        match frame.tag {
            TAG_REPORT => match decode_report(&frame.payload) {
                Ok(TaskReport::Failed {
                    task,
                    error: Error::Cancelled,
                }) => {
                    let error = Error::runtime(format!(
                        "a task of worker {i} stopped because a connection to another \
                             worker broke (that worker probably died)"
                    ));
                    let _ = reports.send(TaskReport::Failed { task, error });
                }
                Ok(r) => {
                    let _ = reports.send(r);
                }
                Err(e) => break format!("it sent a malformed report ({e})"),
            },
            TAG_METRICS => {
                if apply_metrics(&frame.payload, &metrics).is_err() {
                    break "it sent malformed metrics".into();
                }
            }
            TAG_COLLECT => {
                let op = match decode_collect(&frame.payload) {
                    Ok(op) => op,
                    Err(e) => break format!("it sent a malformed collect batch ({e})"),
                };
                if let Some(store) = stores.get(&(frame.channel as usize)) {
                    let _ = store.apply(op);
                }
            }
            TAG_DONE => return,
            other => break format!("it sent an unknown message ({other})"),
        }
    };
    if !link.ending.load(Ordering::SeqCst) {
        let _ = reports.send(TaskReport::Failed {
            task: first_task,
            error: Error::runtime(format!("worker {i} was lost: {why}")),
        });
    }
}

const METRIC_FIELDS: usize = 7;

fn metric_values(m: &OperatorMetrics) -> [u64; METRIC_FIELDS] {
    [
        m.records_in.load(Ordering::Relaxed),
        m.records_out.load(Ordering::Relaxed),
        m.batches_in.load(Ordering::Relaxed),
        m.batches_out.load(Ordering::Relaxed),
        m.late_records.load(Ordering::Relaxed),
        m.spilled_bytes.load(Ordering::Relaxed),
        m.spill_files.load(Ordering::Relaxed),
    ]
}

fn apply_metrics(buf: &[u8], metrics: &[Arc<OperatorMetrics>]) -> Result<()> {
    let mut d = Dec::new(buf);
    let n = d.u32()? as usize;
    for _ in 0..n {
        let node = d.u32()? as usize;
        let mut v = [0u64; METRIC_FIELDS];
        for x in &mut v {
            *x = d.u64()?;
        }
        if let Some(m) = metrics.get(node) {
            m.records_in.fetch_add(v[0], Ordering::Relaxed);
            m.records_out.fetch_add(v[1], Ordering::Relaxed);
            m.batches_in.fetch_add(v[2], Ordering::Relaxed);
            m.batches_out.fetch_add(v[3], Ordering::Relaxed);
            m.late_records.fetch_add(v[4], Ordering::Relaxed);
            m.spilled_bytes.fetch_add(v[5], Ordering::Relaxed);
            m.spill_files.fetch_add(v[6], Ordering::Relaxed);
        }
    }
    Ok(())
}

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
    /// driver runs) and waits for the job.
    pub fn connect(
        driver: &str,
        secret_hex: &str,
        index: usize,
        attempt: u64,
        bind_host: &str,
    ) -> Result<WorkerSession> {
        let secret = Secret::from_hex(secret_hex)?;
        let listener = TcpListener::bind((bind_host, 0))
            .map_err(|e| net_err(&format!("cannot bind a data port on {bind_host}"), e))?;
        let data_addr = listener
            .local_addr()
            .map_err(|e| net_err("no local address", e))?
            .to_string();
        let addr = driver
            .to_socket_addrs()
            .map_err(|e| net_err(&format!("bad driver address {driver}"), e))?
            .next()
            .ok_or_else(|| Error::runtime(format!("bad driver address {driver}")))?;
        let mut control = TcpStream::connect_timeout(&addr, Duration::from_secs(30))
            .map_err(|e| net_err(&format!("cannot reach the driver at {driver}"), e))?;
        client_handshake(&mut control, &secret)?;
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
        for (node, store) in &collect_stores {
            let w = writer.clone();
            let node = *node as u32;
            store.forward_to(Arc::new(move |op| {
                let bytes = encode_collect(&op)?;
                write_frame(&mut *w.lock(), TAG_COLLECT, node, &[&bytes])
                    .map_err(|e| net_err("the driver connection broke", e))
            }));
        }
        let restored = match &start.restore {
            Some(p) => {
                let options = crate::checkpoint::CheckpointConfig::storage_options_of(
                    config.checkpoint.as_ref(),
                );
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
        let recompute = AttemptRecompute::prepare(&graph, recovery, restored.as_ref())?;
        let plan = Plan::new(&graph);
        let shared = Shared::new(&graph);
        let mut plane = DataPlane::new(
            start.index,
            start.attempt,
            secret,
            listener,
            config.channel_capacity,
        );
        let mut place = Placement {
            workers: start.workers,
            me: Some(start.index),
            plane: Some(&mut plane),
        };
        let run = build_attempt(
            &graph,
            &plan,
            &config,
            &shared,
            start.attempt as u32,
            mode,
            restored.as_ref(),
            &recompute,
            &mut place,
        )?;
        drop(restored);
        let mut addrs = Vec::with_capacity(start.addrs.len());
        for a in &start.addrs {
            addrs.push(
                a.parse::<SocketAddr>()
                    .map_err(|e| net_err(&format!("bad peer address {a}"), e))?,
            );
        }
        let locals = run.local_controls();
        if let Err(e) = plane.start(&addrs) {
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
            .spawn(move || read_driver(reader, ctl_locals, gone, cancel))
            .map_err(|e| net_err("cannot start a thread", e))?;
        let node_metrics: Vec<Arc<OperatorMetrics>> =
            shared.metrics.nodes.iter().map(|n| n.2.clone()).collect();
        let mut sent = vec![[0u64; METRIC_FIELDS]; node_metrics.len()];
        let ticker = crossbeam_channel::tick(Duration::from_millis(250));
        let send = |tag: u8, payload: &[u8]| -> Result<()> {
            write_frame(&mut *writer.lock(), tag, 0, &[payload])
                .map_err(|e| net_err("the driver connection broke", e))
        };
        let mut failure: Option<Error> = None;
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
                                encode_report(&TaskReport::Failed { task, error: e })?
                            }
                        };
                        if let Err(e) = send(TAG_REPORT, &bytes) {
                            failure = Some(e);
                            break;
                        }
                    }
                    Err(_) => break,
                },
                recv(ticker) -> _ => {
                    if let Err(e) = send(TAG_METRICS, &metric_deltas(&node_metrics, &mut sent)) {
                        failure = Some(e);
                        break;
                    }
                }
            }
        }
        if failure.is_some() || driver_gone.load(Ordering::SeqCst) {
            for c in locals.iter().flatten() {
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
        let _ = control.shutdown(Shutdown::Write);
        Ok(())
    }
}

fn metric_deltas(metrics: &[Arc<OperatorMetrics>], sent: &mut [[u64; METRIC_FIELDS]]) -> Vec<u8> {
    let mut e = Enc::default();
    e.u32(metrics.len() as u32);
    for (node, (m, last)) in metrics.iter().zip(sent.iter_mut()).enumerate() {
        let now = metric_values(m);
        e.u32(node as u32);
        for k in 0..METRIC_FIELDS {
            e.u64(now[k].saturating_sub(last[k]));
        }
        *last = now;
    }
    e.0
}

fn read_driver(
    mut stream: TcpStream,
    locals: Vec<Option<Sender<Control>>>,
    gone: Arc<AtomicBool>,
    cancelled: Arc<AtomicBool>,
) {
    loop {
        match read_frame(&mut stream) {
            Ok(Some(f)) if f.tag == TAG_CONTROL => {
                if let (Ok(c), Some(Some(tx))) =
                    (decode_control(&f.payload), locals.get(f.channel as usize))
                {
                    let _ = tx.send(c);
                }
            }
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
    for tx in locals.iter().flatten() {
        let _ = tx.send(Control::Cancel);
    }
}
