"""Process-level hazards and everyday API corners.

* fork: using the device in a child forked after the parent used it must raise a clear error (like
  CUDA's "Cannot re-initialize ... in forked subprocess"), never hang; forked DataLoader workers that
  never touch the device must work.
* the persistent program cache: two cache entries swapped on disk must never make one program run for
  another (x*7.25 returning x+7.25); a corrupt entry must be ignored or raise clearly.
* collectives: a shape error in all_gather_into_tensor names the shapes, it does not claim a peer exited.
* Python protocol and device API corners (item/tolist/len/iter/numpy/repr/devices), compared with CPU.
Process-level cases run in child processes, started together so their imports overlap.
"""
import json
import os
import textwrap

import pytest
import torch

from tests.harness import jobs
from tests.harness import differential as D
from tests.harness.compare import assert_same, read
from tests.harness.errors import assert_device_works, _exc_text, is_clear
from tests.harness.inputs import DEV, rand
from tests.harness.isolated import assert_isolated_ok, IsolatedBatch, run_isolated

pytestmark = [pytest.mark.usefixtures("watchdog"), pytest.mark.slow]

# the parent's side of a fork: wait 30 s for the child, then kill it and say it hung
_WAIT_FOR_CHILD = """
        deadline = time.time() + 30
        while time.time() < deadline:
            r, status = os.waitpid(pid, os.WNOHANG)
            if r:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL); os.waitpid(pid, 0); print("CHILD-HANG")
"""

FORK = {
    "fork_after_device_use": ("""
        import os, time, signal
        (torch.ones(2, device="tpu") + 1).cpu()
        pid = os.fork()
        if pid == 0:
            try:
                y = (torch.ones(2, device="tpu") + 1).cpu()
                os.write(1, f"CHILD-RAN {y.tolist()}\\n".encode())
            except Exception as e:
                os.write(1, f"CHILD-RAISED {type(e).__name__}: {e}\\n".encode())
            os._exit(0)
    """ + _WAIT_FOR_CHILD + """
        print("PARENT", (torch.ones(2, device="tpu") * 3).cpu().tolist())
        print("OK")
    """, r"CHILD-RAISED [A-Za-z]*Error: .*(?i:fork)[\s\S]*PARENT \[3.0, 3.0\][\s\S]*OK"),
    "fork_child_device_module_calls": ("""
        import os, time, signal
        (torch.ones(2, device="tpu") + 1).cpu()
        pid = os.fork()
        if pid == 0:
            try:
                torch.tpu.synchronize()
                os.write(1, b"CHILD-RAN\\n")
            except Exception as e:
                os.write(1, f"CHILD-RAISED {type(e).__name__}: {e}\\n".encode())
            os._exit(0)
    """ + _WAIT_FOR_CHILD + """
        print("OK")
    """, r"CHILD-(RAN|RAISED [A-Za-z]*Error: .*(?i:fork))[\s\S]*OK"),
    "is_in_bad_fork": ("""
        import os
        (torch.ones(2, device="tpu") + 1).cpu()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, str(torch.tpu._is_in_bad_fork()).encode()); os._exit(0)
        os.waitpid(pid, 0)
        print("BADFORK", os.read(r, 10).decode())
        print("OK")
    """, r"BADFORK True[\s\S]*OK"),
    "dataloader_fork_workers": ("""
        import multiprocessing as mp
        (torch.ones(2, device="tpu") + 1).cpu()
        ds = torch.utils.data.TensorDataset(torch.arange(8.0))
        dl = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2,
                                         multiprocessing_context=mp.get_context("fork"), timeout=60)
        tot = sum((b[0].to("tpu") * 2).sum().item() for b in dl)
        print("SUM", tot)
        print("OK")
    """, r"SUM 56.0[\s\S]*OK"),
}


def _dist_snippet(world):
    return f"""
        import torch.distributed as dist
        dist.init_process_group(backend="tpu_dist")
        out = torch.empty({world} * 3 + 1, device="tpu")   # wrong size: must be {world} * 2
        try:
            dist.all_gather_into_tensor(out, torch.ones(2, device="tpu"))
            torch.tpu.synchronize(); out.cpu()
            print("NO-RAISE")
        except Exception as e:
            print("RAISED", type(e).__name__, str(e).replace("\\n", " ")[:400])
        dist.destroy_process_group()
        print("OK")
    """


@pytest.fixture(scope="module")
def fork_batch():
    b = IsolatedBatch({k: (v[0], None) for k, v in FORK.items()}, workers=2, timeout=120)
    yield b
    b.close()


