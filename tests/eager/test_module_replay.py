"""Module calls recorded once and replayed as one program (torch_tpu/eager/module_replay.py): a replay gives what
the call's Python gives, and anything a replay would not repeat makes the call run its Python (or record again).

Every test compares with CPU torch running the same module; the replay path itself is exercised with
TORCH_TPU_REPLAY_VERIFY off (the suite's default turns it on, see tests/conftest.py), and the counters say
whether a call recorded, replayed or ran its Python."""
import copy
import os
import pickle

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu.eager import module_replay

MODES = ["DEFER_NEVER", "DEFER_AND_FUSE"]


@pytest.fixture(autouse=True)
def replay_on(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_MODULE_REPLAY", "1")
    monkeypatch.delenv("TORCH_TPU_REPLAY_VERIFY", raising=False)


@pytest.fixture(params=MODES)
def mode(request):
    with torch.tpu.set_eager_mode(torch_tpu.EagerMode[request.param]):
        yield request.param


def _act(x):  # a module-level function a block calls by its global name (patched by a test)
    return F.gelu(x)


class Config:
    def __init__(self):
        self.alpha = 0.5


class Block(torch.nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.l1 = torch.nn.Linear(width, 2 * width)
        self.l2 = torch.nn.Linear(2 * width, width)
        self.norm = torch.nn.LayerNorm(width)
        self.scale = 1.5
        self.cfg = Config()

    def forward(self, x, temb):
        h = self.l2(_act(self.l1(self.norm(x)))) * self.scale
        return x + h * self.cfg.alpha + temb[:, None]


class Net(torch.nn.Module):
    def __init__(self, width=8, depth=3, block=Block):
        super().__init__()
        self.embed = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.SiLU(), torch.nn.Linear(width, width))
        self.blocks = torch.nn.ModuleList([block(width) for _ in range(depth)])
        self.out = torch.nn.Linear(width, 4)

    def forward(self, x, temb):
        x = self.embed(x)
        for b in self.blocks:
            x = b(x, temb)
        return self.out(x)


def _inputs(width=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 5, width, generator=g), torch.randn(2, width, generator=g)


def _models(cls=Net, **kw):
    torch.manual_seed(0)
    cpu = cls(**kw)
    return cpu, copy.deepcopy(cpu).to("tpu")


def _call(model, *args):
    with torch.no_grad():
        out = model(*(a.to("tpu") if isinstance(a, torch.Tensor) else a for a in args))
    return out


def _stats(fn):
    before = torch_tpu.stats()
    out = fn()
    torch_tpu.sync()
    after = torch_tpu.stats()
    return out, {k: after[k] - before[k] for k in ("module_recordings", "module_replays", "module_replay_refusals",
                                                 "executions")}


def _close(got, want, atol=1e-5):
    torch.testing.assert_close(got.cpu(), want, atol=atol, rtol=1e-5)


def test_blocks_record_then_replay_with_cpu_values(mode):
    cpu, tpu = _models()
    x, temb = _inputs()
    with torch.no_grad():
        want = cpu(x, temb)
    got, first = _stats(lambda: _call(tpu, x, temb))
    _close(got, want)
    assert first["module_recordings"] >= 3, first
    for _ in range(2):
        got, later = _stats(lambda: _call(tpu, x, temb))
        _close(got, want)
        assert later["module_recordings"] == 0 and later["module_replays"] >= 3, later
    # new values of the same shapes: the same programs, the new values
    x2, temb2 = _inputs(seed=5)
    with torch.no_grad():
        want2 = cpu(x2, temb2)
    got2, again = _stats(lambda: _call(tpu, x2, temb2))
    _close(got2, want2)
    assert again["module_recordings"] == 0, again


def test_a_replay_launches_one_program_per_block(mode):
    cpu, tpu = _models(depth=4)
    x, temb = _inputs()
    for _ in range(2):
        _call(tpu, x, temb)
    _, counts = _stats(lambda: _call(tpu, x, temb))
    # 4 blocks, one program each; the glue: the embedding's recorded program and the output projection (one
    # op, a program of its own in strict eager, a graph in fused eager), nothing else
    assert counts["module_replays"] == 5, counts
    assert counts["executions"] == 6, counts


def test_turned_off_every_call_runs_its_python(mode, monkeypatch):
    monkeypatch.setenv("TORCH_TPU_MODULE_REPLAY", "0")
    cpu, tpu = _models()
    x, temb = _inputs()
    with torch.no_grad():
        want = cpu(x, temb)
    for _ in range(2):
        got, counts = _stats(lambda: _call(tpu, x, temb))
        _close(got, want)
        assert counts["module_recordings"] == counts["module_replays"] == 0


class Outputs(torch.nn.Module):
    """Returns a new tensor, two views of one new tensor, its input itself, a view of its input, a number, None."""

    def __init__(self, width=8):
        super().__init__()
        self.l = torch.nn.Linear(width, 2 * width)

    def forward(self, x, temb):
        y = self.l(x)
        a, b = y.chunk(2, dim=-1)
        return y.sum(-1), a, b, x, x[:, 1:], 3, None


class Stack(torch.nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Outputs(width), Outputs(width)])

    def forward(self, x, temb):
        return [b(x, temb) for b in self.blocks]


