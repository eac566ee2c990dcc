//! One attempt of a job: which process runs which subtask ([`Placement`]),
//! where each task's control messages go ([`ControlPort`]), and
//! [`build_attempt`], which wires the channels and feedback queues of the
//! plan, constructs the tasks and starts their threads (DESIGN.md
//! "Runtime"). Used by the driver's supervisor and by every worker process.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{unbounded, Receiver, Sender};

use crate::barrier::{AlignmentMode, BarrierAligner};
use crate::channel::{bounded, FlowPolicy, InputFlow, MIN_BUDGET_BYTES};
use crate::checkpoint::coordinator::{Outgoing, TaskInfo};
use crate::checkpoint::restore::{all_finished, state_for};
use crate::checkpoint::RestoredCheckpoint;
use crate::error::{Error, Result};
use crate::feedback::FeedbackQueue;
use crate::graph::{JobGraph, NodeKind};
use crate::keygroup::key_group_range;
use crate::net::data::DataPlane;
use crate::operator::OperatorContext;
use crate::partition::{Partitioner, Partitioning};
use crate::runtime::config::JobConfig;
use crate::runtime::dist::driver::{RemoteAttempt, WorkerLink};
use crate::runtime::plan::Plan;
use crate::runtime::replay::AttemptRecompute;
use crate::runtime::status::Shared;
use crate::runtime::task::loop_head::LoopHead;
use crate::runtime::task::{
    Control, InputChannel, OpSlot, OutSender, OutputEdge, SourceHead, Task, TaskOutput, TaskReport,
    TaskRestore,
};
use crate::termination::BodyTermination;
use std::collections::HashMap;

/// Where the control messages of one task go.
pub(crate) enum ControlPort {
    /// A task thread of this process.
    Local(Sender<Control>),
    /// Task `.1`, run by a worker process.
    Remote(Arc<WorkerLink>, usize),
    /// A task another worker runs (seen from a worker).
    Absent,
}

impl ControlPort {
    pub(crate) fn send(&self, c: Control) {
        match self {
            ControlPort::Local(s) => {
                let _ = s.send(c);
            }
            ControlPort::Remote(link, task) => link.send_control(*task, &c),
            ControlPort::Absent => {}
        }
    }
}

/// Which worker runs which subtask: subtask `s` of every chain runs in
/// worker `s % workers` (forward edges stay in one process).
pub(crate) struct Placement<'a> {
    pub workers: usize,
    /// This process's worker index; `None` for a driver that runs no task.
    pub me: Option<usize>,
    /// The remote channels of this worker (when `workers > 1`).
    pub plane: Option<&'a mut DataPlane>,
}

impl Placement<'_> {
    /// Everything in this process.
    pub(crate) fn local() -> Placement<'static> {
        Placement {
            workers: 1,
            me: Some(0),
            plane: None,
        }
    }

    pub(crate) fn owner(&self, subtask: usize) -> usize {
        subtask % self.workers.max(1)
    }

    pub(crate) fn owns(&self, subtask: usize) -> bool {
        self.me == Some(self.owner(subtask))
    }

    pub(crate) fn plane(&mut self) -> Result<&mut DataPlane> {
        self.plane
            .as_deref_mut()
            .ok_or_else(|| Error::runtime("internal: a remote channel without a data plane"))
    }
}

/// Refuses what a distributed run cannot do yet, before anything starts.
pub(crate) fn check_distributable(graph: &JobGraph, workers: usize) -> Result<()> {
    if workers <= 1 {
        return Ok(());
    }
    let plan = Plan::new(graph);
    for l in &graph.loops {
        let hp = plan.chains[plan.chain_of[l.head]].parallelism;
        let tp = plan.chains[plan.chain_of[l.tail]].parallelism;
        if hp != tp {
            return Err(Error::graph(
                &graph.nodes[l.head].name,
                format!(
                    "this loop's head runs at parallelism {hp} and its tail at {tp}: its \
                     feedback would cross worker processes, which is not supported; give the \
                     loop body the parallelism of its head"
                ),
            ));
        }
    }
    Ok(())
}

