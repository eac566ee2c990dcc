//! The driver side of a distributed job: launching the workers of an
//! attempt, handing them the job, relaying control messages to them and
//! their reports, metrics and collect operations back.

use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use parking_lot::Mutex;

use super::{net_err, Distribution, METRIC_FIELDS};
use crate::checkpoint::coordinator::TaskInfo;
use crate::checkpoint::RestoredCheckpoint;
use crate::error::{Error, Result};
use crate::message::{Control, TaskReport};
use crate::net::auth::{server_handshake, Secret};
use crate::net::control::{
    decode_collect, decode_report, encode_control, Hello, Start, TAG_CANCEL, TAG_COLLECT,
    TAG_CONTROL, TAG_DONE, TAG_HELLO, TAG_METRICS, TAG_REPORT, TAG_SCHEMA, TAG_START,
};
use crate::net::wire::{read_frame, write_frame, Dec};
use crate::runtime::metrics::OperatorMetrics;
use crate::schemas::{decode_schema, encode_schema, SchemaBoard};
use crate::sink::collect::CollectStore;

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
        // The worker may be dead already (its loss is why the attempt ends);
        // closing the link ends it either way, and its reader reports a loss.
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
        schemas: &Arc<SchemaBoard>,
        cancel: &dyn Fn() -> bool,
    ) -> Result<RemoteAttempt> {
        let n = self.dist.workers;
        // The new attempt's tasks finish anew (their workers only ever send
        // `finished` as set: apply_metrics).
        for m in &metrics {
            for s in &m.subtasks {
                s.finished.store(false, Ordering::Relaxed);
            }
        }
        // Hellos of earlier attempts still queued are stale.
        while self.hellos.try_recv().is_ok() {}
        self.dist
            .launcher
            .launch(attempt, n, &self.addr, &self.secret.to_hex())?;
        let joined = self.await_workers(attempt, cancel)?;
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
            let board = schemas.clone();
            readers.push(
                std::thread::Builder::new()
                    .name(format!("eddyline-worker-{i}"))
                    .spawn(move || {
                        let link = WorkerSide {
                            link: l,
                            reports: tx,
                            metrics: m,
                            stores,
                            schemas: board,
                            first_task,
                        };
                        read_worker(reader, link)
                    })
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

    /// Waits until each worker of `attempt` said hello (fencing off workers
    /// of other attempts and duplicates), stopping the launch on
    /// cancellation, a failed launcher or the start timeout.
    fn await_workers(
        &mut self,
        attempt: u64,
        cancel: &dyn Fn() -> bool,
    ) -> Result<Vec<Option<(Hello, TcpStream)>>> {
        let n = self.dist.workers;
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
                        // A stray or late worker: turned away; a socket that
                        // cannot be shut down is closed when dropped anyway.
                        let _ = stream.shutdown(Shutdown::Both);
                    }
                }
                Err(_) => continue,
            }
        }
        Ok(joined)
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
                // A reader reports every loss it sees through `reports`; a
                // panic in it was printed by the panic hook. The join only waits.
                let _ = r.join();
            }
        }
        self.dist.launcher.stop();
        for l in &remote.links {
            // Teardown: a link already broken or closed has nothing to shut.
            let _ = l.writer.lock().shutdown(Shutdown::Both);
        }
    }
}

impl Drop for DistDriver {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::SeqCst);
        // Wakes the acceptor to see `closed`; if it cannot connect, the
        // acceptor is gone already.
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
        let spawned = std::thread::Builder::new()
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
                    // Latency only: a socket without it still carries every frame.
                    let _ = stream.set_nodelay(true);
                    // No receiver: the workers were all joined or the attempt
                    // ended; this late worker is turned away by the drop.
                    let _ = tx.send((h, stream));
                }
            });
        if let Err(e) = spawned {
            // The connection is dropped with the closure: that worker is not
            // joined, and the attempt fails naming the workers that are missing.
            eprintln!("eddyline: cannot start a thread for a worker's handshake: {e}");
        }
    }
}

/// What the reader of one worker's messages passes them on to.
struct WorkerSide {
    link: Arc<WorkerLink>,
    reports: Sender<TaskReport>,
    metrics: Vec<Arc<OperatorMetrics>>,
    stores: HashMap<usize, Arc<CollectStore>>,
    /// The job's agreed output schemas: the first proposal wins.
    schemas: Arc<SchemaBoard>,
    first_task: usize,
}

