"""The TPU lane: what the project promises, measured on the chip, in one JSON.

Run on a TPU host once torch and the packages are installed there (the project's TPU host scripts carry
them as wheels; see "On a TPU" in the README), from the repository root:

    python3 bench/lane/tpu_lane.py --out DIR [--steps demo,demo_step,flux,device_ops,host,tests,tests_diffusers,tests_linear,tests_tpu_forms,tests_linalg,opinfo,eager,coldstart,probe,dtypes,semantics,regressions] [--budget S]

Steps (each in its own processes, one at a time: a TPU is held by one process):
  demo       ``python -m torch_tpu generate`` (the README's main job, shipped demo model) in eager, fused
             and compile modes, each twice: a fresh program cache (cold), then a second process (warm);
             before them, a process that only imports torch and diffusers' FluxPipeline (and whether their
             bytecode is on disk)
  demo_step  bench/profile/demo_step.py: the main job's steady denoising step in strict and fused mode,
             launches and recorded ops per step, and a profile of its host time
  flux       bench/bench_model_width.py: a FLUX.1-width transformer (2+4 blocks, 4608 tokens, bf16) in the
             four modes beside the floor (its GEMMs and attention kernel alone, in JAX)
  device_ops bench/profile/device_ops.py in compiled and fused mode (1 double + 1 single FLUX.1-width block):
             the device's time per XLA op, and the compiled program's optimized HLO (DIR/hlo), where a fusion
             that runs slower than its FLOPs says why (the tanh-GELU recomputed in a matmul's operand, 2026-12-05)
  host       bench/profile/host.py --flux compiled: where a compiled FLUX.1-width call's host time goes,
             and dynamo's guard check beside the same model's on CPU tensors
  tests      the attention, TPU lowering, real-width transformer and precise-math test files on the chip
  tests_diffusers  the pipeline, position-embedding and adaptive-norm test files on the chip
  tests_linear     the whole-linear test file on the chip
  tests_tpu_forms  the files of what programs built for a TPU compute their own way (64-bit integer products, small
             float32 convolutions as matmuls, 64-bit LU, complex Scalars as complex64, special values)
  tests_linalg     the linear algebra file (its own call: it took over 500 s on the chip)
  opinfo     tests/ops/test_op_consistency.py on the chip (its own step: long; --shard i/n runs a part,
             --opinfo-tests FILE::TEST one of its tests)
  eager      bench/bench_eager_cost.py (per-op cost, fused chains, against JAX's own)
  coldstart  bench/bench_coldstart.py (first image per mode, cold and warm)
  probe      bench/probes/tpu_probe.py (kernel tiles, float32 functions' error)
  dtypes     bench/probes/tpu_dtype_probe.py (JAX alone: which 64-bit and complex ops XLA compiles, a process per abort)
  semantics  bench/probes/tpu_semantics_probe.py (JAX alone: special values, float64 precision, NaN in reductions, against
             XLA:CPU on the same host; ~30 s)
  regressions  bench/lane/chip_regressions.py (the cases the chip got wrong before, each against CPU torch)
Writes DIR/lane.json after every step (a step that runs out of --budget seconds is recorded as such),
plus each step's own JSON and logs in DIR.
"""
from __future__ import annotations

import argparse
import json
import os
import platform as host
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository root (bench/lane/)
STEPS = ("demo", "demo_step", "flux", "device_ops", "host", "tests", "tests_diffusers", "tests_linear", "opinfo",
         "tests_tpu_forms", "tests_linalg", "eager", "coldstart", "probe", "dtypes", "semantics", "regressions")
# each group fits one device call (the first took ~5 min on the chip, where every small program compiles in ~0.3 s)
TEST_GROUPS = {
    "tests": ["tests/ops/test_attention_op.py", "tests/runtime/test_tpu_lowering.py", "tests/models/test_real_width.py",
              "tests/ops/test_precise_math.py"],
    "tests_diffusers": ["tests/integrations/test_pipelines.py", "tests/integrations/test_diffusers_embeddings.py",
                        "tests/integrations/test_module_replay_diffusers.py"],
    "tests_linear": ["tests/ops/test_linear_whole.py"],
    "tests_tpu_forms": ["tests/ops/test_tpu_products.py", "tests/ops/test_tpu_float64.py",
                        "tests/ops/test_tpu_special_values.py"],
    "tests_linalg": ["tests/ops/test_linalg.py"],
}


