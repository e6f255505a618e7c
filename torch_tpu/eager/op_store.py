"""What an op entry needs, kept on disk beside its program: a warm process builds the entry of an op
signature it has seen before without running torch's meta kernel or tracing the lowering.

An op's description (output shapes and dtypes, the structure of its result, whether it returns a Python
scalar, the dtype its fill value must fit, the messages of its device-side checks, the layout of results
torch does not lay out contiguously) is a function of its program key (the op by name, input shapes and
dtypes, static arguments) and the versions in ``stable_keys.environment``. It is stored as JSON in a
verified disk entry (``runtime.disk_cache``: full key and checksum checked on load).
"""
from __future__ import annotations

import dataclasses
import json
import math

import torch

from ..errors import leaves
from ..runtime import counters, disk_cache, prefetch, stable_keys

stable_keys.register_kind("op")  # ("op", name, input signature, matmul precision): see op_path.program_key

_NAMES: dict = {}


@dataclasses.dataclass(frozen=True)
class OpDescription:
    """What an op entry needs beside its program (``entries.LoweredEntry.from_description``)."""
    avals: tuple  # the program's outputs: ((shape, torch dtype), ...)
    out_dtypes: tuple  # the results' torch dtypes
    returns_scalar: bool  # a Python scalar result
    structure: object  # None, or the result's structure with meta tensors standing for the outputs
    check_dtype: torch.dtype | None  # the dtype a dynamic Scalar must fit (None: no per-call check)
    device_checks: tuple  # the messages of the lowering's device-side checks
    layouts: tuple | None  # see ``plans.Plan.layouts``


def op_name(func) -> str:
    """``aten::add.Tensor``: the op's name in every process (cached by id: OpOverload hashing is slow)."""
    name = _NAMES.get(id(func))
    if name is None:
        name = _NAMES[id(func)] = f"{func._schema.name}.{func._overloadname}"
    return name


def is_own_lowering(low) -> bool:
    """A lowering from torch_tpu's op table (its code is part of every persistent key's environment)."""
    return getattr(low.fn, "__module__", "").startswith("torch_tpu.")


def _disk_key(program_key) -> str | None:
    text = stable_keys.text(program_key)
    if text is None:
        return None
    return "op-description\n" + text + "\n" + stable_keys.environment(True)


_LEAF_TYPES = (bool, int, str, type(None))


def _structure(x):
    """A JSON form of an op's result structure: tensors as "T", containers, plain values."""
    if isinstance(x, torch.Tensor):
        return "T"
    if type(x) in (list, tuple):
        return {type(x).__name__: [_structure(e) for e in x]}
    if type(x) in _LEAF_TYPES or (type(x) is float and math.isfinite(x)):
        return {"value": x}
    raise ValueError(f"not kept on disk: {type(x).__name__} in a result")


def _template(s):
    """The result structure back, with meta tensors standing for the outputs."""
    if s == "T":
        return torch.empty(0, device="meta")
    if "value" in s:
        return s["value"]
    if "tuple" in s:
        return tuple(_template(e) for e in s["tuple"])
    return [_template(e) for e in s["list"]]


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).rpartition(".")[2]


def _dtype(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dt


prefetch.set_loader("op-description", disk_cache.load, small=True)


def save(program_key, entry, meta_out, in_place: bool, check_meta) -> None:
    """Keep ``entry``'s description on disk (off the critical path) when its key is persistent."""
    if not disk_cache.enabled():
        return
    key = _disk_key(program_key)
    if key is None:
        return
    try:
        tensors = [m for m in leaves(meta_out) if isinstance(m, torch.Tensor)] if not in_place else []
        desc = {
            "avals": [[list(shape), _dtype_name(_torch_dtype_of(dt))] for shape, dt in entry.avals],
            "out_dtypes": [_dtype_name(d) for d in entry.out_dtypes],
            "returns_scalar": bool(entry.returns_scalar),
            "structure": None if entry.rebuild is None else _structure(meta_out),
            "check_dtype": _dtype_name(check_meta.dtype) if isinstance(check_meta, torch.Tensor) else None,
            "device_checks": [str(m) for m in entry.device_checks],
            "layouts": None if entry.layouts is None else [None if lay is None else [list(lay[0]), list(lay[1])]
                                                          for lay in entry.layouts],
        }
        if len(tensors) != entry.n_out:
            return
    except ValueError:
        return
    disk_cache.store(key, json.dumps(desc).encode())


def load(program_key):
    """The description of ``program_key`` from disk, or None."""
    if not disk_cache.enabled():
        return None
    key = _disk_key(program_key)
    if key is None:
        return None
    payload = prefetch.read(key)  # a warm process's background thread reads the next ones meanwhile
    if payload is None:
        return None
    try:
        d = json.loads(payload)
        desc = OpDescription(
            avals=tuple((tuple(int(n) for n in shape), _dtype(dt)) for shape, dt in d["avals"]),
            out_dtypes=tuple(_dtype(n) for n in d["out_dtypes"]),
            returns_scalar=bool(d["returns_scalar"]),
            structure=None if d["structure"] is None else _template(d["structure"]),
            check_dtype=None if d["check_dtype"] is None else _dtype(d["check_dtype"]),
            device_checks=tuple(_message(m) for m in d["device_checks"]),
            layouts=None if d["layouts"] is None else tuple(
                None if lay is None else (tuple(int(n) for n in lay[0]), tuple(int(n) for n in lay[1]))
                for lay in d["layouts"]),
        )
    except (ValueError, KeyError, TypeError) as exc:  # verified bytes we cannot read: rebuild
        counters.add("cache_rejects", 1)
        disk_cache.forget(key)
        return None
    counters.add("op_loads", 1)
    return desc


def _message(m) -> str:
    if type(m) is not str:
        raise TypeError("a check's message is text")
    return m


def _torch_dtype_of(jax_dtype) -> torch.dtype:
    from ..runtime import dtypes

    return dtypes.to_torch_dtype(jax_dtype)
