"""Out-of-range and negative indices for every indexing op.

CPU torch raises for an index outside ``[-n, n)`` (or outside ``[0, n)`` for ops that take no negative
indices); the tpu must raise too -- a clear error about the index -- at the latest at the next wait
(the harness reads every result and synchronises), at the call itself under launch blocking, and in
fused graphs and compiled programs alike. Nothing may be clamped, wrapped, dropped or turned into NaN.
Valid negative indices must keep working where CPU accepts them.
"""
import pytest
import torch
import torch.nn.functional as F

from tests.harness import differential as D
from tests.harness.compare import assert_same, read, sync
from tests.harness.errors import is_clear
from tests.harness.inputs import DEV, noncontig, t

pytestmark = pytest.mark.usefixtures("watchdog")

INDEX_ERR = r"(?i)index|out of (range|bounds)|bounds|target|class|invalid"


def _bad_values(n):
    """Index values around a dimension of size ``n`` (the first index of each case stays valid)."""
    return {"n": n, "n+3": n + 3, "-1": -1, "-n": -n, "-n-1": -n - 1, "2^31": 2 ** 31 + 5, "2^40": 2 ** 40}


X = torch.arange(12, dtype=torch.float32).reshape(4, 3)


def _idx(v, dtype=torch.int64):
    if dtype == torch.int32 and not -2 ** 31 <= v < 2 ** 31:
        v = 2 ** 31 - 1  # the largest int32 index
    return torch.tensor([1, v], dtype=dtype)


def _idx2(v, cols=3):
    """A (2, cols) index for gather/scatter along dim 0 with one bad entry."""
    i = torch.zeros(2, cols, dtype=torch.int64)
    i[0] = torch.arange(cols) % 4
    i[1, 1] = v
    return i


def _idx_dim1(v):
    """A (4, 2) index for gather along dim 1 with one bad entry."""
    i = torch.tensor([[0, 1], [1, 2], [2, 0], [0, 0]])
    i[1, 1] = v
    return i