def _run(cmd, timeout, env=None, log=None):
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                              env={**os.environ, **(env or {})})
        out, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        out += f"\n[timed out after {timeout} s]"
        rc = "timeout"
    if log:
        Path(log).write_text(out)
    return rc, out, time.perf_counter() - t0


def _stage_times(text: str) -> dict:
    """The stage table ``generate`` prints: name -> seconds."""
    times = {}
    for line in text.splitlines():
        m = re.match(r"^(\S.*?)\s{2,}(\d+\.\d+)\s*$", line)
        if m:
            times[m.group(1).strip()] = float(m.group(2))
    return times


def _bytecode() -> dict:
    """Whether the heavy packages' compiled bytecode is on disk: without it (wheels installed with
    --no-compile on a host that sets PYTHONDONTWRITEBYTECODE) every process compiles torch, diffusers and
    transformers from source, ~10 s more per process on the TPU host."""
    import importlib.util

    found = {}
    for name in ("torch", "diffusers", "transformers"):
        spec = importlib.util.find_spec(name)
        found[name] = bool(spec and spec.origin and os.path.exists(importlib.util.cache_from_source(spec.origin)))
    return {"cached": found, "dont_write_bytecode": bool(sys.flags.dont_write_bytecode)}


def step_demo(args, left):
    # what every diffusers program pays before it touches the device, in a process of its own
    rc, _, wall = _run([sys.executable, "-c", "import torch; from diffusers import FluxPipeline"], min(300, left()))
    out = {"imports": {"rc": rc, "process_s": wall, "bytecode": _bytecode()}}
    print(f"imports (torch, diffusers' FluxPipeline): {wall:.1f} s", flush=True)
    for mode in ("eager", "fused", "compile"):
        cache = tempfile.mkdtemp(prefix=f"lane-{mode}-")
        for run in ("cold", "warm"):
            cmd = [sys.executable, "-m", "torch_tpu", "generate", "--mode", mode, "--output",
                   str(Path(args.out) / f"demo-{mode}.png")]
            rc, text, wall = _run(cmd, min(600, left()), env={"TORCH_TPU_CACHE_DIR": cache},
                                  log=Path(args.out) / f"demo-{mode}-{run}.log")
            out[f"{mode}/{run}"] = {"rc": rc, "process_s": wall, "stages": _stage_times(text),
                                    "tail": text[-1500:]}
            print(f"demo {mode} {run}: rc={rc} {wall:.1f} s", flush=True)
    return out


def step_flux(args, left):
    path = Path(args.out) / "flux_width.json"
    rc, text, wall = _run([sys.executable, "bench/bench_model_width.py", "--out", str(path)], left(),
                          log=Path(args.out) / "flux_width.log")
    result = json.loads(path.read_text()) if path.exists() else {}
    return {"rc": rc, "process_s": wall, **result, "tail": text[-2000:]}


def _pytest(files, args, left, name, env=None):
    # -v: each test's outcome on its own line as it ends, so a step cut short by its time still says which failed
    cmd = [sys.executable, "-m", "pytest", "-v", "--tb=short", "-o", "addopts=", "-p", "no:cacheprovider", *files]
    # on a TPU the platform's own lowering is the check: the files marked check_lowering would otherwise
    # export every program for a TPU a second time (tests/conftest.py leaves a variable that is set alone)
    env = {"TORCH_TPU_CHECK_LOWERING": "0", **(env or {})}
    rc, text, wall = _run(cmd, left(), env=env, log=Path(args.out) / f"{name}.log")
    summary = [l for l in text.splitlines() if re.search(r"\d+ (passed|failed)", l)]
    failed = sorted(set(re.findall(r"^FAILED (\S+)", text, re.M)) | set(re.findall(r"^(\S+::\S+) FAILED", text, re.M)))
    return {"rc": rc, "process_s": wall, "summary": summary[-1:] if summary else text[-300:],
            "failed": failed}


def step_tests(args, left):
    return _pytest(TEST_GROUPS["tests"], args, left, "tests")


def step_tests_diffusers(args, left):
    return _pytest(TEST_GROUPS["tests_diffusers"], args, left, "tests_diffusers")


def step_tests_linear(args, left):
    return _pytest(TEST_GROUPS["tests_linear"], args, left, "tests_linear")


def step_tests_tpu_forms(args, left):
    return _pytest(TEST_GROUPS["tests_tpu_forms"], args, left, "tests_tpu_forms")


