"""Telling a hang from a slow machine.

A limit on wall-clock time fails a correct case on a loaded machine (a case that takes 60 s alone took over
240 s on two cores shared by a whole suite) and still has to be generous enough to be slow at finding a real
hang. What a hang looks like instead: a deadlock or a wait for something that never comes uses no CPU at all
(a process that used the device and then waits on a lock used 0.00 s of CPU in 30 s here). So a case is
judged by the CPU time of its process tree (the process and every live descendant, plus the descendants it
has already waited for), which a busy machine spreads over more wall-clock time but does not shrink:

* no progress: the tree used less than ``IDLE_CPU_S`` of CPU in the last ``stall_s`` seconds of wall time;
* runaway: the tree used more than its CPU budget (a loop that never ends, recompiling forever);
* a backstop on wall-clock time, ``WALL_FACTOR`` times the budget, so that nothing runs forever.

Where /proc is missing (not Linux) only the wall-clock limit applies, at ``WALL_FACTOR`` times the budget.
No torch import here: ``conftest.py`` uses it before anything is collected.
"""
from __future__ import annotations

import faulthandler
import os
import subprocess
import sys
import threading
import time

IDLE_CPU_S = 0.2   # less CPU than this in a whole stall window is no progress
WALL_FACTOR = 10   # the wall-clock backstop, in CPU budgets
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: str) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and of its waited-for children) from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # the name, in parentheses, may hold spaces
    except (OSError, IndexError):
        return None
    # after the name: state ppid ... utime(12) stime(13) cutime(14) cstime(15), 1-based from the state
    return int(fields[1]), sum(int(v) for v in fields[11:15]) / _TICK


def _processes() -> dict[int, tuple[int, float]]:
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            s = _stat(entry)
            if s is not None:
                stats[int(entry)] = s
    return stats


def _tree(pid: int, stats: dict) -> list[int]:
    children: dict[int, list[int]] = {}
    for p, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(p)
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, ()))
    return tree


def kill_tree(proc) -> None:
    """Kill a ``Popen`` child and every live descendant of it (a hung case's own children would otherwise
    outlive it, busy or waiting), then reap the child."""
    pids = _tree(proc.pid, _processes()) if os.path.exists("/proc/self/stat") else [proc.pid]
    for p in reversed(pids):  # the descendants first, so none is re-parented and missed
        try:
            os.kill(p, 9)
        except OSError:
            pass
    proc.wait()


def tree_cpu_seconds(pid: int) -> float | None:
    """CPU seconds used so far by ``pid`` and all its live descendants (and the children each has reaped);
    None where /proc cannot be read."""
    if not os.path.exists(f"/proc/{pid}/stat"):
        return None
    stats = _processes()
    if pid not in stats:
        return None
    return sum(stats[p][1] for p in _tree(pid, stats))


class Progress:
    """Watches one process tree from ``start()``: ``verdict()`` is None while it makes progress within its
    budget, else a sentence saying why it is taken for hung."""

    def __init__(self, pid: int, cpu_budget_s: float, stall_s: float = 120.0):
        self.pid, self.budget, self.stall_s = pid, cpu_budget_s, stall_s
        self.start()

    def start(self) -> None:
        now = time.monotonic()
        cpu = tree_cpu_seconds(self.pid)
        self._t0, self._cpu0 = now, cpu
        self._last_t, self._last_cpu = now, cpu  # when the tree last used CPU, and its CPU then

    def verdict(self) -> str | None:
        now = time.monotonic()
        wall = now - self._t0
        cpu = tree_cpu_seconds(self.pid)
        if cpu is None or self._cpu0 is None:
            if wall > self.budget * WALL_FACTOR:
                return f"no answer in {wall:.0f} s ({WALL_FACTOR}x its budget of {self.budget:.0f} s; no /proc here)"
            return None
        if cpu - self._last_cpu >= IDLE_CPU_S:
            self._last_t, self._last_cpu = now, cpu
        used = cpu - self._cpu0
        if now - self._last_t > self.stall_s:
            return (f"no progress: its processes used no CPU for the last {now - self._last_t:.0f} s "
                    f"({used:.1f} s of CPU in {wall:.0f} s)")
        if used > self.budget:
            return f"used {used:.0f} s of CPU, over its budget of {self.budget:.0f} s ({wall:.0f} s)"
        if wall > self.budget * WALL_FACTOR:
            return f"still running after {wall:.0f} s ({used:.0f} s of CPU), {WALL_FACTOR}x its budget"
        return None


class Hung(subprocess.TimeoutExpired):
    """``run``'s child was taken for hung (``why``); a ``subprocess.TimeoutExpired``, as ``subprocess.run``'s."""

    def __init__(self, cmd, timeout, why, output=None, stderr=None):
        super().__init__(cmd, timeout, output, stderr)
        self.why = why

    def __str__(self):
        return f"[hang] {self.why}: {str(self.cmd)[:300]}"


def run(args, *, timeout: float, input=None, stall_s: float = 120.0, **kw) -> subprocess.CompletedProcess:
    """``subprocess.run`` for tests, whose ``timeout`` is about the seconds the child takes at most on an idle
    machine: the child is killed (``Hung``, a ``TimeoutExpired``) only when ``Progress`` takes it for hung
    (no CPU use for ``stall_s``, more than twice ``timeout`` seconds of CPU, or the wall-clock backstop), so a
    loaded machine only makes it slower."""
    if kw.pop("capture_output", False):
        kw["stdout"] = kw["stderr"] = subprocess.PIPE
    if input is not None:
        kw["stdin"] = subprocess.PIPE
    with subprocess.Popen(args, **kw) as proc:
        progress = Progress(proc.pid, 2 * timeout, stall_s)
        while True:
            try:
                out, err = proc.communicate(input, timeout=2.0)
                break
            except subprocess.TimeoutExpired:
                input = None  # sent by the first call
                why = progress.verdict()
                if why:
                    kill_tree(proc)
                    out, err = proc.communicate()
                    raise Hung(args, timeout, why, out, err) from None
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def watch_this_process(cpu_budget_s: float, stall_s: float = 120.0):
    """A context manager for one test in this process: when the test stops making progress or overruns its
    CPU budget (``Progress``), print every thread's stack and end the process (a hang fails loudly rather
    than holding the suite). A C-level backstop (faulthandler) covers a hang that holds the GIL."""
    return _Watch(cpu_budget_s, stall_s)


class _Watch:
    def __init__(self, cpu_budget_s, stall_s):
        self.budget, self.stall_s = cpu_budget_s, stall_s
        self._done = threading.Event()

    def __enter__(self):
        progress = Progress(os.getpid(), self.budget, self.stall_s)
        faulthandler.dump_traceback_later(self.budget * WALL_FACTOR, exit=True)

        def watch():
            while not self._done.wait(2.0):
                why = progress.verdict()
                if why:
                    sys.stderr.write(f"\n[hang] {os.environ.get('PYTEST_CURRENT_TEST', 'this test')}: {why}\n")
                    faulthandler.dump_traceback(all_threads=True)
                    sys.stderr.flush()
                    os._exit(1)

        self._thread = threading.Thread(target=watch, name="hang-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        faulthandler.cancel_dump_traceback_later()
        self._thread.join()
        return False