@pytest.mark.parametrize("name", sorted(FORK))
def test_fork(fork_batch, name):
    proc = fork_batch.result(name)
    assert "CHILD-HANG" not in proc.stdout, f"[hang] the forked child hung using the device: {proc.stdout[-500:]}"
    if name == "fork_after_device_use":
        assert "CHILD-RAN" not in proc.stdout, (
            f"[silent] the forked child used the device without an error (CUDA raises): {proc.stdout[-300:]}")
    if name == "is_in_bad_fork":
        assert "BADFORK False" not in proc.stdout, "[silent] torch.tpu._is_in_bad_fork() is False in a forked child"
    assert_isolated_ok(proc, expect=FORK[name][1])


@pytest.mark.parametrize("world", [1, 2])
def test_all_gather_shape_error_is_clear(world):
    code = "import torch, torch_tpu\n" + textwrap.dedent(_dist_snippet(world))
    outs = jobs.run_ranks(["-c", code], jobs.without_rank_variables(os.environ), nproc=world, timeout=120,
                          extra={"TORCH_TPU_DIST_TIMEOUT": "30"})
    for rank, (rc, o, _) in enumerate(outs):
        assert rc is not None, f"[hang] rank {rank} did not finish: {o[-1500:]}"
        assert rc == 0, f"[crash] rank {rank} rc {rc}: {o[-2000:]}"
        assert "RAISED" in o, f"[silent] rank {rank}: all_gather_into_tensor with a wrong output size returned: {o}"
        msg = o.split("RAISED", 1)[1].split("\n", 1)[0].lower()
        assert "peer" not in msg and "exited" not in msg, f"[unclear error] rank {rank} blames a peer: {o.strip()}"
        assert any(w in msg for w in ("size", "shape", "numel", "element")), (
            f"[unclear error] rank {rank}: the message does not name the size problem: {o.strip()}")


# ---------------------------------------------------------------------------------------------------
# persistent program cache


_POPULATE = """
    import json, os
    from torch_tpu.runtime import disk_cache
    d = os.environ["TORCH_TPU_CACHE_DIR"]
    def listing():
        disk_cache.flush_writes()  # entries are written on a background thread: wait for them
        return set(f for f in os.listdir(d) if not f.startswith("."))
    x = torch.tensor([1.0, 2.0, 4.0]).to("tpu")
    (x.cpu(), (x - 0.5).cpu())
    s0 = listing()
    y = (x * 7.25).cpu()
    s1 = listing()
    z = (x + 7.25).cpu()
    s2 = listing()
    print("FILES", json.dumps({"mul": sorted(s1 - s0), "add": sorted(s2 - s1)}))
    print("OK")
"""

_VERIFY = """
    x = torch.tensor([1.0, 2.0, 4.0]).to("tpu")
    try:
        m = (x * 7.25).cpu().tolist()
        a = (x + 7.25).cpu().tolist()
        print("VALUES", m, a)
        assert m == [7.25, 14.5, 29.0], f"x*7.25 gave {m}"
        assert a == [8.25, 9.25, 11.25], f"x+7.25 gave {a}"
    except AssertionError:
        raise
    except Exception as e:
        print("RAISED", type(e).__name__, e)
    print("OK")
"""


def _populate(tmp_path):
    """A fresh persistent cache folder after one process computed x*7.25 and x+7.25, and the files each
    program added. (Each test populates its own folder: a copied folder is not hit by JAX's cache.)"""
    cache = tmp_path / "xla-cache"
    cache.mkdir()
    p1 = run_isolated(_POPULATE, timeout=180, env={"TORCH_TPU_CACHE_DIR": str(cache)})
    assert_isolated_ok(p1)
    files = json.loads(p1.stdout.split("FILES", 1)[1].splitlines()[0])
    return cache, files


def test_persistent_cache_swapped_entries(tmp_path):
    cache, files = _populate(tmp_path)
    mul = [f for f in files["mul"] if (cache / f).is_file()]
    add = [f for f in files["add"] if (cache / f).is_file()]
    assert mul and add, f"test setup: no new cache files per program: {files}"
    # swap the largest new entry of each program (the executable)
    mul_f = max(mul, key=lambda f: (cache / f).stat().st_size)
    add_f = max(add, key=lambda f: (cache / f).stat().st_size)
    a, b = (cache / mul_f).read_bytes(), (cache / add_f).read_bytes()
    (cache / mul_f).write_bytes(b)
    (cache / add_f).write_bytes(a)
    names_before = {f.name for f in cache.iterdir()}
    p2 = run_isolated(_VERIFY, timeout=180, env={"TORCH_TPU_CACHE_DIR": str(cache)})
    new_names = {f.name for f in cache.iterdir()} - names_before
    assert not new_names, (f"test setup: the second process looked up other cache keys ({sorted(new_names)}), "
                           "so the swapped entries were never read")
    if "AssertionError: x*7.25 gave" in p2.stderr or "AssertionError: x+7.25 gave" in p2.stderr:
        pytest.fail("[wrong value] swapped persistent-cache entries ran one program for another: "
                    + p2.stdout.strip())
    assert_isolated_ok(p2, expect=r"(VALUES|RAISED)[\s\S]*OK")
    if "RAISED" in p2.stdout:
        line = p2.stdout.split("RAISED", 1)[1].splitlines()[0]
        assert any(w in line.lower() for w in ("cache", "corrupt", "mismatch")), f"[unclear error] {line}"