def _tpu_log_tail(lines=15) -> list:
    """The last fatal/check lines of libtpu's newest log (where an XLA:TPU abort says why)."""
    logs = sorted(Path("/tmp/tpu_logs").glob("*"), key=lambda p: p.stat().st_mtime) if Path("/tmp/tpu_logs").is_dir() else []
    if not logs:
        return []
    text = logs[-1].read_text(errors="replace").splitlines()
    return [l for l in text if re.match(r"^[FE]\d{4}|.*Check failed", l)][-lines:]


def step_opinfo(args, left):
    """The OpInfo file (or a shard of it), restarted after a case that aborts the process (an XLA:TPU compiler
    abort cannot be caught): that case is recorded as aborted, with libtpu's last fatal lines, and the run
    goes on from the next case. Every case's outcome comes from the outcomes file conftest writes."""
    outcomes = Path(args.out) / "opinfo_outcomes.jsonl"
    outcomes.unlink(missing_ok=True)
    done, aborted, attempts = args.start, [], []
    while left() > 30:
        env = {"TORCH_TPU_TEST_OUTCOMES": str(outcomes), "TORCH_TPU_TEST_FROM": str(done)}
        if args.count:
            left_to_run = args.start + args.count - done
            if left_to_run <= 0:
                break
            env["TORCH_TPU_TEST_COUNT"] = str(left_to_run)
        if args.shard:
            env["TORCH_TPU_TEST_SHARD"] = args.shard
        result = _pytest([args.opinfo_tests], args, left, f"opinfo{len(attempts)}", env=env)
        attempts.append({k: result[k] for k in ("rc", "process_s", "summary")})
        records = [json.loads(l) for l in outcomes.read_text().splitlines()] if outcomes.exists() else []
        started = [r["case"] for r in records if r["when"] == "start"]
        started_total = args.start + len(started)
        if result["rc"] in (0, 1) or not started or result["rc"] == "timeout":
            break
        aborted.append({"case": started[-1], "rc": result["rc"], "libtpu": _tpu_log_tail()})
        done = started_total  # the aborted case counts as done: the next attempt starts after it
    records = [json.loads(l) for l in outcomes.read_text().splitlines()] if outcomes.exists() else []
    calls = [r for r in records if r["when"] == "call"]
    return {"tests": args.opinfo_tests, "shard": args.shard, "attempts": attempts, "passed": sum(r["outcome"] == "passed" for r in calls),
            "failed": [{"case": r["case"], "when": r["when"], "text": r["text"]} for r in records
                       if r["outcome"] == "failed"], "aborted": aborted}


# The benchmark scripts the lane runs and the arguments it gives them besides ``--out`` (coldstart: one warm
# process per mode and no compile-on-the-caller reference: cold TPU compiles take minutes)
BENCH_ARGS = {"eager_cost": (), "coldstart": ("--warm-runs", "1", "--no-reference", "--no-depth")}


def _bench_script(name, args, left):
    script = ROOT / "bench" / f"bench_{name}.py"
    if not script.exists():
        return {"skipped": f"{script.name} not in this tree"}
    path = Path(args.out) / f"{name}.json"
    rc, text, wall = _run([sys.executable, str(script), "--out", str(path), *BENCH_ARGS[name]], left(),
                          log=Path(args.out) / f"{name}.log")
    result = json.loads(path.read_text()) if path.exists() else {}
    return {"rc": rc, "process_s": wall, "result": result, "tail": text[-2000:]}


def step_eager(args, left):
    return _bench_script("eager_cost", args, left)


def step_coldstart(args, left):
    return _bench_script("coldstart", args, left)


def step_demo_step(args, left):
    """The main job's steady denoising step per eager mode, with a profile of where its host time goes."""
    rc, text, wall = _run([sys.executable, "bench/profile/demo_step.py", "--out", args.out], min(600, left()),
                          log=Path(args.out) / "demo_step.log")
    return {"rc": rc, "process_s": wall, "wrote": (Path(args.out) / "demo_step.json").exists(), "tail": text[-1500:]}