def test_results_keep_their_layout_and_aliasing(mode):
    cpu, tpu = _models(Stack)
    x, temb = _inputs()
    with torch.no_grad():
        want = cpu(x, temb)
    xt = x.to("tpu")
    for call in range(3):
        with torch.no_grad():
            got = tpu(xt, temb.to("tpu"))
        for g, w in zip(got, want):
            s, a, b, same, view, number, none = g
            for t, u in zip((s, a, b, view), (w[0], w[1], w[2], w[4])):
                _close(t, u)
                assert t.stride() == u.stride() and t.storage_offset() == u.storage_offset()
            assert same is xt and number == 3 and none is None
            assert view._tpu_storage is xt._tpu_storage  # a view of the argument, as on CPU
            a.mul_(0)  # a and b are views of one tensor: a write into one leaves the other
            _close(b, w[2])
            assert a._tpu_storage is b._tpu_storage
    assert torch_tpu.stats()["module_replays"] > 0


class Counter(torch.nn.Module):
    """Writes into a buffer and into its argument in place, and returns a value computed from both."""

    def __init__(self, width=8):
        super().__init__()
        self.register_buffer("seen", torch.zeros(width))
        self.l = torch.nn.Linear(width, width)

    def forward(self, x, temb):
        self.seen.add_(1)
        temb.mul_(0.5)
        return self.l(x) + self.seen + temb[:, None]


def test_in_place_writes_into_buffers_and_arguments_happen_at_every_call(mode):
    cpu, tpu = _models(Net, block=Counter)
    x, temb = _inputs()
    temb_t = temb.to("tpu")
    for _ in range(3):
        with torch.no_grad():
            want = cpu(x, temb)
            got = tpu(x.to("tpu"), temb_t)
        _close(got, want)
        _close(temb_t, temb)
        for b_cpu, b_tpu in zip(cpu.blocks, tpu.blocks):
            _close(b_tpu.seen, b_cpu.seen)
    assert torch_tpu.stats()["module_replays"] > 0


# --- what makes a call record again -------------------------------------------------------------------------
def _after_change(mode, change, expect_recording=True):
    """Record, apply ``change(cpu, tpu)``, call again: CPU's values, and a new recording (or its Python)."""
    cpu, tpu = _models()
    x, temb = _inputs()
    for _ in range(2):
        _call(tpu, x, temb)
    change(cpu, tpu)
    with torch.no_grad():
        want = cpu(x, temb)
    got, counts = _stats(lambda: _call(tpu, x, temb))
    _close(got, want)
    if expect_recording:
        assert counts["module_recordings"] + counts["module_replay_refusals"] >= 1, counts
    got, _ = _stats(lambda: _call(tpu, x, temb))  # and the next call (replayed again) too
    _close(got, want)
    return counts


def test_a_method_patched_on_its_class_is_run(mode, monkeypatch):
    def change(cpu, tpu):
        monkeypatch.setattr(torch.nn.LayerNorm, "forward", lambda self, x: x * 2.0)

    _after_change(mode, change)


def test_a_global_function_rebound_is_run(mode, monkeypatch):
    def change(cpu, tpu):
        monkeypatch.setitem(globals(), "_act", torch.tanh)

    _after_change(mode, change)


