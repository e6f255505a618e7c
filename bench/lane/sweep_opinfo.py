"""Wide OpInfo sweep (not a test): every OpInfo that reaches the tpu op table (the selection of
tests/ops/test_op_consistency.py), run against CPU torch beyond what that file checks:

  dtype:<dt>   extra dtypes (float16, float64, int64, int32, int8, uint8, int16, bool, complex64) where supported
  f32all       float32 samples past the first three (the consistency file runs only those)
  noncontig    float32 samples made non-contiguous (``SampleInput.noncontiguous()``) and transposed copies
  fused        float32 samples in DEFER_AND_FUSE
  compiled     float32 samples through torch.compile(backend="tpu") (not in the default phases: slow)
  inplace      op.inplace_variant (float32, int32, bool, float16, complex64): same result or both raise
  backward     grads of sum(outputs * random cotangent) for supports_autograd OpInfos (float32)
  errors       ``op.error_inputs``: must raise on tpu too (strict, then fused)

Each (op, phase) runs in a worker process (restarted after a crash or hang). The catalogue is printed
at the end and written as JSON lines: tags [wrong value] [wrong dtype] [wrong shape] [silent]
[tpu raised] [unclear error] [crash] [hang].

    PYTHONPATH=$PWD python3 bench/lane/sweep_opinfo.py --out /tmp/sweep.jsonl [--ops a,b] [--phases dtype,fused]
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # the repository root (bench/lane/)
EXTRA = ["float16", "float64", "int64", "int32", "int8", "uint8", "int16", "bool", "complex64"]
CAP = {"inplace": 3, "compiled": 2, "dtype": 3, "f32all": 6, "noncontig": 3, "fused": 4, "backward": 3, "errors": 12}

_S, _E, _R = "@@S ", "@@E ", "@@R "


# ----------------------------------------------------------------------------------------------------
# worker side


def _worker():
    sys.path.insert(0, ROOT)  # the repository root: tests.*
    import faulthandler
    faulthandler.enable()
    import torch
    from torch.utils import _pytree as pytree

    import torch_tpu
    from tests.harness.compare import sync, _TOL
    from tests.harness.errors import assert_device_works, is_clear
    from tests.harness.inputs import materialise
    from tests.ops import test_op_consistency as T

    ops = {T._full_name(o): o for o in T._selected()}

    def tol(name, dtype):
        t = T.TOLERANCES.get((name, dtype)) or T.TOLERANCES.get((name, None))
        return t if t else _TOL.get(dtype, (0.0, 0.0))

    def short(e):
        s = str(e).strip().splitlines()
        return f"{type(e).__module__}.{type(e).__name__}: {s[0][:300] if s else ''}"

    def _classify(report, base, cexc, texc, compare_values) -> None:
        """Report one sample: CPU and tpu both raised (the tpu error must be clear), one of them raised, or
        both returned (``compare_values()`` gives a (tag, message) or None)."""
        if cexc is not None:
            if texc is None:
                report({**base, "tag": "[silent]", "msg": "cpu raised " + short(cexc)})
            elif not is_clear(texc):
                report({**base, "tag": "[unclear error]", "msg": short(texc) + " || cpu " + short(cexc)})
            return
        if texc is not None:
            report({**base, "tag": "[tpu raised]", "msg": short(texc)})
            return
        try:
            bad = compare_values()
        except Exception as e:  # noqa: BLE001
            bad = ("[compare error]", short(e))
        if bad:
            report({**base, "tag": bad[0], "msg": bad[1]})

    def to_host(v):
        return pytree.tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, v)

    def compare(name, sample, exp, got, dtype):
        """None when equal, else (tag, message)."""
        got = to_host(got)
        cl, cs = pytree.tree_flatten(exp)
        tl, ts = pytree.tree_flatten(got)
        if len(cl) != len(tl):
            return "[wrong structure]", f"cpu {cs} tpu {ts}"
        for k, (c, t) in enumerate(zip(cl, tl)):
            if isinstance(c, torch.Tensor):
                if not isinstance(t, torch.Tensor):
                    return "[wrong structure]", f"out {k}: tpu {type(t)}"
                if c.dtype != t.dtype and not (name == "native_layer_norm" and k > 0):
                    return "[wrong dtype]", f"out {k}: cpu {c.dtype} tpu {t.dtype}"
                if c.shape != t.shape:
                    return "[wrong shape]", f"out {k}: cpu {tuple(c.shape)} tpu {tuple(t.shape)}"
        if name in T.RANDOM or name in T.UNINITIALISED:
            try:
                if name in T.RANDOM:
                    T._check_random(name, sample, exp, got)
            except AssertionError as e:
                return "[wrong value]", short(e)
            return None
        if name == "nn.functional.scaled_dot_product_attention" and sample.kwargs.get("dropout_p", 0) > 0:
            return None  # random masks: shape and dtype only
        a, r = tol(name, dtype)
        if name in T._INDEX_OUTPUT_OPS and isinstance(exp, tuple) and len(exp) == 2:
            try:
                T._check_indices(name, sample, exp, got, a, r)
            except Exception as e:  # noqa: BLE001
                return "[wrong value]", short(e)
            return None
        if name == "argsort":
            x = sample.input
            if x.dim() == 0:
                return None
            dim = sample.kwargs.get("dim", sample.args[0] if sample.args else -1)
            if not torch.equal(x.gather(dim, got), x.gather(dim, exp)):
                return "[wrong value]", "argsort: gathered values differ"
            return None
        override = T.TOLERANCES.get((name, dtype)) or T.TOLERANCES.get((name, None))
        r0 = r
        accum = dtype in (torch.bfloat16, torch.float16) and name in T.ACCUMULATING
        for k, (c, t) in enumerate(zip(cl, tl)):
            if isinstance(c, torch.Tensor):
                aa, r = (a, r0) if override else _TOL.get(c.dtype, (0.0, 0.0))
                if accum and c.is_floating_point() and c.numel():
                    f = c[torch.isfinite(c)]
                    aa = a * max(1.0, f.abs().max().item() if f.numel() else 1.0)
                try:
                    torch.testing.assert_close(t, c, atol=aa, rtol=r, equal_nan=True, check_stride=False,
                                               check_dtype=False)
                except AssertionError as e:
                    lines = str(e).strip().splitlines()
                    return "[wrong value]", f"out {k} ({c.dtype}{list(c.shape)}): " + " | ".join(lines[:5])
            elif isinstance(c, float) and isinstance(t, float):
                import math
                if not (math.isclose(t, c, rel_tol=r, abs_tol=a) or (math.isnan(t) and math.isnan(c))):
                    return "[wrong value]", f"out {k}: cpu {c} tpu {t}"
            elif c != t:
                return "[wrong value]", f"out {k}: cpu {c!r} tpu {t!r}"
        return None

    def report(rec):
        print(_R + json.dumps(rec), flush=True)

    def sample_list(op, dtype, cap, skip=0, **kw):
        out = []
        try:
            for i, s in enumerate(op.sample_inputs("cpu", dtype, **kw)):
                if i < skip:
                    continue
                if len(out) >= cap:
                    break
                out.append((i, s))
        except Exception as e:  # noqa: BLE001
            report({"tag": "[sample error]", "msg": short(e)})
        return out

    def run_forward(name, op, dtype, samples, mode=None, variant="", aliased=False):
        n = 0
        for i, sample in samples:
            torch.manual_seed(0)
            try:
                exp = op(sample.input, *sample.args, **sample.kwargs)
                cexc = None
            except Exception as e:  # noqa: BLE001
                exp, cexc = None, e
            torch.manual_seed(0)
            try:
                # views are rebuilt as views on the device (.to() of a strided view gives a dense copy)
                inp, args, kwargs = move_aliased(name, sample) if aliased else T._move_sample(name, sample)
                if mode == "compiled":
                    torch._dynamo.reset()
                    got = to_host(torch.compile(lambda i, a, k: op(i, *a, **k), backend="tpu", dynamic=False)(
                        inp, args, kwargs))
                elif mode is not None:
                    with torch.tpu.set_eager_mode(mode):
                        got = op(inp, *args, **kwargs)
                        got = to_host(got)
                        sync()
                else:
                    got = to_host(op(inp, *args, **kwargs))
                texc = None
            except Exception as e:  # noqa: BLE001
                got, texc = None, e
            n += 1
            desc = T._describe(sample)[:400]
            base = {"dtype": str(dtype).replace("torch.", ""), "sample": i, "variant": variant, "desc": desc}
            _classify(report, base, cexc, texc, lambda: compare(name, sample, exp, got, dtype))
        return n

    def transposed(sample):
        def tr(x):
            if isinstance(x, torch.Tensor) and x.dim() >= 2:
                return x.detach().mT.contiguous().mT.requires_grad_(x.requires_grad)
            return x
        return sample.transform(tr)

    def phase(name, ph):
        op = ops[name]
        supported = op.supported_dtypes("cpu")
        f32 = torch.float32 if torch.float32 in supported else None
        n = 0
        if ph.startswith("dtype:"):
            dt = getattr(torch, ph.split(":")[1])
            n += run_forward(name, op, dt, sample_list(op, dt, CAP["dtype"]))
        elif ph == "f32all":
            n += run_forward(name, op, f32, sample_list(op, f32, CAP["f32all"], skip=3))
        elif ph == "noncontig":
            ss = sample_list(op, f32, CAP["noncontig"])
            n += run_forward(name, op, f32, [(i, s.noncontiguous()) for i, s in ss], variant="noncontig", aliased=True)
            n += run_forward(name, op, f32, [(i, transposed(s)) for i, s in ss], variant="transposed")
        elif ph == "fused":
            n += run_forward(name, op, f32, sample_list(op, f32, CAP["fused"]),
                             mode=torch_tpu.EagerMode.DEFER_AND_FUSE, variant="fused")
        elif ph == "compiled":
            n += run_forward(name, op, f32, sample_list(op, f32, CAP["compiled"]), mode="compiled",
                             variant="compiled")
        elif ph.startswith("inplace:"):
            dt = getattr(torch, ph.split(":")[1])
            n += run_inplace(name, op, dt, sample_list(op, dt, CAP["inplace"]))
        elif ph == "backward":
            n += run_backward(name, op, sample_list(op, torch.float32, CAP["backward"], requires_grad=True))
        elif ph.startswith("errors"):
            mode = torch_tpu.EagerMode.DEFER_AND_FUSE if ph == "errors_fused" else None
            n += run_errors(name, op, mode)
        return n

    def run_inplace(name, op, dtype, samples):
        """op.inplace_variant on a clone of the input: same result, same mutated input, or both raise."""
        fn = op.inplace_variant
        n = 0
        for i, sample in samples:
            base = {"dtype": str(dtype).replace("torch.", ""), "sample": i, "variant": "inplace",
                    "desc": T._describe(sample)[:400]}
            if not isinstance(sample.input, torch.Tensor):
                continue
            c_in = sample.input.clone()
            torch.manual_seed(0)
            try:
                fn(c_in, *sample.args, **sample.kwargs)
                cexc = None
            except Exception as e:  # noqa: BLE001
                cexc = e
            n += 1
            _, args, kwargs = T._move_sample(name, sample)
            t_in = sample.input.clone().to("tpu")
            torch.manual_seed(0)
            try:
                fn(t_in, *args, **kwargs)
                got = t_in.cpu()
                texc = None
            except Exception as e:  # noqa: BLE001
                texc = e
            _classify(report, base, cexc, texc, lambda: compare(name, sample, c_in, got, dtype))
        return n

    def run_backward(name, op, samples):
        n = 0
        for i, sample in samples:
            base = {"dtype": "float32", "sample": i, "variant": "backward", "desc": T._describe(sample)[:400]}
            if name in T.RANDOM or sample.kwargs.get("dropout_p", 0) > 0:
                continue  # random values: nothing to compare
            leaves = [x for x in pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
                      if isinstance(x, torch.Tensor) and x.requires_grad]
            if not leaves:
                continue
            torch.manual_seed(0)
            try:
                out = op(sample.input, *sample.args, **sample.kwargs)
                outs = [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
                if not outs:
                    continue
                g = torch.Generator().manual_seed(1)
                cots = [torch.randn(o.shape, generator=g, dtype=o.dtype) if not o.is_complex() else
                        torch.randn(o.shape, generator=g, dtype=o.dtype) for o in outs]
                loss = sum((o * c).sum() for o, c in zip(outs, cots))
                if loss.is_complex():
                    loss = loss.real
                exp = torch.autograd.grad(loss, leaves, allow_unused=True)
                cexc = None
            except Exception as e:  # noqa: BLE001
                exp, cexc = None, e
            if cexc is not None:
                continue  # CPU cannot differentiate this sample
            n += 1
            mapping = {}

            def mv(x):
                if isinstance(x, torch.Tensor):
                    if id(x) not in mapping:
                        y = x.detach().to("tpu")
                        if x.requires_grad:
                            y.requires_grad_(True)
                        mapping[id(x)] = y
                    return mapping[id(x)]
                if isinstance(x, torch.device) and x.type == "cpu":
                    return torch.device("tpu")
                return x
            torch.manual_seed(0)
            try:
                inp = pytree.tree_map(mv, sample.input)
                args = list(sample.args) if name in T._CPU_ARGS else pytree.tree_map(mv, list(sample.args))
                kwargs = pytree.tree_map(mv, dict(sample.kwargs))
                tleaves = [mapping[id(x)] for x in leaves]
                out = op(inp, *args, **kwargs)
                touts = [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
                if len(touts) != len(cots):
                    report({**base, "tag": "[wrong structure]", "msg": f"{len(touts)} differentiable outputs, cpu {len(cots)}"})
                    continue
                loss = sum((o * c.to(o.device)).sum() for o, c in zip(touts, cots))
                if loss.is_complex():
                    loss = loss.real
                got = to_host(list(torch.autograd.grad(loss, tleaves, allow_unused=True)))
            except Exception as e:  # noqa: BLE001
                report({**base, "tag": "[tpu raised]" if is_clear(e) else "[tpu raised][unclear]", "msg": short(e)})
                continue
            for k, (c, t) in enumerate(zip(exp, got)):
                if (c is None) != (t is None):
                    report({**base, "tag": "[wrong structure]", "msg": f"grad {k}: cpu {c is None} tpu {t is None}"})
                    break
                if c is None:
                    continue
                if c.dtype != t.dtype or c.shape != t.shape:
                    report({**base, "tag": "[wrong dtype]", "msg": f"grad {k}: {c.dtype}{tuple(c.shape)} vs {t.dtype}{tuple(t.shape)}"})
                    break
                a, r = tol(name, torch.float32)
                a, r = max(a, 1e-4), max(r, 1e-4)
                try:
                    torch.testing.assert_close(t, c, atol=a, rtol=r, equal_nan=True)
                except AssertionError as e:
                    report({**base, "tag": "[wrong value]", "msg": f"grad {k}: " + " | ".join(str(e).splitlines()[:5])})
                    break
        return n

    def move_aliased(name, s):
        """The sample on the device with its aliasing kept (an out= view of the input stays a view)."""
        inp, args, kwargs = materialise([s.input, list(s.args), dict(s.kwargs)], "tpu")
        if name in T._CPU_ARGS:
            args = list(s.args)
        dev = lambda x: torch.device("tpu") if isinstance(x, torch.device) and x.type == "cpu" else x  # noqa: E731
        kwargs = {k: ("tpu" if k == "device" and v == "cpu" else dev(v)) for k, v in kwargs.items()}
        return inp, [dev(a) for a in args], kwargs

    def run_errors(name, op, mode):
        if op.error_inputs_func is None:
            return 0
        n = 0
        try:
            errs = list(op.error_inputs("cpu"))[:CAP["errors"]]
        except Exception as e:  # noqa: BLE001
            report({"tag": "[sample error]", "msg": short(e)})
            return 0
        for i, ei in enumerate(errs):
            s = ei.sample_input
            try:
                op(s.input, *s.args, **s.kwargs)
                continue  # CPU does not raise this one (device-specific error input)
            except Exception as e:  # noqa: BLE001
                cexc = e
            n += 1
            base = {"dtype": str(getattr(s.input, "dtype", "")), "sample": i,
                    "variant": "errors_fused" if mode else "errors", "desc": T._describe(s)[:300]}
            try:
                inp, args, kwargs = move_aliased(name, s)
                if mode is not None:
                    with torch.tpu.set_eager_mode(mode):
                        to_host(op(inp, *args, **kwargs))
                        sync()
                else:
                    to_host(op(inp, *args, **kwargs))
                    sync()
                report({**base, "tag": "[silent]", "msg": "cpu raised " + short(cexc)})
            except Exception as e:  # noqa: BLE001
                if not is_clear(e):
                    report({**base, "tag": "[unclear error]", "msg": short(e) + " || cpu " + short(cexc)})
            try:
                assert_device_works()
            except BaseException as e:  # noqa: BLE001
                report({**base, "tag": "[device broken]", "msg": short(e)})
        return n

    for line in sys.stdin:
        task = line.strip()
        if not task:
            continue
        print(_S + task, flush=True)
        print(_S + task, file=sys.stderr, flush=True)
        name, ph = task.split("|")
        t0 = time.monotonic()
        try:
            n = phase(name, ph)
            st = "done"
        except Exception as e:  # noqa: BLE001
            n, st = 0, "error " + short(e)
        print(_E + json.dumps([task, st, n, round(time.monotonic() - t0, 2)]), flush=True)


# ----------------------------------------------------------------------------------------------------
# driver side


def _tasks(selected_ops, phases):
    sys.path.insert(0, ROOT)  # the repository root: tests.*
    import torch
    from tests.ops import test_op_consistency as T
    out = []
    for op in T._selected():
        name = T._full_name(op)
        if selected_ops and name not in selected_ops:
            continue
        sup = op.supported_dtypes("cpu")
        for ph in phases:
            if ph == "dtype":
                out += [f"{name}|dtype:{d}" for d in EXTRA if getattr(torch, d) in sup]
            elif ph in ("f32all", "noncontig", "fused", "compiled"):
                if torch.float32 in sup:
                    out.append(f"{name}|{ph}")
            elif ph == "inplace":
                if op.inplace_variant is not None:
                    out += [f"{name}|inplace:{d}" for d in ("float32", "int32", "bool", "float16", "complex64")
                            if getattr(torch, d) in sup]
            elif ph == "backward":
                if op.supports_autograd and torch.float32 in sup:
                    out.append(f"{name}|backward")
            elif ph == "errors":
                if op.error_inputs_func is not None:
                    out += [f"{name}|errors", f"{name}|errors_fused"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/sweep.jsonl")
    ap.add_argument("--ops", default="")
    ap.add_argument("--phases", default="dtype,f32all,noncontig,fused,inplace,backward,errors")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--worker", action="store_true")
    a = ap.parse_args()
    if a.worker:
        return _worker()
    ops = set(x for x in a.ops.split(",") if x)
    tasks = _tasks(ops, a.phases.split(","))
    print(f"{len(tasks)} tasks", flush=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    out = open(a.out, "w")
    todo = list(tasks)
    t_start = time.monotonic()
    done = 0
    while todo:
        proc = subprocess.Popen([sys.executable, "-X", "faulthandler", __file__, "--worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        lines: queue.Queue = queue.Queue()
        err_tail: list = []

        def pump_out():
            for ln in proc.stdout:
                lines.put(ln)
            lines.put(None)

        def pump_err():
            for ln in proc.stderr:
                if ln.startswith(_S.strip()):
                    err_tail.clear()
                err_tail.append(ln)
                del err_tail[:-200]

        threading.Thread(target=pump_out, daemon=True).start()
        threading.Thread(target=pump_err, daemon=True).start()
        def feed(items=list(todo)):
            try:
                proc.stdin.write("\n".join(items) + "\n")
                proc.stdin.close()
            except (BrokenPipeError, OSError, ValueError):
                pass

        threading.Thread(target=feed, daemon=True).start()
        current = None
        deadline = time.monotonic() + a.timeout + 60
        finished = set()
        while True:
            try:
                ln = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                ln = "TIMEOUT"
            if ln == "TIMEOUT" or ln is None:
                if ln == "TIMEOUT":
                    proc.kill()
                proc.wait()
                cur = current or (todo[0] if todo else None)
                if cur is not None and cur not in finished:
                    tag = "[hang]" if ln == "TIMEOUT" else "[crash]"
                    tail = "".join(err_tail)
                    cut = tail.find("\nExtension modules:")
                    tail = tail[:cut] if cut >= 0 else tail
                    rec = {"task": cur, "tag": tag, "msg": f"rc {proc.returncode}: " + tail[-1500:]}
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
                    finished.add(cur)
                break
            if ln.startswith(_S):
                current = ln[len(_S):].strip()
                deadline = time.monotonic() + a.timeout
            elif ln.startswith(_R):
                rec = json.loads(ln[len(_R):])
                rec["task"] = current
                out.write(json.dumps(rec) + "\n")
                out.flush()
            elif ln.startswith(_E):
                task, st, n, dt = json.loads(ln[len(_E):])
                out.write(json.dumps({"task": task, "tag": "[done]", "status": st, "n": n, "s": dt}) + "\n")
                out.flush()
                finished.add(task)
                done += 1
                current = None
                if done % 100 == 0:
                    print(f"{done}/{len(tasks)} tasks, {time.monotonic() - t_start:.0f} s", flush=True)
        todo = [t for t in todo if t not in finished]
    out.close()
    summarise(a.out)


def summarise(path):
    import collections
    recs = [json.loads(ln) for ln in open(path)]
    c = collections.Counter()
    per = collections.defaultdict(set)
    samples = 0
    for r in recs:
        if r["tag"] == "[done]":
            samples += r["n"]
            continue
        c[r["tag"]] += 1
        per[r["tag"]].add(r["task"])
    print(f"tasks {sum(1 for r in recs if r['tag'] == '[done]')}, samples run {samples}")
    for tag, n in c.most_common():
        print(f"{tag}: {n} samples in {len(per[tag])} tasks")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--summary":
        summarise(sys.argv[2])
    else:
        main()