# name -> (size of the indexed dimension, builder(v) -> (fn, args))
OPS = {
    "getitem": (4, lambda v: (lambda x, i: x[i], (X, _idx(v)))),
    "getitem_dim1": (3, lambda v: (lambda x, i: x[:, i], (X, _idx(v)))),
    "getitem_pair": (3, lambda v: (lambda x, i: x[torch.tensor([0, 1], device=i.device), i], (X, _idx(v)))),
    "getitem_int32": (4, lambda v: (lambda x, i: x[i], (X, _idx(v, torch.int32)))),
    "getitem_noncontig": (3, lambda v: (lambda x, i: x[i], (noncontig(X), _idx(v)))),
    "index_select": (4, lambda v: (lambda x, i: torch.index_select(x, 0, i), (X, _idx(v)))),
    "index_select_dim1": (3, lambda v: (lambda x, i: torch.index_select(x, 1, i), (X, _idx(v)))),
    "gather": (4, lambda v: (lambda x, i: torch.gather(x, 0, i), (X, _idx2(v)))),
    "gather_dim1": (3, lambda v: (lambda x, i: torch.gather(x, 1, i), (X, _idx_dim1(v)))),
    "take": (12, lambda v: (lambda x, i: torch.take(x, i), (X, _idx(v)))),
    "take_along_dim": (4, lambda v: (lambda x, i: torch.take_along_dim(x, i, 0), (X, _idx2(v)))),
    "embedding": (4, lambda v: (lambda w, i: F.embedding(i, w), (X, _idx(v)))),
    "embedding_padding": (4, lambda v: (lambda w, i: F.embedding(i, w, padding_idx=0), (X, _idx(v)))),
    "scatter_src": (4, lambda v: (lambda x, i: x.clone().scatter_(0, i, torch.ones_like(x)[:2]), (X, _idx2(v)))),
    "scatter_value": (4, lambda v: (lambda x, i: x.clone().scatter_(0, i, 7.0), (X, _idx2(v)))),
    "scatter_add": (4, lambda v: (lambda x, i: x.clone().scatter_add_(0, i, torch.ones_like(x)[:2]), (X, _idx2(v)))),
    "scatter_reduce_amax": (4, lambda v: (lambda x, i: x.scatter_reduce(0, i, torch.ones_like(x)[:2], "amax"),
                                          (X, _idx2(v)))),
    "index_put": (4, lambda v: (lambda x, i: x.clone().index_put_((i,), torch.tensor(5.0, device=x.device)),
                                (X, _idx(v)))),
    "index_put_accumulate": (4, lambda v: (lambda x, i: x.clone().index_put_((i,), torch.ones(2, 3, device=x.device),
                                                                           accumulate=True), (X, _idx(v)))),
    "setitem": (4, lambda v: (lambda x, i: x.__setitem__(i, 9.0), (X.clone(), _idx(v)))),
    "setitem_dim1": (3, lambda v: (lambda x, i: x.__setitem__((slice(None), i), 9.0), (X.clone(), _idx(v)))),
    "index_add": (4, lambda v: (lambda x, i: x.index_add(0, i, torch.ones(2, 3, device=x.device)), (X, _idx(v)))),
    "index_copy": (4, lambda v: (lambda x, i: x.index_copy(0, i, torch.ones(2, 3, device=x.device)), (X, _idx(v)))),
    "index_fill": (4, lambda v: (lambda x, i: x.index_fill(0, i, -1.0), (X, _idx(v)))),
    "index_reduce": (4, lambda v: (lambda x, i: x.index_reduce(0, i, torch.ones(2, 3, device=x.device) * 2, "prod"),
                                   (X, _idx(v)))),
    "put_": (12, lambda v: (lambda x, i: x.clone().put_(i, torch.tensor([1.0, 2.0], device=x.device)), (X, _idx(v)))),
    "nll_loss": (4, lambda v: (lambda x, i: F.nll_loss(F.log_softmax(x[:2, :].repeat(1, 2)[:, :4], 1), i),
                               (X, _idx(v)))),
    "cross_entropy": (4, lambda v: (lambda x, i: F.cross_entropy(x[:2, :].repeat(1, 2)[:, :4], i), (X, _idx(v)))),
    "cross_entropy_none": (4, lambda v: (lambda x, i: F.cross_entropy(x[:2, :].repeat(1, 2)[:, :4], i,
                                                                      reduction="none"), (X, _idx(v)))),
    "one_hot": (4, lambda v: (lambda x, i: F.one_hot(i, 4), (X, _idx(v)))),
    # sorter entries address the sequence's elements: the tpu searched a gathered (clamped) sequence
    "searchsorted_sorter": (2, lambda v: (lambda x, i: torch.searchsorted(x[0, 1:] * torch.tensor([-1.0, 1.0], device=x.device), x[1], sorter=i), (X, _idx(v)))),
}
# bincount allocates max(index)+1 bins on CPU: only the negative values (a 2^31 value would fill 16 GB)
BINCOUNT_BAD = ["-1", "-n", "-n-1"]

BAD_NAMES = ["n", "n+3", "-1", "-n", "-n-1", "2^31", "2^40"]


# What a failed write leaves behind: CPU torch writes the elements its loop reaches before the first bad
# index and then raises, so its partial result depends on its loop order (``x[:, [1, 9]] = v`` writes
# x[0, 1] only). That order is an implementation detail, not a contract. The tpu's rule, explicit: a
# write with out-of-range entries writes every in-range entry, drops the others (never at a wrapped or
# clamped position) and raises. For the ops below the two differ; the state after the error is checked
# against CPU torch running the same write with the out-of-range entries removed
# (test_failed_write_keeps_in_range_entries).
ORDER_DEPENDENT = {"setitem_dim1"}