def test_a_torch_function_patched_by_the_user_is_run(mode, monkeypatch):
    original = F.gelu

    def change(cpu, tpu):
        monkeypatch.setattr(F, "gelu", lambda x: original(x) * 3.0)

    _after_change(mode, change)


def test_an_attribute_set_again_is_read(mode):
    def change(cpu, tpu):
        for m in (cpu, tpu):
            m.blocks[1].scale = -2.0

    _after_change(mode, change)


def test_an_attribute_of_a_plain_object_is_read(mode):
    def change(cpu, tpu):
        for m in (cpu, tpu):
            m.blocks[0].cfg.alpha = 4.0

    _after_change(mode, change)


def test_a_parameter_replaced_or_written_is_read(mode):
    """A new parameter of the same layout in its place, or new data: the replay reads the new values (no new
    recording is needed: the program reads every module tensor from its place)."""
    def change(cpu, tpu):
        with torch.no_grad():
            new = torch.randn(16, 8)
            cpu.blocks[0].l1.weight = torch.nn.Parameter(new.clone())
            tpu.blocks[0].l1.weight = torch.nn.Parameter(new.to("tpu"))
            cpu.blocks[1].l2.weight.data = torch.ones(8, 16)
            tpu.blocks[1].l2.weight.data = torch.ones(8, 16).to("tpu")

    counts = _after_change(mode, change, expect_recording=False)
    assert counts["module_recordings"] == 0 and counts["module_replays"] >= 3, counts


def test_a_parameter_updated_in_place_is_read_without_recording_again(mode):
    def change(cpu, tpu):
        with torch.no_grad():
            for m in (cpu, tpu):
                m.blocks[2].l1.weight.add_(0.25)
                m.blocks[0].norm.bias.fill_(-1.0)

    counts = _after_change(mode, change, expect_recording=False)
    assert counts["module_recordings"] == 0 and counts["module_replays"] >= 3, counts


def test_moved_to_the_host_and_back_it_replays_with_the_same_parameters(mode):
    """Model offload's round trip: the weights come back in new storages, laid out as before; the recording
    serves them (no new recording), and the move keeps every parameter object (an optimizer built before it
    still holds the model's parameters)."""
    cpu, tpu = _models()
    x, temb = _inputs()
    with torch.no_grad():
        want = cpu(x, temb)
    for _ in range(2):
        _call(tpu, x, temb)
    params = list(tpu.parameters())
    for _ in range(2):
        tpu.to("cpu")
        assert all(p.device.type == "cpu" for p in params)
        tpu.to("tpu")
        assert [id(p) for p in tpu.parameters()] == [id(p) for p in params]
        got, counts = _stats(lambda: _call(tpu, x, temb))
        _close(got, want)
        assert counts["module_recordings"] == 0 and counts["module_replays"] >= 3, counts


def test_parameter_data_set_again_is_read(mode):
    """``p.data = t`` (diffusers' group offload, accelerate): the new values of the same layout are read by the
    replay; another layout, or two tensors that now share a storage, record again; CPU's values each time."""
    cpu, tpu = _models()
    x, temb = _inputs()
    for _ in range(2):
        _call(tpu, x, temb)
    with torch.no_grad():
        new = torch.randn(16, 8)
        cpu.blocks[0].l1.weight.data = new.clone()
        tpu.blocks[0].l1.weight.data = new.to("tpu")
        want = cpu(x, temb)
    got, counts = _stats(lambda: _call(tpu, x, temb))
    _close(got, want)
    assert counts["module_recordings"] == 0 and counts["module_replays"] >= 3, counts
    with torch.no_grad():
        for m in (cpu, tpu):  # bias and weight of one norm: one storage now
            m.blocks[1].norm.bias.data = m.blocks[1].norm.weight.data
            m.blocks[2].l2.weight.data = m.blocks[2].l2.weight.data.t().contiguous().t()  # (column-major now)
        want = cpu(x, temb)
    got, counts = _stats(lambda: _call(tpu, x, temb))
    _close(got, want)
    assert counts["module_recordings"] == 2, counts
    with torch.no_grad():
        for m in (cpu, tpu):
            m.blocks[1].norm.weight.add_(1.0)  # (the bias too: they share it)
        want = cpu(x, temb)
    _close(_call(tpu, x, temb), want)


