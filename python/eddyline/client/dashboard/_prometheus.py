"""``/metrics``: a job's metrics in the Prometheus text format.

A ``prometheus_client`` custom collector reads one :class:`~._model.Sample`
per scrape; counters are the job's own totals (so a scrape agrees with
``client.metrics()``), gauges the current rates and watermarks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from ._model import JobView

__all__ = ["registry_for"]

_OP = ["job", "operator", "operator_id"]
_SUB = [*_OP, "subtask"]


class _JobCollector(Collector):
    def __init__(self, view: JobView) -> None:
        self._view = view

    def collect(self) -> Iterator[Metric]:
        view = self._view
        sample = view.sample()
        job = view.job.name
        counters = {
            key: CounterMetricFamily(f"eddyline_operator_{key}", doc, labels=_OP)
            for key, doc in (
                ("records_in", "Rows the operator took in."),
                ("records_out", "Rows the operator emitted."),
                ("batches_in", "Batches the operator took in."),
                ("batches_out", "Batches the operator emitted."),
                ("late_records", "Late rows the operator dropped."),
                ("spilled_bytes", "Loop heads: feedback bytes spilled to disk."),
            )
        }
        sub_counters = {
            key: CounterMetricFamily(f"eddyline_subtask_{key}_seconds", doc, labels=_SUB)
            for key, doc in (
                ("busy", "Time the subtask computed."),
                ("backpressured", "Time the subtask was blocked on a full output channel."),
                ("idle", "Time the subtask waited for input."),
            )
        }
        sub_rows = {
            key: CounterMetricFamily(
                f"eddyline_subtask_{key}", f"Rows of the subtask ({key}).", labels=_SUB
            )
            for key in ("records_in", "records_out")
        }
        # Loop heads only (DESIGN.md "Loops"): gauges of the current attempt.
        loops = {
            key: GaugeMetricFamily(f"eddyline_loop_{key}", doc, labels=_SUB)
            for key, doc in (
                ("feedback_queue_events", "Events on the head subtask's feedback queues."),
                ("feedback_queue_bytes", "Feedback bytes the head subtask holds in memory."),
                ("termination_round", "The last termination round the head subtask emitted."),
            )
        }
        watermark = GaugeMetricFamily(
            "eddyline_subtask_watermark_ms",
            "The subtask's current output watermark.",
            labels=_SUB,
        )
        for node, op in zip(view.nodes, sample.operators, strict=False):
            labels = [job, node.name, str(node.id)]
            for key, family in counters.items():
                family.add_metric(labels, float(op.get(key, 0)))
            for i, st in enumerate(op.get("subtasks", [])):
                sub = [*labels, str(i)]
                for key, family in sub_counters.items():
                    family.add_metric(sub, st.get(f"{key}_ns", 0) / 1e9)
                for key, family in sub_rows.items():
                    family.add_metric(sub, float(st.get(key, 0)))
                if st.get("watermark") is not None:
                    watermark.add_metric(sub, float(st["watermark"]))
                if node.kind == "loop_head":
                    for key, gauge in loops.items():
                        gauge.add_metric(sub, float(st.get(key, 0)))
        yield from counters.values()
        yield from sub_counters.values()
        yield from sub_rows.values()
        yield watermark
        yield from loops.values()
        yield from self._job_metrics(job, sample)

    @staticmethod
    def _job_metrics(job: str, sample: Any) -> Iterator[Metric]:
        done = CounterMetricFamily(
            "eddyline_checkpoints_completed", "Completed checkpoints.", labels=["job"]
        )
        done.add_metric([job], float(len(sample.checkpoints)))
        failed = CounterMetricFamily(
            "eddyline_checkpoints_failed", "Aborted checkpoints.", labels=["job"]
        )
        failed.add_metric([job], float(sample.failed_checkpoints))
        restarts = CounterMetricFamily("eddyline_job_restarts", "Restarts.", labels=["job"])
        restarts.add_metric([job], float(len(sample.restarts)))
        uptime = GaugeMetricFamily("eddyline_job_uptime_seconds", "Wall time.", labels=["job"])
        uptime.add_metric([job], sample.wall_time_s)
        yield from (done, failed, restarts, uptime)
        if sample.checkpoints:
            last = sample.checkpoints[-1]
            for name, value, doc in (
                ("id", last.id, "The id of the last completed checkpoint."),
                ("size_bytes", last.bytes, "Its size."),
                ("duration_seconds", last.duration_ms / 1000, "Its duration."),
                ("alignment_seconds", last.alignment_ms / 1000, "Its longest alignment."),
            ):
                g = GaugeMetricFamily(f"eddyline_last_checkpoint_{name}", doc, labels=["job"])
                g.add_metric([job], float(value))
                yield g


def registry_for(view: JobView) -> CollectorRegistry:
    """A registry holding only the job's metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_JobCollector(view))
    return registry