def test_persistent_cache_corrupt_entry(tmp_path):
    cache, _ = _populate(tmp_path)
    for f in cache.iterdir():
        if f.is_file():
            f.write_bytes(b"\x00garbage" * 3)
    p2 = run_isolated(_VERIFY, timeout=180, env={"TORCH_TPU_CACHE_DIR": str(cache)})
    assert_isolated_ok(p2, expect=r"VALUES[\s\S]*OK")


# ---------------------------------------------------------------------------------------------------
# Python protocol, conversions, device API corners

PROTOCOL = {
    "item_float": lambda x: x[0, 0].item(),
    "item_int": lambda x: x.long()[0, 1].item(),
    "item_bool": lambda x: (x > 1)[0, 2].item(),
    "item_bf16": lambda x: x.bfloat16()[1, 1].item(),
    "tolist": lambda x: x.tolist(),
    "tolist_int8": lambda x: x.to(torch.int8).tolist(),
    "tolist_0d": lambda x: x[0, 0].tolist(),
    "float_of": lambda x: float(x[1, 2]),
    "int_of": lambda x: int(x[1, 2]),
    "bool_of": lambda x: bool(x[0, 0]),
    "index_protocol": lambda x: list(range(10))[x.long()[0, 2]],
    "len": lambda x: len(x),
    "iter": lambda x: [r.sum() for r in x],
    "equal": lambda x: (torch.equal(x, x.clone()), torch.equal(x, x + 1)),
    "allclose": lambda x: torch.allclose(x, x + 1e-9),
    "any_all_python": lambda x: (bool((x > 3).any()), bool((x > -1).all())),
    "nonzero_tuple": lambda x: torch.nonzero(x > 2, as_tuple=True),
    "format": lambda x: f"{x[0, 1].item():.3f}",
    "shape_ops": lambda x: (x.shape, x.size(-1), x.dim(), x.numel(), x.nelement(), x.element_size()),
    "dtype_props": lambda x: (x.is_floating_point(), x.is_complex(), x.long().is_signed(), x.dtype),
    "contains": lambda x: (3.0 in x, 99.0 in x),
    "to_same_device_noop": lambda x: x.to(x.device) is x,
    "to_dtype_copy": lambda x: x.to(torch.float64),
    "type_conversion": lambda x: x.type(torch.int32),
    "round_trip_cpu_bf16_nan": lambda x: torch.tensor([float("nan"), float("inf"), -0.0], device=x.device).bfloat16(),
    "float_to_int_cast": lambda x: torch.tensor([-1.7, 2.9, 300.5], device=x.device).to(torch.int64),
    "float_to_uint8_cast": lambda x: torch.tensor([1.7, 254.9], device=x.device).to(torch.uint8),
    "int_to_bool": lambda x: torch.tensor([0, 2, -1], device=x.device).bool(),
    "half_overflow": lambda x: torch.tensor([70000.0, -1e6], device=x.device).half(),
    "bf16_round": lambda x: torch.tensor([1.00390625, 1.01171875], device=x.device).bfloat16(),
    "complex_abs": lambda x: torch.complex(x, -x).abs(),
    "clone_preserves_requires_grad": lambda x: x.clone().requires_grad_(True).clone().requires_grad,
}


@pytest.mark.parametrize("case", sorted(PROTOCOL))
def test_protocol(eager_mode, case):
    D.check(PROTOCOL[case], torch.arange(6, dtype=torch.float32).reshape(2, 3))


DEVICE_API = {
    "other_index_tensor": lambda: torch.ones(2, device="tpu:1"),
    "other_index_to": lambda: torch.ones(2).to("tpu:3"),
    "set_device_1": lambda: torch.tpu.set_device(1),
    "device_ctx_other": lambda: torch.tpu.device(2).__enter__(),
    "negative_index": lambda: torch.ones(2, device="tpu:-1"),
    "mixed_devices_binary": lambda: torch.ones(2, device="tpu") + torch.ones(2),
    "mixed_devices_index": lambda: torch.ones(3, device="tpu")[torch.tensor([0, 1])],
    "mixed_devices_index_select": lambda: torch.index_select(torch.ones(3, device="tpu"), 0, torch.tensor([0, 1])),
    "mixed_devices_copy_ok": lambda: torch.ones(2, device="tpu").copy_(torch.zeros(2)).cpu(),
    "cpu_0dim_mixing_ok": lambda: (torch.ones(2, device="tpu") * torch.tensor(3.0)).cpu(),
    "pin_memory": lambda: torch.ones(2, device="tpu").pin_memory(),
    "numpy_on_device": lambda: torch.ones(2, device="tpu").numpy(),
}

