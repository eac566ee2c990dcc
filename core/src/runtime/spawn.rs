//! One attempt of a job: which process runs which subtask ([`Placement`]),
//! where each task's control messages go ([`ControlPort`]), and
//! [`build_attempt`], which wires the channels and feedback queues of the
//! plan, constructs the tasks and starts their threads (DESIGN.md
//! "Runtime"). Used by the driver's supervisor and by every worker process.

use std::cell::RefCell;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{unbounded, Receiver, Sender};

use crate::barrier::{AlignmentMode, BarrierAligner};
use crate::channel::{bounded, EventReceiver, FlowPolicy, InputFlow, MIN_BUDGET_BYTES};
use crate::checkpoint::channel_rescale::{redistribute, EdgeShape, SubtaskChannels};
use crate::checkpoint::coordinator::{Outgoing, TaskInfo};
use crate::checkpoint::restore::{all_finished, state_for};
use crate::checkpoint::RestoredCheckpoint;
use crate::error::{Error, Result};
use crate::feedback::FeedbackQueue;
use crate::graph::{JobGraph, NodeKind};
use crate::keygroup::key_group_range;
use crate::net::data::{CreditReturn, DataPlane};
use crate::operator::OperatorContext;
use crate::partition::{Partitioner, Partitioning};
use crate::runtime::config::JobConfig;
use crate::runtime::dist::driver::{RemoteAttempt, WorkerLink};
use crate::runtime::plan::Plan;
use crate::runtime::replay::AttemptRecompute;
use crate::runtime::status::Shared;
use crate::runtime::task::loop_head::LoopHead;
use crate::runtime::task::{
    Chained, Control, InputChannel, OpSlot, OutSender, OutputEdge, SourceHead, Task, TaskKind,
    TaskOutput, TaskReport, TaskRestore,
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
                // Err: the task ended already; a control for it is moot.
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
        if let Err(e) = self.join_local() {
            // The attempt ends with its own cause; this one is only logged.
            eprintln!("eddyline: closing the loops' feedback queues after a cancel failed: {e}");
        }
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
            // A task catches its own panics and reports them as its failure
            // (`Task::run`): a join error has no cause left to report.
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

/// The channels and feedback queues of one attempt, by chain and subtask.
struct Wiring {
    outputs: Vec<Vec<TaskOutput>>,
    inputs: Vec<Vec<Vec<InputChannel>>>,
    /// Every feedback queue (closed when the attempt ends).
    queues: Vec<Arc<FeedbackQueue>>,
    /// The feedback queues of each loop head node, by head subtask.
    head_queues: HashMap<usize, Vec<Vec<Arc<FeedbackQueue>>>>,
}

/// The operators of one task's chain, ready to run, and what they restore.
#[derive(Default)]
struct ChainParts {
    source: Option<Box<SourceHead>>,
    chain: Vec<Chained>,
    restore: TaskRestore,
}

/// What every step of building an attempt reads.
struct AttemptBuilder<'a> {
    graph: &'a JobGraph,
    plan: &'a Plan,
    config: &'a JobConfig,
    shared: &'a Shared,
    attempt: u32,
    mode: AlignmentMode,
    restored: Option<&'a RestoredCheckpoint>,
    recompute: &'a AttemptRecompute,
    /// Restored channel state dealt out to another parallelism, by chain.
    channel_state: RefCell<HashMap<usize, Vec<Option<SubtaskChannels>>>>,
}