@pytest.mark.parametrize("bad", BAD_NAMES)
@pytest.mark.parametrize("op", sorted(OPS))
def test_bad_index(eager_mode, op, bad):
    n, build = OPS[op]
    fn, args = build(_bad_values(n)[bad])
    D.check(fn, *args, match=INDEX_ERR, check_inputs=op not in ORDER_DEPENDENT)


# op -> (size of the indexed dim, builder(index values) -> (fn, args)): writes whose state after an error
# is checked
PARTIAL_WRITES = {
    "setitem_dim1": (3, lambda vals: (lambda x, i: x.__setitem__((slice(None), i), 9.0),
                                      (X.clone(), torch.tensor(vals)))),
    "index_put_2d": (4, lambda vals: (lambda x, i: x.index_put_((i[:, None], torch.tensor([0, 2], device=i.device)),
                                                                torch.tensor(5.0, device=x.device)),
                                      (X.clone(), torch.tensor(vals)))),
    "scatter_add": (3, lambda vals: (lambda x, i: x.scatter_add_(1, i.expand(4, i.shape[1]),
                                                                 torch.ones(4, i.shape[1], device=x.device)),
                                     (X.clone(), torch.tensor([vals])))),
}


@pytest.mark.parametrize("bad", ["n", "2^40", "-n-1"])
@pytest.mark.parametrize("op", sorted(PARTIAL_WRITES))
def test_failed_write_keeps_in_range_entries(eager_mode, op, bad):
    """After a write with an out-of-range entry raised, the tensor holds the write of its in-range
    entries only: CPU torch's result for the same write without the bad entry."""
    n, build = PARTIAL_WRITES[op]
    fn, (x, i) = build([2, _bad_values(n)[bad], 0])
    x_tpu, i_tpu = x.to(DEV), i.to(DEV)
    try:
        fn(x.clone(), i)
    except Exception as exc:  # noqa: BLE001 - its class is the contract
        cpu_error = type(exc)
    else:
        raise AssertionError(f"test setup: CPU torch accepted {op} with {bad}")
    with pytest.raises(cpu_error) as info:
        fn(x_tpu, i_tpu)
        sync()
    assert is_clear(info.value), f"[unclear error] {info.value!r}"
    fn_ok, (expected, i_ok) = build([2, 0])
    fn_ok(expected, i_ok)
    assert_same(expected, read(x_tpu), where=f"{op} after the failed write")


@pytest.mark.parametrize("bad", BINCOUNT_BAD)
def test_bincount_negative(eager_mode, bad):
    D.check(lambda i: torch.bincount(i, minlength=4), _idx(_bad_values(4)[bad]))


@pytest.mark.parametrize("op", sorted(OPS))
def test_bad_index_launch_blocking(op):
    """Under launch blocking the error comes from the call itself."""
    n, build = OPS[op]
    fn, args = build(n + 1)
    D.check(fn, *args, modes=["blocking"], match=INDEX_ERR, raise_at_call=True,
            check_inputs=op not in ORDER_DEPENDENT)


@pytest.mark.parametrize("op", ["getitem", "index_select", "gather", "embedding", "scatter_add",
                                "index_put_accumulate", "cross_entropy"])
def test_bad_index_compiled(op):
    n, build = OPS[op]
    fn, args = build(n + 2)
    D.check(fn, *args, modes=["compiled"], match=INDEX_ERR)


@pytest.mark.parametrize("op", ["getitem", "gather", "scatter_add", "index_put", "embedding", "cross_entropy"])
def test_bad_index_then_good_index(eager_mode, op):
    """The program made for an out-of-range index value must not be served (or fail) for a good one,
    and after the error the same op with good indices still works."""
    n, build = OPS[op]
    fn_bad, args_bad = build(n + 1)
    fn_ok, args_ok = build(0)
    D.check(fn_bad, *args_bad)
    D.check(fn_ok, *args_ok)


