"""Views, storage, deepcopy, save/load.

* Views share storage with their base on CPU; writes through any view must show in the base and in
  every other view, in strict and fused mode alike.
* ``copy.deepcopy`` of a view and ``untyped_storage().clone()`` once segfaulted: those cases run in a
  child process (a crash fails the case, the suite survives).
* ``torch.save``/``torch.load`` must keep storage sharing between a tensor and its views, the strides of
  non-contiguous tensors, and ``nn.Parameter`` types.
"""
import copy
import io

import pytest
import torch

from tests.harness import differential as D
from tests.harness.compare import assert_same, read, sync
from tests.harness.inputs import DEV
from tests.harness.isolated import isolated_case_tests, run_isolated, stderr_excerpt

pytestmark = pytest.mark.usefixtures("watchdog")

X = torch.arange(24, dtype=torch.float32).reshape(4, 6)

# ---------------------------------------------------------------------------------------------------
# writes through views (the harness compares every input after the call, so base and views both count)

VIEW_WRITES = {
    "row_add_": lambda x: x[1].add_(100),
    "col_mul_": lambda x: x[:, 2].mul_(-1),
    "transpose_fill_": lambda x: x.t()[0].fill_(7),
    "strided_slice_copy_": lambda x: x[::2, ::3].copy_(torch.ones(2, 2, device=x.device)),
    "diagonal_zero_": lambda x: x.diagonal().zero_(),
    "view_reshape_add_": lambda x: x.view(6, 4)[2].add_(1),
    "unsqueeze_chain": lambda x: x.unsqueeze(0)[0, 3, ::2].sub_(5),
    "narrow_setitem": lambda x: x.narrow(1, 1, 3).__setitem__((slice(None), 0), -1.0),
    "unfold_view_write": lambda x: x.unfold(1, 2, 2)[..., 0].mul_(10),
    "split_write": lambda x: x.split(2, 1)[1].add_(0.5),
    "chunk_write": lambda x: x.chunk(2, 0)[1].neg_(),
    "unbind_write": lambda x: x.unbind(1)[5].clamp_(max=3),
    "expand_read_after_write": lambda x: (x[0].add_(1), x[0].expand(3, 6).sum(0)),
    "as_strided_write": lambda x: x.as_strided((2, 2), (7, 1), 1).fill_(-3),
    "view_dtype_write": lambda x: x.view(torch.int32)[0].bitwise_and_(0),
    "real_view_write": lambda x: torch.view_as_real(torch.view_as_complex(x.reshape(4, 3, 2)))[..., 1].zero_(),
    "flatten_view_write": lambda x: x.flatten()[3:7].fill_(1),
    "permute_write": lambda x: x.reshape(2, 2, 6).permute(2, 0, 1)[0].add_(9),
    "setitem_bool_through_view": lambda x: x[1:3].__setitem__(x[1:3] > 10, 0.0),
    "index_put_through_view": lambda x: x.t().index_put_((torch.tensor([0, 5], device=x.device),),
                                                         torch.tensor(4.0, device=x.device)),
    "two_views_overlap": lambda x: (x[0:2].add_(1), x[1:3].mul_(2)),
    "write_then_read_old_view": lambda x: (lambda v: (x.add_(1), v * 1))(x[2]),
    "detach_shares": lambda x: x.detach()[0].fill_(3),
    "alias_via_data": lambda x: x.data[1].fill_(2),
    "resize_view_read": lambda x: x[:, :3].contiguous().add_(1),
    "squeeze_view_write": lambda x: x[None, :, None][:, 1].squeeze().mul_(0),
    "select_negative_write": lambda x: x[-1, -1:].fill_(42),
    "copy_from_overlapping_self": lambda x: x[1:].copy_(x[:-1].clone()),
    "inplace_on_expanded_raises": lambda x: x[0].expand(4, 6).add_(1),
    "set_storage_view": lambda x: x.view(-1)[::5].zero_(),
    "copy_partial_overlap": lambda x: x[:, :4].copy_(x[:, 2:6]),
    "add_self_alias": lambda x: x.add_(x),
    "inplace_out_alias": lambda x: torch.add(x[0], x[1], out=x[0]),
    "index_copy_self_source": lambda x: x.index_copy_(0, torch.tensor([0, 1], device=x.device), x[2:]),
    "view_then_resize_base_read": lambda x: (lambda v: (x.mul_(2), v.sum()))(x[1:3, 2:]),
    # a whole tensor shrunk by resize_ keeps its storage (views taken before see its writes; the tpu
    # gave it a new storage, so the view kept the old values)
    "resize_shrink_then_write": lambda x: (lambda v: (x.resize_(2, 5), x.fill_(7), v * 1))(x[0, :3]),
    "resize_shrink_out_then_view": lambda x: (lambda v: (torch.add(x[0, :4], 1, out=x.resize_(0)), v * 1))(x[1]),
    "resize_same_numel_then_write": lambda x: (lambda v: (x.resize_(6, 4), x[0].fill_(-1), v * 1))(x[0]),
}