class ViewBuffers(torch.nn.Module):
    """Buffers that are views of other storages (a transposed table, a slice)."""

    def __init__(self, width=8):
        super().__init__()
        self.register_buffer("table", torch.randn(width, width).t())
        self.register_buffer("part", torch.randn(4, width)[1:3])
        self.l = torch.nn.Linear(width, width)

    def forward(self, x, temb):
        return self.l(x @ self.table + self.part.sum(0)) + temb[:, None]


def test_a_view_buffer_written_in_place_is_read_again(mode):
    """A replay reads a view's value computed at its recording; written in place since, it is computed again
    (it was an internal error)."""
    cpu, tpu = _models(Net, block=ViewBuffers)
    x, temb = _inputs()
    for i in range(4):
        with torch.no_grad():
            want = cpu(x, temb)
        _close(_call(tpu, x, temb), want)
        with torch.no_grad():
            for m in (cpu, tpu):
                m.blocks[1].table.add_(0.5)
                m.blocks[i % 3].part.mul_(-2.0)


def test_a_hook_added_runs_and_sees_the_call(mode):
    seen = []

    def change(cpu, tpu):
        for m in (cpu, tpu):
            m.blocks[1].l1.register_forward_hook(lambda mod, args, out: seen.append(out.shape) or out * 0.5)

    _after_change(mode, change)
    assert len(seen) >= 3


def test_autocast_and_the_default_dtype_are_part_of_the_recording(mode):
    cpu, tpu = _models()
    x, temb = _inputs()
    for _ in range(2):
        _call(tpu, x, temb)
    with torch.autocast("tpu", dtype=torch.bfloat16), torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.no_grad():
            want = cpu(x, temb)
        got, counts = _stats(lambda: _call(tpu, x, temb))
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got.cpu().float(), want.float(), atol=0.1, rtol=0.05)
    assert counts["module_recordings"] >= 1, counts


def test_shapes_and_python_numbers_of_the_arguments_select_the_recording(mode):
    cpu, tpu = _models()
    for seed, tokens in ((0, 5), (1, 7), (2, 5)):
        x, temb = _inputs(seed=seed)
        x = torch.cat([x, x], dim=1)[:, :tokens]
        with torch.no_grad():
            want = cpu(x, temb)
        _close(_call(tpu, x, temb), want)
    assert sorted(len(r.replays) for _, r in module_replay.replayers(tpu) if not r.glue) == [2, 2, 2]