def test_pending_good_work_survives_bad_index(eager_mode):
    """Good work queued before a bad index op keeps its value after the error is reported."""
    def fn(x, i):
        y = x * 2
        z = x[i]  # raises on CPU
        return y, z
    D.check(fn, X, _idx(9))

    def fn2(x, i):
        x.mul_(3)
        return x[i]
    D.check(fn2, X.clone(), _idx(9))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32], ids=["f32", "i32"])
def test_bad_index_dtype(eager_mode, dtype):
    """Indices of a non-integer dtype, or int32 where CPU demands int64."""
    i = torch.tensor([0, 1], dtype=dtype)
    D.check(lambda x, i: x[i], X, i)
    D.check(lambda x, i: torch.index_select(x, 0, i), X, i)
    # (contiguous index: CPU torch 2.13 gathers wrongly with an expanded int32 index)
    D.check(lambda x, i: torch.gather(x, 0, i.reshape(2, 1).expand(2, 3).contiguous()), X, i)
    D.check(lambda x, i: F.embedding(i, x), X, i)
    D.check(lambda x, i: x.clone().scatter_(0, i.reshape(2, 1).expand(2, 3).contiguous(), 1.0), X, i)
    D.check(lambda x, i: x.index_add(0, i, torch.ones(2, 3, device=x.device)), X, i)


def _rows(i):  # i as a (3, 2) index along dim 1 of a (3, 4) input
    return i.reshape(1, -1)[:, :2].expand(3, 2).contiguous()


# every index argument with every integer dtype: CPU takes int64 only (put, index_copy, index_fill,
# multi_margin_loss), int32/int64 (index_select, index_add, index_reduce, repeat_interleave), int64/int32/
# uint8/bool (x[i], index_put), int64/uint8 (nll_loss); the meta kernels take any and the tpu computed
INDEX_ARGS = {
    "getitem": lambda x, i: x[i],
    "getitem_two": lambda x, i: x[i, i],
    "index_put": lambda x, i: x.index_put((i,), torch.tensor(5.0, device=x.device)),
    "index_put_accumulate": lambda x, i: x.index_put((i,), torch.tensor(5.0, device=x.device), accumulate=True),
    "index_select": lambda x, i: x.index_select(0, i),
    "gather": lambda x, i: torch.gather(x, 1, _rows(i)),
    "scatter": lambda x, i: x.scatter(1, _rows(i), 1.0),
    "scatter_add": lambda x, i: x.scatter_add(1, _rows(i), torch.ones(3, 2, device=x.device)),
    "take": lambda x, i: torch.take(x, i),
    "put": lambda x, i: x.put(i, torch.ones(i.shape, device=x.device)),
    "index_add": lambda x, i: x.index_add(0, i, torch.ones(len(i), 4, device=x.device)),
    "index_copy": lambda x, i: x.index_copy(0, i[:1], torch.ones(1, 4, device=x.device)),
    "index_fill": lambda x, i: x.index_fill(0, i, -1.0),
    "index_reduce": lambda x, i: x.index_reduce(0, i, torch.ones(len(i), 4, device=x.device), "prod"),
    "embedding": lambda x, i: F.embedding(i, x),
    "nll_loss": lambda x, i: F.nll_loss(x, i),
    "cross_entropy": lambda x, i: F.cross_entropy(x, i),
    "cross_entropy_2d": lambda x, i: F.cross_entropy(x.reshape(1, 3, 4), i.reshape(1, 3)[:, :, None].expand(1, 3, 4)),
    "multi_margin_loss": lambda x, i: F.multi_margin_loss(x, i),
    "take_along_dim": lambda x, i: torch.take_along_dim(x, i.reshape(3, 1), 1),
    "repeat_interleave": lambda x, i: x.repeat_interleave(i, 0),
}


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8],
                         ids=["i64", "i32", "i16", "i8", "u8"])