@pytest.mark.parametrize("case", sorted(VIEW_WRITES))
def test_view_write(eager_mode, case):
    D.check(VIEW_WRITES[case], X.clone(), check_stride=True)


VIEW_META = {
    "stride_transpose": lambda x: x.t().stride(),
    "offset_select": lambda x: x[2, 3:].storage_offset(),
    "is_contiguous_t": lambda x: x.t().is_contiguous(),
    "contiguous_strides": lambda x: x.t().contiguous().stride(),
    "storage_nbytes": lambda x: x[1].untyped_storage().nbytes(),
    "storage_shared": lambda x: x[1].untyped_storage().data_ptr() == x.untyped_storage().data_ptr(),
    "is_view": lambda x: (x[1]._base is x, x.t()._is_view()),
    "clone_strides": lambda x: x.t().clone().stride(),
    "empty_like_strides": lambda x: torch.empty_like(x.t()).stride(),
    "reshape_shares": lambda x: x.t().reshape(24)._base is not None,
    "expand_strides": lambda x: x[0].expand(3, 6).stride(),
    "mT_strides": lambda x: x.mT.stride(),
    "view_as_real_strides": lambda x: torch.view_as_real(torch.view_as_complex(x.reshape(4, 3, 2))).stride(),
    "unfold_strides": lambda x: x.unfold(1, 2, 2).stride(),
    "channels_last": lambda x: x.reshape(1, 2, 3, 4).contiguous(memory_format=torch.channels_last).stride(),
    "channels_last_op": lambda x: (x.reshape(1, 2, 3, 4).contiguous(memory_format=torch.channels_last) + 1).stride(),
}


@pytest.mark.parametrize("case", sorted(VIEW_META))
def test_view_metadata(eager_mode, case):
    D.check(VIEW_META[case], X.clone())


# ---------------------------------------------------------------------------------------------------
# results keep torch's dense layout (TensorIterator's order: channels_last, a transposed input's order)


def _cl(x, shape=(1, 2, 3, 4)):
    return x.reshape(shape).contiguous(memory_format=torch.channels_last)