pub(crate) struct Attempt {
    pub(crate) controls: Vec<ControlPort>,
    pub(crate) threads: Vec<JoinHandle<()>>,
    pub reports: Receiver<TaskReport>,
    pub(crate) tasks: Vec<TaskInfo>,
    /// The loops' feedback queues: closed (spill files deleted) when the
    /// attempt's threads are gone.
    pub(crate) queues: Vec<Arc<FeedbackQueue>>,
    /// The worker processes running the tasks (driver of a distributed job).
    pub(crate) remote: Option<RemoteAttempt>,
    /// The newest checkpoint announced to the loop heads.
    pub(crate) announced: std::cell::Cell<u64>,
}

impl Attempt {
    pub(crate) fn deliver(&self, out: &mut Vec<Outgoing>) {
        for msg in out.drain(..) {
            match msg {
                Outgoing::Trigger { task, barrier } => {
                    self.announce_to_loop_heads(task, barrier.id);
                    self.controls[task].send(Control::TriggerCheckpoint(barrier));
                }
                Outgoing::StopSource { task, barrier } => {
                    if let Some(b) = &barrier {
                        self.announce_to_loop_heads(task, b.id);
                    }
                    self.controls[task].send(Control::StopSource(barrier));
                }
                Outgoing::Notify { checkpoint } => {
                    for c in &self.controls {
                        c.send(Control::NotifyComplete(checkpoint));
                    }
                }
                Outgoing::Abort { checkpoint } => {
                    for c in &self.controls {
                        c.send(Control::AbortCheckpoint(checkpoint));
                    }
                }
                Outgoing::Finalize => {
                    for c in &self.controls {
                        c.send(Control::Finalize {
                            commit_end_of_job: false,
                        });
                    }
                }
            }
        }
    }
}

impl Attempt {
    /// A checkpoint is triggered at source task `task`: every loop head
    /// learns that its barrier is coming, so it reads its input first until
    /// the barrier arrived (see [`Control::ExpectBarrier`]). Once per
    /// checkpoint.
    pub(crate) fn announce_to_loop_heads(&self, task: usize, checkpoint: u64) {
        if !self.tasks[task].is_source || self.announced.get() >= checkpoint {
            return;
        }
        self.announced.set(checkpoint);
        for (t, info) in self.tasks.iter().enumerate() {
            if info.loop_head {
                self.controls[t].send(Control::ExpectBarrier(checkpoint));
            }
        }
    }

    pub(crate) fn cancel_and_join(self) {
        for c in &self.controls {
            c.send(Control::Cancel);
        }
        let _ = self.join_local();
    }

    /// The control senders of this process's tasks, by task id.
    pub(crate) fn local_controls(&self) -> Vec<Option<Sender<Control>>> {
        self.controls
            .iter()
            .map(|c| match c {
                ControlPort::Local(s) => Some(s.clone()),
                _ => None,
            })
            .collect()
    }