def step_device_ops(args, left):
    """Device time per XLA op of a compiled and a fused call, and the compiled program's optimized HLO."""
    hlo = Path(args.out) / "hlo"
    runs = {}
    for mode in ("compiled", "fused"):
        env = {"XLA_FLAGS": f"--xla_dump_to={hlo} --xla_dump_hlo_module_re=.*wrapper.* --xla_dump_hlo_as_text"} \
            if mode == "compiled" else None
        rc, text, wall = _run([sys.executable, "bench/profile/device_ops.py", "--mode", mode, "--top", "150",
                               "--out", args.out], min(300, left()), env=env,
                              log=Path(args.out) / f"device_ops_{mode}.log")
        runs[mode] = {"rc": rc, "process_s": wall, "wrote": (Path(args.out) / f"device_ops_{mode}.json").exists()}
    if hlo.is_dir():  # only the module's HLO before and after XLA's passes
        for f in hlo.iterdir():
            if not f.name.endswith(("before_optimizations.txt", "after_optimizations.txt")):
                f.unlink()
    return runs


def step_host(args, left):
    """The host's share of a compiled FLUX.1-width call: its profile and dynamo's guard check."""
    rc, text, wall = _run([sys.executable, "bench/profile/host.py", "--out", args.out, "--flux", "compiled"],
                          min(600, left()), log=Path(args.out) / "host.log")
    return {"rc": rc, "process_s": wall, "wrote": (Path(args.out) / "profile_host.json").exists(),
            "tail": text[-1500:]}


def _probe(args, left, script, json_name, log_name, limit_s, tail_chars=1500):
    """A bench script run with ``--out DIR/json_name`` for at most ``limit_s`` (and the lane's time left)."""
    path = Path(args.out) / json_name
    rc, text, wall = _run([sys.executable, script, "--out", str(path)], min(limit_s, left()),
                          log=Path(args.out) / log_name)
    return {"rc": rc, "process_s": wall, "wrote": path.exists(), "tail": text[-tail_chars:]}


def step_probe(args, left):
    return _probe(args, left, "bench/probes/tpu_probe.py", "probe.json", "probe.log", float("inf"))


def step_dtypes(args, left):
    """JAX alone: which 64-bit float and complex operations XLA compiles and runs here (bench/probes/tpu_dtype_probe.py)."""
    return _probe(args, left, "bench/probes/tpu_dtype_probe.py", "tpu_dtype_probe.json", "dtypes.log", 500)


def step_tests_linalg(args, left):
    return _pytest(TEST_GROUPS["tests_linalg"], args, left, "tests_linalg")


def step_semantics(args, left):
    """JAX alone: where XLA:TPU's elementwise, float64 and reduction results differ from XLA:CPU's."""
    return _probe(args, left, "bench/probes/tpu_semantics_probe.py", "tpu_semantics_probe.json", "semantics.log", 300,
                  tail_chars=3000)


def step_regressions(args, left):
    """The cases the chip got wrong before (bench/lane/chip_regressions.py), each against CPU torch."""
    return _probe(args, left, "bench/lane/chip_regressions.py", "regression_probe.json", "regressions.log", 300,
                  tail_chars=3000)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", default="demo,flux,tests")
    parser.add_argument("--budget", type=float, default=540, help="seconds for all steps together")
    parser.add_argument("--shard", default=None, help="opinfo: run part i of n (i/n)")
    parser.add_argument("--start", type=int, default=0, help="opinfo: skip the shard's first cases (a later call "
                                                                  "going on where an earlier one stopped)")
    parser.add_argument("--count", type=int, default=0, help="opinfo: run at most this many of the shard's cases")
    parser.add_argument("--opinfo-tests", default="tests/ops/test_op_consistency.py",
                        help="opinfo: the file or test to run (a node id such as FILE::test_op_matches_cpu_fused)")
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()

    def left():
        return max(5, int(args.budget - (time.perf_counter() - start)))

    lane_path = Path(args.out) / "lane.json"
    lane = json.loads(lane_path.read_text()) if lane_path.exists() else {}
    lane.setdefault("runs", []).append({"date": time.strftime("%Y-%m-%d %H:%M:%S"), "steps": args.steps,
                                        "host": {"python": host.python_version(), "cpus": os.cpu_count()}})
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    except OSError:
        commit = ""
    lane["commit"] = commit or os.environ.get("TORCH_TPU_COMMIT", "")
    for name in args.steps.split(","):
        if left() <= 5:
            lane[name] = {"skipped": "out of the lane's time budget"}
        else:
            print(f"--- {name} ({left()} s left)", flush=True)
            lane[name] = globals()[f"step_{name}"](args, left)
        lane_path.write_text(json.dumps(lane, indent=1, default=str))
    print("wrote", lane_path)


if __name__ == "__main__":
    main()
