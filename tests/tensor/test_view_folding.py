"""Views cost no program of their own: an op reads its view inputs inside its own program (strict and
fused eager), ``_unsafe_view`` and reshapes of contiguous tensors are metadata only; results match CPU
torch, with dynamic Scalars, in-place writes through views, device-side checks and data-dependent ops."""
import pytest
import torch

import torch_tpu
from tests.harness.counting import programs_run
from torch_tpu.errors import DeviceAssertError


VIEW_CASES = {
    "transpose": lambda a: a.transpose(0, 2) + 1,
    "strided slice": lambda a: a[1:3, ::2] * 2,
    "select with offset": lambda a: a[2] - a[1],
    "reshape and t": lambda a: a.view(24, 8) @ a.view(24, 8).t(),
    "expand": lambda a: a[:, :1].expand(4, 6, 8) + a,
    "dtype view": lambda a: a.view(torch.int32) & 0xFF,
    "diagonal": lambda a: a[0, :6, :6].diagonal() + 1,
    "dynamic scalars": lambda a: torch.add(a[1:3], a[0:2], alpha=0.5),
    "list of views": lambda a: torch.cat([a[0], a[1, :, ::2], a[3, :, 2:].t()], dim=1),
}


@pytest.mark.parametrize("case", list(VIEW_CASES))
def test_view_inputs_cost_no_program(case, eager_mode):
    x = torch.randn(4, 6, 8)
    t = x.to("tpu")
    got, n = programs_run(lambda: VIEW_CASES[case](t))
    torch.testing.assert_close(got.cpu(), VIEW_CASES[case](x), atol=1e-5, rtol=1e-5)
    assert n == 1


def test_offsets_are_inputs_not_keys():
    x = torch.randn(10, 4)
    t = x.to("tpu")
    (t[1] * 3).cpu()  # compiles the program for views at a non-zero offset
    torch_tpu.reset_stats()
    outs = [(t[i] * 3).cpu() for i in range(2, 10)]
    assert torch_tpu.stats()["compiles"] == 0
    for i, o in enumerate(outs, 2):
        torch.testing.assert_close(o, x[i] * 3)


def _compiled_modules(monkeypatch) -> list:
    """The StableHLO text of every program compiled from here on."""
    from jax._src import stages

    texts, compile_ = [], stages.Lowered.compile

    def recording(self, *args, **kwargs):
        texts.append(self.as_text())
        return compile_(self, *args, **kwargs)

    monkeypatch.setattr(stages.Lowered, "compile", recording)
    return texts


MOVING_OFFSET_READS = {
    "row": lambda a, i: a[i] * 3,
    "two scalars": lambda a, i: a[i, 1] - a[i + 1, 2],  # the scheduler's sigma_next - sigma
    "column window": lambda a, i: a[:, i:i + 2] + 1,
    "write through a row": lambda a, i: a[i].mul_(2),
}


@pytest.mark.parametrize("case", list(MOVING_OFFSET_READS))
def test_offsets_are_unravelled_in_32_bits(case, eager_mode, fresh_programs, monkeypatch):
    """A view at a moving storage offset is read (or written) at a traced int64 offset. XLA:TPU emulates
    64-bit integer division and remainder: with them a view read compiled for 2.5-7.5 s on the chip instead of
    0.1-0.7 s (the demo's first image waited on it). Below 2**31 elements the offset's arithmetic is 32-bit:
    no program holds a 64-bit divide or remainder, and the values are CPU torch's at every offset."""
    import re

    texts = _compiled_modules(monkeypatch)
    x = torch.randn(10, 6)
    t, ref = x.to("tpu"), x.clone()
    for i in range(1, 7):
        got = MOVING_OFFSET_READS[case](t, i)
        want = MOVING_OFFSET_READS[case](ref, i)
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
    torch.testing.assert_close(t.cpu(), ref, rtol=0, atol=0)
    assert texts, "nothing was compiled: the test did not see the programs it is about"
    wide = [m.group(0) for text in texts
            for m in re.finditer(r"stablehlo\.(divide|remainder) [^\n]*tensor<i64>", text)]
    assert not wide, wide[:3]


