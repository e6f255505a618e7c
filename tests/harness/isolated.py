"""Cases that may crash or hang the process, run in children: ``run_isolated`` (one snippet), ``IsolatedBatch``,
and a file's ``ISOLATED_CASES`` run in a crash-tolerant child restarted after a crash or a hang
(``run_cases_isolated``, ``isolated_case_tests``, ``isolated_fixture``); a hang is judged by CPU use
(``hangs.py``), not by wall-clock time.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from typing import Callable, Sequence

import pytest

import torch_tpu
from tests.harness import REPO, hangs

from tests.harness.errors import _exc_text, expected_failure


_PRELUDE = """
import os, sys
import torch
import torch_tpu
"""


def _this_process_holds_a_tpu() -> bool:
    tpu = sys.modules.get("torch_tpu")
    if tpu is None:
        return False
    from torch_tpu.runtime import platform

    return platform.runtime_started() and platform.platform() == "tpu"


def run_isolated(code: str, timeout: float = 90, env: dict | None = None,
                 prelude: bool = True) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh Python process (this worktree first on sys.path), after importing torch and
    torch_tpu unless ``prelude`` is False. Returns the CompletedProcess; when the child is taken for hung
    (``hangs.run``: ``timeout`` is about the seconds it takes at most on an idle machine) returncode is None
    and stdout/stderr hold what came before."""
    full = (_PRELUDE if prelude else "") + textwrap.dedent(code)
    e = dict(os.environ)
    e["PYTHONPATH"] = REPO + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.pop("PYTEST_CURRENT_TEST", None)
    if _this_process_holds_a_tpu():
        # one process at a time can hold a TPU chip: a child of a test run on one computes on the CPU
        # platform (what these children check is how a process behaves, not the chip's numbers)
        e.setdefault("JAX_PLATFORMS", "cpu")
    e.update(env or {})
    try:
        return hangs.run([sys.executable, "-X", "faulthandler", "-c", full], env=e, capture_output=True,
                         text=True, timeout=timeout)
    except subprocess.TimeoutExpired as t:
        out = t.stdout.decode() if isinstance(t.stdout, bytes) else (t.stdout or "")
        err = t.stderr.decode() if isinstance(t.stderr, bytes) else (t.stderr or "")
        return subprocess.CompletedProcess(t.cmd, None, out, err)


def stderr_excerpt(err: str, n: int = 1500) -> str:
    """The useful part of a dying process's stderr: from shortly before "Fatal Python error" (the C++
    message and the Python stack), without faulthandler's list of extension modules."""
    err = err or ""
    cut = err.find("\nExtension modules:")
    if cut >= 0:
        err = err[:cut]
    at = err.find("Fatal Python error")
    if at >= 0:
        return err[max(0, at - 300):at - 300 + n]
    return err[-n:]


def assert_isolated_ok(proc: subprocess.CompletedProcess, expect: str = "OK"):
    """The subprocess exited cleanly (rc 0, no signal, no timeout) and printed ``expect`` (a regex)."""
    tail = stderr_excerpt(proc.stderr)
    if proc.returncode is None:
        pytest.fail(f"[hang] the subprocess did not finish in time; stdout={proc.stdout[-500:]!r} stderr={tail}")
    if proc.returncode < 0 or proc.returncode in (134, 139):
        pytest.fail(f"[crash] the subprocess died (rc {proc.returncode}); stdout={proc.stdout[-500:]!r} "
                    f"stderr={tail}")
    if proc.returncode != 0:
        pytest.fail(f"[tpu raised] the subprocess exited with rc {proc.returncode}; stdout="
                    f"{proc.stdout[-800:]!r} stderr={tail}")
    if not re.search(expect, proc.stdout):
        pytest.fail(f"[wrong value] the subprocess did not print {expect!r}: stdout={proc.stdout[-1500:]!r} "
                    f"stderr={tail}")


class IsolatedBatch:
    """Start many isolated snippets at once (a few at a time) so their ~4 s imports overlap; each test
    then takes its own result. ``batch.result(name)``."""

    def __init__(self, snippets: dict[str, tuple[str, dict]], workers: int = 2, timeout: float = 90):
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max_workers=workers)
        self._futures = {name: self._pool.submit(run_isolated, code, timeout, env)
                         for name, (code, env) in snippets.items()}

    def result(self, name: str) -> subprocess.CompletedProcess:
        return self._futures[name].result()

    def close(self):
        self._pool.shutdown(wait=True)


