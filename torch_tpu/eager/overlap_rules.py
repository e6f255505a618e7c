"""Eager's overlap rules for an op that writes: CPU torch's checks that what an op writes does not overlap
what it reads, per op family (in-place ops, out= ops that refuse any overlap, out= ops that refuse the
named inputs). Compiled graphs check their in-place calls with the same rules on fake tensors
(``compile/overlaps.py``)."""
from __future__ import annotations

import torch

from ..ops import registry
from ..tensor import strided
from ..tensor.tensor import TpuTensor

# in-place ops whose CPU kernels do not check that their inputs overlap what they write
OVERLAP_UNCHECKED = {torch.ops.aten.masked_scatter_.default}


# out= ops whose CPU kernels refuse any overlap of an input with the output (not only a partial one)
_NO_OVERLAP = {torch.ops.aten.cat.out}


# out= ops whose CPU kernels refuse an out= tensor sharing any memory with the named inputs, the whole of
# it included (kthvalue(x, out=(x, i)), gather(x, 0, i, out=x)): refused here too
_aten = torch.ops.aten
_NO_SELF_OVERLAP = {_aten.kthvalue.values: ("self",), _aten.gather.out: ("self", "index"),
                    _aten.index_select.out: ("self", "index"), _aten.take.out: ("self", "index"),
                    _aten.scatter.src_out: ("index", "src"), _aten.scatter.reduce_out: ("index", "src"),
                    _aten.scatter.value_out: ("index",), _aten.scatter.value_reduce_out: ("index",)}


# in-place ops that write one value to every element (allowed on views whose elements share memory)
_ONE_VALUE = {torch.ops.aten.fill_.Scalar, torch.ops.aten.fill_.Tensor, torch.ops.aten.zero_.default}


def refuse_overlapping_writes(func, args, kwargs, kind, storage_of) -> None:
    """Eager's overlap rules for one call of ``func`` on tensors of type ``kind`` whose storage identity
    is ``storage_of(t)``: compiled graphs check their in-place calls with it on fake tensors
    (``compile/overlaps.py``)."""
    writes = registry.mutated_arguments(func)
    if writes and func not in OVERLAP_UNCHECKED:
        refuse_partial_overlap(func, writes, args, kwargs, kind, storage_of)


def refuse_partial_overlap(func, writes, args, kwargs, kind=TpuTensor, storage_of=strided.tpu_storage_of) -> None:
    if func not in _ONE_VALUE:
        for pos, name in writes:
            target = kwargs[name] if name in kwargs else args[pos]
            if isinstance(target, kind) and not getattr(target, "_tpu_full", False):
                strided.check_no_internal_overlap(target, func)
    inputs = [a for a in (*args, *kwargs.values()) if isinstance(a, kind)]
    for a in (*args, *kwargs.values()):
        if type(a) in (list, tuple):
            inputs.extend(e for e in a if isinstance(e, kind))
    if len(inputs) < 2:
        return
    if func in _NO_SELF_OVERLAP:
        call = dict(zip([a.name for a in func._schema.arguments], args), **kwargs)
        read = [call[n] for n in _NO_SELF_OVERLAP[func] if isinstance(call.get(n), kind)]
        for pos, name in writes:
            strided.check_no_overlap(kwargs[name] if name in kwargs else args[pos], read, storage_of)
    if func in _NO_OVERLAP:  # every input but the out= argument itself (a list may hold it: cat([a], out=a))
        read = [e for a in args if type(a) in (list, tuple) for e in a if isinstance(e, kind)]
        for pos, name in writes:
            strided.check_no_overlap(kwargs[name] if name in kwargs else args[pos], read, storage_of)
        return
    for pos, name in writes:
        strided.check_no_partial_overlap(kwargs[name] if name in kwargs else args[pos], inputs, storage_of)