@pytest.mark.parametrize("case", sorted(INDEX_ARGS))
def test_index_argument_dtypes(eager_mode, case, dtype):
    D.check(INDEX_ARGS[case], torch.arange(12.0).reshape(3, 4), torch.tensor([2, 0, 1], dtype=dtype))


def test_cross_entropy_byte_target_backward(eager_mode):
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    D.check(lambda x, t: torch.autograd.grad(F.cross_entropy(x.requires_grad_(), t), x)[0], x,
            torch.tensor([2, 0, 1, 1], dtype=torch.uint8))


INT_INDEX = {
    "int_index": lambda x: x[4],
    "neg_int_index": lambda x: x[-5],
    "int_index_dim1": lambda x: x[:, 3],
    "select": lambda x: x.select(1, -4),
    "narrow": lambda x: x.narrow(0, 3, 2),
    "unbind_item": lambda x: x.unbind(0)[4],
    "slice_ok_past_end": lambda x: x[2:10],
    "slice_empty": lambda x: x[5:7],
    "neg_slice": lambda x: x[-10:-2],
    "step_slice": lambda x: x[::3],
    "zero_step": lambda x: x[::0],
    "neg_step": lambda x: x[::-1],
    "ellipsis_too_many": lambda x: x[0, 0, 0],
    "none_index": lambda x: x[None, 1, None],
    "list_index": lambda x: x[[0, 3, -1]],
    "list_bad_index": lambda x: x[[0, 4]],
    "tuple_list_index": lambda x: x[[0, 1], [2, 3]],
    "item_of_many": lambda x: x.item(),
    "diagonal_offset": lambda x: x.diagonal(5),
}


@pytest.mark.parametrize("case", sorted(INT_INDEX))
def test_python_index(eager_mode, case):
    D.check(INT_INDEX[case], X)


MASKS = {
    "short": torch.tensor([True, False, True]),
    "long": torch.tensor([True, False, True, False, True]),
    "2d_wrong": torch.ones(4, 2, dtype=torch.bool),
    "2d_transposed": torch.ones(3, 4, dtype=torch.bool),
    "3d": torch.ones(4, 3, 1, dtype=torch.bool),
    "uint8_mask": torch.tensor([1, 0, 1, 0], dtype=torch.uint8),
    "empty": torch.zeros(0, dtype=torch.bool),
}

MASK_OPS = {
    "getitem": lambda x, m: x[m],
    "setitem": lambda x, m: x.__setitem__(m, 1.0),
    "setitem_tensor": lambda x, m: x.__setitem__(m, torch.tensor(2.0, device=x.device)),
    "masked_select": lambda x, m: torch.masked_select(x, m),
    "masked_fill": lambda x, m: x.masked_fill(m, 0.0),
    "masked_scatter": lambda x, m: x.masked_scatter(m, torch.zeros(20, device=x.device)),
    "index_put_bool": lambda x, m: x.index_put((m,), torch.tensor(3.0, device=x.device)),
    "where_mask": lambda x, m: torch.where(m, x, 0.0),
}


@pytest.mark.parametrize("mask", sorted(MASKS))
@pytest.mark.parametrize("op", sorted(MASK_OPS))
def test_bool_mask_shape(eager_mode, op, mask):
    """A mask of the wrong shape raises at once, in every mode (the shape is known at the call)."""
    m = MASKS[mask]
    D.check(MASK_OPS[op], X.clone(), m, raise_at_call=True)


def test_masked_scatter_too_few_source_elements(eager_mode):
    m = torch.tensor([[True, True, True]] * 4)
    D.check(lambda x, m, s: x.masked_scatter(m, s), X, m, torch.zeros(5))


def test_bool_mask_compiled():
    m = torch.tensor([True, False, True, True])
    D.check(lambda x, m: x[m] * 2, X, m, modes=["compiled"])