@pytest.mark.parametrize("refined,strides", [((6, 4, 8), (32, 8, 1)), ((2 ** 20, 2 ** 12), (2 ** 12, 1))])
def test_box_starts_at_a_traced_offset_match_host_arithmetic(refined, strides):
    """The box's starts computed on a traced offset (32-bit below 2**31 elements, 64-bit above: the second
    geometry is a 2**32-element storage) equal the host's floor arithmetic at every offset tried."""
    import numpy as np

    from torch_tpu.runtime import platform
    from torch_tpu.tensor import strided

    jax = platform.jax()
    geometry = (refined, strides, ())
    numel = int(np.prod(refined))
    offsets = sorted({0, 1, strides[0] - 1, strides[0], numel // 2 + 3, numel - 1})
    with platform.X64():
        starts = jax.jit(lambda o: strided._box_starts(geometry, o))
        for offset in offsets:
            got = [int(v) for v in starts(np.int64(offset))]
            assert got == strided._box_starts(geometry, offset), offset


def test_reshapes_are_metadata_only():
    t = torch.randn(6, 8).to("tpu")
    _, n = programs_run(lambda: (t.view(2, 3, 8), t.reshape(48), torch.ops.aten._unsafe_view(t, [2, 3, 8]),
                              t.flatten(), t.unsqueeze(0).squeeze(0)))
    assert n == 0


def test_unsafe_view_aliases_like_cpu():
    x = torch.randn(6, 8)
    t = x.to("tpu")
    got = torch.ops.aten._unsafe_view(t, [2, 3, 8])
    ref = torch.ops.aten._unsafe_view(x, [2, 3, 8])
    t.add_(1)
    x.add_(1)  # on the CPU the result shares its input's memory; so it does here
    torch.testing.assert_close(got.cpu(), ref)
    for dev_t in (x.t(), t.t()):  # strides that cannot be viewed: torch's error, as on the CPU
        with pytest.raises(RuntimeError, match="view size is not compatible"):
            torch.ops.aten._unsafe_view(dev_t, [48])


def test_matmul_results_are_not_copied():
    a, b = torch.randn(2, 5, 7), torch.randn(7, 3)
    _, n = programs_run(lambda: a.to("tpu") @ b.to("tpu"))  # mm + _unsafe_view: one program
    assert n == 1


def test_in_place_through_views(eager_mode):
    x = torch.randn(5, 6)
    t = x.to("tpu")
    for dev_or_cpu in (x, t):
        dev_or_cpu[1:4, ::2].mul_(2.0)
        dev_or_cpu.t()[2].add_(dev_or_cpu.t()[0], alpha=3)
        torch.add(dev_or_cpu[4], 1, out=dev_or_cpu[0])
    torch.testing.assert_close(t.cpu(), x)


WHOLE_STORAGE_WRITES = {  # (how the tensor is made, the in-place op)
    "transposed add_": (lambda x: x.reshape(6, 8), lambda a: a.t().add_(1)),
    "channels_last mul_": (lambda x: x.contiguous(memory_format=torch.channels_last), lambda a: a.mul_(2)),
    "transposed out=": (lambda x: x.reshape(6, 8), lambda a: torch.add(a.t(), 1, out=a.t())),
    "permuted result sub_": (lambda x: x.transpose(0, 1) * 3, lambda a: a.sub_(1)),
}


@pytest.mark.parametrize("case", list(WHOLE_STORAGE_WRITES))
def test_whole_storage_seen_permuted_is_written_by_the_op(case, eager_mode):
    """An in-place op on a whole storage seen in another order than its memory (a transposed tensor, a
    channels_last one, a permuted result) writes the storage from its own program: no write program."""
    make, op = WHOLE_STORAGE_WRITES[case]
    x = make(torch.arange(48.0).reshape(2, 3, 2, 4))
    t = make(torch.arange(48.0).reshape(2, 3, 2, 4).to("tpu"))
    assert t.stride() == x.stride()
    ref = op(x)
    got, n = programs_run(lambda: op(t))
    assert n == 1
    torch.testing.assert_close(got.cpu(), ref)
    assert got.stride() == ref.stride()
    torch.testing.assert_close(t.cpu(), x)


def test_device_checks_on_view_inputs():
    x = torch.arange(20.0).reshape(4, 5)
    t = x.to("tpu")
    idx = torch.tensor([[0, 9], [1, 2]])
    torch.testing.assert_close(t.t()[1:].index_select(1, idx[1].to("tpu")).cpu(), x.t()[1:].index_select(1, idx[1]))
    y = t.t()[1:].index_select(1, idx.to("tpu")[:, 1])  # a view [9, 2] as the index: 9 is out of range
    with pytest.raises(DeviceAssertError, match="index_select"):
        y.cpu()


def test_data_dependent_op_on_a_view(eager_mode):
    x = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 3.0]])
    t = x.to("tpu")
    torch.testing.assert_close(t.t()[1:].nonzero().cpu(), x.t()[1:].nonzero())
    torch.testing.assert_close(t[:, 1:].masked_select(t[:, 1:] > 0).cpu(), x[:, 1:].masked_select(x[:, 1:] > 0))