/// Answers a worker's proposal of node `node`'s output schema with the
/// agreed one.
fn answer_schema(side: &WorkerSide, node: u32, proposal: &[u8]) -> Result<()> {
    let agreed = side
        .schemas
        .agree(node as usize, &decode_schema(proposal)?)?;
    let bytes = encode_schema(&agreed)?;
    let mut w = side.link.writer.lock();
    write_frame(&mut *w, TAG_SCHEMA, node, &[&bytes]).map_err(|e| net_err("cannot answer", e))
}

fn read_worker(mut stream: TcpStream, side: WorkerSide) {
    let WorkerSide {
        link,
        reports,
        metrics,
        stores,
        first_task,
        ..
    } = &side;
    let (i, first_task) = (link.index, *first_task);
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
                    // No receiver: the attempt ended, its outcome is decided.
                    let _ = reports.send(TaskReport::Failed { task, error });
                }
                Ok(r) => {
                    // No receiver: the attempt ended, its outcome is decided.
                    let _ = reports.send(r);
                }
                Err(e) => break format!("it sent a malformed report ({e})"),
            },
            TAG_METRICS => {
                if apply_metrics(&frame.payload, metrics).is_err() {
                    break "it sent malformed metrics".into();
                }
            }
            TAG_COLLECT => {
                let op = match decode_collect(&frame.payload) {
                    Ok(op) => op,
                    Err(e) => break format!("it sent a malformed collect batch ({e})"),
                };
                if let Some(store) = stores.get(&(frame.channel as usize)) {
                    // Rows lost here would be lost silently: fail with the cause.
                    if let Err(e) = store.apply(op) {
                        break format!("its collected rows could not be applied ({e})");
                    }
                }
            }
            TAG_SCHEMA => {
                if let Err(e) = answer_schema(&side, frame.channel, &frame.payload) {
                    break format!("its output schema could not be agreed ({e})");
                }
            }
            TAG_DONE => return,
            other => break format!("it sent an unknown message ({other})"),
        }
    };
    if !link.ending.load(Ordering::SeqCst) {
        // No receiver: the attempt ended already, with its own cause.
        let _ = reports.send(TaskReport::Failed {
            task: first_task,
            error: Error::runtime(format!("worker {i} was lost: {why}")),
        });
    }
}

