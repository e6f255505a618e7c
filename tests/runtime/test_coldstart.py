"""Time to first image: the persistent program cache (verified entries, programs and op descriptions
found by key, eviction) and fused-mode graph boundaries (model calls and repeated blocks).

Results are compared with CPU torch; counters say what was compiled, loaded or rejected. No timing."""
import json
import os
import sys

import pytest
import torch

import torch_tpu
from torch_tpu import EagerMode
from torch_tpu.engine import fused, module_graphs
from torch_tpu.runtime import disk_cache, stable_keys
from tests.harness import hangs

pytestmark = pytest.mark.slow

FUSE = EagerMode.DEFER_AND_FUSE


# -------------------------------------------------------------------------------------------------
# Entries and keys
# -------------------------------------------------------------------------------------------------
def test_an_entry_is_returned_only_for_its_own_key_and_intact_bytes():
    data = disk_cache.encode("key A", b"payload of A")
    assert disk_cache.decode("key A", data) == (b"payload of A", "")
    assert disk_cache.decode("key B", data)[0] is None  # a file moved under another name
    flipped = bytearray(data)
    flipped[-3] ^= 0x01
    assert disk_cache.decode("key A", bytes(flipped)) == (None, "checksum mismatch")
    assert disk_cache.decode("key A", data[:-1])[0] is None
    assert disk_cache.decode("key A", data + b"x")[0] is None
    assert disk_cache.decode("key A", b"garbage")[0] is None


def test_only_registered_kinds_of_plain_values_are_persistent_keys():
    text = stable_keys.text
    assert text(("op", "aten::add.Tensor", (((2, 3), torch.float32),), None)) is not None
    assert text(("not-a-kind", 1)) is None  # unregistered kinds (ids, handles) stay in the process
    assert text(("op", "aten::add.Tensor", (stable_keys.ProcessLocal(123),), None)) is None
    assert text(("op", "aten::add.Tensor", (object(),), None)) is None
    distinct = [1, 1.0, True, 0.0, -0.0, float("nan"), 1 + 0j, "1", None, torch.float32, torch.int32]
    texts = {text(("op", "x", v)) for v in distinct}
    assert len(texts) == len(distinct)
    # a fused graph is persistent only when every node is
    node = ("op", "aten::sin.default", (((2,), torch.float32),), None)
    assert text(("fused", ((node, (("i", 0),)),), (), (), ())) is not None
    assert text(("fused", ((("other", 1), (("i", 0),)),), (), (), ())) is None


