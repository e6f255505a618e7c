"""Empty, 0-dim, non-contiguous, expanded (stride 0) and offset inputs through common ops.

(Reductions, shape ops, in-place writes, data-dependent ops; plain elementwise ops are left out to keep
the file cheap.)

Each (op, input kind) runs on CPU and on the tpu; both raise or both return equal values (dtype, shape,
values). Input kinds are built per device so views stay views: a transposed tensor, a stride-0
expanded tensor, a view with a storage offset.
"""
import pytest
import torch
import torch.nn.functional as F

from tests.harness import differential as D
from tests.harness.inputs import per_device, rand

pytestmark = pytest.mark.usefixtures("watchdog")

_BASE = rand(4, 3, seed=7)

KINDS = {
    "empty": lambda d: torch.zeros(0, 3, device=d),
    "zero_dim": lambda d: torch.tensor(-1.25, device=d),
    "noncontig": lambda d: _BASE.clone().to(d).t(),
    "expanded": lambda d: _BASE[:1].clone().to(d).expand(4, 3),
    "offset_view": lambda d: _BASE.clone().to(d)[1:, 1:],
}

OPS = {
    "softmax": lambda x: x.softmax(-1),
    "log_softmax": lambda x: x.log_softmax(0),
    "sum": lambda x: x.sum(),
    "sum_last": lambda x: x.sum(-1),
    "amax_last": lambda x: x.amax(-1),
    "max": lambda x: x.max(),
    "argmax_last": lambda x: x.argmax(-1),
    "min_dim": lambda x: x.min(0),
    "cumsum": lambda x: x.cumsum(-1),
    "sort": lambda x: x.sort(-1),
    "view_flat": lambda x: x.view(-1),
    "transpose": lambda x: x.transpose(0, -1),
    "cat_self": lambda x: torch.cat([x, x], -1),
    "where": lambda x: torch.where(x > 0, x, 0.0),
    "add_inplace_clone": lambda x: x.clone().add_(x),
    "matmul_mT": lambda x: x @ x.mT,
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "norm": lambda x: x.norm(),
    "prod": lambda x: x.prod(-1),
    "any_all": lambda x: ((x > 0).any(), (x > -9).all()),
    "nonzero": lambda x: (x > 0).nonzero(),
    "masked_select": lambda x: x[x > 0],
    "unique": lambda x: torch.unique(x),
    "to_int": lambda x: (x * 10).to(torch.int32),
    "expand_more": lambda x: x.expand(2, *x.shape),
    "inplace_on_view": lambda x: x.mul_(2),
    "fill_view": lambda x: x.fill_(3),
    "index_first": lambda x: x[torch.tensor([0], device=x.device)],
    "pad": lambda x: F.pad(x, (1, 1)),
    "topk1": lambda x: x.topk(1),
    "linear": lambda x: F.linear(x, torch.ones(2, x.shape[-1], device=x.device)),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("op", sorted(OPS))
def test_input_kind(eager_mode, op, kind):
    D.check(OPS[op], per_device(KINDS[kind]))