LAYOUTS = {
    "cl_add_scalar": lambda x: _cl(x) + 1,
    "cl_unary": lambda x: (_cl(x).neg(), _cl(x).exp(), torch.relu(_cl(x) - 5)),
    "cl_binary_both": lambda x: _cl(x) * _cl(x),
    "cl_mixed_contiguous_first": lambda x: x.reshape(1, 2, 3, 4) + _cl(x),
    "cl_mixed_cl_first": lambda x: _cl(x) + x.reshape(1, 2, 3, 4),
    "cl_broadcast_bias": lambda x: _cl(x) + torch.arange(2.0, device=x.device).reshape(1, 2, 1, 1),
    "cl_batch2": lambda x: _cl(x, (2, 3, 2, 2)) * 2,
    "cl_3d": lambda x: x.reshape(1, 2, 3, 2, 2).contiguous(memory_format=torch.channels_last_3d) - 1,
    "cl_empty_like": lambda x: torch.empty_like(_cl(x)).stride(),
    "cl_zeros_like": lambda x: (torch.zeros_like(_cl(x)), torch.full_like(_cl(x), 3.0)),
    "cl_clone": lambda x: (_cl(x).clone(), _cl(x).clone(memory_format=torch.contiguous_format)),
    # a factory naming another device makes its tensor there, in the source's layout (dynamo pickles a
    # guarded tensor's metadata with ``torch.empty_like(t, device="meta")``: a tpu tensor came back)
    "like_on_another_device": lambda x: (
        [(t.device.type, t.dtype, tuple(t.shape), t.stride()) for t in (
            torch.empty_like(x.t(), device="meta"), torch.empty_like(_cl(x), device="meta"),
            torch.zeros_like(x.t(), device="cpu"), torch.randn_like(_cl(x), device="cpu"),
            torch.ones_like(x, dtype=torch.float64, device="meta"), x.new_empty((2, 5), device="meta"),
            x.new_empty_strided((2, 5), (1, 2), device="cpu"))],
        torch.zeros_like(x.t(), device="cpu"), torch.full_like(_cl(x), 2.5, device="cpu"),
        torch.randint_like(x, 3, 4, device="cpu").clamp(3, 3)),
    "cl_to_dtype": lambda x: (_cl(x).to(torch.float64), _cl(x).half()),
    "to_channels_last": lambda x: x.reshape(1, 2, 3, 4).to(memory_format=torch.channels_last),
    "cl_inplace_on_result": lambda x: (_cl(x) + 1).mul_(2).sub_(1),
    "cl_result_views": lambda x: (lambda y: (y.permute(0, 2, 3, 1).reshape(-1), y[:, 1], y.transpose(1, 3)))(
        _cl(x) * 2),
    "cl_result_storage": lambda x: (lambda y: (y.untyped_storage().nbytes(), y.storage_offset(),
                                               torch.empty(0, device=x.device).set_(y.untyped_storage())))(
        _cl(x) * 2),
    "cl_where": lambda x: torch.where(_cl(x) > 5, _cl(x), 0.0),
    "cl_softmax": lambda x: _cl(x).softmax(1),
    "cl_reductions": lambda x: (_cl(x).sum(1, keepdim=True), _cl(x).amax((2, 3)), _cl(x).max(1)),
    "cl_chain": lambda x: ((_cl(x) + 1) * 3).clamp(0, 40).reshape(1, 2, 12),
    "cl_cat": lambda x: torch.cat([_cl(x), _cl(x)], 1),
    "transposed_add": lambda x: (x.t() + 1, x.t() * x.t(), (x.t() + 1).exp()),
    "permuted_3d": lambda x: x.reshape(2, 3, 4).permute(2, 0, 1).neg(),
    "transposed_then_read": lambda x: (lambda y: (y[1:3], y.sum(0), y.reshape(-1)))(x.t() - 2),
    "sliced_not_dense": lambda x: x[:, ::2] + 1,
}


@pytest.mark.parametrize("case", sorted(LAYOUTS))
def test_result_layout(eager_mode, case):
    D.check(LAYOUTS[case], X.clone(), check_stride=True)


@pytest.mark.parametrize("case", ["cl_add_scalar", "cl_mixed_contiguous_first", "cl_where", "transposed_add",
                                  "cl_clone"])
def test_result_layout_compiled(case):
    D.check(LAYOUTS[case], X.clone(), check_stride=True, modes=["compiled"])


# ---------------------------------------------------------------------------------------------------
# set_ re-points a tensor at another tensor's or storage's memory; TypedStorage element access uses it


def _empty_like_dev(x, dtype=None):
    return torch.empty(0, dtype=dtype or x.dtype, device=x.device)


def _old_view_keeps_old_storage(x):
    y = x[0].clone()
    v = y[1:]
    y.set_(x)
    y.zero_()
    v.add_(1)
    return v, y, v.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()