LAYOUT_OPS = {"exp": torch.exp, "mul": lambda t: t * 2.5, "gelu": torch.nn.functional.gelu,
              "to_bf16": lambda t: t.to(torch.bfloat16), "where": lambda t: torch.where(t > 0, t, -t)}


@pytest.mark.parametrize("op", list(LAYOUT_OPS))
@pytest.mark.parametrize("read_first", ["permuted", "contiguous"])
def test_a_read_view_and_a_contiguous_tensor_of_its_shape_keep_their_own_layouts(op, read_first, eager_mode):
    """A view whose value was read (``v.cpu()``) entered its op's key as (shape, dtype), as a contiguous
    tensor of that shape does: whichever ran first gave the other its result layout (``c.exp()`` of a
    contiguous ``c`` came back permuted and ``.view(-1)`` failed where CPU works). Strides and values
    against CPU, both orders."""
    f = LAYOUT_OPS[op]
    base_cpu, c_cpu = torch.randn(2, 3, 4), torch.randn(4, 3, 2)
    v, c = base_cpu.to("tpu").permute(2, 1, 0), c_cpu.to("tpu")
    v.cpu()  # the view's value is read now (and kept)
    order = [("v", v, base_cpu.permute(2, 1, 0)), ("c", c, c_cpu)]
    if read_first == "contiguous":
        order.reverse()
    for name, t, ref in order:
        got, want = f(t), f(ref)
        assert got.stride() == want.stride() and got.is_contiguous() == want.is_contiguous(), (name, got.stride())
        torch.testing.assert_close(got.cpu(), want)
        if want.is_contiguous():
            torch.testing.assert_close(got.view(-1).cpu(), want.view(-1))


def _random_views(seed, count):
    """(storage shape, size, stride, offset) of as_strided views inside their storage, from a seeded sweep."""
    import random

    rng = random.Random(seed)
    out = []
    while len(out) < count:
        shape = [rng.randint(1, 5) for _ in range(rng.randint(1, 4))]
        numel = 1
        for n in shape:
            numel *= n
        nd = rng.randint(1, 3)
        size = [rng.randint(1, 4) for _ in range(nd)]
        stride = [rng.choice([0, 1, 2, 3, 4, 5, 6, 8, 12, 20]) for _ in range(nd)]
        span = sum((n - 1) * s for n, s in zip(size, stride))
        if span < numel:
            out.append((shape, size, stride, rng.randint(0, numel - 1 - span)))
    return out


PLACED_VIEWS = {  # view -> how its program finds it in its storage (strided.placement)
    "rows": (lambda b: b[:, 2:5], "box"),
    "chunk of the last dim": (lambda b: b.chunk(3, -1)[1], "box"),
    "heads split from a row": (lambda b: b.view(2, 6, 3, 4)[:, 1:4, 1], "box"),
    "heads merged into a row": (lambda b: b.view(2, 6, 3, 4)[1, 2:5].reshape(3, 12), "box"),
    "select": (lambda b: b[1, 3:], "box"),
    "permuted box": (lambda b: b.view(2, 6, 3, 4)[..., 1:3].permute(3, 0, 2, 1), "box"),
    "whole, transposed": (lambda b: b.transpose(0, 2), "zero"),
    "wraps into the next row": (lambda b: b.reshape(-1)[5:17], "window"),
    "expanded": (lambda b: b[:, 1:2, :].expand(2, 4, 12), "window"),
}