# expected: "raise" (a clear error) or a CPU tensor the call must equal
DEVICE_EXPECT = {
    "other_index_tensor": "raise", "other_index_to": "raise", "set_device_1": "raise", "device_ctx_other": "raise",
    "negative_index": "raise", "mixed_devices_binary": "raise", "mixed_devices_index": torch.ones(2),
    "mixed_devices_index_select": "raise", "mixed_devices_copy_ok": torch.zeros(2),
    "cpu_0dim_mixing_ok": torch.full((2,), 3.0), "pin_memory": "raise", "numpy_on_device": "raise",
}


@pytest.mark.parametrize("case", sorted(DEVICE_API))
def test_device_api(eager_mode, case):
    """Device API misuse: the answer CUDA gives (mixing devices raises; CPU index tensors may index a
    device tensor, as on CUDA; 0-dim CPU tensors mix)."""
    exp = DEVICE_EXPECT[case]
    try:
        got = DEVICE_API[case]()
        got = read(got)
        err = None
    except Exception as e:  # noqa: BLE001
        err = e
    if isinstance(exp, str) and exp == "raise":
        assert err is not None, f"[silent] {case} returned {got!r}"
        assert is_clear(err), f"[unclear error] {case}: {type(err).__module__}.{type(err).__name__}: {err}"
        assert_device_works()
    else:
        assert err is None, f"[tpu raised] {case}: {_exc_text(err)}"
        assert_same(exp, got, where=case)


def test_repr_of_pending_and_views(eager_mode):
    x = torch.arange(6.0).reshape(2, 3)
    xt = x.to(DEV)
    for a, b in [(x, xt), (x.t(), xt.t()), (x[1], xt[1]), (x[:0], xt[:0]), (x[0, 0], xt[0, 0]),
                 ((x * 2).bfloat16(), (xt * 2).bfloat16()), (x > 2, xt > 2)]:
        r = repr(b)
        exp = repr(a)
        assert "device='tpu:0'" in r, f"[wrong value] repr without the device: {r}"
        body = r.replace(", device='tpu:0'", "")
        assert body == exp, f"[wrong value] repr differs from CPU: {body!r} vs {exp!r}"


def test_launch_blocking_error_at_call():
    """Under launch blocking an op's runtime error comes from the op's own call."""
    D.check(lambda x, i: x[i], torch.ones(3), torch.tensor([5]), modes=["blocking"], raise_at_call=True)
    D.check(lambda x: torch.multinomial(x * 0, 1), torch.ones(3), modes=["blocking"], raise_at_call=True)


# Ops that had no lowering although CPU torch has a kernel (a user met a NotImplementedError)
SEARCH = {
    "nonzero_static_pad": (lambda x: torch.nonzero_static(x > 0, size=7, fill_value=-3), (rand(2, 3),)),
    "nonzero_static_cut": (lambda x: torch.nonzero_static(x, size=1), (torch.tensor([0.0, 2.0, 3.0]),)),
    "nonzero_static_empty": (lambda x: torch.nonzero_static(x, size=0), (torch.tensor([1, 0]),)),
    "nonzero_static_0d": (lambda x: torch.nonzero_static(x, size=2), (torch.tensor(5),)),
    "nonzero_static_negative": (lambda x: torch.nonzero_static(x, size=-1), (torch.tensor([1]),)),
    "searchsorted_scalar": (lambda s: torch.searchsorted(s, 2.5), (torch.tensor([1.0, 2.0, 3.0]),)),
    "searchsorted_scalar_int_right": (lambda s: torch.searchsorted(s, 2, right=True, out_int32=True),
                                      (torch.tensor([1, 2, 2, 3]),)),
    "searchsorted_scalar_sorter": (lambda s: torch.searchsorted(s, 2, sorter=torch.tensor([1, 2, 0], device=s.device)),
                                   (torch.tensor([3, 1, 2]),)),
    "bucketize_scalar": (lambda s: torch.bucketize(2, s), (torch.tensor([1, 2, 3]),)),
    "bucketize_scalar_float_right": (lambda s: torch.bucketize(2.0, s, right=True, out_int32=True),
                                     (torch.tensor([1.0, 2.0, 3.0]),)),
}


@pytest.mark.parametrize("case", sorted(SEARCH))
def test_search_ops(eager_mode, case):
    fn, args = SEARCH[case]
    D.check(fn, *args)
