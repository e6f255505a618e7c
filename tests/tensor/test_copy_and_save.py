"""deepcopy, pickle, torch.save and torch.load of tpu tensors: values, sharing between views, strides,
dtypes, Parameters and gradients come back as they are on CPU torch."""
import copy
import io
import pickle

import pytest
import torch

import torch_tpu


def _family(device):
    base = torch.arange(24.0, device=device).reshape(4, 6)
    return {"base": base, "row": base[1], "t": base.t(), "strided": base[::2, 1::2],
            "flat": base.view(-1)[3:9], "as_int": base.view(torch.int32)}


def _check_like_cpu(got: dict, want: dict):
    for name, w in want.items():
        g = got[name]
        assert g.shape == w.shape and g.stride() == w.stride() and g.dtype == w.dtype, name
        torch.testing.assert_close(g.cpu(), w, msg=name)
    # a write through one view reaches every other, as on CPU
    with torch.no_grad():
        got["row"].mul_(-1)
        want["row"].mul_(-1)
    for name, w in want.items():
        torch.testing.assert_close(got[name].cpu(), w, msg=f"{name} after a write through row")


def test_deepcopy_keeps_sharing_and_strides(eager_mode):
    src = _family("tpu")
    got = copy.deepcopy(src)
    _check_like_cpu(got, copy.deepcopy(_family("cpu")))
    torch.testing.assert_close(src["row"].cpu(), torch.arange(6.0, 12.0))  # the original is untouched


def test_deepcopy_of_views_and_modules():
    x = torch.arange(6.0, device="tpu").reshape(2, 3)
    torch.testing.assert_close(copy.deepcopy(x[1]).cpu(), torch.tensor([3.0, 4.0, 5.0]))
    m = torch.nn.Linear(3, 2).to("tpu")
    m(torch.ones(1, 3, device="tpu")).sum().backward()
    m2 = copy.deepcopy(m)
    assert isinstance(m2.weight, torch.nn.Parameter) and m2.weight.requires_grad
    assert m2.weight.grad is None and m.weight.grad is not None  # nn.Parameter.__deepcopy__ drops it, as on CPU
    with torch.no_grad():
        m2.weight.zero_()
    assert m.weight.abs().sum().item() > 0


def test_deepcopy_with_pending_fused_values():
    m = torch.nn.Linear(4, 4).to("tpu")
    with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        with torch.no_grad():
            m.weight.mul_(3)  # pending
        ema = copy.deepcopy(m)
        torch.testing.assert_close(ema.weight.cpu(), m.weight.cpu())


def test_non_leaf_deepcopy_raises_like_cpu():
    x = torch.ones(2, device="tpu", requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(x)


@pytest.mark.parametrize("map_location", [None, "cpu", "tpu"])
def test_save_load_round_trip(map_location):
    buf = io.BytesIO()
    torch.save(_family("tpu"), buf)
    buf.seek(0)
    got = torch.load(buf, map_location=map_location)
    want_device = "cpu" if map_location == "cpu" else "tpu"
    assert all(t.device.type == want_device for t in got.values())
    _check_like_cpu(got, _family("cpu"))


def test_save_writes_a_shared_storage_once():
    x = torch.zeros(1000, device="tpu")
    one, many = io.BytesIO(), io.BytesIO()
    torch.save([x], one)
    torch.save([x] + [x[i:] for i in range(20)], many)
    assert len(many.getvalue()) < len(one.getvalue()) + 4000


def test_parameters_and_state_dicts():
    m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.GELU(), torch.nn.Linear(4, 2)).to("tpu")
    frozen = torch.nn.Parameter(torch.ones(2, device="tpu"), requires_grad=False)
    buf = io.BytesIO()
    torch.save({"model": m, "sd": m.state_dict(), "frozen": frozen}, buf)
    buf.seek(0)
    got = torch.load(buf, weights_only=False)
    assert isinstance(got["frozen"], torch.nn.Parameter) and not got["frozen"].requires_grad
    assert all(isinstance(p, torch.nn.Parameter) for p in got["model"].parameters())
    x = torch.randn(5, 3)
    torch.testing.assert_close(got["model"](x.to("tpu")).cpu(), m(x.to("tpu")).cpu())
    m2 = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.GELU(), torch.nn.Linear(4, 2)).to("tpu")
    sd = io.BytesIO()
    torch.save(m.state_dict(), sd)
    sd.seek(0)
    m2.load_state_dict(torch.load(sd))  # weights_only=True: the default
    torch.testing.assert_close(m2(x.to("tpu")).cpu(), m(x.to("tpu")).cpu())


def test_pickle_and_complex_views():
    z = torch.randn(3, 2, dtype=torch.complex64, device="tpu")
    r = torch.view_as_real(z)
    z2, r2 = pickle.loads(pickle.dumps((z, r)))
    torch.testing.assert_close(r2.cpu(), torch.view_as_real(z.cpu()))
    r2.zero_()
    assert z2.abs().sum().item() == 0
