"""Peak resident memory of a process tree (Linux ``/proc``), for the peers' JVMs.

A peer (Spark, PyFlink) is a Python driver process that starts a JVM as its child, so
the peak RSS of the driver alone (``RUSAGE_SELF``) misses the JVM, and
``getrusage(RUSAGE_CHILDREN)`` only counts children that have already exited and
gives the largest one, not the sum. :func:`tree_peak_rss_mb` reads instead the
``VmHWM`` (peak resident set size) of a process and of every living descendant and
adds them up. As the processes need not peak at the same moment, the sum is an upper
bound of the tree's peak; the JVM dominates it. Standard library only (the PyFlink
peer runs in its own virtual environment).
"""

from __future__ import annotations

import os

__all__ = ["descendants", "tree_peak_rss_mb", "vm_hwm_kb"]


def _parents() -> dict[int, int]:
    """Every living process's parent, from ``/proc/<pid>/stat``."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:  # exited meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold blanks and parentheses
        fields = stat[stat.rfind(")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
    return parents


def descendants(pid: int) -> list[int]:
    """The living descendants of ``pid`` (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def vm_hwm_kb(pid: int) -> int:
    """The peak RSS (``VmHWM``) of process ``pid`` in KiB, 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_peak_rss_mb(pid: int | None = None) -> float:
    """The sum of ``VmHWM`` over ``pid`` (default: this process) and its descendants, in MiB."""
    root = os.getpid() if pid is None else pid
    return sum(vm_hwm_kb(p) for p in [root, *descendants(root)]) / 1024.0
