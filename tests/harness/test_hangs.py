"""The hang detector (``hangs.py``) tells a process that stopped from one that is slow: a child that waits on
nothing is reported as making no progress, one that computes past its CPU budget as over it, and one that
computes within its budget is left alone however long the stall window is exceeded in wall-clock time; the
isolated-case runner reports a hung case as ``[hang]`` and goes on with the next one."""
import os
import subprocess
import sys
import time

import pytest

from tests.harness.isolated import run_cases_isolated
from tests.harness import hangs

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="CPU accounting reads /proc")


def _child(code):
    return subprocess.Popen([sys.executable, "-c", code])


def _verdict_after(progress, proc, polls):
    why = None
    for _ in range(polls):
        time.sleep(0.5)
        why = progress.verdict()
        if why:
            break
    hangs.kill_tree(proc)  # a grandchild too
    return why


def test_a_waiting_process_makes_no_progress():
    proc = _child("import threading; threading.Event().wait()")
    why = _verdict_after(hangs.Progress(proc.pid, cpu_budget_s=600, stall_s=2), proc, polls=40)
    assert why is not None and why.startswith("no progress"), why


def test_a_computing_process_within_its_budget_is_not_hung():
    proc = _child("while True: pass")
    why = _verdict_after(hangs.Progress(proc.pid, cpu_budget_s=600, stall_s=2), proc, polls=8)
    assert why is None, why


def test_a_computing_process_past_its_budget_is():
    proc = _child("while True: pass")
    why = _verdict_after(hangs.Progress(proc.pid, cpu_budget_s=1, stall_s=1000), proc, polls=120)
    assert why is not None and "over its budget" in why, why


def test_the_cpu_of_a_grandchild_counts_and_the_grandchild_is_killed_with_its_parent():
    proc = _child("import subprocess, sys; subprocess.run([sys.executable, '-c', 'while True: pass'])")
    time.sleep(1.0)
    grandchildren = [p for p in hangs._tree(proc.pid, hangs._processes()) if p != proc.pid]
    why = _verdict_after(hangs.Progress(proc.pid, cpu_budget_s=600, stall_s=2), proc, polls=8)
    assert why is None, why
    time.sleep(0.5)
    assert grandchildren and not any(_alive(p) for p in grandchildren), grandchildren


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except OSError:
        return False


ISOLATED_CASES = {
    "waits_forever": lambda: __import__("threading").Event().wait(),
    "passes": lambda: None,
}


def test_the_isolated_runner_reports_a_hang_and_goes_on():
    results = run_cases_isolated(__file__, ["waits_forever", "passes"], stall_s=3)
    assert results["waits_forever"][0] == "hang" and "no progress" in results["waits_forever"][1], results
    assert results["passes"] == ("pass", ""), results