@pytest.mark.parametrize("case", list(PLACED_VIEWS))
def test_view_placement_reads_and_writes_like_cpu(case, eager_mode):
    """A view that is a box of its storage is read with one dynamic slice of the array in its own shape (no
    flat copy of the whole storage); values and writes through it as on CPU, in both eager modes."""
    from torch_tpu.tensor import strided

    view, expected_placement = PLACED_VIEWS[case]
    base_c = torch.arange(2 * 6 * 12, dtype=torch.float32).reshape(2, 6, 12)
    base_t = base_c.to("tpu")
    v_t = view(base_t)
    storage = v_t._tpu_storage
    assert strided.placement(tuple(v_t.shape), tuple(v_t.stride()), v_t.storage_offset(), storage.shape,
                             storage.dtype, v_t.dtype) == expected_placement
    torch.testing.assert_close((v_t * 2).cpu(), view(base_c) * 2, rtol=0, atol=0)
    if 0 not in view(base_c).stride():
        values = torch.randn(view(base_c).shape)
        view(base_c).copy_(values)
        view(base_t).copy_(values.to("tpu"))
        view(base_c).mul_(3)
        view(base_t).mul_(3)
        torch.testing.assert_close(base_t.cpu(), base_c, rtol=0, atol=0)


def test_random_views_read_and_write_like_cpu():
    """Seeded as_strided views of random storages (boxes, windows, wrapping rows, overlapping and
    broadcast dims): every read equals CPU's, and writes through the boxes land where CPU's do."""
    from torch_tpu.tensor import strided

    torch.manual_seed(0)
    seen = set()
    for shape, size, stride, offset in _random_views(seed=1, count=120):
        b_c = torch.randn(shape)
        b_t = b_c.to("tpu")
        v_t = b_t.as_strided(size, stride, offset)
        storage = v_t._tpu_storage
        where = strided.placement(tuple(v_t.shape), tuple(v_t.stride()), offset, storage.shape, storage.dtype,
                                  v_t.dtype)
        seen.add(where)
        want = b_c.as_strided(size, stride, offset)
        assert torch.equal((v_t + 0).cpu(), want), (shape, size, stride, offset, where)
        if where == "box":
            values = torch.randn(size)
            b_c.as_strided(size, stride, offset).copy_(values)
            b_t.as_strided(size, stride, offset).copy_(values.to("tpu"))
            assert torch.equal(b_t.cpu(), b_c), (shape, size, stride, offset)
    assert seen == {"box", "window", "zero"}


CAST_CASES = {  # (view of a, dtype): the view's value cast, one program in strict mode
    "slice at an offset to float64": (lambda a: a[1:3, 2:], torch.float64),
    "select to bfloat16": (lambda a: a[2], torch.bfloat16),
    "stacked pairs flattened (diffusers' rotary embedding)": (
        lambda a: torch.stack([-a[..., 1::2], a[..., ::2]], dim=-1).flatten(2), torch.float64),
    "reshape of a slice to half": (lambda a: a[1:3].reshape(2, 48), torch.float16),
    "dtype view to float": (lambda a: a.view(torch.int32)[1:3], torch.float32),
    "bool slice to float": (lambda a: (a > 0)[::2], torch.float32),
    "float slice to int64": (lambda a: (a * 10)[1], torch.int64),
}


@pytest.mark.parametrize("case", list(CAST_CASES))
def test_a_view_cast_to_another_dtype_is_one_program(case, eager_mode):
    """``view.to(dtype)`` reads the view inside the cast's program (no view read of its own), values as CPU."""
    make, dtype = CAST_CASES[case]
    x = torch.randn(4, 6, 8)
    t = x.to("tpu")
    view_cpu, view = make(x), make(t)
    torch_tpu.sync()
    got, n = programs_run(lambda: view.to(dtype))
    assert got.dtype == dtype and got.shape == view_cpu.shape
    torch.testing.assert_close(got.cpu(), view_cpu.to(dtype), atol=1e-3, rtol=1e-3)
    if eager_mode is torch_tpu.EagerMode.DEFER_NEVER:
        assert n == 1


def test_a_view_cast_after_its_base_was_written_reads_the_new_values(eager_mode):
    x = torch.randn(4, 8)
    t = x.to("tpu")
    v, v_cpu = t[1:3, ::2], x[1:3, ::2]
    first, first_cpu = v.double(), v_cpu.double()
    t.mul_(-2)  # the base changes after the first cast: a later cast must see it
    x.mul_(-2)
    t[1, 0] = 7.0
    x[1, 0] = 7.0
    second = v.half()
    torch.testing.assert_close(first.cpu(), first_cpu)
    torch.testing.assert_close(second.cpu(), v_cpu.half())
    torch.testing.assert_close(v.float().cpu(), v_cpu)  # and the view itself, read after the casts