def _typed_setitem(x):
    ts = x[1].storage()
    ts[3] = -1.0
    ts[23] = 99.0
    return x


SET_CASES = {
    "tensor_other_shape": lambda x: (lambda y: (y.set_(x.t()), y.add_(1), y.stride(), y.storage_offset()))(
        _empty_like_dev(x)),
    "tensor_view_offset": lambda x: (lambda y: (y.set_(x[1, 2:]), y.mul_(2), y.storage_offset(),
                                                y.untyped_storage().nbytes()))(_empty_like_dev(x)),
    "tensor_write_source_seen": lambda x: (lambda y: (y.set_(x[:, 1:]), x.add_(5), y))(_empty_like_dev(x)),
    "tensor_old_view_keeps_old_storage": _old_view_keeps_old_storage,
    "tensor_shares_storage": lambda x: (lambda y: (y.set_(x.view(2, 12)),
                                                   y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr(),
                                                   y.data_ptr() == x.data_ptr()))(_empty_like_dev(x)),
    "tensor_same_shape": lambda x: (lambda y: (y.set_(x), y[2].fill_(0), y))(torch.ones_like(x)),
    "tensor_then_views": lambda x: (lambda y: (y.set_(x.t()), y[1:3, ::2].neg_(), y.reshape(-1)[::5]))(
        _empty_like_dev(x)),
    "tensor_other_dtype_op": lambda x: (lambda y: (torch.ops.aten.set_.source_Tensor(y, x[1]), y))(
        _empty_like_dev(x, torch.int32)),
    "empty": lambda x: (x.set_(), x.shape, x.stride(), x.untyped_storage().nbytes()),
    "storage_offset_size_stride": lambda x: (lambda y: (y.set_(x.untyped_storage(), 2, (2, 3), (1, 2)),
                                                        y.fill_(9), y.stride()))(_empty_like_dev(x)),
    "storage_whole": lambda x: (lambda y: (y.set_(x[2].untyped_storage()), y[7].fill_(-1), y))(
        _empty_like_dev(x)),
    "storage_other_dtype": lambda x: _empty_like_dev(x, torch.int32).set_(x.untyped_storage(), 3, (2, 2)),
    "storage_of_clone": lambda x: (lambda y: (y.set_(x.untyped_storage().clone(), 0, (4, 6), (6, 1)),
                                              y.add_(1)))(_empty_like_dev(x)),
    "typed_storage": lambda x: (lambda y: (y.set_(x.storage()), y.mul_(3)))(_empty_like_dev(x)),
    "typed_getitem": lambda x: (x.storage()[5], x[1].storage()[23], len(x.t().storage())),
    "typed_setitem": _typed_setitem,
    "typed_tolist": lambda x: (x.add_(1), x.t().storage().tolist()),
    "typed_fill_slice_copy": lambda x: (x.storage()[2:5].tolist(), x.storage().__setitem__(slice(1, 3), 7.0),
                                        x[2].storage().fill_(-2.0)[0], x.clone(),
                                        x.storage().copy_(torch.ones(24).storage()).tolist()),
    "typed_other_dtypes": lambda x: (x.long().storage()[4], (x > 2).storage().tolist()[:5],
                                     x.bfloat16().storage()[3]),
}


@pytest.mark.parametrize("case", sorted(SET_CASES))
@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_set_(eager_mode, case):
    D.check(SET_CASES[case], X.clone(), check_stride=True)


def test_set_cpu_source_raises(eager_mode):
    """CPU torch refuses a source on another device; so does tpu, naming both devices."""
    y = torch.empty(0, device=DEV)
    with pytest.raises(RuntimeError, match="cpu"):
        y.set_(torch.ones(2))
    with pytest.raises(RuntimeError, match="different device"):
        y.set_(torch.ones(2).untyped_storage())
    assert y.shape == (0,)