BINCOUNT = {
    "counts": (t(0, 1, 1, 3), None, 0),
    "weights_minlength": (t(0, 1, 1, 3), t(0.5, 1.0, 2.0, 3.0), 6),
    "int_weights_are_double": (t(2, 0), t(1, 4), 0),
    "half_weights_are_double": (t(2, 0), t(1.5, 4.0, dtype=torch.float16), 0),
    "empty": (torch.zeros(0, dtype=torch.int64), None, 3),
    "negative": (t(0, -1), None, 0),
    "two_dim": (t(0, 1).reshape(1, 2), None, 0),
    "float_input": (t(0.5), None, 0),
    "weights_length": (t(0, 1), t(1.0), 0),
    "negative_minlength": (t(0, 1), None, -1),
}


@pytest.mark.parametrize("case", sorted(BINCOUNT))
def test_bincount(eager_mode, case):
    """bincount had no lowering; its length is the largest value + 1 (a value read on the host)."""
    x, w, m = BINCOUNT[case]
    D.check(lambda x, w: torch.bincount(x, w, minlength=m), x, w)


UNIQUE_CONSECUTIVE = {
    "rows": (t(1, 1, 2, 2, 1, 3, 3, 4, 4, 3, 3, 3, 4, 4, 3).reshape(3, 5), 0),
    "cols": (t(1, 1, 2, 2, 1, 3, 3, 4, 4, 3, 3, 3, 4, 4, 3).reshape(3, 5), 1),
    "last_dim": (t(1, 1, 1, 1, 2, 2).reshape(3, 2), -1),
    "empty_selected": (torch.zeros(0, 3, dtype=torch.int64), 0),
    "empty_not_selected": (torch.zeros(0, 3, dtype=torch.int64), 1),
    "dim_out_of_range": (t(1, 2).reshape(1, 2), 2),
    "zero_dim": (t(5).reshape(()), 0),
}


@pytest.mark.parametrize("case", sorted(UNIQUE_CONSECUTIVE))
def test_unique_consecutive_dim(eager_mode, case):
    """unique_consecutive along a dim was refused on the tpu; CPU's errors for empty and 0-dim inputs."""
    x, dim = UNIQUE_CONSECUTIVE[case]
    D.check(lambda x: torch.unique_consecutive(x, return_inverse=True, return_counts=True, dim=dim), x)


@pytest.mark.parametrize("case,dtype", [("index_select", torch.int16), ("put", torch.int32), ("index_fill", torch.int32),
                                        ("index_add", torch.uint8), ("multi_margin_loss", torch.int32)])
def test_index_argument_dtypes_compiled(case, dtype):
    D.check_raises(lambda x, i: INDEX_ARGS[case](x, i) * 1, torch.arange(12.0).reshape(3, 4),
                   torch.tensor([2, 0, 1], dtype=dtype), modes=["compiled"])


EMPTY_DIM_CASES = {
    # (x's shape, the indexing, whether CPU raises): an index into a dim of size 0 raises where the result has
    # elements; an empty result checks no index (the gather of a dim of size 0 could not even be built)
    "into_empty_dim": ((0, 3), lambda x, i: x[i], True),
    "into_empty_inner_dim": ((2, 0), lambda x, i: x[:, i], True),
    "put_into_empty_dim": ((0, 3), lambda x, i: x.index_put((i,), torch.ones(3)), True),
    "bad_index_empty_result": ((0, 3), lambda x, i: x[:, i + 5], False),
    "empty_index_into_empty_dim": ((0, 3), lambda x, i: x[i[:0]], False),
}


@pytest.mark.parametrize("case", list(EMPTY_DIM_CASES), ids=list(EMPTY_DIM_CASES))
def test_an_index_into_an_empty_dim_raises_as_cpu_does(case, eager_mode):
    shape, fn, raises = EMPTY_DIM_CASES[case]
    D.check(fn, torch.zeros(shape), torch.tensor([0]), match=INDEX_ERR, expect_raise=raises)
