"""CompositeImplicit ops the op table lowers whole, because torch's decomposition would lose a check.

torch decomposes a CompositeImplicitAutograd op above autograd, before ``__torch_dispatch__`` sees it.
``one_hot``'s decomposition checks the class values only on CPU tensors (elsewhere it relies on a
device-side assert that its ``eq`` never raises), so an out-of-range class would be silent. A kernel on
the AutogradPrivateUse1 key stops the decomposition and sends the op itself below autograd, to the op
table's lowering, which checks on the device.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten
_LIBRARY = None


def one_hot(x, num_classes=-1):
    if x.dtype != torch.long or num_classes < -1:
        return aten.one_hot.default.decompose(x, num_classes)  # torch's own errors
    if x.numel() == 0 and num_classes <= 0:  # CPU's check (the decomposition would reduce an empty tensor)
        raise RuntimeError("Can not infer total number of classes from empty tensor.")
    if num_classes == -1:  # the class count comes from the data: one wait, as on CPU
        low, high = (int(v) for v in torch.aminmax(x))
        if low < 0:
            raise RuntimeError("Class values must be non-negative.")
        num_classes = high + 1
    with torch._C._AutoDispatchBelowAutograd():
        return aten.one_hot.default(x, num_classes)


def register() -> None:
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library("aten", "IMPL")
        _LIBRARY.impl("one_hot", one_hot, "AutogradPrivateUse1")