    /// Waits for this process's task threads and closes the loops' queues.
    pub(crate) fn join_local(self) -> Result<()> {
        drop(self.controls);
        for t in self.threads {
            let _ = t.join();
        }
        let mut result = Ok(());
        for q in &self.queues {
            if let Err(e) = q.close() {
                result = Err(e);
            }
        }
        result
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn build_attempt(
    graph: &JobGraph,
    plan: &Plan,
    config: &JobConfig,
    shared: &Shared,
    attempt: u32,
    mode: AlignmentMode,
    restored: Option<&RestoredCheckpoint>,
    recompute: &AttemptRecompute,
    place: &mut Placement<'_>,
) -> Result<Attempt> {
    let max_p = graph.max_parallelism;
    let flow_policy = FlowPolicy::for_job(
        config.in_flight_target,
        config.checkpoint.as_ref().map(|c| c.interval),
    );
    // Channels: for every edge into a chain head, one channel per connected
    // (producer subtask, consumer subtask) pair.
    let n_chains = plan.chains.len();
    let mut outputs: Vec<Vec<TaskOutput>> = plan
        .chains
        .iter()
        .map(|c| (0..c.parallelism).map(|_| TaskOutput::default()).collect())
        .collect();
    let mut inputs: Vec<Vec<Vec<InputChannel>>> = plan
        .chains
        .iter()
        .map(|c| (0..c.parallelism).map(|_| Vec::new()).collect())
        .collect();
    // Channels are numbered in this (deterministic) order in every process.
    let mut channel_id: u32 = 0;
    for (ci, chain) in plan.chains.iter().enumerate() {
        let head = &graph.nodes[chain.nodes[0]];
        if matches!(head.kind, NodeKind::Source(_)) {
            continue;
        }
        for edge in &head.inputs {
            let from_chain = plan.chain_of[edge.from];
            let up_p = plan.chains[from_chain].parallelism;
            let down_p = chain.parallelism;
            #[allow(clippy::needless_range_loop)] // `up` is also the forward target
            for up in 0..up_p {
                let targets: Vec<usize> = match edge.partitioning {
                    Partitioning::Forward => vec![up],
                    _ => (0..down_p).collect(),
                };
                let up_here = place.owns(up);
                let mut senders = Vec::with_capacity(targets.len());
                for down in targets {
                    let id = channel_id;
                    channel_id += 1;
                    let down_here = place.owns(down);
                    let (rx, credit) = match (up_here, down_here) {
                        (true, true) => {
                            let (tx, rx) = bounded(config.channel_capacity, MIN_BUDGET_BYTES);
                            senders.push(OutSender::Channel(tx));
                            (rx, None)
                        }
                        (true, false) => {
                            let to = place.owner(down);
                            let tx = place.plane()?.outbound(to, id);
                            senders.push(OutSender::Remote(Box::new(tx)));
                            continue;
                        }
                        (false, true) => {
                            let from = place.owner(up);
                            let (rx, credit) = place.plane()?.inbound(from, id);
                            (rx, Some(credit))
                        }
                        (false, false) => continue,
                    };
                    inputs[ci][down].push(InputChannel {
                        rx,
                        credit,
                        input: edge.input,
                        ended: false,
                        blocked: false,
                        watermark: i64::MIN,
                        idle: false,
                    });
                }
                if !up_here {
                    continue;
                }
                let consumers = senders.len();
                outputs[from_chain][up].edges.push(OutputEdge {
                    partitioner: Partitioner::new(
                        &head.name,
                        edge.partitioning.clone(),
                        consumers,
                        max_p,
                        up,
                    ),
                    senders,
                    port: edge.port,
                });
            }
        }
    }
    // Feedback edges (FLIP-15): one never-blocking queue per (tail subtask,
    // head subtask) pair; forward when the parallelisms match, else every
    // tail subtask writes to every head subtask round-robin.
    let mut all_queues: Vec<Arc<FeedbackQueue>> = Vec::new();
    let mut head_queues: HashMap<usize, Vec<Vec<Arc<FeedbackQueue>>>> = HashMap::new();
    for l in &graph.loops {
        let head_chain = plan.chain_of[l.head];
        let tail_chain = plan.chain_of[l.tail];
        let head_name = &graph.nodes[l.head].name;
        if plan.chains[head_chain].nodes[0] != l.head
            || plan.chains[tail_chain].nodes.last() != Some(&l.tail)
        {
            return Err(Error::graph(
                head_name,
                "internal: a loop head must start its chain and a loop tail must end its chain",
            ));
        }
        let hp = plan.chains[head_chain].parallelism;
        let tp = plan.chains[tail_chain].parallelism;
        let forward = hp == tp;
        let writers = if forward { 1 } else { tp };
        let spill_dir = l
            .spill_dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("eddyline-spill"));
        let per_queue = (l.feedback_memory / writers).max(1);
        let queues: Vec<Vec<Arc<FeedbackQueue>>> = (0..hp)
            .map(|h| {
                (0..writers)
                    .map(|w| {
                        let q = Arc::new(FeedbackQueue::new(
                            format!("{head_name} {h} from {}", if forward { h } else { w }),
                            spill_dir.clone(),
                            per_queue,
                        ));
                        all_queues.push(q.clone());
                        q
                    })
                    .collect()
            })
            .collect();
        for (t, out) in outputs[tail_chain].iter_mut().enumerate() {
            let senders: Vec<OutSender> = if forward {
                vec![OutSender::Feedback(queues[t][0].clone())]
            } else {
                (0..hp)
                    .map(|h| OutSender::Feedback(queues[h][t].clone()))
                    .collect()
            };
            let partitioning = if forward {
                Partitioning::Forward
            } else {
                Partitioning::Rebalance
            };
            let consumers = senders.len();
            out.edges.push(OutputEdge {
                partitioner: Partitioner::new(head_name, partitioning, consumers, max_p, t),
                senders,
                port: 0,
            });
        }
        head_queues.insert(l.head, queues);
    }
    // Task ids are assigned chain by chain, subtask by subtask.
    let mut first_task = Vec::with_capacity(n_chains);
    let mut next_task = 0;
    for chain in &plan.chains {
        first_task.push(next_task);
        next_task += chain.parallelism;
    }
    let predecessors = |ci: usize, subtask: usize| -> Vec<usize> {
        let head = &graph.nodes[plan.chains[ci].nodes[0]];
        let mut out = Vec::new();
        for edge in &head.inputs {
            let from_chain = plan.chain_of[edge.from];
            let up_p = plan.chains[from_chain].parallelism;
            if edge.partitioning == Partitioning::Forward {
                out.push(first_task[from_chain] + subtask);
            } else {
                out.extend((0..up_p).map(|u| first_task[from_chain] + u));
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    };
    let (report_tx, report_rx) = unbounded();
    let mut controls = Vec::new();
    let mut tasks = Vec::new();
    let mut infos = Vec::new();
    for ci in 0..n_chains {
        let chain = &plan.chains[ci];
        let p = chain.parallelism;
        let mut chain_outputs = std::mem::take(&mut outputs[ci]).into_iter();
        let mut chain_inputs = std::mem::take(&mut inputs[ci]).into_iter();
        for subtask in 0..p {
            let head_node = &graph.nodes[chain.nodes[0]];
            let info = TaskInfo {
                name: chain
                    .nodes
                    .iter()
                    .map(|n| graph.nodes[*n].name.as_str())
                    .collect::<Vec<_>>()
                    .join(" -> "),
                nodes: chain.nodes.clone(),
                subtask,
                is_source: matches!(head_node.kind, NodeKind::Source(_)),
                loop_head: graph.loop_with_head(chain.nodes[0]).is_some(),
                predecessors: predecessors(ci, subtask),
            };
            let task_output = chain_outputs.next().unwrap_or_default();
            let task_inputs: Vec<InputChannel> = chain_inputs.next().unwrap_or_default();
            if !place.owns(subtask) {
                controls.push(ControlPort::Absent);
                infos.push(info);
                continue;
            }
            let ctx_of = |node: usize| OperatorContext {
                name: graph.nodes[node].name.clone(),
                uid: graph.nodes[node].uid.clone(),
                subtask_index: subtask,
                parallelism: p,
                max_parallelism: max_p,
                key_groups: key_group_range(subtask, p, max_p),
                attempt,
            };
            let mut source = None;
            let mut source_context = None;
            let mut ops = Vec::new();
            let mut slots = Vec::new();
            let mut contexts = Vec::new();
            let mut node_ids = Vec::new();
            let mut restore = TaskRestore {
                finished: restored.is_some_and(|rc| all_finished(rc, graph, &chain.nodes))
                    && !recompute.replays_chain(graph, &chain.nodes),
                ..TaskRestore::default()
            };
            for &node_id in &chain.nodes {
                let node = &graph.nodes[node_id];
                let ctx = ctx_of(node_id);
                let slot = OpSlot {
                    name: Arc::from(node.name.as_str()),
                    metrics: shared.metrics.nodes[node_id].2.clone(),
                    schema: node.output_schema.clone(),
                    late: 0,
                    replay_drop: false,
                };
                let state = match restored {
                    Some(rc) => state_for(rc, graph, node, subtask, p, ctx.key_groups.clone())?,
                    None => None,
                };
                match &node.kind {
                    NodeKind::Source(f) => {
                        let reader = f
                            .create(&ctx, config.batch_size)
                            .map_err(|e| e.in_operator(&node.name))?;
                        source = Some(SourceHead {
                            reader,
                            slot,
                            node: node_id,
                            sized: config.checkpoint.as_ref().is_none_or(|c| {
                                c.recovery != crate::checkpoint::recompute::Recovery::Recompute
                            }),
                            row_bytes: 0,
                        });
                        source_context = Some(ctx);
                        restore.source_offset = match recompute.source_start(&node.uid, subtask) {
                            Some(start) => start,
                            None => state
                                .and_then(|s| s.operator)
                                .and_then(|b| b.as_bytes().map(<[u8]>::to_vec)),
                        };
                    }
                    NodeKind::Operator(f) => {
                        ops.push(f.create(&ctx).map_err(|e| e.in_operator(&node.name))?);
                        slots.push(slot);
                        contexts.push(ctx);
                        node_ids.push(node_id);
                        restore.states.push(state);
                    }
                }
            }
            let (ctl_tx, ctl_rx) = unbounded();
            controls.push(ControlPort::Local(ctl_tx));
            let loop_head = match graph.loop_with_head(chain.nodes[0]) {
                Some(l) => {
                    let queues = head_queues
                        .get(&l.head)
                        .and_then(|q| q.get(subtask))
                        .cloned()
                        .unwrap_or_default();
                    Some(Box::new(LoopHead::new(
                        l.id,
                        Arc::from(head_node.name.as_str()),
                        queues,
                        l.priority,
                        l.co,
                        task_inputs.len(),
                        l.feedback_memory,
                        l.spill_dir
                            .clone()
                            .unwrap_or_else(|| std::env::temp_dir().join("eddyline-spill")),
                        shared.metrics.nodes[l.head].2.clone(),
                    )))
                }
                None => None,
            };
            let body_term = (!head_node.scope.is_root() && loop_head.is_none())
                .then(|| BodyTermination::new(task_inputs.len()));
            let id = infos.len();
            infos.push(info);
            tasks.push(Task {
                id,
                source,
                source_context,
                ops,
                slots,
                contexts,
                aligner: BarrierAligner::new(task_inputs.len(), mode),
                inputs: task_inputs,
                num_logical_inputs: graph.num_inputs(chain.nodes[0]).max(1),
                output: task_output,
                control: ctl_rx,
                reports: report_tx.clone(),
                recompute: recompute.for_task(graph, &chain.nodes, &node_ids, subtask),
                node_ids,
                restore,
                scope: head_node.scope.loop_path(),
                body_term,
                loop_head,
                flow: std::cell::RefCell::new(InputFlow::new(flow_policy, Instant::now())),
            });
        }
    }
    drop(report_tx);
    let mut threads = Vec::new();
    for task in tasks {
        let name = format!("eddyline-task-{}", task.id);
        match std::thread::Builder::new()
            .name(name)
            .spawn(move || task.run())
        {
            Ok(h) => threads.push(h),
            Err(e) => {
                let run = Attempt {
                    controls,
                    threads,
                    reports: report_rx,
                    tasks: infos,
                    queues: all_queues,
                    remote: None,
                    announced: std::cell::Cell::new(0),
                };
                run.cancel_and_join();
                return Err(Error::runtime(format!("cannot start a task thread: {e}")));
            }
        }
    }
    Ok(Attempt {
        controls,
        threads,
        reports: report_rx,
        tasks: infos,
        queues: all_queues,
        remote: None,
        announced: std::cell::Cell::new(0),
    })
}