def test_the_disk_cache_keeps_to_its_size_bound(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TORCH_TPU_CACHE_MAX_MB", "1")
    blob = os.urandom(200_000)
    for i in range(12):  # 2.4 MB through a 1 MB bound
        disk_cache.store(f"entry {i}", blob)
        disk_cache.flush_writes()
        os.utime(disk_cache._path(str(tmp_path), f"entry {i}"), (1000 + i, 1000 + i))
    total = sum(p.stat().st_size for p in tmp_path.glob("*.ttpc"))
    assert total <= 2**20
    assert disk_cache.load("entry 11") == blob  # the most recent entries stay
    assert disk_cache.load("entry 0") is None


def test_a_process_counts_the_cache_folder_from_its_count_file_not_a_scan(tmp_path, monkeypatch):
    """A process's first write reads the folder's byte count beside the entries (a full folder holds ~10^5
    of them; stat-ing each kept a background thread busy for seconds, competing for the GIL); it adds what it
    writes, and the bound still holds (an eviction counts the folder again)."""
    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TORCH_TPU_CACHE_MAX_MB", "1")
    blob = os.urandom(200_000)
    disk_cache.store("entry a", blob)
    disk_cache.flush_writes()
    size = os.path.getsize(disk_cache._path(str(tmp_path), "entry a"))
    assert disk_cache._read_total(str(tmp_path)) == size
    scans = []
    real_scan = disk_cache._scan
    monkeypatch.setattr(disk_cache, "_scan", lambda root: scans.append(root) or real_scan(root))
    monkeypatch.setattr(disk_cache._WRITER, "total", {})  # as in a new process
    disk_cache.store("entry b", blob)
    disk_cache.flush_writes()
    assert not scans
    assert disk_cache._read_total(str(tmp_path)) == 2 * size
    for i in range(5):  # past the 1 MB bound: evicted by a scan, the count corrected
        disk_cache.store(f"entry {i}", blob)
        disk_cache.flush_writes()
    assert scans
    total = sum(p.stat().st_size for p in tmp_path.glob("*.ttpc"))
    assert total <= 2**20 and disk_cache._read_total(str(tmp_path)) == total


# -------------------------------------------------------------------------------------------------
# Warm processes: found by key, never the wrong program
# -------------------------------------------------------------------------------------------------
def _ops(x):
    y = torch.nn.functional.gelu(x @ x.t() * 7.25 + 1.5)
    z = torch.softmax(y, dim=-1)[:, 1:3].contiguous()
    z[0] += 2  # a view write
    return torch.cat([z, x[:, :2] - 7.25], dim=1).sum(dim=0)


@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_AND_FUSE"])
def test_programs_and_op_descriptions_come_back_from_disk(tmp_path, monkeypatch, mode):
    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", str(tmp_path))
    x = torch.randn(6, 5)
    ref = _ops(x)
    with torch.tpu.set_eager_mode(EagerMode[mode]):
        torch_tpu.reset_caches()
        first = _ops(x.to("tpu")).cpu()
        disk_cache.flush_writes()
        torch_tpu.reset_caches()  # a fresh process, as far as programs and op entries go
        torch_tpu.reset_stats()
        second = _ops(x.to("tpu")).cpu()
        stats = torch_tpu.stats()
    torch.testing.assert_close(first, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(second, ref, atol=1e-5, rtol=1e-5)
    assert stats["compiles"] == 0 and stats["cache_loads"] > 0 and stats["op_loads"] > 0, stats
    assert stats["cache_rejects"] == 0, stats



def _view_ops(x):
    y = (x * 2).view(2, 6, 4).pow(2)  # pow of a folded view (a reshape of an op's output)
    return y.transpose(0, 1)[1:4].exp()


@pytest.mark.parametrize("first,second", [("DEFER_NEVER", "DEFER_AND_FUSE"), ("DEFER_AND_FUSE", "DEFER_NEVER")])
def test_op_descriptions_of_view_arguments_load_in_the_other_mode(tmp_path, monkeypatch, first, second):
    # An op description written by one mode and traced again by the other (fused graphs and programs
    # not on disk retrace a loaded description) must still read its view arguments through the view.
    import warnings

    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", str(tmp_path))
    x = torch.randn(12, 4)
    ref = _view_ops(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fused graph that fails as a whole warns
        with torch.tpu.set_eager_mode(EagerMode[first]):
            torch_tpu.reset_caches()
            a = _view_ops(x.to("tpu")).cpu()
            disk_cache.flush_writes()
        with torch.tpu.set_eager_mode(EagerMode[second]):
            torch_tpu.reset_caches()  # a fresh process, as far as programs and op entries go
            torch_tpu.reset_stats()
            b = _view_ops(x.to("tpu")).cpu()
            stats = torch_tpu.stats()
    torch.testing.assert_close(a, ref)
    torch.testing.assert_close(b, ref)
    assert stats["op_loads"] > 0, stats


def _entry_calls(x, i):
    conv = torch.nn.functional.conv2d(x.view(1, 2, 3, 4).to(memory_format=torch.channels_last),
                                      torch.ones(3, 2, 1, 1, device=x.device))  # a channels_last result
    values, idx = x.max(dim=1)  # two results
    y = x.clone()
    y.add_(1.5)  # in-place, a dynamic Scalar
    out = torch.empty(4, 6, device=x.device, dtype=torch.float64)
    torch.add(x, 2, out=out)  # out= of another dtype
    return conv, values, idx, y, out, x.index_select(0, i), torch.full((2,), 3.5, device=x.device)


def test_an_entry_from_its_description_is_the_entry_from_its_plan(tmp_path, monkeypatch):
    # LoweredEntry.from_description (a warm process) must give every op what LoweredEntry.from_plan gave it
    from torch_tpu.eager import op_path
    from torch_tpu.eager.entries import LoweredEntry

    def entries():
        found = {e.key: e for e in op_path._ENTRIES.values() if isinstance(e, LoweredEntry)}
        return {k: (e.avals, e.out_dtypes, e.n_out, e.writes, e.returns_scalar, tuple(e.device_checks), e.layouts,
                    e.write_orders, e.random, e.plain, e.check is None, e.rebuild is None, e.loaded)
                for k, e in found.items()}

    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", str(tmp_path))
    x, i = torch.randn(4, 6), torch.tensor([0, 3])
    ref = _entry_calls(x, i)
    torch_tpu.reset_caches()
    first = [t.cpu() for t in _entry_calls(x.to("tpu"), i.to("tpu"))]
    planned = entries()
    disk_cache.flush_writes()
    torch_tpu.reset_caches()  # a fresh process, as far as programs and op entries go
    torch_tpu.reset_stats()
    second = [t.cpu() for t in _entry_calls(x.to("tpu"), i.to("tpu"))]
    described = entries()
    for a, b, r in zip(first, second, ref):
        torch.testing.assert_close(a, r)
        torch.testing.assert_close(b, r)
    assert torch_tpu.stats()["op_loads"] >= 6
    loaded = [k for k in described if described[k][-1]]
    assert len(loaded) >= 6 and any(planned[k][6] is not None for k in loaded)  # (the conv's layout)
    for k in loaded:
        assert described[k][:-1] == planned[k][:-1], k



def _resized_out_ops(x, c):
    # out= tensors of the wrong shape (resized, as CPU does with its deprecation warning when they held
    # elements); c is a CPU 0-dim tensor (allowed like CUDA's cpu scalars)
    return [torch.add(x, c, out=torch.empty(0, dtype=torch.int64, device=x.device)),
            torch.fmod(x, c, out=torch.empty(0, dtype=torch.int64, device=x.device)),
            torch.mul(x.float(), 2.5, out=torch.empty(0, device=x.device))]


@pytest.mark.parametrize("first,second", [("DEFER_NEVER", "DEFER_AND_FUSE"), ("DEFER_AND_FUSE", "DEFER_NEVER"),
                                          ("DEFER_NEVER", "DEFER_NEVER")])
def test_a_resized_out_argument_traces_again_from_its_description(tmp_path, monkeypatch, first, second):
    """An entry read from disk traces from meta arguments; its check of a resized out= view read an
    attribute only a tpu tensor has (AttributeError '_tpu_full': in fused mode, or where the program was
    not on disk)."""
    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", str(tmp_path))
    x, c = torch.tensor([3, -7, 5], dtype=torch.int8), torch.tensor(-2)
    ref = _resized_out_ops(x, c)
    for mode in (first, second):
        with torch.tpu.set_eager_mode(EagerMode[mode]):
            torch_tpu.reset_caches()  # a fresh process, as far as programs and op entries go
            got = [t.cpu() for t in _resized_out_ops(x.to("tpu"), c)]
            disk_cache.flush_writes()
        for g, r in zip(got, ref):
            assert g.dtype == r.dtype
            torch.testing.assert_close(g, r)


def _gather(x, rows):
    return torch.nn.functional.embedding(rows, x) * 2  # embedding checks its indices on the device


@pytest.mark.parametrize("descriptions", ["kept", "lost"])
@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_AND_FUSE"])
def test_programs_with_device_checks_are_found_by_key_and_still_check(tmp_path, monkeypatch, mode, descriptions):
    # A program with device-side checks is found by key (no tracing, no lowering) with the messages of
    # its checks: from its op's description, or (descriptions lost) from the program's own entry.
    from torch_tpu.errors import DeviceAssertError

    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", str(tmp_path))
    x = torch.randn(6, 3)
    good, bad = torch.tensor([[0, 5], [2, 2]]), torch.tensor([[0, 6], [2, 2]])
    with torch.tpu.set_eager_mode(EagerMode[mode]):
        torch_tpu.reset_caches()
        _gather(x.to("tpu"), good.to("tpu")).cpu()
        disk_cache.flush_writes()
        if descriptions == "lost":
            for f in tmp_path.glob("*.ttpc"):
                if f.read_bytes()[len(disk_cache._MAGIC) + 12:].startswith(b"op-description"):
                    f.unlink()
        torch_tpu.reset_caches()  # a fresh process, as far as programs and op entries go
        torch_tpu.reset_stats()
        out = _gather(x.to("tpu"), good.to("tpu")).cpu()
        stats = torch_tpu.stats()
        with pytest.raises(DeviceAssertError, match="embedding"):
            _gather(x.to("tpu"), bad.to("tpu")).cpu()
        torch_tpu.sync()
    torch.testing.assert_close(out, _gather(x, good))
    assert stats["compiles"] == 0 and stats["cache_loads"] > 0, stats
    if descriptions == "kept" or mode == "DEFER_NEVER":  # (fused mode traces an op without one)
        assert stats["device_checks_traced"] == 0, stats  # found by key: nothing was traced
    assert stats["cache_rejects"] == 0, stats


_CHILD = r"""
import json, torch, torch_tpu
from torch_tpu.runtime import disk_cache
x = torch.tensor([1.0, 2.0, 4.0]).to("tpu")
out = {}
for mode in ("DEFER_NEVER", "DEFER_AND_FUSE"):  # op programs, then fused graphs' programs and sets
    with torch.tpu.set_eager_mode(torch_tpu.EagerMode[mode]):
        out[mode] = {"mul": (x * 7.25).cpu().tolist(), "add": (x + 7.25).cpu().tolist(),
                     "sub": (x - 7.25).cpu().tolist()}
disk_cache.flush_writes()
print(json.dumps({**out, "stats": torch_tpu.stats()}))
"""


def _child(cache):
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(cache))
    out = hangs.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _right(r):
    for mode in ("DEFER_NEVER", "DEFER_AND_FUSE"):
        assert r[mode] == {"mul": [7.25, 14.5, 29.0], "add": [8.25, 9.25, 11.25], "sub": [-6.25, -5.25, -3.25]}, r


def test_swapped_and_corrupted_cache_files_are_rejected_and_rebuilt(tmp_path):
    cache = tmp_path / "cache"
    _right(_child(cache))
    warm = _child(cache)
    _right(warm)
    assert warm["stats"]["compiles"] == 0 and warm["stats"]["cache_loads"] > 0, warm["stats"]

    # every file now holds another file's entry (x * 7.25 could find the program of x + 7.25) ...
    files = sorted(cache.glob("*.ttpc"))
    contents = [f.read_bytes() for f in files]
    for f, data in zip(files, contents[1:] + contents[:1]):
        f.write_bytes(data)
    swapped = _child(cache)
    _right(swapped)
    assert swapped["stats"]["cache_rejects"] > 0 and swapped["stats"]["compiles"] > 0, swapped["stats"]

    # ... and then every file is damaged in its payload, or cut short
    for i, f in enumerate(sorted(cache.glob("*.ttpc"))):
        data = bytearray(f.read_bytes())
        if i % 2:
            data[-1] ^= 0xFF
            f.write_bytes(bytes(data))
        else:
            f.write_bytes(bytes(data[: len(data) // 2]))
    corrupted = _child(cache)
    _right(corrupted)
    assert corrupted["stats"]["cache_rejects"] > 0 and corrupted["stats"]["compiles"] > 0, corrupted["stats"]

    healed = _child(cache)  # the rebuilt entries are good again
    _right(healed)
    assert healed["stats"]["cache_rejects"] == 0 and healed["stats"]["compiles"] == 0, healed["stats"]


def test_a_fused_program_returning_other_shapes_is_dropped_and_the_values_are_right(tmp_path, monkeypatch):
    """A cached program that returns other shapes than its graph recorded (a wrong entry: the opsweep
    round saw a (25,) result for a [5, 5] value) must never hand them out: the graph runs op by op and
    the program is forgotten."""
    import warnings

    from torch_tpu.runtime import program_cache

    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", str(tmp_path))
    x_cpu = torch.randn(5, 5)

    def graph(x):
        return torch.nn.functional.threshold(x * 2, 0.3, -0.8)

    real = program_cache.compile_program

    def wrong(key, fn, args, **kw):  # a fused graph's program that returns its values flattened
        if key[0] != "fused":
            return real(key, fn, args, **kw)
        return real(key, lambda *a: tuple(r.reshape(-1) for r in fn(*a)), args, **kw)

    with torch.tpu.set_eager_mode(FUSE):
        torch_tpu.reset_caches()
        monkeypatch.setattr(program_cache, "compile_program", wrong)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y = graph(x_cpu.to("tpu"))
            got = y.cpu()
        assert not [k for k in program_cache._PROGRAMS if k[0] == "fused"]  # dropped, never run
        monkeypatch.setattr(program_cache, "compile_program", real)
        torch_tpu.reset_stats()
        again = graph(x_cpu.to("tpu")).cpu()  # compiled again, right this time
        assert torch_tpu.stats()["compiles"] == 1
    assert got.shape == (5, 5) and y.shape == (5, 5)
    torch.testing.assert_close(got, graph(x_cpu))
    torch.testing.assert_close(again, graph(x_cpu))
    assert any("returns shape (25,)" in str(w.message) for w in caught), [str(w.message) for w in caught]


def test_a_program_that_cannot_be_kept_on_disk_leaves_no_alias_to_it(tmp_path, monkeypatch):
    """Some executables cannot be serialized (XLA:CPU's sort). Its key must then not point at a
    missing entry: the next process compiles it again instead of loading, failing and dropping it."""
    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", str(tmp_path))
    from torch_tpu.runtime import prefetch, program_cache

    # programs the loader read ahead from the default cache (earlier tests of this process) would be
    # taken instead of compiled, and never written to this test's folder
    prefetch.stop(timeout=30)
    monkeypatch.setattr(prefetch._State, "ready", {})
    real = program_cache._serialize
    monkeypatch.setattr(program_cache, "_serialize",
                        lambda c: None if "sort" in str(c.as_text()) else real(c))
    x = torch.tensor([3.0, -1.0, 2.0, 0.5])
    torch_tpu.reset_caches()
    got = torch.sort(x.to("tpu") * 2).values.cpu()
    disk_cache.flush_writes()
    torch.testing.assert_close(got, torch.sort(x * 2).values)
    stored = {}  # kind of entry -> [(key, payload)]
    for f in tmp_path.glob("*.ttpc"):
        data = f.read_bytes()[len(disk_cache._MAGIC):]
        key_len, _ = disk_cache._HEADER.unpack_from(data)
        key = data[disk_cache._HEADER.size:disk_cache._HEADER.size + key_len].decode()
        payload, why = disk_cache.decode(key, f.read_bytes())
        assert payload is not None, why
        stored.setdefault(key.split("\n", 1)[0], []).append((key, payload))
    assert "program-by-module" in stored  # the multiplication's program was kept
    for _, payload in stored.get("program-by-key", []):
        assert disk_cache.exists(json.loads(payload)["module"]), "an alias points at a program not on disk"
    assert len(stored.get("program-by-key", [])) == 1, stored.keys()  # mul only; sort has none
    torch_tpu.reset_caches()
    torch_tpu.reset_stats()
    again = torch.sort(x.to("tpu") * 2).values.cpu()
    torch.testing.assert_close(again, torch.sort(x * 2).values)
    stats = torch_tpu.stats()
    assert stats["compiles"] == 1 and stats["cache_loads"] == 1 and stats["cache_rejects"] == 0, stats


def test_the_background_loader_keeps_a_bounded_number_of_programs_ahead(monkeypatch):
    """A process that starts like the last run and then does something else must not load (and hold)
    every program of that run: at most ``_AHEAD`` loaded programs wait to be taken."""
    import time

    from torch_tpu.runtime import prefetch

    st = prefetch._State
    prefetch.stop(timeout=30)  # this worker's own loaders (earlier tests) must not fill this test's dict
    for name in ("source", "stop", "ready", "loading", "threads"):  # this test's own loader state
        monkeypatch.setattr(st, name, {} if name in ("ready", "loading") else [] if name == "threads" else None)
    monkeypatch.setattr(prefetch, "_AHEAD", 16)
    loaded = []
    monkeypatch.setitem(prefetch._loaders, "test-kind", lambda key: loaded.append(key) or ("program", key))
    keys = [f"test-kind\n{i}" for i in range(200)]
    prefetch._launch(keys)

    def settle():
        for _ in range(200):
            before = len(loaded)
            time.sleep(0.02)
            if len(loaded) == before and not st.loading:
                return

    settle()
    assert len(st.ready) == 16 and len(loaded) == 16, (len(st.ready), len(loaded))
    assert prefetch.take(keys[3]) == ("program", keys[3])  # taking one makes room for one more
    settle()
    assert len(st.ready) == 16 and len(loaded) == 17
    prefetch.stop(timeout=10)
    assert not any(t.is_alive() for t in st.threads)

    # small entries (op descriptions) do not count: a warm pipeline's 225 of them came first and kept its
    # programs from loading until the main thread took some
    monkeypatch.setattr(prefetch, "_small", {"test-small"})
    monkeypatch.setitem(prefetch._loaders, "test-small", lambda key: loaded.append(key) or ("desc", key))
    st.ready.clear()
    loaded.clear()
    small = [f"test-small\n{i}" for i in range(40)]
    prefetch._launch(small + keys[100:140])
    settle()
    assert len(loaded) == 40 + 16 and all(k in st.ready for k in small), len(loaded)
    prefetch.stop(timeout=10)


_AHEAD_CHILD = r"""
import json, sys, torch, torch_tpu
from torch_tpu.runtime import disk_cache, prefetch

def work(x):
    y = torch.tanh(x * 3.5) + x.exp() - torch.softmax(x, 0) * 2
    return [y, y.sum(), x.max(), torch.cumsum(x, 0), x.abs().sqrt(), torch.flip(y, [0]), x.clamp(0, 1)]

ref = work(torch.tensor([1.0, -2.0, 4.0, 0.5]))
prefetch._thread_count = lambda: int(sys.argv[2])
read_before_transfer = None
if sys.argv[3] == "is_available":  # asked before any device use (diffusers asks at import)
    from torch_tpu.runtime import platform
    assert torch.accelerator.is_available()
    for t in platform._BACKGROUND:  # the platform's start thread starts the background loaders
        t.join(60)
    for t in prefetch._State.threads:
        t.join(60)
    read_before_transfer = torch_tpu.stats()["cache_prefetched"]
x = torch.tensor([1.0, -2.0, 4.0, 0.5]).to("tpu")  # the first transfer starts the background thread
if sys.argv[1] == "DEFER_AND_FUSE":
    torch.tpu.eager_mode = torch_tpu.EagerMode.DEFER_AND_FUSE
for t in prefetch._State.threads:  # let it read everything the last run used before the first op
    t.join(60)
if sys.argv[1] == "compile":  # as a pipeline with a compiled transformer: eager ops first, then the graph
    eager = [t.cpu() for t in work(x)]
    fn = torch.compile(work, backend="tpu", fullgraph=True)
else:
    fn = work
out = [t.cpu() for t in fn(x)]
same = all(torch.allclose(a, b, atol=1e-5, rtol=1e-5) for a, b in zip(out, ref))
disk_cache.flush_writes()
print(json.dumps({"same": same, "stats": torch_tpu.stats(), "read_before_transfer": read_before_transfer}))
"""


@pytest.mark.parametrize("mode,threads,start", [("DEFER_NEVER", 1, "transfer"), ("DEFER_NEVER", 3, "transfer"),
                                                ("DEFER_AND_FUSE", 3, "is_available"), ("compile", 3, "transfer")])
def test_a_warm_process_reads_programs_and_op_descriptions_ahead(tmp_path, mode, threads, start):
    """The background threads of a warm process load the last run's programs and read its op
    descriptions; the main thread then takes them (none is read twice) and computes the same values.
    They start at the first transfer, or earlier where the program asks torch.accelerator.is_available()
    first (the platform's start thread starts them as soon as the device is open). A torch.compile graph's
    program, found by its lowered module (no structural key), is read ahead too: on the TPU host a
    transformer's took 1.2 s to load on the calling thread."""
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(tmp_path), TORCH_TPU_LOG="compiles")
    results = []

    def child():
        out = hangs.run([sys.executable, "-c", _AHEAD_CHILD, mode, str(threads), start], env=env,
                        capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        r = json.loads(out.stdout.strip().splitlines()[-1])
        assert r["same"], r
        results.append(r)
        return r["stats"], [line for line in out.stderr.splitlines() if "torch_tpu" in line and " in " in line]

    (cold, cold_log) = child()
    assert cold["compiles"] > 0 and cold["cache_prefetched"] == 0, cold
    assert len([m for m in cold_log if "] compiled " in m]) == cold["compiles"], cold_log
    (warm, warm_log) = child()
    # the compile log says where each program came from (it said "compiled in 0.000s" of read-ahead ones)
    assert warm_log and all("] loaded from cache (read ahead) " in m for m in warm_log), warm_log
    assert warm["compiles"] == 0 and warm["cache_rejects"] == 0, warm
    assert warm["op_loads"] > 0 or mode == "compile", warm
    assert warm["cache_loads"] > 0, warm
    # every program, op description and fused graph set the warm run read came from the background thread
    assert warm["cache_prefetched"] == warm["cache_loads"] + warm["op_loads"] + warm["graph_set_loads"], warm
    assert (warm["graph_set_loads"] > 0) == (mode == "DEFER_AND_FUSE"), warm
    if start == "is_available":  # all of it read before the program's first transfer
        assert results[-1]["read_before_transfer"] == warm["cache_prefetched"] > 0, results[-1]


_SETS_CHILD = r"""
import json, sys, torch, torch_tpu
from torch_tpu.runtime import disk_cache
hold = sys.argv[1] == "hold"
x0 = torch.linspace(-1, 1, 24).reshape(4, 6)
ref = x0.clone()
for _ in range(3):
    ref = torch.tanh(ref) * 0.5 + 0.1
x = x0.to("tpu")
kept = [x] if hold else []  # the first step's input stays referenced: not free to donate then
torch.tpu.eager_mode = torch_tpu.EagerMode.DEFER_AND_FUSE
compiles = []
for _ in range(3):
    before = torch_tpu.stats()["compiles"]
    x = torch.tanh(x) * 0.5 + 0.1
    torch.tpu.synchronize()
    compiles.append(torch_tpu.stats()["compiles"] - before)
same = torch.allclose(x.cpu(), ref, atol=1e-6, rtol=1e-6)
disk_cache.flush_writes()
print(json.dumps({"same": same, "compiles": compiles, "stats": torch_tpu.stats()}))
"""


def test_a_warm_process_starts_from_the_donation_sets_the_last_one_ended_with(tmp_path):
    """The first step's graph of a warm process may find more inputs free to donate than the last
    process's first step did (there, a value was still referenced: held by the user, or by a graph
    waiting for its background compile). The last run's donation set is kept on disk, so the warm
    process reuses its program instead of compiling the same graph with another donation set."""
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(tmp_path))

    def child(arg):
        out = hangs.run([sys.executable, "-c", _SETS_CHILD, arg], env=env, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        r = json.loads(out.stdout.strip().splitlines()[-1])
        assert r["same"], r
        return r

    cold = child("hold")
    assert cold["compiles"][0] >= 1 and cold["compiles"][1:] == [0, 0], cold  # one set, kept to the end
    warm = child("free")
    assert warm["compiles"] == [0, 0, 0] and warm["stats"]["cache_rejects"] == 0, warm


# -------------------------------------------------------------------------------------------------
# Fused graph boundaries
# -------------------------------------------------------------------------------------------------
class _Block(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.lin = torch.nn.Linear(width, width)

    def forward(self, x, scale):
        return x + torch.tanh(self.lin(self.norm(x))) * scale


class _Model(torch.nn.Module):
    _repeated_blocks = ["_Block"]  # as diffusers models declare them: blocks even when there is one

    def __init__(self, depth, width=16):
        super().__init__()
        self.inp = torch.nn.Linear(width, width)
        self.blocks = torch.nn.ModuleList(_Block(width) for _ in range(depth))
        self.out = torch.nn.Linear(width, width)

    def forward(self, x, t):
        scale = torch.sigmoid(t) * 0.5
        h = self.inp(x)[:, 1:]  # the first block gets a view, the next ones whole tensors
        for block in self.blocks:
            h = block(h, scale)
        return self.out(torch.cat([h[:, :1], h], dim=1))


def _denoise(model, x, steps):
    """A denoising loop: glue before the model call, the call, a scheduler-like update."""
    builds = []
    for i in range(steps):
        t = torch.full((1,), 1.0 - i / steps, device=x.device) * 2.0  # glue before the call
        before = torch_tpu.stats()["cache_misses"]
        eps = model(x, t)
        x = x - 0.1 * eps  # the scheduler step: glue recorded before the next call
        builds.append(torch_tpu.stats()["cache_misses"] - before)
    return x, builds


def test_every_denoising_step_is_the_same_graph_and_identical_blocks_share_a_program():
    torch.manual_seed(0)
    x = torch.randn(2, 4, 16)
    programs = {}
    for depth in (1, 3):
        model = _Model(depth)
        with torch.no_grad():
            ref, _ = _denoise(model, x, 4)
        model.to("tpu")
        torch_tpu.reset_caches()
        with torch.no_grad(), torch.tpu.set_eager_mode(FUSE):
            torch_tpu.reset_stats()
            out, builds = _denoise(model, x.to("tpu"), 4)
            out = out.cpu()
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        # step 1: the model's programs and its glue; step 2: the scheduler glue only; then nothing new
        assert builds[2:] == [0, 0], builds
        assert builds[1] <= 1, builds
        programs[depth] = builds[0]
    assert programs[3] == programs[1], programs  # identical blocks share one program, whatever the depth


class _SplittingBlock(torch.nn.Module):
    """As FLUX's single-stream block: one stream in, two slices of it out."""

    def __init__(self, width):
        super().__init__()
        self.lin = torch.nn.Linear(width, width)

    def forward(self, text, image):
        h = torch.cat([text, image], dim=1)
        h = h + torch.tanh(self.lin(h))
        return h[:, :1], h[:, 1:]


class _SplittingModel(torch.nn.Module):
    _repeated_blocks = ["_SplittingBlock"]

    def __init__(self, depth, width=16):
        super().__init__()
        self.inp = torch.nn.Linear(width, width)
        self.blocks = torch.nn.ModuleList(_SplittingBlock(width) for _ in range(depth))

    def forward(self, x):
        h = self.inp(x)
        text, image = h[:, :1], h[:, 1:]
        for block in self.blocks:
            text, image = block(text, image)
        return image * 2


def test_the_views_a_block_returns_are_read_in_its_own_graph():
    """A block returning views of its result (FLUX's single-stream blocks return two slices): reading them
    in the next block's pre-hook made a two-node graph, one more launch, per block. They are read in the
    returning block's graph: one graph per block, plus the model's input and output glue."""
    torch.manual_seed(0)
    x = torch.randn(2, 5, 16)
    model = _SplittingModel(4)
    with torch.no_grad():
        ref = model(x)
    model.to("tpu")
    with torch.no_grad(), torch.tpu.set_eager_mode(FUSE):
        xt = x.to("tpu")
        model(xt)
        torch_tpu.sync()
        before = torch_tpu.stats()["executions"]
        out = model(xt)
        torch_tpu.sync()
        launched = torch_tpu.stats()["executions"] - before
    torch.testing.assert_close(out.cpu(), ref, atol=1e-5, rtol=1e-5)
    assert launched == 4 + 2, launched


def test_compiled_blocks_in_fused_mode_entered_at_every_call_compile_once():
    """Regional compilation with the glue in fused mode, the mode set around every call (as a pipeline call
    in ``with set_eager_mode(...)``): dynamo guards a compiled block on the ids of torch's global module
    hooks and on the block's own hooks, which fused mode installs; new ids at each switch recompiled every
    block at every call until dynamo's recompile limit, an error with fullgraph=True."""
    torch.manual_seed(0)
    x = torch.randn(2, 4, 16)
    model = _Model(3)
    with torch.no_grad():
        ref = [model(x, torch.full((1,), 0.1 * i)) for i in range(10)]
    model.to("tpu")
    for block in model.blocks:
        block.compile(backend="tpu", fullgraph=True, dynamic=False)
    outs = []
    for i in range(10):  # past dynamo's recompile limit (8)
        with torch.no_grad(), torch.tpu.set_eager_mode(FUSE):
            outs.append(model(x.to("tpu"), torch.full((1,), 0.1 * i, device="tpu")).cpu())
        if i == 1:
            compiles = torch_tpu.stats()["graph_compiles"]
    assert torch_tpu.stats()["graph_compiles"] == compiles  # nothing compiled after the second call
    for got, want in zip(outs, ref):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_repeated_blocks_are_found():
    model = _Model(1)
    assert module_graphs.repeated_blocks(model) == list(model.blocks)  # named by _repeated_blocks
    stack = torch.nn.Module()
    stack.layers = torch.nn.ModuleList(_Block(4) for _ in range(3))  # a ModuleList of alike blocks
    assert module_graphs.repeated_blocks(stack) == list(stack.layers)
    lins = torch.nn.Module()
    lins.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))  # leaves are not blocks
    assert module_graphs.repeated_blocks(lins) == []
    mixed = torch.nn.Module()  # one class, other widths (a VAE's up blocks): every one is a block
    mixed.layers = torch.nn.ModuleList([_Block(4), _Block(8), _Block(4)])
    assert module_graphs.repeated_blocks(mixed) == list(mixed.layers)
    lone = torch.nn.Module()  # a block alone of its class in the list is not
    lone.layers = torch.nn.ModuleList([_Block(4), _SplittingBlock(4), _Block(4)])
    assert module_graphs.repeated_blocks(lone) == [lone.layers[0], lone.layers[2]]


class _WideningStack(torch.nn.Module):
    """A decoder's stack: blocks of one class whose widths differ (each a graph of its own, the alike ones
    sharing a program), glue between them."""

    def __init__(self):
        super().__init__()
        self.ups = torch.nn.ModuleList([_Block(8), _Block(8), _Widen(8, 16), _Widen(16, 4)])
        self.out = torch.nn.Linear(4, 4)

    def forward(self, x):
        for block in self.ups:
            x = block(x, 0.5) if isinstance(block, _Block) else block(x)
        return self.out(x)


class _Widen(torch.nn.Module):
    def __init__(self, a, b):
        super().__init__()
        self.norm = torch.nn.LayerNorm(a)
        self.lin = torch.nn.Linear(a, b)

    def forward(self, x):
        return torch.nn.functional.silu(self.lin(self.norm(x)))


def _cpu_then_tpu(model, x):
    """CPU torch's output of ``model`` on ``x``; then the model moves to the tpu, its programs' caches emptied."""
    with torch.no_grad():
        ref = model(x)
    model.to("tpu")
    torch_tpu.reset_caches()
    return ref


def test_blocks_that_differ_are_graphs_of_their_own():
    """The blocks of a stack whose shapes differ are graphs of their own, compiled side by side on a first
    call (they were one graph with the model, a decoder's longest compile): one graph per block call and one
    for the model's own ops, alike blocks sharing a program; values as on CPU, and a second call builds nothing."""
    torch.manual_seed(0)
    model = _WideningStack()
    x = torch.randn(2, 3, 8)
    ref = _cpu_then_tpu(model, x)
    with torch.no_grad(), torch.tpu.set_eager_mode(FUSE):
        xt = x.to("tpu")
        torch_tpu.reset_stats()
        out = model(xt).cpu()
        first = torch_tpu.stats()
        again = model(xt).cpu()
        second = torch_tpu.stats()
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(again, ref, atol=1e-5, rtol=1e-5)
    assert first["flushes"] == first["executions"] == 5, first  # four blocks and the model's last Linear
    assert first["cache_misses"] == 4, first  # programs: the two _Block(8) share one
    assert second["cache_misses"] == first["cache_misses"], second  # the second call builds nothing


class _PackedModel(torch.nn.Module):
    """A transformer-like model called as a pipeline calls it: keyword arguments, a Linear over a 3-D
    input (it flattens it with a view), a timestep embedding, one repeated block."""
    _repeated_blocks = ["_Block"]

    def __init__(self, width=16):
        super().__init__()
        self.x_embedder = torch.nn.Linear(width, width)
        self.t_embedder = torch.nn.Linear(1, width)
        self.blocks = torch.nn.ModuleList(_Block(width) for _ in range(2))
        self.proj_out = torch.nn.Linear(width, width)

    def forward(self, hidden_states, timestep):
        h = self.x_embedder(hidden_states)
        scale = torch.sigmoid(self.t_embedder(timestep[:, None]))[:, None]
        for block in self.blocks:
            h = block(h, scale)
        return self.proj_out(h)


def _pipeline(model, noise, steps, builds=None):
    """A flow-matching denoising loop as diffusers writes it: packed latents (a reshape of a permuted
    tensor, so a view at step 1 and a tensor of its own afterwards), a scheduler reading sigmas[i] and
    sigmas[i + 1] (offset 0 at step 1 only), the first step's latents still referenced by the caller
    when its update runs."""
    b, c, h, w = noise.shape
    latents = noise.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5).reshape(b, h * w // 4, c * 4)
    first = latents
    sigmas = torch.linspace(1.0, 1.0 / steps, steps, device=noise.device)
    sigmas = torch.cat([sigmas, sigmas.new_zeros(1)])
    for i in range(steps):
        before = torch_tpu.stats()["cache_misses"]
        timestep = sigmas[i].expand(b)
        eps = model(hidden_states=latents, timestep=timestep)
        latents = latents + (sigmas[i + 1] - sigmas[i]) * eps
        if builds is not None:
            builds.append(torch_tpu.stats()["cache_misses"] - before)
    return latents, first


def test_a_pipeline_denoising_step_compiles_nothing_new_after_the_first():
    # The first step's packed latents are a view (later steps pass the scheduler's output), its
    # scheduler update reads sigmas at offset 0 (later steps at another), and the buffers free to reuse
    # differ; none of this may make a model graph or the scheduler's graph of later steps new.
    torch.manual_seed(0)
    noise = torch.randn(1, 4, 8, 8)
    model = _PackedModel()
    with torch.no_grad():
        ref, _ = _pipeline(model, noise, 5)
    model.to("tpu")
    torch_tpu.reset_caches()
    builds = []
    with torch.no_grad(), torch.tpu.set_eager_mode(FUSE):
        torch_tpu.reset_stats()
        out, first = _pipeline(model, noise.to("tpu"), 5, builds)
        out = out.cpu()
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert builds[0] >= 4, builds  # the glue, the model before its blocks, the block, after the blocks
    # step 2 builds the scheduler update of step 1 (recorded after step 1's model call, flushed when
    # step 2's call starts). The sigmas a step reads are views whose offsets change from step to step: as
    # any number of a fused graph, an offset is a constant of its program until a second value is seen at
    # its place, and an input from then on (graph_sets.dynamic_numbers): the glue reading them builds once
    # more with the offsets as inputs (step 2's glue, step 2's scheduler update flushed at step 3); then
    # every step reuses every program
    assert builds[1] <= 2 and builds[2] <= 1, builds
    assert builds[3:] == [0, 0], builds
    del first


class _ActivatedStack(torch.nn.Module):
    """Blocks with glue around them that holds one of torch's parameterless layers (a VAE decoder's conv_act)."""

    def __init__(self, width=8):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.act = torch.nn.SiLU()
        self.blocks = torch.nn.ModuleList([_Block(width) for _ in range(2)])
        self.out = torch.nn.Linear(width, 4)

    def forward(self, x):
        x = self.act(self.norm(x))
        for b in self.blocks:
            x = b(x, 0.5)
        return self.out(self.act(x))


def test_a_fused_call_repeated_builds_nothing_new_around_torch_layers():
    """torch's parameterless layers around the blocks are not recorded: a recording refused for its size split
    the fused graph around them in the first two calls only, so the third call built the graph whole as a new
    program (the shipped demo's VAE decoder did)."""
    torch.manual_seed(0)
    model = _ActivatedStack()
    x = torch.randn(2, 3, 8)
    ref = _cpu_then_tpu(model, x)
    misses = []
    with torch.no_grad(), torch.tpu.set_eager_mode(FUSE):
        xt = x.to("tpu")
        for _ in range(4):
            before = torch_tpu.stats()["cache_misses"]
            torch.testing.assert_close(model(xt).cpu(), ref, atol=1e-5, rtol=1e-5)
            misses.append(torch_tpu.stats()["cache_misses"] - before)
    assert misses[0] > 0 and misses[1:] == [0, 0, 0], misses


@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_AND_FUSE"])
def test_an_indexed_read_shares_one_program_at_every_index_zero_included(mode):
    # x[i] takes its offset as a program input; only a view reading its whole storage (offset 0
    # necessarily) is specialised. A loop over i must not build one program for i == 0 and another for
    # the rest.
    sig = torch.linspace(1.0, 0.0, 6)
    x = torch.randn(6, 3)
    with torch.tpu.set_eager_mode(EagerMode[mode]):
        torch_tpu.reset_caches()
        sig_t, x_t = sig.to("tpu"), x.to("tpu")
        builds, outs = [], []
        for i in range(5):
            before = torch_tpu.stats()["cache_misses"]
            outs.append(((sig_t[i + 1] - sig_t[i]) * x_t[i]).cpu())
            builds.append(torch_tpu.stats()["cache_misses"] - before)
    for i in range(5):
        torch.testing.assert_close(outs[i], (sig[i + 1] - sig[i]) * x[i])
    # (fused: an offset is a constant of its graph until a second value is seen at its place, then an
    # input, as any number of a graph: the second index builds once more, and no later one)
    assert builds[0] >= 1 and builds[1] <= (1 if mode == "DEFER_AND_FUSE" else 0) and builds[2:] == [0, 0, 0], builds


class _WritesItsInput(torch.nn.Module):
    def forward(self, hidden_states):
        before = self.lin_in(hidden_states)  # read through the value taken at the call's start
        flat = hidden_states.view(-1, hidden_states.shape[-1])
        flat.mul_(2)  # a write into another view of the same storage: later reads must see it
        after = hidden_states.reshape(hidden_states.shape[-1], -1)[1:3] + flat.t()[:2]
        return before, after

    def __init__(self):
        super().__init__()
        self.lin_in = torch.nn.Linear(16, 4)


def test_a_model_call_on_a_reshaped_view_sees_writes_through_other_views():
    # A model call's argument that is all of its storage in another shape is read once when the call
    # starts, and the call's views of it read that value: a write through one of them must still reach
    # the storage, the argument, its base and every later read.
    torch.manual_seed(0)
    model = _WritesItsInput()
    noise = torch.randn(1, 4, 8, 8)

    def run(m, n):
        packed = n.view(1, 4, 4, 2, 4, 2).permute(0, 2, 4, 1, 3, 5).reshape(1, 16, 16)
        before, after = m(hidden_states=packed)
        return before, after, packed, packed.view(-1)

    with torch.no_grad():
        ref = run(model, noise)
    model.to("tpu")
    with torch.no_grad(), torch.tpu.set_eager_mode(FUSE):
        got = [[t.cpu() for t in run(model, noise.to("tpu"))] for _ in range(2)]
    for outs in got:
        for g, r in zip(outs, ref):
            torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-5)