/// Builds the channels, feedback queues and tasks of one attempt and starts
/// the tasks this process owns on their own threads.
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
    let b = AttemptBuilder {
        graph,
        plan,
        config,
        shared,
        attempt,
        mode,
        restored,
        recompute,
        channel_state: Default::default(),
    };
    let mut wiring = b.wire_channels(place)?;
    b.wire_feedback(&mut wiring)?;
    let first_task = first_task_ids(plan);
    let (report_tx, report_rx) = unbounded();
    let mut controls = Vec::new();
    let mut tasks = Vec::new();
    let mut infos = Vec::new();
    for (ci, chain) in plan.chains.iter().enumerate() {
        let mut chain_outputs = std::mem::take(&mut wiring.outputs[ci]).into_iter();
        let mut chain_inputs = std::mem::take(&mut wiring.inputs[ci]).into_iter();
        for subtask in 0..chain.parallelism {
            let info = b.task_info(ci, subtask, &first_task);
            let output = chain_outputs.next().unwrap_or_default();
            let inputs = chain_inputs.next().unwrap_or_default();
            if !place.owns(subtask) {
                controls.push(ControlPort::Absent);
                infos.push(info);
                continue;
            }
            let (ctl_tx, ctl_rx) = unbounded();
            controls.push(ControlPort::Local(ctl_tx));
            let channels = TaskChannels {
                id: infos.len(),
                output,
                inputs,
                control: ctl_rx,
                reports: report_tx.clone(),
            };
            infos.push(info);
            tasks.push(b.task(ci, subtask, channels, &wiring.head_queues)?);
        }
    }
    drop(report_tx);
    let run = Attempt {
        controls,
        threads: Vec::new(),
        reports: report_rx,
        tasks: infos,
        queues: wiring.queues,
        remote: None,
        announced: std::cell::Cell::new(0),
    };
    spawn_tasks(run, tasks)
}

/// The channels of one task.
struct TaskChannels {
    id: usize,
    output: TaskOutput,
    inputs: Vec<InputChannel>,
    control: Receiver<Control>,
    reports: Sender<TaskReport>,
}

/// Starts one thread per task; a thread that cannot start cancels the rest.
fn spawn_tasks(mut run: Attempt, tasks: Vec<Task>) -> Result<Attempt> {
    for task in tasks {
        let name = format!("eddyline-task-{}", task.id);
        match std::thread::Builder::new()
            .name(name)
            .spawn(move || task.run())
        {
            Ok(h) => run.threads.push(h),
            Err(e) => {
                run.cancel_and_join();
                return Err(Error::runtime(format!("cannot start a task thread: {e}")));
            }
        }
    }
    Ok(run)
}

/// Task ids are assigned chain by chain, subtask by subtask: the first id of
/// each chain.
fn first_task_ids(plan: &Plan) -> Vec<usize> {
    let mut first_task = Vec::with_capacity(plan.chains.len());
    let mut next_task = 0;
    for chain in &plan.chains {
        first_task.push(next_task);
        next_task += chain.parallelism;
    }
    first_task
}

