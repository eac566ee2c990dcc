"""Execution internals: the executors that run user functions inside a job.

The public DSL (``eddyline.stream`` and friends) builds a graph whose
``python`` nodes carry a :class:`~eddyline._exec.factory.RunnerFactory`; the
binding (``python/src/udf.rs``) calls it once per parallel subtask and drives
the :class:`~eddyline._exec.base.Runner` it returns (DESIGN.md "Runtime").
Nothing here is public API.

- ``base``: the executor protocol the binding calls, and its types.
- ``factory``: the per-node factory and the private copy of user objects.
- ``user_code``: :class:`~eddyline._exec.user_code.UserCode`, the one place
  that turns what user code raises into an error naming the operator.
- ``codegen``: loops generated per schema for per-record functions.
- ``output``: rows and batches returned by user code, checked and converted.
- One module per kind of executor: ``records`` (fused map/flat_map/filter,
  ``connect().map``), ``batches`` (``map_batches``), ``keyed`` (the keyed
  base and ``reduce``), ``process`` (``process`` with state and timers),
  ``window`` (Python window functions), ``two_phase`` (two-phase-commit
  sinks).
- ``event_time`` (event-time columns), ``dedup`` (the ``dedup`` process
  function) and ``worker`` (the entry point of a worker process,
  ``python -m eddyline._exec.worker``).
"""
