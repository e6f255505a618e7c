"""A small mutation check of the core: does the suite of a subject fail when one line of it is wrong?

Each mutant in ``mutants.py`` replaces one line of the package (found by its exact text, which must occur
once) in a temporary copy of the repository (the package and the tests, not .git), runs the tests listed
for it against that copy with an empty program cache, and counts the mutant *killed* when they fail and a
*survivor* when they pass. A survivor is a wrong change no test notices: it becomes a test in the file of
its subject (then the mutant is killed). Nothing here runs in the default test run: a mutant costs one
pytest process (tens of seconds to minutes).

    python3 tests/mutation/run.py                  # every mutant, a table at the end
    python3 tests/mutation/run.py fused-fill-order promotion-0dim-widens   # the named ones
    python3 tests/mutation/run.py --list           # the mutants and the tests each runs
    python3 tests/mutation/run.py --check          # each mutant's line is still in the code (no tests run)
    python3 tests/mutation/run.py --json out.json  # also write the results as JSON

Exit status: 0 when every mutant was killed, 1 when one survived, 2 when a mutant no longer applies (its
line changed: update ``mutants.py``). Before the mutants, the listed tests run once on the unchanged copy:
a mutant is only judged against tests that pass without it.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutants import MUTANTS, Mutant  # noqa: E402


def _copy_repo(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".git", "results")
    for name in ("torch_tpu", "tests"):
        shutil.copytree(REPO / name, dest / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, dest / name)


def _run_tests(root: Path, tests: tuple[str, ...], timeout: float) -> tuple[bool, str, float]:
    """Run ``tests`` (paths or node ids relative to the repository) against the copy at ``root`` in a
    fresh process and program cache; (passed, the tail of its output, seconds)."""
    env = dict(os.environ, PYTHONPATH=str(root), TORCH_TPU_CACHE_DIR=tempfile.mkdtemp(prefix="mutant-cache-"),
               PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-n", "0", *tests]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, "timed out (counted as killed: the mutant made a test hang)", time.monotonic() - t0
    finally:
        shutil.rmtree(env["TORCH_TPU_CACHE_DIR"], ignore_errors=True)
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-6:])
    return proc.returncode == 0, tail, time.monotonic() - t0


def _apply(root: Path, mutant: Mutant) -> str:
    """Write the mutant into the copy; return the original text of its file."""
    path = root / mutant.file
    text = path.read_text()
    count = text.count(mutant.line)
    if count != 1:
        raise LookupError(f"{mutant.name}: {mutant.file} holds its line {count} times (want once): "
                          f"{mutant.line!r}")
    path.write_text(text.replace(mutant.line, mutant.replacement))
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--check", action="store_true", help="check that every mutant's line occurs once, and exit")
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per test run")
    args = parser.parse_args(argv)

    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        parser.error(f"no such mutant: {', '.join(sorted(unknown))}")
    if args.check:
        stale = [m.name for m in chosen if (REPO / m.file).read_text().count(m.line) != 1]
        print("stale: " + ", ".join(stale) if stale else f"{len(chosen)} mutants, each line found once")
        return 2 if stale else 0
    if args.list:
        for m in chosen:
            print(f"{m.name}\n    {m.file}: {m.line.strip()!r} -> {m.replacement.strip()!r}\n"
                  f"    tests: {' '.join(m.tests)}\n    {m.why}")
        return 0

    results = []
    with tempfile.TemporaryDirectory(prefix="torch-tpu-mutants-") as tmp:
        root = Path(tmp)
        _copy_repo(root)
        baseline: dict[tuple, bool] = {}
        for m in chosen:
            if m.tests not in baseline:
                ok, tail, secs = _run_tests(root, m.tests, args.timeout)
                baseline[m.tests] = ok
                if not ok:
                    print(f"[baseline fails] {' '.join(m.tests)} ({secs:.0f} s):\n{tail}", flush=True)
            if not baseline[m.tests]:
                results.append({"mutant": m.name, "outcome": "no baseline"})
                continue
            try:
                original = _apply(root, m)
            except LookupError as exc:
                print(f"[stale] {exc}", flush=True)
                results.append({"mutant": m.name, "outcome": "stale"})
                continue
            try:
                passed, tail, secs = _run_tests(root, m.tests, args.timeout)
            finally:
                (root / m.file).write_text(original)
            outcome = "SURVIVED" if passed else "killed"
            print(f"[{outcome}] {m.name} ({secs:.0f} s)" + ("" if passed else f"\n    {tail.splitlines()[-1]}"),
                  flush=True)
            results.append({"mutant": m.name, "outcome": outcome, "seconds": round(secs, 1)})

    width = max((len(r["mutant"]) for r in results), default=10)
    print("\n" + "\n".join(f"{r['mutant']:<{width}}  {r['outcome']}" for r in results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    outcomes = {r["outcome"] for r in results}
    if outcomes & {"stale", "no baseline"}:
        return 2
    return 1 if "SURVIVED" in outcomes else 0


if __name__ == "__main__":
    sys.exit(main())