def test_set_storage_cannot_grow(eager_mode):
    """CPU grows a storage too small for set_'s sizes; a tpu storage cannot grow, so it says so."""
    x = X.clone().to(DEV)
    with pytest.raises(RuntimeError, match="cannot grow"):
        torch.empty(0, device=DEV).set_(x.untyped_storage(), 1, (24,))
    assert_same(X, read(x), where="tensor after the refused set_")


# ---------------------------------------------------------------------------------------------------
# deepcopy and storage clone: in one crash-tolerant child process (a segfault fails the case only)


def _fused():
    import torch_tpu

    return torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE)


def _iso_deepcopy_view():
    x = torch.arange(6.0, device="tpu").reshape(2, 3)
    y = copy.deepcopy(x[1])
    assert_same(torch.tensor([3.0, 4.0, 5.0]), read(y), where="deepcopy(x[1])")


def _iso_deepcopy_views_share():
    x = torch.arange(6.0, device="tpu").reshape(2, 3)
    a, b = copy.deepcopy((x, x[1]))
    b.add_(10)
    assert_same(torch.tensor([13.0, 14.0, 15.0]), read(a[1]), where="copied base after writing the copied view")
    assert_same(torch.tensor([3.0, 4.0, 5.0]), read(x[1]), where="original")


def _iso_deepcopy_noncontig():
    x = torch.arange(6.0, device="tpu").reshape(2, 3).t()
    y = copy.deepcopy(x)
    assert_same(torch.arange(6.0).reshape(2, 3).t(), read(y), where="deepcopy(x.t())", check_stride=True)


def _iso_untyped_storage_clone():
    x = torch.arange(6.0, device="tpu")
    s = x.untyped_storage().clone()
    assert s.nbytes() == 24 and s.device.type == "tpu", (s.nbytes(), s.device)
    y = torch.empty(0, device="tpu").set_(s, 0, (6,), (1,))
    assert_same(torch.arange(6.0), read(y), where="tensor on the cloned storage")


def _iso_untyped_storage_cpu():
    x = torch.arange(6.0, device="tpu")
    s = x.untyped_storage().cpu()
    assert bytes(s) == bytes(torch.arange(6.0).untyped_storage()), "[wrong value] storage bytes differ"


def _iso_storage_of_view_clone():
    x = torch.arange(6.0, device="tpu").reshape(2, 3)
    s = x[1].untyped_storage()
    assert s.nbytes() == 24, f"[wrong value] storage of a view has {s.nbytes()} bytes, CPU 24"
    s.clone()


def _iso_typed_storage():
    x = torch.arange(6.0, device="tpu")
    ts = x.storage()
    assert len(ts) == 6 and ts.dtype == torch.float32, (len(ts), ts.dtype)
    assert ts.tolist() == list(map(float, range(6))), ts.tolist()


def _iso_set_source_tensor():
    x = torch.arange(6.0, device="tpu")
    y = torch.empty(0, device="tpu")
    y.set_(x)
    y.add_(1)
    assert_same(torch.arange(6.0) + 1, read(x), where="x after y.set_(x); y.add_(1)")


def _iso_deepcopy_module():
    m = torch.nn.Linear(3, 2).to("tpu")
    m2 = copy.deepcopy(m)
    assert isinstance(m2.weight, torch.nn.Parameter), f"[wrong type] {type(m2.weight)}"
    assert torch.equal(m2.weight.detach().cpu(), m.weight.detach().cpu())
    with torch.no_grad():
        m2.weight.add_(1)
    assert not torch.equal(m2.weight.detach().cpu(), m.weight.detach().cpu()), "[wrong value] the copy shares storage"


def _iso_deepcopy_pending_fused():
    with _fused():
        x = torch.arange(6.0, device="tpu")
        y = x * 2 + 1          # pending
        z = copy.deepcopy(y)
        assert_same(torch.arange(6.0) * 2 + 1, read(z), where="deepcopy of a pending value")