impl AttemptBuilder<'_> {
    /// Channels: for every edge into a chain head, one channel per connected
    /// (producer subtask, consumer subtask) pair, numbered in the same
    /// (deterministic) order in every process; a pair split between two
    /// processes goes over the data plane.
    fn wire_channels(&self, place: &mut Placement<'_>) -> Result<Wiring> {
        let (graph, plan, config) = (self.graph, self.plan, self.config);
        let mut wiring = Wiring {
            outputs: plan
                .chains
                .iter()
                .map(|c| (0..c.parallelism).map(|_| TaskOutput::default()).collect())
                .collect(),
            inputs: plan
                .chains
                .iter()
                .map(|c| (0..c.parallelism).map(|_| Vec::new()).collect())
                .collect(),
            queues: Vec::new(),
            head_queues: HashMap::new(),
        };
        let mut channel_id: u32 = 0;
        for (ci, chain) in plan.chains.iter().enumerate() {
            let head = &graph.nodes[chain.nodes[0]];
            if matches!(head.kind, NodeKind::Source(_)) {
                continue;
            }
            for edge in &head.inputs {
                let from_chain = plan.chain_of[edge.from];
                for up in 0..plan.chains[from_chain].parallelism {
                    let targets: Vec<usize> = match edge.partitioning {
                        Partitioning::Forward => vec![up],
                        _ => (0..chain.parallelism).collect(),
                    };
                    let mut senders = Vec::with_capacity(targets.len());
                    for down in targets {
                        let id = channel_id;
                        channel_id += 1;
                        let Some((rx, credit)) =
                            self.channel(place, up, down, id, &mut senders, config)?
                        else {
                            continue;
                        };
                        wiring.inputs[ci][down].push(InputChannel {
                            rx,
                            credit,
                            input: edge.input,
                            ended: false,
                            blocked: false,
                            watermark: i64::MIN,
                            idle: false,
                            pending: Default::default(),
                            last_barrier: 0,
                            announced: 0,
                            restored: 0,
                        });
                    }
                    if !place.owns(up) {
                        continue;
                    }
                    let partitioner = Partitioner::new(
                        &head.name,
                        edge.partitioning.clone(),
                        senders.len(),
                        graph.max_parallelism,
                        up,
                    );
                    wiring.outputs[from_chain][up].edges.push(OutputEdge {
                        partitioner,
                        senders,
                        port: edge.port,
                    });
                }
            }
        }
        Ok(wiring)
    }

    /// Channel `id` from subtask `up` to subtask `down`: its sending end goes
    /// to `senders` when `up` runs here; its receiving end (and the credit
    /// return of a remote one) is returned when `down` runs here.
    fn channel(
        &self,
        place: &mut Placement<'_>,
        up: usize,
        down: usize,
        id: u32,
        senders: &mut Vec<OutSender>,
        config: &JobConfig,
    ) -> Result<Option<(EventReceiver, Option<CreditReturn>)>> {
        Ok(match (place.owns(up), place.owns(down)) {
            (true, true) => {
                let (tx, rx) = bounded(config.channel_capacity, MIN_BUDGET_BYTES);
                senders.push(OutSender::Channel(tx));
                Some((rx, None))
            }
            (true, false) => {
                let to = place.owner(down);
                let tx = place.plane()?.outbound(to, id);
                senders.push(OutSender::Remote(Box::new(tx)));
                None
            }
            (false, true) => {
                let from = place.owner(up);
                let (rx, credit) = place.plane()?.inbound(from, id);
                Some((rx, Some(credit)))
            }
            (false, false) => None,
        })
    }

    /// Feedback edges (FLIP-15): one never-blocking queue per (tail subtask,
    /// head subtask) pair; forward when the parallelisms match, else every
    /// tail subtask writes to every head subtask round-robin.
    fn wire_feedback(&self, wiring: &mut Wiring) -> Result<()> {
        let (graph, plan) = (self.graph, self.plan);
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
                            let from = if forward { h } else { w };
                            let name = format!("{head_name} {h} from {from}");
                            let q =
                                Arc::new(FeedbackQueue::new(name, spill_dir.clone(), per_queue));
                            wiring.queues.push(q.clone());
                            q
                        })
                        .collect()
                })
                .collect();
            for (t, out) in wiring.outputs[tail_chain].iter_mut().enumerate() {
                let (senders, partitioning): (Vec<OutSender>, _) = if forward {
                    let q = queues[t][0].clone();
                    (vec![OutSender::Feedback(q)], Partitioning::Forward)
                } else {
                    let all = (0..hp).map(|h| OutSender::Feedback(queues[h][t].clone()));
                    (all.collect(), Partitioning::Rebalance)
                };
                let consumers = senders.len();
                let max_p = graph.max_parallelism;
                out.edges.push(OutputEdge {
                    partitioner: Partitioner::new(head_name, partitioning, consumers, max_p, t),
                    senders,
                    port: 0,
                });
            }
            wiring.head_queues.insert(l.head, queues);
        }
        Ok(())
    }

    /// What the coordinator knows of subtask `subtask` of chain `ci`.
    fn task_info(&self, ci: usize, subtask: usize, first_task: &[usize]) -> TaskInfo {
        let (graph, plan) = (self.graph, self.plan);
        let chain = &plan.chains[ci];
        let head_node = &graph.nodes[chain.nodes[0]];
        let mut predecessors = Vec::new();
        for edge in &head_node.inputs {
            let from_chain = plan.chain_of[edge.from];
            let up_p = plan.chains[from_chain].parallelism;
            if edge.partitioning == Partitioning::Forward {
                predecessors.push(first_task[from_chain] + subtask);
            } else {
                predecessors.extend((0..up_p).map(|u| first_task[from_chain] + u));
            }
        }
        predecessors.sort_unstable();
        predecessors.dedup();
        TaskInfo {
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
            predecessors,
        }
    }

    /// The operators of subtask `subtask` of chain `ci`, created, with the
    /// state each restores.
    fn chain_parts(&self, ci: usize, subtask: usize) -> Result<ChainParts> {
        let (graph, config) = (self.graph, self.config);
        let chain = &self.plan.chains[ci];
        let (p, max_p) = (chain.parallelism, graph.max_parallelism);
        let mut parts = ChainParts {
            restore: TaskRestore {
                finished: self
                    .restored
                    .is_some_and(|rc| all_finished(rc, graph, &chain.nodes))
                    && !self.recompute.replays_chain(graph, &chain.nodes),
                ..TaskRestore::default()
            },
            ..ChainParts::default()
        };
        for &node_id in &chain.nodes {
            let node = &graph.nodes[node_id];
            let ctx = OperatorContext {
                name: node.name.clone(),
                uid: node.uid.clone(),
                subtask_index: subtask,
                parallelism: p,
                max_parallelism: max_p,
                key_groups: key_group_range(subtask, p, max_p),
                attempt: self.attempt,
            };
            let slot = OpSlot {
                name: Arc::from(node.name.as_str()),
                metrics: self.shared.metrics.nodes[node_id].2.clone(),
                sub: Default::default(),
                schema: node.output_schema.clone(),
                agreement: node.output_schema.is_none().then(|| {
                    crate::schemas::SchemaAgreement::new(node_id, self.shared.schemas.clone())
                }),
                late: 0,
                replay_drop: false,
            };
            let state = match self.restored {
                Some(rc) => state_for(rc, graph, node, subtask, p, ctx.key_groups.clone())?,
                None => None,
            };
            match &node.kind {
                NodeKind::Source(f) => {
                    let reader = f
                        .create(&ctx, config.batch_size)
                        .map_err(|e| e.in_operator(&node.name))?;
                    let recomputes = config.checkpoint.as_ref().is_some_and(|c| {
                        c.recovery == crate::checkpoint::recompute::Recovery::Recompute
                    });
                    parts.source = Some(Box::new(SourceHead {
                        reader,
                        slot,
                        context: ctx,
                        node: node_id,
                        sized: !recomputes,
                        row_bytes: 0,
                    }));
                    parts.restore.source_offset =
                        match self.recompute.source_start(&node.uid, subtask) {
                            Some(start) => start,
                            None => state
                                .and_then(|s| s.operator)
                                .and_then(|b| b.as_bytes().map(<[u8]>::to_vec)),
                        };
                }
                NodeKind::Operator(f) => {
                    let mut op = f.create(&ctx).map_err(|e| e.in_operator(&node.name))?;
                    if node.output_schema.is_none() {
                        op.set_schema_agreement(crate::schemas::SchemaAgreement::new(
                            node_id,
                            self.shared.schemas.clone(),
                        ));
                    }
                    parts.chain.push(Chained {
                        op,
                        slot,
                        context: ctx,
                        node: node_id,
                    });
                    parts.restore.states.push(state);
                }
            }
        }
        if let Some(rc) = self.restored {
            parts.restore.channels =
                restored_channels(rc, graph, self.plan, ci, subtask, &self.channel_state)?;
        }
        Ok(parts)
    }

    /// The loop head state of subtask `subtask` when chain `ci` heads a loop.
    fn loop_head(
        &self,
        ci: usize,
        subtask: usize,
        inputs: usize,
        head_queues: &HashMap<usize, Vec<Vec<Arc<FeedbackQueue>>>>,
    ) -> Option<Box<LoopHead>> {
        let head = self.plan.chains[ci].nodes[0];
        let l = self.graph.loop_with_head(head)?;
        let queues = head_queues
            .get(&l.head)
            .and_then(|q| q.get(subtask))
            .cloned()
            .unwrap_or_default();
        Some(Box::new(
            LoopHead::new(
                l.id,
                Arc::from(self.graph.nodes[head].name.as_str()),
                queues,
                l.priority,
                l.co,
                inputs,
                l.feedback_memory,
                l.spill_dir
                    .clone()
                    .unwrap_or_else(|| std::env::temp_dir().join("eddyline-spill")),
                self.shared.metrics.nodes[l.head].2.clone(),
            )
            .observed_by(self.shared.metrics.nodes[l.head].2.subtask(subtask)),
        ))
    }

    /// Subtask `subtask` of chain `ci`, ready to run on its own thread.
    fn task(
        &self,
        ci: usize,
        subtask: usize,
        channels: TaskChannels,
        head_queues: &HashMap<usize, Vec<Vec<Arc<FeedbackQueue>>>>,
    ) -> Result<Task> {
        let graph = self.graph;
        let chain = &self.plan.chains[ci];
        let head_node = &graph.nodes[chain.nodes[0]];
        let parts = self.chain_parts(ci, subtask)?;
        let inputs = channels.inputs.len();
        let kind = match (
            parts.source,
            self.loop_head(ci, subtask, inputs, head_queues),
        ) {
            (Some(source), _) => TaskKind::Source(source),
            (None, Some(head)) => TaskKind::LoopHead(head),
            (None, None) => TaskKind::Channels {
                body_term: (!head_node.scope.is_root()).then(|| BodyTermination::new(inputs)),
            },
        };
        let op_nodes: Vec<usize> = parts.chain.iter().map(|c| c.node).collect();
        let flow_policy = FlowPolicy::for_job(
            self.config.in_flight_target,
            self.config.checkpoint.as_ref().map(|c| c.interval),
        );
        Ok(Task {
            id: channels.id,
            kind,
            chain: parts.chain,
            aligner: BarrierAligner::new(inputs, self.mode),
            inputs: channels.inputs,
            num_logical_inputs: graph.num_inputs(chain.nodes[0]).max(1),
            output: channels.output,
            control: channels.control,
            reports: channels.reports,
            recompute: self
                .recompute
                .for_task(graph, &chain.nodes, &op_nodes, subtask),
            restore: parts.restore,
            scope: head_node.scope.loop_path(),
            flow: std::cell::RefCell::new(InputFlow::new(flow_policy, Instant::now())),
            unaligned: Default::default(),
            aligned_timeout: self
                .config
                .checkpoint
                .as_ref()
                .filter(|c| c.unaligned)
                .and_then(|c| c.aligned_timeout),
        })
    }
}