_START, _END = "@@HOSTILE-START ", "@@HOSTILE-END "


def _worker(module_file: str) -> None:
    """Child side of ``run_cases_isolated``: load ``module_file``, read case names from stdin, run
    ``module.ISOLATED_CASES[name]()`` for each, report on stdout."""
    import importlib.util
    import json
    import traceback

    spec = importlib.util.spec_from_file_location("_isolated_cases", module_file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cases = mod.ISOLATED_CASES
    for line in sys.stdin:
        name = line.strip()
        if not name:
            continue
        print(_START + name, flush=True)
        print(_START + name, file=sys.stderr, flush=True)
        os.environ["PYTEST_CURRENT_TEST"] = name + " (call)"
        started = time.perf_counter()
        try:
            cases[name]()
            status, msg = "pass", ""
        except pytest.fail.Exception as f:
            status, msg = "fail", str(f)
        except Exception as e:  # noqa: BLE001  (the case itself broke: report it as a failure)
            status, msg = "fail", "[tpu raised] " + _exc_text(e) + "\n" + "".join(traceback.format_exc()[-1500:])
        print(_END + json.dumps([name, status, msg, round(time.perf_counter() - started, 3)]), flush=True)
    if os.environ.get("TORCH_TPU_CASE_TIMES"):
        import torch_tpu

        s = torch_tpu.stats()
        _note_case_time(module_file, "(child's compiles: %d, compile seconds: %.1f, cache loads: %d)"
                        % (s["compiles"], s["compile_seconds"], s["cache_loads"]), time.process_time())


def _note_case_time(module_file: str, name: str, seconds: float) -> None:
    """With TORCH_TPU_CASE_TIMES=FILE, append each isolated case's time (to find what makes the suite slow)."""
    out = os.environ.get("TORCH_TPU_CASE_TIMES")
    if out:
        with open(out, "a") as f:
            f.write(f"{seconds:.3f}\t{os.path.basename(module_file)}\t{name}\n")


def run_cases_isolated(module_file: str, names: Sequence[str], timeout_per_case: float = 120,
                       env: dict | None = None, stall_s: float = 120) -> dict[str, tuple[str, str]]:
    """Run the named cases of ``module_file``'s ``ISOLATED_CASES`` in a child process; a case that
    kills the child (signal, abort) is reported as ``("crash", ...)``, one that stops making progress or
    uses more than twice ``timeout_per_case`` seconds of CPU (``hangs.Progress``: about the seconds a case
    takes at most on an idle machine; compiles use more than one thread) as ``("hang", ...)``, and the
    child is restarted for the remaining cases (``stall_s``: the seconds without CPU use taken for a hang).
    Returns {name: (status, message)}, status in pass/fail/crash/hang."""
    import json
    import queue
    import threading

    e = dict(os.environ)
    e["PYTHONPATH"] = REPO + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.update(env or {})
    code = f"from tests.harness import isolated; isolated._worker({module_file!r})"
    results: dict[str, tuple[str, str]] = {}
    todo = list(names)
    while todo:
        proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-c", code], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
        lines: "queue.Queue[str | None]" = queue.Queue()
        err_tail: list[str] = []

        # each pump is bound to its own worker's pipe, queue and tail: read at call time, the names would be
        # the next worker's once a killed worker's pump ended late, and its end-of-file would end that one
        def pump_out(out=proc.stdout, queue_=lines):
            for ln in out:
                queue_.put(ln)
            queue_.put(None)

        def pump_err(err=proc.stderr, tail=err_tail):
            for ln in err:
                if ln.startswith(_START.strip()):
                    tail.clear()  # keep only the current case's stderr
                tail.append(ln)
                del tail[:-400]

        threading.Thread(target=pump_out, daemon=True).start()
        threading.Thread(target=pump_err, daemon=True).start()
        try:
            proc.stdin.write("\n".join(todo) + "\n")
            proc.stdin.close()
        except BrokenPipeError:
            pass
        current = None
        # a case is hung when its processes stop using CPU or overrun their CPU budget (hangs.Progress), not
        # after a wall-clock time: a loaded machine takes longer, it does not stop
        budget = 2 * timeout_per_case  # CPU seconds: compiles run on more than one thread
        progress = hangs.Progress(proc.pid, budget + 30, stall_s)  # the first case also pays the imports
        checked = time.monotonic()
        while True:
            try:
                ln = lines.get(timeout=1.0)
            except queue.Empty:
                ln = ""  # nothing yet (a line read always ends with a newline; None is the end)
            if ln == "" or time.monotonic() - checked > 1.0:
                checked = time.monotonic()
                why = progress.verdict()
                if why is None:
                    if ln == "":
                        continue
                else:
                    hangs.kill_tree(proc)
                    if current is None:
                        current = todo[0]
                    results[current] = ("hang", f"[hang] {why}; stderr: {''.join(err_tail)[-1200:]}")
                    break
            if ln is None:
                proc.wait()
                if current is not None:
                    results[current] = ("crash", f"[crash] the process died (rc {proc.returncode}) in this case; "
                                                 f"stderr: {stderr_excerpt(''.join(err_tail))}")
                elif todo and todo[0] not in results:
                    results[todo[0]] = ("crash", f"[crash] the worker died before the first case (rc "
                                                 f"{proc.returncode}); stderr: {stderr_excerpt(''.join(err_tail))}")
                break
            if ln.startswith(_START):
                current = ln[len(_START):].strip()
                progress = hangs.Progress(proc.pid, budget, stall_s)
            elif ln.startswith(_END):
                name, status, msg, seconds = json.loads(ln[len(_END):])
                results[name] = (status, msg)
                _note_case_time(module_file, name, seconds)
                current = None
        todo = [n for n in todo if n not in results]
    return results


def isolated_results(request, module_file: str, case_of_item: Callable, **kw) -> dict:
    """For a module-scoped fixture: run, in one crash-tolerant child, the cases of every collected test
    item of ``module_file`` (``case_of_item(item) -> name or None``)."""
    names = []
    for item in request.session.items:
        if os.path.abspath(str(item.fspath)) == os.path.abspath(module_file):
            n = case_of_item(item)
            if n is not None and n not in names:
                names.append(n)
    return run_cases_isolated(module_file, names, **kw)


def case_and_mode(item):
    """``case_of_item`` for tests parametrized by ``case`` and ``mode``: the case named "<case>:<mode>"."""
    cs = getattr(item, "callspec", None)
    if cs is None or "case" not in cs.params:
        return None
    return f"{cs.params['case']}:{cs.params['mode']}"


def param_of(test_name: str, param: str = "name"):
    """``case_of_item`` for one test function parametrized by ``param``: that parameter is the case."""
    def case_of_item(item):
        cs = getattr(item, "callspec", None)
        return cs.params.get(param) if cs is not None and item.originalname == test_name else None
    return case_of_item


def isolated_fixture(module_file: str, case_of_item: Callable, **kw):
    """A module-scoped fixture whose value is ``isolated_results`` for ``module_file``'s collected items:
    ``results = D.isolated_fixture(__file__, D.case_and_mode, timeout_per_case=120)`` (``kw``: those of
    ``run_cases_isolated``, e.g. ``env``)."""
    @pytest.fixture(scope="module")
    def results(request):
        return isolated_results(request, module_file, case_of_item, **kw)

    return results


def isolated_case_tests(module_file: str, cases: dict, xfail: dict | None = None, timeout_per_case: float = 120,
                        **kw):
    """The module fixture and the test of a file whose ``ISOLATED_CASES`` run in one crash-tolerant child:
    ``results, test_case = D.isolated_case_tests(__file__, ISOLATED_CASES, XFAIL)``; a case named in
    ``xfail`` (name -> ``Gap(reason, match)``) is a strict xfail of that failure only (``known_gap``). The
    test may take any name (``results, test_seed = ...``)."""
    xfail = xfail or {}

    def case_of_item(item):
        cs = getattr(item, "callspec", None)
        return cs.params.get("name") if cs is not None and getattr(item, "function", None) is test_case else None

    results = isolated_fixture(module_file, case_of_item, timeout_per_case=timeout_per_case, **kw)

    @pytest.mark.parametrize("name", [pytest.param(n, marks=xfail[n].mark()) if n in xfail else n for n in cases])
    def test_case(results, name):
        assert_isolated_result(results, name, xfail.get(name))

    return results, test_case


def assert_isolated_result(results: dict, name: str, gap: "Gap | None" = None):
    """The isolated case ``name`` passed; ``gap``: a known gap's case, whose expected failure becomes
    ``KnownGap`` (``expected_failure``)."""
    status, msg = results.get(name, ("missing", "the case did not run"))
    with expected_failure(gap):
        if status != "pass":
            pytest.fail(msg if msg.startswith("[") else f"[{status}] {msg}")