def _iso_deepcopy_module_pending_fused():
    with _fused():
        torch.manual_seed(0)
        m = torch.nn.Linear(3, 2)
        ref = m.weight.detach().clone() + 1
        m = m.to("tpu")
        with torch.no_grad():
            m.weight.add_(1)   # pending in-place update
        m2 = copy.deepcopy(m)
        assert_same(ref, read(m2.weight.detach()), where="weight of the deep-copied module")


def _iso_pickle_tensor():
    import pickle

    x = torch.arange(6.0, device="tpu").reshape(2, 3)
    y = pickle.loads(pickle.dumps(x[1]))
    assert y.device.type == "tpu", y.device
    assert_same(torch.tensor([3.0, 4.0, 5.0]), read(y), where="pickled view")


ISOLATED_CASES = {name[len("_iso_"):]: fn for name, fn in dict(globals()).items() if name.startswith("_iso_")}


results, test_isolated_storage = isolated_case_tests(__file__, dict(sorted(ISOLATED_CASES.items())),
                                                       timeout_per_case=90)


# ---------------------------------------------------------------------------------------------------
# save / load


def _roundtrip(obj, map_location=None):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, map_location=map_location, weights_only=False)


def _sharing(x, v):
    """Observable sharing: writing through the loaded view changes the loaded base."""
    v.fill_(-7)
    return x


SAVE_LOAD = {
    "tensor": lambda x: _roundtrip(x),
    "view_row": lambda x: _roundtrip(x[1]),
    "view_keeps_storage_size": lambda x: _roundtrip(x[1]).untyped_storage().nbytes(),
    "view_offset": lambda x: _roundtrip(x[1, 2:]).storage_offset(),
    "noncontig_strides": lambda x: _roundtrip(x.t()).stride(),
    "noncontig_values": lambda x: _roundtrip(x.t()),
    "strided_slice": lambda x: (lambda y: (y, y.stride()))(_roundtrip(x[::2, 1::2])),
    "base_and_view_share": lambda x: (lambda p: _sharing(*p))(_roundtrip((x, x[1]))),
    "two_views_share": lambda x: (lambda p: (p[0].add_(1), p[1]))(_roundtrip((x[1:3], x[2]))),
    "dict_of_views": lambda x: (lambda d: (d["a"].mul_(2), d["b"]))(_roundtrip({"a": x[:, :3], "b": x})),
    # A Parameter of a tensor subclass is the subclass with ``_is_param`` set (torch's rule for subclasses:
    # ``type(tpu_module.weight)`` is TpuTensor before any save), so the contract is isinstance, not type()
    "parameter_type": lambda x: isinstance(_roundtrip(torch.nn.Parameter(x.clone())), torch.nn.Parameter),
    "parameter_requires_grad": lambda x: _roundtrip(torch.nn.Parameter(x.clone())).requires_grad,
    "buffer_in_state_dict": lambda x: _roundtrip(torch.nn.BatchNorm1d(3).to(x.device).state_dict()),
    "module_roundtrip_param_type": lambda x: isinstance(_roundtrip(torch.nn.Linear(2, 2).to(x.device)).weight,
                                                        torch.nn.Parameter),
    "zero_dim": lambda x: _roundtrip(x[1, 1]),
    "empty": lambda x: _roundtrip(x[:0]),
    "bf16": lambda x: _roundtrip(x.bfloat16()),
    "bool": lambda x: _roundtrip(x > 5),
    "int8": lambda x: _roundtrip(x.to(torch.int8)),
    "complex": lambda x: _roundtrip(torch.view_as_complex(x.reshape(4, 3, 2))),
    "expanded": lambda x: (lambda y: (y, y.stride()))(_roundtrip(x[0].expand(3, 6))),
    "requires_grad_leaf": lambda x: _roundtrip(x.clone().requires_grad_(True)).requires_grad,
    "map_location_cpu_device": lambda x: _roundtrip(x, map_location="cpu").device.type,
    "after_inplace": lambda x: _roundtrip(x.add_(1)),
    "channels_last": lambda x: (lambda y: (y, y.stride()))(
        _roundtrip(x.reshape(1, 2, 3, 4).contiguous(memory_format=torch.channels_last))),
}