class Scaled(torch.nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.l = torch.nn.Linear(width, width)

    def forward(self, x, factor):
        return self.l(x) * factor if factor > 0 else self.l(x) - 1


def test_a_python_number_argument_is_part_of_the_signature(mode):
    torch.manual_seed(0)
    cpu = torch.nn.ModuleList([Scaled(), Scaled()])
    tpu = copy.deepcopy(cpu).to("tpu")
    module_replay.install(tpu)
    x = torch.randn(3, 8)
    for factor in (2.0, -1.0, 2.0, 0.5, -0.0):
        with torch.no_grad():
            want = cpu[0](x, factor)
            got = tpu[0](x.to("tpu"), factor)
        _close(got, want)


def test_grad_mode_runs_the_python_and_trains(mode):
    cpu, tpu = _models()
    x, temb = _inputs()
    for _ in range(2):
        _call(tpu, x, temb)
    out = tpu(x.to("tpu"), temb.to("tpu")).sum()
    out.backward()
    want = cpu(x, temb).sum()
    want.backward()
    _close(tpu.blocks[0].l1.weight.grad, cpu.blocks[0].l1.weight.grad, atol=1e-4)


# --- what is never replayed ---------------------------------------------------------------------------------
_KEPT: list = []
_GLOBAL = {}


class Reads(torch.nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.l = torch.nn.Linear(width, width)

    def forward(self, x, temb):
        y = self.l(x)
        return y * (1.0 if y.sum().item() > 0 else -1.0)


class Keeps(Reads):
    def forward(self, x, temb):
        y = self.l(x)
        self.last = y * 2  # (a cache: a replay would not set it)
        return y


class Appends(Reads):
    def forward(self, x, temb):
        y = self.l(x)
        _KEPT.append(y + 1)
        return y


class Prints(Reads):
    def forward(self, x, temb):
        print("block called")
        return self.l(x)


class ReadsAGlobal(Reads):
    def forward(self, x, temb):
        return self.l(x) + _GLOBAL["t"]


class Indexes(Reads):
    def __init__(self, width=8):
        super().__init__(width)
        self.e = torch.nn.Embedding(10, width)

    def forward(self, x, temb):
        return self.l(x) + self.e(torch.tensor([1, 2], device=x.device))[:, None]


@pytest.mark.parametrize("block, why", [
    (Reads, "reads a value on the host"),
    (Keeps, "changes its module's state"),
    (Appends, "changes what its code looks up (the contents of a list"),
    (Prints, "prints"),
])
def test_calls_a_replay_would_not_repeat_run_their_python(mode, block, why, capsys):
    _KEPT.clear()
    cpu, tpu = _models(Net, block=block)
    x, temb = _inputs()
    with torch.no_grad():
        want = cpu(x, temb)
    for _ in range(3):
        got, counts = _stats(lambda: _call(tpu, x, temb))
        _close(got, want)
    blocks = [r for _, r in module_replay.replayers(tpu) if not r.glue]
    assert all(len(r.replays) == 0 for r in blocks) and counts["module_replays"] <= 2, counts  # (the glue's)
    assert all(why in r.reason for r in blocks), [r.reason for r in blocks]
    if block is Prints:
        assert capsys.readouterr().out.count("block called") == 3 * 3 + 3  # every call printed (CPU's too)
    if block is Appends:
        assert len(_KEPT) == 3 * 3 + 3


class Looks(torch.nn.Module):
    """Looks rows up by indices it is given (an embedding: its index bounds are checked on the device)."""

    def __init__(self, width=8):
        super().__init__()
        self.e = torch.nn.Embedding(10, width)

    def forward(self, x, index):
        return x + self.e(index)[:, None]


def test_device_side_checks_are_replayed_and_raise_at_the_next_wait(mode):
    torch.manual_seed(0)
    cpu = torch.nn.ModuleList([Looks(), Looks()])
    tpu = copy.deepcopy(cpu).to("tpu")
    module_replay.install(tpu)
    x = torch.randn(2, 5, 8)
    for _ in range(3):
        index = torch.tensor([1, 7])
        with torch.no_grad():
            got, counts = _stats(lambda: tpu[0](x.to("tpu"), index.to("tpu")))
            _close(got, cpu[0](x, index))
    assert counts["module_replays"] == 1, counts
    with torch.no_grad():
        bad = tpu[0](x.to("tpu"), torch.tensor([1, 12]).to("tpu"))  # replayed: the check runs on the device
        later = bad * 2
    with pytest.raises(IndexError, match="index out of range|out of bounds|embedding"):
        torch.tpu.synchronize()
    with pytest.raises(IndexError):
        later.cpu()  # computed from a failed check: it raises at every read
    with torch.no_grad():  # and the next calls are right again
        _close(tpu[0](x.to("tpu"), torch.tensor([2, 3]).to("tpu")), cpu[0](x, torch.tensor([2, 3])))


def test_a_tensor_read_from_a_global_is_never_a_constant(mode):
    cpu, tpu = _models(Net, block=ReadsAGlobal)
    x, temb = _inputs()
    for value in (1.0, 2.0, -3.0):
        _GLOBAL["t"] = torch.full((8,), value)
        with torch.no_grad():
            want = cpu(x, temb)
        _GLOBAL["t"] = _GLOBAL["t"].to("tpu")
        _close(_call(tpu, x, temb), want)
    assert all("neither an argument nor its module's" in r.reason for _, r in module_replay.replayers(tpu)
               if not r.glue)


def test_random_ops_are_drawn_again_at_every_call(mode):
    class Drops(Reads):
        def forward(self, x, temb):
            return F.dropout(self.l(x), 0.5, training=True)

    _, tpu = _models(Net, block=Drops)
    x, temb = _inputs()
    outs = [_call(tpu, x, temb).cpu() for _ in range(3)]
    assert not torch.equal(outs[1], outs[2])
    assert all("draws random numbers" in r.reason for _, r in module_replay.replayers(tpu) if not r.glue)


def test_an_outer_block_that_cannot_replay_leaves_its_inner_blocks_replaying(mode):
    class Outer(torch.nn.Module):
        def __init__(self, width=8):
            super().__init__()
            self.inner = torch.nn.ModuleList([Block(width), Block(width)])

        def forward(self, x, temb):
            for b in self.inner:
                x = b(x, temb)
            return x * (1.0 if x.sum().item() > 0 else 2.0)

    cpu, tpu = _models(Net, block=Outer)
    x, temb = _inputs()
    with torch.no_grad():
        want = cpu(x, temb)
    for _ in range(4):  # two recordings of each outer block refused, then the inner blocks record, then replay
        got, counts = _stats(lambda: _call(tpu, x, temb))
        _close(got, want)
    assert counts["module_replays"] >= 6 and counts["module_recordings"] == 0, counts


def test_an_error_in_a_block_raises_at_the_op_and_the_next_calls_work(mode):
    cpu, tpu = _models()
    x, temb = _inputs()
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied|same reduction dim"):
        _call(tpu, torch.randn(2, 5, 3), temb)
    with torch.no_grad():
        want = cpu(x, temb)
    for _ in range(2):
        _close(_call(tpu, x, temb), want)


def test_a_failing_program_falls_back_to_the_python(mode, monkeypatch):
    cpu, tpu = _models()
    x, temb = _inputs()
    for _ in range(2):
        _call(tpu, x, temb)
    for _, replayer in module_replay.replayers(tpu):
        for replay in replayer.replays.values():
            def failing(*args):
                raise RuntimeError("RESOURCE_EXHAUSTED: out of memory (simulated)")
            replay.prog = failing
    with torch.no_grad():
        want = cpu(x, temb)
    _close(_call(tpu, x, temb), want)
    assert all("out of memory" in r.reason for _, r in module_replay.replayers(tpu) if not r.glue)


def test_copies_and_pickles_of_a_model_hold_no_replayer(mode):
    cpu, tpu = _models()
    x, temb = _inputs()
    for _ in range(2):
        _call(tpu, x, temb)
    copied = copy.deepcopy(tpu)
    assert all("_compiled_call_impl" not in vars(m) for m in copied.modules())
    loaded = pickle.loads(pickle.dumps(cpu))
    with torch.no_grad():
        want = loaded(x, temb)
    _close(_call(copied, x, temb), want)


def test_a_compiled_parent_traces_its_blocks_python(mode):
    cpu, tpu = _models()
    x, temb = _inputs()
    for _ in range(2):
        _call(tpu, x, temb)
    compiled = torch.compile(tpu, backend="tpu", fullgraph=True, dynamic=False)
    with torch.no_grad():
        want = cpu(x, temb)
    before = torch_tpu.stats()["module_replays"]
    _close(_call(compiled, x, temb), want)
    assert torch_tpu.stats()["module_replays"] == before


def test_moved_back_to_the_cpu_the_model_runs_there(mode):
    cpu, tpu = _models()
    x, temb = _inputs()
    for _ in range(2):
        _call(tpu, x, temb)
    back = tpu.to("cpu")
    with torch.no_grad():
        torch.testing.assert_close(back(x, temb), cpu(x, temb))


# --- TORCH_TPU_REPLAY_VERIFY=1 ------------------------------------------------------------------------------
class ReadsTheEnvironment(Reads):
    """Reads a setting through os.environ (a mapping the guards see only by identity): a blind spot."""

    def forward(self, x, temb):
        return self.l(x) * float(os.environ.get("TORCH_TPU_TEST_REPLAY_FACTOR", "1"))


def test_verify_raises_where_the_python_would_differ(mode, monkeypatch):
    monkeypatch.setenv("TORCH_TPU_REPLAY_VERIFY", "1")
    monkeypatch.setenv("TORCH_TPU_TEST_REPLAY_FACTOR", "1")
    cpu, tpu = _models(Net, block=ReadsTheEnvironment)
    x, temb = _inputs()
    with torch.no_grad():
        want = cpu(x, temb)
    for _ in range(3):  # replays, each checked against the Python
        got, counts = _stats(lambda: _call(tpu, x, temb))
        _close(got, want)
    assert counts["module_replays"] >= 3, counts
    monkeypatch.setenv("TORCH_TPU_TEST_REPLAY_FACTOR", "3")
    with pytest.raises(module_replay.ReplayMismatch, match="ReadsTheEnvironment"):
        _call(tpu, x, temb)