pub(super) fn apply_metrics(buf: &[u8], metrics: &[Arc<OperatorMetrics>]) -> Result<()> {
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
        for _ in 0..d.u32()? {
            let index = d.u32()? as usize;
            let mut v = [0u64; 5];
            for x in &mut v {
                *x = d.u64()?;
            }
            let watermark = d.i64()?;
            let (round, events, bytes) = (d.u64()?, d.u64()?, d.u64()?);
            let finished = d.u64()? != 0;
            if let Some(s) = metrics.get(node).and_then(|m| m.subtasks.get(index)) {
                s.termination_round.store(round, Ordering::Relaxed);
                // Only ever set here: a worker that does not run the subtask
                // sends its own `false` for it when it touched its counters
                // (start_attempt clears the flags of a new attempt).
                if finished {
                    s.finished.store(true, Ordering::Relaxed);
                }
                s.feedback_events.store(events, Ordering::Relaxed);
                s.feedback_bytes.store(bytes, Ordering::Relaxed);
                s.records_in.fetch_add(v[0], Ordering::Relaxed);
                s.records_out.fetch_add(v[1], Ordering::Relaxed);
                s.busy_ns.fetch_add(v[2], Ordering::Relaxed);
                s.backpressured_ns.fetch_add(v[3], Ordering::Relaxed);
                s.idle_ns.fetch_add(v[4], Ordering::Relaxed);
                // A frame never takes a known watermark back to "none".
                if watermark != i64::MIN {
                    s.watermark.store(watermark, Ordering::Relaxed);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::dist::worker::metric_deltas;
    use crate::runtime::dist::SentMetrics;

    fn ops(parallelism: usize) -> Vec<Arc<OperatorMetrics>> {
        vec![Arc::new(OperatorMetrics::new(parallelism))]
    }

    #[test]
    fn a_workers_subtask_metrics_add_up_on_the_driver() {
        let (worker, driver) = (ops(2), ops(2));
        let mut sent = vec![SentMetrics::default()];
        let sub = &worker[0].subtasks[1];
        worker[0].add_in(10);
        sub.records_in.fetch_add(10, Ordering::Relaxed);
        sub.busy_ns.fetch_add(7, Ordering::Relaxed);
        sub.backpressured_ns.fetch_add(5, Ordering::Relaxed);
        sub.watermark.store(42, Ordering::Relaxed);
        apply_metrics(&metric_deltas(&worker, &mut sent), &driver).unwrap();
        // A second frame carries only what changed since.
        sub.idle_ns.fetch_add(3, Ordering::Relaxed);
        sub.watermark.store(50, Ordering::Relaxed);
        apply_metrics(&metric_deltas(&worker, &mut sent), &driver).unwrap();
        apply_metrics(&metric_deltas(&worker, &mut sent), &driver).unwrap();
        let got = driver[0].subtasks[1].snapshot();
        assert_eq!(got, worker[0].subtasks[1].snapshot());
        assert_eq!((got.records_in, got.busy_ns, got.idle_ns), (10, 7, 3));
        assert_eq!((got.backpressured_ns, got.watermark), (5, 50));
        assert_eq!(driver[0].records_in.load(Ordering::Relaxed), 10);
        assert_eq!(driver[0].subtasks[0].snapshot().watermark, i64::MIN);
    }

    #[test]
    fn a_subtasks_gauges_reach_the_driver_as_they_are() {
        let (worker, driver) = (ops(1), ops(1));
        let mut sent = vec![SentMetrics::default()];
        let sub = &worker[0].subtasks[0];
        sub.termination_round.store(3, Ordering::Relaxed);
        sub.feedback_events.store(7, Ordering::Relaxed);
        apply_metrics(&metric_deltas(&worker, &mut sent), &driver).unwrap();
        sub.termination_round.store(5, Ordering::Relaxed);
        sub.feedback_events.store(2, Ordering::Relaxed);
        sub.finished.store(true, Ordering::Relaxed);
        apply_metrics(&metric_deltas(&worker, &mut sent), &driver).unwrap();
        let got = driver[0].subtasks[0].snapshot();
        assert_eq!((got.termination_round, got.feedback_events), (5, 2));
        assert!(got.finished);
        // Another worker, which does not run the subtask but counted time on
        // its counters, sends `finished: false` for it: the flag stays.
        let other = ops(1);
        other[0].subtasks[0].idle_ns.fetch_add(9, Ordering::Relaxed);
        let mut other_sent = vec![SentMetrics::default()];
        apply_metrics(&metric_deltas(&other, &mut other_sent), &driver).unwrap();
        assert!(driver[0].subtasks[0].snapshot().finished);
    }

    #[test]
    fn a_worker_sends_no_subtask_it_never_touched() {
        let driver = ops(2);
        let (runs_0, runs_1) = (ops(2), ops(2));
        runs_0[0].subtasks[0]
            .termination_round
            .store(4, Ordering::Relaxed);
        apply_metrics(
            &metric_deltas(&runs_0, &mut [SentMetrics::default()]),
            &driver,
        )
        .unwrap();
        runs_1[0].subtasks[1]
            .busy_ns
            .fetch_add(1, Ordering::Relaxed);
        let frame = metric_deltas(&runs_1, &mut [SentMetrics::default()]);
        apply_metrics(&frame, &driver).unwrap();
        assert_eq!(driver[0].subtasks[0].snapshot().termination_round, 4);
        // node count, node, 7 operator counters, one subtask: index, 5 deltas,
        // watermark, round, events, bytes, finished
        assert_eq!(frame.len(), 4 + 4 + 7 * 8 + 4 + 4 + 5 * 8 + 8 + 4 * 8);
    }

    #[test]
    fn a_truncated_metric_frame_is_an_error() {
        let worker = ops(1);
        worker[0].subtasks[0]
            .busy_ns
            .fetch_add(1, Ordering::Relaxed);
        let frame = metric_deltas(&worker, &mut [SentMetrics::default()]);
        assert!(apply_metrics(&frame[..frame.len() - 3], &ops(1)).is_err());
    }
}