@pytest.mark.parametrize("case", sorted(SAVE_LOAD))
def test_save_load(eager_mode, case):
    D.check(SAVE_LOAD[case], X.clone(), check_stride=True)


def test_load_cpu_checkpoint_to_tpu(eager_mode, tmp_path):
    """Saved from CPU, loaded with map_location='tpu': views keep sharing storage, parameters keep type."""
    base = X.clone()
    p = torch.nn.Parameter(torch.ones(3))
    torch.save({"x": base, "v": base[1], "p": p}, tmp_path / "ck.pt")
    d = torch.load(tmp_path / "ck.pt", map_location="tpu")
    assert d["x"].device.type == "tpu" and d["v"].device.type == "tpu"
    assert isinstance(d["p"], torch.nn.Parameter), f"[wrong type] {type(d['p'])}"
    d["v"].fill_(-1)
    got = d["x"].cpu()
    exp = base.clone()
    exp[1] = -1
    assert_same(exp, read(d["x"]), where="base after writing the loaded view")
    assert torch.equal(got, exp)


def test_save_tpu_load_cpu_keeps_sharing(eager_mode, tmp_path):
    x = X.clone().to(DEV)
    torch.save((x, x[1], x.t()), tmp_path / "ck.pt")
    a, b, c = torch.load(tmp_path / "ck.pt", map_location="cpu")
    assert c.stride() == (1, 6), f"[wrong stride] transposed tensor came back with strides {c.stride()}"
    b.fill_(0)
    assert a[1].abs().sum() == 0, "[wrong value] the loaded view does not share storage with its base"
    assert c[:, 1].abs().sum() == 0, "[wrong value] the loaded transposed tensor does not share storage"


def test_state_dict_load_into_tpu_module(eager_mode):
    """load_state_dict into a tpu module copies values and keeps parameters as parameters."""
    torch.manual_seed(0)
    src = torch.nn.Linear(3, 2)
    dst = torch.nn.Linear(3, 2).to(DEV)
    dst.load_state_dict(_roundtrip(src.state_dict()))
    assert isinstance(dst.weight, torch.nn.Parameter)
    assert_same(src.weight, read(dst.weight), where="weight")
    assert_same(src.bias, read(dst.bias), where="bias")


def test_deepcopy_tensor_in_process(eager_mode):
    """deepcopy of a contiguous tensor (not a view): values equal, storage independent."""
    x = X.clone().to(DEV)
    y = copy.deepcopy(x)
    y.add_(1)
    assert_same(X, read(x), where="original after writing the copy")
    assert_same(X + 1, read(y), where="copy")


def _permuted_whole_storage_add(x):
    """A transposed (2, 2) tensor that is its whole (2, 2) storage, read, then written in place."""
    t = x[:4].reshape(2, 2).clone().t()
    t.cpu()
    return t.add_(1), t.contiguous()


def _permuted_flat_memory_add(x):
    """The same geometry over a flat (4,) memory: a dtype round trip of a transposed view keeps its
    layout (CPU's preserve_format) and lays its result out in a fresh flat storage."""
    t = x.as_strided((2, 2), (1, 2), 1).to(torch.bfloat16).float()
    return t.add_(1), t.contiguous()


def test_permuted_whole_storages_of_other_shapes_do_not_share_an_entry(eager_mode):
    """Both write back the storage's memory in the storage's shape; their op key left the storage's shape
    out, so the second wrote a (2, 2) array into the (4,) storage and the next read crashed inside JAX
    ("Argument types differ ..."; tensor/test_random_sequences.py, seeds 3388 then 3403)."""
    D.check_both_orders([D.named("whole (2, 2) storage", _permuted_whole_storage_add),
                         D.named("flat (4,) memory", _permuted_flat_memory_add)], X.clone().reshape(-1))


