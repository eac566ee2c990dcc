"""The client: what runs, watches and inspects a job from outside the DSL.

* :mod:`eddyline.client.job` — ``JobClient`` and ``JobResult``, the handle of a
  running job and what it returned.
* :mod:`eddyline.client.runners` — ``ProcessRunner``, subtasks in local worker
  processes.
* :mod:`eddyline.client.cli` — the ``eddyline`` command (``python -m eddyline``).
* :mod:`eddyline.client.dashboard` — the web dashboard and ``/metrics``.

The names users need are re-exported at the top of the package
(``ed.JobClient``, ``ed.ProcessRunner``, ...).
"""
