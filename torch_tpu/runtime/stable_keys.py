"""Program keys that mean the same thing in every process: their canonical text, and the environment.

A structural key (an op, its input shapes and dtypes, its static arguments; or a fused graph of such
nodes) names a program only inside one process unless every part of it is a value whose text is the same
in the next process. ``text(key)`` returns that text, or None when the key holds anything else (an
object id, a function, an unknown object): such a program is cached on disk by its lowered module instead
(``program_cache``), never by a key that could name another program.

A key is a tuple whose first item is its kind (``"op"``, ``"view-read"`` ...). Only kinds registered with
``register_kind`` by the code that builds them are persistent: that code promises the key holds
everything that changes the program. ``environment()`` is the rest: the platform, the device, the
versions of torch_tpu (its source), JAX, jaxlib and torch, XLA flags and the JAX options that change
lowering. Both go into every disk key.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import sys

import numpy as np
import torch

from .. import config
from . import caches, platform

_KINDS: dict = {}
# id(key) -> (key, its text): a fused graph's key holds its ops' keys, the same objects whose text was
# made for their op descriptions, so a warm process makes each op's text once. By identity, not
# equality: 1, 1.0 and True are equal as tuple items but have different texts.
_TEXTS = caches.register("key texts", caches.Bounded(lambda: 50_000))
_LONG_TEXTS = caches.register("long key part texts", caches.Bounded(lambda: 16))  # (see _part)


def register_kind(kind: str, check=None) -> None:
    """Keys whose first item is ``kind`` hold everything that changes their program (a promise);
    ``check(key)``, when given, says whether one such key is (a graph: whether all its nodes are)."""
    _KINDS[kind] = check


class ProcessLocal:
    """A key part that means something in this process only (a function's id): never persisted."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return type(other) is ProcessLocal and other.value == self.value

    def __hash__(self):
        return hash(("ProcessLocal", self.value))

    def __repr__(self):
        return f"ProcessLocal({self.value!r})"


class Hashed(tuple):
    """A tuple whose hash is computed once (a long key part looked up many times); equal to the tuple of
    its items, and its text is theirs."""

    def __new__(cls, items):
        self = tuple.__new__(cls, items)
        self._hash = tuple.__hash__(self)
        return self

    def __hash__(self):
        return self._hash

    def __reduce__(self):
        return tuple, (tuple(self),)


class _NotStable(Exception):
    pass


_TORCH_ENUMS = (torch.dtype, torch.layout, torch.memory_format)
_BUILTIN_TYPES = {int: "int", float: "float", complex: "complex", bool: "bool", tuple: "tuple", list: "list",
                  str: "str", type(None): "NoneType"}


def _float(x: float) -> str:
    return "nan" if math.isnan(x) else x.hex()  # hex: exact, and -0.0 differs from 0.0


def _part(x, out: list) -> None:
    t = type(x)
    if t is Hashed:
        t = tuple
    if t is tuple and x and type(x[0]) is str:  # a key of its own (an op in a graph): text made before?
        found = _TEXTS.get(id(x))
        if found is not None and found[0] is x:
            out.append(found[1])
            return
    if t is tuple and len(x) > 64:
        # a fused graph's nodes: the keys of one flush (its program, its output and donation sets) share
        # this tuple, and a 1000-node graph's text took 50 ms to make
        found = _LONG_TEXTS.get(id(x))
        if found is None or found[0] is not x:
            inner: list[str] = []
            _items(x, inner, "(", ")")
            found = _LONG_TEXTS[id(x)] = (x, "".join(inner))
        out.append(found[1])
    elif t is tuple or t is torch.Size or t is list:
        _items(x, out, "[" if t is list else "(", "]" if t is list else ")")  # (a list is not a tuple)
    elif t is str:
        out.append(json.dumps(x))
    elif t is bool:
        out.append("T" if x else "F")
    elif t is int:
        out.append(f"i{x}")
    elif t is float:
        out.append("f" + _float(x))
    elif t is complex:
        out.append(f"c{_float(x.real)}:{_float(x.imag)}")
    elif x is None:
        out.append("N")
    elif x is Ellipsis:
        out.append("...")
    elif t in _TORCH_ENUMS:
        out.append(f"<{x}>")
    elif t is torch.device:
        out.append(f"<dev {x.type}:{x.index}>")
    elif isinstance(x, np.dtype):
        out.append(f"<np {x.name}>")
    elif isinstance(x, type):
        if x in _BUILTIN_TYPES:
            out.append(f"<type {_BUILTIN_TYPES[x]}>")
        elif issubclass(x, np.generic):
            out.append(f"<np {np.dtype(x).name}>")
        elif x.__module__.startswith("jax") and isinstance(getattr(x, "dtype", None), np.dtype):
            out.append(f"<np {x.dtype.name}>")  # jnp.float32 and friends
        else:
            raise _NotStable(x)
    elif isinstance(x, np.generic) and t.__module__ == "numpy":
        out.append(f"<np {np.dtype(t).name} {x!r}>")
    else:
        raise _NotStable(x)


def _items(x, out: list, opening: str, closing: str) -> None:
    out.append(opening)
    for e in x:
        _part(e, out)
        out.append(",")
    out.append(closing)


def is_stable(key) -> bool:
    """Whether ``key`` is of a registered kind (its parts are checked by ``text``)."""
    if type(key) is not tuple or not key or type(key[0]) is not str or key[0] not in _KINDS:
        return False
    check = _KINDS[key[0]]
    return check is None or bool(check(key))


def text(key) -> str | None:
    """The canonical text of a persistent key, or None when it is not one."""
    found = _TEXTS.get(id(key))
    if found is not None and found[0] is key:
        return found[1]
    if not is_stable(key):
        return None
    out: list[str] = []
    try:
        _part(key, out)
    except _NotStable:
        return None
    result = "".join(out)
    _TEXTS[id(key)] = (key, result)
    return result


def forget(key) -> None:
    """Drop ``key``'s remembered text (a key no cache keeps: a failed build), so the memo, which holds
    keys by identity, does not fill up with one dead key per failed call."""
    found = _TEXTS.get(id(key))
    if found is not None and found[0] is key:
        _TEXTS.pop(id(key), None)


# -------------------------------------------------------------------------------------------------
# The environment a program was built in
# -------------------------------------------------------------------------------------------------
_JAX_OPTIONS = ("jax_enable_x64", "jax_default_matmul_precision", "jax_numpy_dtype_promotion",
                "jax_numpy_rank_promotion", "jax_default_prng_impl", "jax_threefry_partitionable",
                "jax_dynamic_shapes", "jax_use_shardy_partitioner")
_ENV_VARIABLES = ("XLA_FLAGS", "LIBTPU_INIT_ARGS", "TPU_ACCELERATOR_TYPE", "CUDA_VISIBLE_DEVICES")


@functools.lru_cache(maxsize=None)
def source_digest() -> str:
    """A digest of torch_tpu's own source: a lowering edited in place changes every persistent key."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__")))
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                h.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()[:24]


def _version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "-"


def environment(with_source: bool = True) -> str:
    """Everything outside a key that changes a program: platform, device, versions, flags, and (for
    structural keys, whose programs torch_tpu's code builds) a digest of torch_tpu's source. The
    device-side checks setting is read on every call: it can change inside a process (with
    ``reset_caches``), and a program built without checks must never be found by a process that checks;
    so are the float32 math mode, the TPU lowering check (a program found by key was checked when
    it was built, in a process that checked), programs built for a TPU elsewhere (TORCH_TPU_BUILD_FOR) and the
    sequence-major kernels chosen."""
    s = config.settings()
    return (_environment(with_source) + ("\nchecks" if s.checks else "\nno-checks") +
            f"\nf32-math:{s.f32_math}" + ("\ntpu-lowering-checked" if s.check_lowering else "") +
            ("\nbuilt-for-tpu" if s.build_for else "") +
            "".join(f"\nsequence-major-{name}" for name in sorted(s.sequence_major_kernels)))


@functools.lru_cache(maxsize=None)
def _environment(with_source: bool) -> str:
    jax = platform.jax()
    dev = platform.jax_device()
    options = {}
    for name in _JAX_OPTIONS:
        try:
            options[name] = str(getattr(jax.config, name))
        except AttributeError:
            options[name] = "-"
    client = dev.client
    env = {
        "torch_tpu_source": source_digest() if with_source else "-",
        "jax": jax.__version__,
        "jaxlib": _version("jaxlib"),
        "libtpu": _version("libtpu") if platform.platform() == "tpu" else "-",
        "torch": torch.__version__,
        "python": "%d.%d" % sys.version_info[:2],
        "platform": platform.platform(),
        "platform_version": str(getattr(client, "platform_version", "")),
        "device_kind": str(getattr(dev, "device_kind", "")),
        "device_id": int(dev.id),
        "process_devices": len(jax.devices()),
        "options": options,
        "variables": {v: os.environ.get(v, "") for v in _ENV_VARIABLES},
    }
    return json.dumps(env, sort_keys=True)