def test_permuted_whole_storage_write_keeps_its_storage_shape(eager_mode):
    """The internal invariant behind the test above (a crash needs a read program compiled before the
    bad write): after both writes, each storage holds an array of its own shape."""
    x = X.clone().reshape(-1).to(DEV)
    for make in (_permuted_whole_storage_add, _permuted_flat_memory_add):
        t, _ = make(x)
        sync()
        st = t._tpu_storage
        assert tuple(st.value().shape) == tuple(st.shape), \
            f"[wrong shape] {make.__name__}: storage of shape {st.shape} holds an array of {st.value().shape}"


def _transposed_casts(x):
    y = x.reshape(2, 3, 4).transpose(0, 2).to(torch.float64)  # empty_like(preserve_format), then written whole
    z = x.reshape(2, 3, 4).permute(1, 2, 0).to(torch.bfloat16)
    return y, z, y * 2, z.float() + 1


def test_a_whole_storage_written_in_another_order_launches_no_zeros(eager_mode):
    """A cast of a transposed tensor keeps its layout: an empty storage in that order, written whole. The write
    read the empty storage's zeros first, a program launched on its own (outside fused graphs too) at every
    such cast: 8 extra programs per SD3.5 block call. The same values as CPU, and no zeros program."""
    import torch_tpu
    from torch_tpu.runtime import program_cache

    D.check(_transposed_casts, torch.randn(24))
    x = torch.randn(24).to(DEV)
    sync()
    zeros = []
    original = program_cache.zeros
    program_cache.zeros = lambda *a: zeros.append(a) or original(*a)
    try:
        _transposed_casts(x)
        torch_tpu.sync()
    finally:
        program_cache.zeros = original
    assert zeros == [], f"zeros programs launched for whole writes: {zeros}"


# ---------------------------------------------------------------------------------------------------
# view keys made before the first math bit (tensor/views.py keys conj/neg as False until MATH_BITS_SEEN)

_MATH_BITS_CHILD = r"""
import json, torch, torch_tpu
from torch_tpu.tensor import views
c = torch.complex(torch.arange(6.0), -torch.arange(6.0) - 1).reshape(2, 3).to("tpu")
assert not views.MATH_BITS_SEEN[0]
out = {"seen_before": views.MATH_BITS_SEEN[0]}
# keyed while no tensor has a bit: the same views of a conjugate (or negative) tensor must not reuse them
out["imag"] = c.imag.cpu().tolist()
out["row_imag"] = c[1].imag.cpu().tolist()
out["t_imag"] = c.t().imag.cpu().tolist()
j = c.conj()
out["conj_is_conj"] = j.is_conj()
out["conj_imag"] = j.imag.cpu().tolist()
out["conj_row_imag"] = j[1].imag.cpu().tolist()
out["conj_t_imag"] = j.t().imag.cpu().tolist()
out["neg_view"] = torch._neg_view(c).t().real.cpu().tolist()
out["seen_after"] = views.MATH_BITS_SEEN[0]
print(json.dumps(out))
"""


def test_view_keys_before_the_first_math_bit(tmp_path):
    """A fresh process keys views before any tensor has a math bit (conj/neg read as False, not asked);
    the same views of a conjugate or negative view made afterwards get keys of their own."""
    import json

    proc = run_isolated(_MATH_BITS_CHILD, timeout=120, env={"TORCH_TPU_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, stderr_excerpt(proc.stderr)
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    c = torch.complex(torch.arange(6.0), -torch.arange(6.0) - 1).reshape(2, 3)
    assert not got["seen_before"] and got["seen_after"] and got["conj_is_conj"]
    assert got["imag"] == c.imag.tolist() and got["row_imag"] == c[1].imag.tolist()
    assert got["t_imag"] == c.t().imag.tolist()
    assert got["conj_imag"] == c.conj().imag.tolist()
    assert got["conj_row_imag"] == c.conj()[1].imag.tolist()
    assert got["conj_t_imag"] == c.conj().t().imag.tolist()
    assert got["neg_view"] == torch._neg_view(c).t().real.tolist()