/// The channel state subtask `subtask` of chain `ci` (headed by `head`, at
/// `parallelism`) restores from an unaligned checkpoint (FLIP-76), if it
/// has any. At the parallelisms of the checkpoint each subtask gets back
/// what it captured, unless the chain reads a broadcast edge; at others, or
/// with a broadcast edge, the captured data of every old subtask is dealt
/// out by the input edges' partitioning
/// ([`crate::checkpoint::channel_rescale`]), once per chain (`cache`).
fn restored_channels(
    rc: &crate::checkpoint::RestoredCheckpoint,
    graph: &JobGraph,
    plan: &Plan,
    ci: usize,
    subtask: usize,
    cache: &RefCell<HashMap<usize, Vec<Option<SubtaskChannels>>>>,
) -> Result<Option<SubtaskChannels>> {
    use crate::checkpoint::channel_state::{channel_state_uid, decode};
    let chain = &plan.chains[ci];
    let (head, parallelism) = (&graph.nodes[chain.nodes[0]], chain.parallelism);
    for &n in &chain.nodes[1..] {
        refuse_chained_channel_state(rc, &graph.nodes[n], head)?;
    }
    let uid = channel_state_uid(&head.uid);
    let Some(entry) = rc.manifest().operator(&uid) else {
        return Ok(None);
    };
    let old_p = entry.subtasks.len();
    let decoded = |s: usize| -> Result<Option<SubtaskChannels>> {
        rc.state(&uid, s as u32)
            .and_then(|st| st.operator.as_ref())
            .map(|b| b.to_bytes())
            .transpose()?
            .map(|bytes| decode(&head.name, &bytes))
            .transpose()
    };
    let mut edges = Vec::with_capacity(head.inputs.len());
    for edge in &head.inputs {
        let producer = &graph.nodes[edge.from];
        let old_producers = rc
            .manifest()
            .operator(&producer.uid)
            .map(|e| e.subtasks.len())
            .ok_or_else(|| {
                Error::checkpoint(
                    Some(rc.dir().to_path_buf()),
                    format!(
                        "checkpoint {} holds in-flight data of operator '{}' read from \
                         operator '{}' (uid '{}'), which the checkpoint does not know: the \
                         in-flight data cannot be dealt out without its parallelism",
                        rc.id(),
                        head.name,
                        producer.name,
                        producer.uid
                    ),
                )
            })?;
        edges.push(EdgeShape {
            partitioning: edge.partitioning.clone(),
            old_producers,
            new_producers: plan.chains[plan.chain_of[edge.from]].parallelism,
        });
    }
    // A subtask restores the broadcast state of one old subtask (restore.rs
    // `broadcast_source`; docs/DESIGN.md "Unaligned checkpoints"), so the
    // broadcast rows in flight it replays must be that subtask's too, at
    // the old parallelism as at any other: another's would miss or repeat
    // the rows the two copies differ by.
    let broadcast = edges
        .iter()
        .any(|e| e.partitioning == Partitioning::Broadcast);
    let rescaled = old_p != parallelism || edges.iter().any(|e| e.old_producers != e.new_producers);
    if !rescaled && !broadcast {
        return decoded(subtask);
    }
    let mut cache = cache.borrow_mut();
    let dealt = match cache.entry(ci) {
        std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
        std::collections::hash_map::Entry::Vacant(v) => {
            let old = (0..old_p).map(decoded).collect::<Result<Vec<_>>>()?;
            let from = (0..parallelism)
                .map(|n| crate::checkpoint::restore::broadcast_source(rc, head, n, old_p))
                .collect::<Result<Vec<_>>>()?;
            let dealt = redistribute(
                &head.name,
                &edges,
                old,
                parallelism,
                graph.max_parallelism,
                &from,
            )
            .map_err(|e| match e {
                Error::Checkpoint {
                    path: None,
                    message,
                } => Error::checkpoint(Some(rc.dir().to_path_buf()), message),
                other => other,
            })?;
            v.insert(dealt)
        }
    };
    Ok(dealt.get_mut(subtask).and_then(Option::take))
}

/// Channel state is replayed into the input channels of a chain head. The
/// plan of a restoring run never chains an operator with restored channel
/// state ([`Plan::for_restore`]); should a plan built otherwise chain one
/// behind `head`, it would have no input channels to replay into, and the
/// restore is refused, naming it, rather than dropping the data.
fn refuse_chained_channel_state(
    rc: &crate::checkpoint::RestoredCheckpoint,
    node: &crate::graph::Node,
    head: &crate::graph::Node,
) -> Result<()> {
    let uid = crate::checkpoint::channel_state::channel_state_uid(&node.uid);
    if !rc.subtask_states(&uid).any(|(_, s)| !s.is_empty()) {
        return Ok(());
    }
    Err(Error::checkpoint(
        Some(rc.dir().to_path_buf()),
        format!(
            "internal: checkpoint {} holds in-flight data (channel state) of operator '{}' \
             (uid '{}'), which the plan chains behind operator '{}', with no input channels \
             to replay it into",
            rc.id(),
            node.name,
            node.uid,
            head.name,
        ),
    ))
}
