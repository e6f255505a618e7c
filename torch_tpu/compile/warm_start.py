"""A compiled module's first call in a new process traces nothing: dynamo's guards and bytecode, AOTAutograd's
runtime wrappers and the XLA programs of its graphs all come from the disk cache.

``module.compile(backend="tpu", fullgraph=True)`` (what diffusers' ``compile_repeated_blocks`` calls on each
block too) makes the module's calls go through ``CompiledCall``. A call that needs no autograd (inference:
``torch.no_grad()``, or nothing requiring grad) is captured once with torch's ``aot_compile`` machinery
(``torch._dynamo.aot_compile.aot_compile_fullgraph``: dynamo traces the module's ``_call_impl`` as for any
compile, once; the backend returns its result in serializable form, ``serialized.py``), and the result is kept
on disk (``disk_cache``: verified entries) beside the programs. A later process with the same module class,
input signature, module structure, settings and versions reads it instead of tracing, and runs it when
dynamo's guards pass for the call. Every other call (one that needs autograd, launch blocking, a module whose
graphs cannot be kept) goes through the ordinary ``torch.compile`` of the module, as before.

What keeps a stale entry from running:
- the disk key: the module's class, its parameters' and buffers' names, shapes and dtypes, the call's
  signature (tensors' shapes, dtypes, strides; Python values), the settings that change a program
  (``stable_keys.environment``: device-side checks, float32 math, kernels ...), torch_tpu's source, torch, JAX,
  Python and the model package's versions, the float32 matmul precision and default dtype;
- the source of every function dynamo traced, checked against what was traced (a changed model file, a
  changed torch_tpu integration);
- dynamo's own guards (a parameter's shape, dtype or device, a config value the forward reads, grad mode
  ...), checked at every call as dynamo checks them;
- the guards dynamo cannot serialize (a function's or class's identity, a module-level global: ``ID_MATCH``,
  ``CLOSURE_MATCH``, globals): each object they guard is described (a function by its module, name and
  bytecode; a class or module by name; a value by itself) when the entry is made, compared when it is loaded,
  and the same object is found again at every call (else its description is compared again);
- each graph's program found on disk under its structural key with the same device-side checks
  (``lowering.GraphProgram``); when the disk cache lost one, the entry is dropped and the module traced.
An entry that fails any of these is not used (and the call is captured again, which replaces it).

Why one module: an entry is written and read back as one record (its key, the sources traced, the guards dynamo
keeps and those described here); the writer and the reader, apart, would drift. Its serialized form is
``serialized.py``.
"""
from __future__ import annotations

import builtins
import contextlib
import enum
import functools
import hashlib
import importlib
import inspect
import os
import pickle
import re
import threading
import types
import weakref

import torch

_STATE = threading.local()
# the names ``torch.nn.Module._call_impl``'s module defines itself (every process has them)
_MODULE_GLOBALS = frozenset(vars(importlib.import_module("torch.nn.modules.module")))
_MAX_ENTRIES = 16  # captured calls kept per module class (dynamo's own recompile limit is 8 per frame)


class NotCapturable(Exception):
    """This call's graph cannot be kept for another process (the module is compiled as usual)."""


class StaleEntry(Exception):
    """A kept entry whose programs the disk cache no longer holds (evicted, or built by other code)."""


def capturing() -> bool:
    """Whether the backend is running for a capture (its result must be serializable)."""
    return getattr(_STATE, "capturing", False)


# -------------------------------------------------------------------------------------------------
# Describing what a guard dynamo cannot serialize guarded
# -------------------------------------------------------------------------------------------------
_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.layout,
          torch.memory_format)


def _code_digest(code: types.CodeType) -> str:
    """A digest of what a code object does (its bytecode, constants, names), the same in every process
    (``marshal``'s bytes are not: they depend on reference counts)."""
    h = hashlib.sha256()

    def add(c: types.CodeType) -> None:
        h.update(c.co_code)
        for const in c.co_consts:
            if isinstance(const, types.CodeType):
                add(const)
            else:
                h.update(f"{type(const).__name__}:{const!r};".encode())
        h.update(repr((c.co_names, c.co_varnames, c.co_freevars, c.co_cellvars, c.co_argcount,
                       c.co_kwonlyargcount, c.co_flags, c.co_qualname)).encode())

    add(code)
    return h.hexdigest()[:20]


def describe(obj, depth: int = 0):
    """A description of ``obj`` that means the same in every process: equal descriptions, the same
    behaviour as far as a guard on ``obj`` can tell (a function's module, name and bytecode; a class's or
    module's name; a plain value itself; containers to a small depth)."""
    t = type(obj)
    if t in _PLAIN:
        return ("value", t.__name__, obj if t is not float else float(obj).hex())
    if isinstance(obj, enum.Enum):
        return ("enum", describe(t, depth + 1), obj.name)
    if isinstance(obj, types.ModuleType):
        return ("module", obj.__name__)
    if isinstance(obj, type):
        return ("class", obj.__module__, obj.__qualname__)
    if isinstance(obj, types.FunctionType):
        return ("function", obj.__module__, obj.__qualname__, _code_digest(obj.__code__))
    if isinstance(obj, types.MethodType):
        return ("method", describe(obj.__func__, depth + 1), describe(type(obj.__self__), depth + 1))
    if isinstance(obj, (types.BuiltinFunctionType, types.BuiltinMethodType, types.WrapperDescriptorType,
                        types.MethodWrapperType, types.MethodDescriptorType, types.ClassMethodDescriptorType)):
        owner = getattr(obj, "__self__", None)
        owner = owner.__name__ if isinstance(owner, types.ModuleType) else type(owner).__qualname__
        return ("builtin", getattr(obj, "__module__", None), owner, getattr(obj, "__qualname__", repr(obj)))
    if isinstance(obj, functools.partial):
        return ("partial", describe(obj.func, depth + 1), describe(obj.args, depth + 1),
                describe(obj.keywords, depth + 1))
    if isinstance(obj, torch._ops.OpOverload) or isinstance(obj, torch._ops.OpOverloadPacket):
        return ("op", str(obj))
    if isinstance(obj, torch.Tensor):
        return ("tensor", describe(t, depth + 1), tuple(obj.shape), tuple(obj.stride()), str(obj.dtype),
                obj.device.type, obj.requires_grad)
    if depth < 3 and t in (tuple, list, set, frozenset):
        items = [describe(e, depth + 1) for e in obj]
        return (t.__name__, tuple(sorted(map(repr, items))) if t in (set, frozenset) else tuple(items))
    if depth < 3 and isinstance(obj, dict):
        return ("dict", describe(t, depth + 1),
                tuple((repr(describe(k, depth + 1)), describe(v, depth + 2)) for k, v in obj.items()))
    if isinstance(obj, (tuple, list, dict, set, frozenset)):
        return ("container", t.__name__, len(obj))
    state = getattr(obj, "__dict__", None)
    if depth < 2 and isinstance(state, dict) and not isinstance(obj, torch.nn.Module):
        # another object of the same class differs by its attributes (a processor's settings)
        return ("object", describe(t, depth + 1), describe(state, depth + 1))
    return ("object", describe(t, depth + 1))


class _ImportScope(dict):
    """The globals a guard's source reads: the traced function's, and dynamo's ``__import_<module>``
    aliases, imported when first read."""

    def __missing__(self, name):
        if name.startswith("__import_"):
            value = self[name] = importlib.import_module(name[len("__import_"):].replace("_dot_", "."))
            return value
        if name.startswith("__builtins_dict__"):  # dynamo's alias of the builtins' namespace
            return builtins.__dict__
        raise KeyError(name)


@functools.lru_cache(maxsize=None)
def _closure_vars() -> dict:
    from torch._dynamo import guards

    return dict(guards._get_closure_vars())


class _Dropped:
    """The guards of one entry that dynamo does not serialize: each source's object, described when the entry
    was made, is found again (same description) when it is loaded and at each call."""

    def __init__(self, sources: list, described: list, fn_globals: dict, roots: dict):
        self.sources, self.described, self.roots = sources, described, roots
        self.scope = _ImportScope(fn_globals)
        for name, module_name in roots.items():  # dynamo's globals naming a module (``G['_1403..._c0']``)
            self.scope[name] = importlib.import_module(module_name)
        self.codes = [compile(src, "<guard>", "eval") for src in sources]
        self.objects = [None] * len(sources)
        self._holds_all = None

    def _eval(self, code, f_locals):
        # (a guard's source names a local as ``L['x']`` or as ``x`` itself)
        return eval(code, {"L": f_locals, "G": self.scope, "__builtins__": builtins, **_closure_vars()}, f_locals)

    def holds(self, f_locals) -> bool:
        objects = self.objects
        try:
            values = [self._eval(code, f_locals) for code in self.codes]
        except Exception:  # noqa: BLE001 - a source that no longer evaluates: the guard fails
            return False
        for k, v in enumerate(values):
            if v is objects[k]:
                continue
            if describe(v) != self.described[k]:
                return False
            objects[k] = v
        return True


# -------------------------------------------------------------------------------------------------
# Entries
# -------------------------------------------------------------------------------------------------
class _Entry:
    """One captured call: torch's ``AOTCompiledFunction`` (guards, bytecode, the backend's result) and the
    checks of the guards it could not keep."""

    def __init__(self, fn, dropped: _Dropped):
        self.fn, self.dropped = fn, dropped

    def matches(self, module, args, kwargs) -> bool:
        f_locals = self.fn.prepare_f_locals(module, *args, **kwargs)
        return bool(self.fn._artifacts.guard_manager.check(f_locals)) and self.dropped.holds(f_locals)

    def __call__(self, module, args, kwargs):
        return self.fn.fn(module, *args, **kwargs)


def _guard_filter(dropped: list):
    """dynamo's guard filter for a capture: keep what it serializes; the others go to ``dropped`` as
    (source, description of the guarded object)."""
    from torch._dynamo.guards import CheckFunctionManager

    from ..tensor.tensor import TpuTensor

    unsupported = set(CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES)

    def keep(g) -> bool:
        # (the user's stack of each guard is only for a failure's message: it was half of a load's time)
        g.orig_guard.user_stack = g.orig_guard.stack = None
        if g.guard_type == "TENSOR_SUBCLASS_METADATA_MATCH" and isinstance(g.value, TpuTensor):
            return False  # (a tpu tensor's flatten metadata is None: nothing to guard)
        if "__tensor_flatten__()" in g.name or "._tpu_fake_inner" in g.name:
            return False  # a tpu tensor's meta stand-in: its outer tensor's guards hold the same
        if g.is_global or g.guard_type in unsupported or unsupported.intersection(g.derived_guard_types):
            dropped.append((g.name, describe(g.value) if g.has_value else None))
            return False
        return True

    def guard_filter(entries):
        return [keep(g) for g in entries]

    return guard_filter


_ROOT = re.compile(r"G\['([^']+)'\]")


def _generated_roots(sources: list, fn_globals: dict) -> tuple:
    """({name: module name} of the globals dynamo added under names of its own that the sources read,
    whether every such global is a module (the others cannot be found again in another process))."""
    roots, portable = {}, True
    for source in sources:
        for name in _ROOT.findall(source):
            if name.startswith(("__import_", "__builtins_dict__")) or name in roots:
                continue
            value = fn_globals.get(name)
            if isinstance(value, types.ModuleType):
                if name not in _MODULE_GLOBALS:
                    roots[name] = value.__name__
            elif name not in _MODULE_GLOBALS:
                portable = False
    return roots, portable


def _capture(module, args, kwargs, backend) -> tuple:
    """(entry, its bytes for the disk) of one call: dynamo traces it once, ``backend`` compiles it."""
    from torch._dynamo.aot_compile import AOTCompiledFunction, aot_compile_fullgraph
    from torch._dynamo.hooks import Hooks

    dropped: list = []
    forward = getattr(inspect.unwrap(type(module).forward), "__code__", None)

    def named_backend(gm, example_inputs):
        from torch._guards import TracingContext

        ctx = TracingContext.try_get()
        if ctx is not None and not getattr(ctx, "traced_code", None) and forward is not None:
            ctx.traced_code = [forward]  # (the program's name: compiled.forward.inference, as dynamo names it)
        return backend(gm, example_inputs)

    named_backend.__wrapped__ = backend  # (floats.py recognizes the backend through it)
    local = next((type(m) for m in module.modules() if "<locals>" in type(m).__qualname__), None)
    if local is not None:  # (torch's package refuses it, after tracing: found before, so it is traced once)
        raise NotCapturable(f"{local.__qualname__} is defined inside a function; torch can keep only classes "
                            "defined at a module's top level")
    _STATE.capturing = True
    try:
        with _no_aot_cache_key():
            fn = aot_compile_fullgraph(module._call_impl, (args, kwargs),
                                       Hooks(guard_filter_fn=_guard_filter(dropped)), named_backend, dynamic=False)
    except (TypeError, torch._dynamo.exc.PackageError) as exc:
        if "cannot be saved into torch.compile() package" not in str(exc):
            raise
        raise NotCapturable(str(exc)) from exc  # (another object of a local class the guards read)
    finally:
        _STATE.capturing = False
    sources = [name for name, _ in dropped]
    described = [d for _, d in dropped]
    fn_globals = torch.nn.Module._call_impl.__globals__
    roots, portable = _generated_roots(sources, fn_globals)
    checks = _Dropped(sources, described, fn_globals, roots)
    for k, (name, d) in enumerate(dropped):
        if d is None:  # (no value recorded: describe what the source reads now)
            f_locals = fn.prepare_f_locals(module, *args, **kwargs)
            described[k] = describe(checks._eval(checks.codes[k], f_locals))
    data = None
    if not portable:
        _note("kept in this process only: a guard reads a global dynamo made of an object other than a module")
        return _Entry(fn, checks), None
    try:
        data = pickle.dumps((AOTCompiledFunction.serialize(fn).serialized_data, sources, described, roots))
    except NotCapturable:
        raise
    except Exception as exc:  # noqa: BLE001 - torch could not serialize some part: kept in this process only
        _note(f"not kept on disk: {type(exc).__name__}: {exc}")
    return _Entry(fn, checks), data


def _load(data: bytes, backend):
    """The entry kept in ``data``; raises when its sources changed or its programs are gone."""
    from torch._dynamo.aot_compile import AOTCompiledFunction
    from torch._dynamo.package import _hash_sourcelines

    from . import floats

    floats.install(backend)  # (dynamo's guard builders as the capturing process had them)
    blob, sources, described, roots = pickle.loads(data)
    fn_globals = torch.nn.Module._call_impl.__globals__
    with _one_fake_mode():
        fn = AOTCompiledFunction.deserialize(blob, f_globals=_ImportScope(fn_globals))
    for code in fn._artifacts.source_info.inlined_sources:
        module = importlib.import_module(code.module)
        if _hash_sourcelines(module, code.firstlineno, code.lastlineno) != code.checksum:
            raise StaleEntry(f"the source of {code.module} (lines {code.firstlineno}-{code.lastlineno}) changed")
    return _Entry(fn, _Dropped(sources, described, fn_globals, roots))


@contextlib.contextmanager
def _no_aot_cache_key():
    """While a call is captured: AOTAutograd's bundled entry without its own cache's key and file (what is
    kept is this module's entry). That key hashes the whole graph and torch's sources, 0.6 s of a FLUX-shaped
    transformer's capture on 2 CPU cores; torch falls back to a random key itself when it cannot make one."""
    from torch._functorch._aot_autograd import autograd_cache

    key_fn = getattr(autograd_cache, "autograd_cache_key", None)
    write = autograd_cache.AOTAutogradCache.__dict__.get("_write_to_local_cache")
    if key_fn is None or write is None:
        yield
        return
    autograd_cache.autograd_cache_key = lambda *args, **kwargs: (f"torch_tpu-capture-{os.urandom(8).hex()}", [])
    autograd_cache.AOTAutogradCache._write_to_local_cache = staticmethod(lambda *args, **kwargs: None)
    try:
        yield
    finally:
        autograd_cache.autograd_cache_key = key_fn
        autograd_cache.AOTAutogradCache._write_to_local_cache = write


@contextlib.contextmanager
def _one_fake_mode():
    """While guards are unpickled: every guarded tensor's fake made in one fake mode (dynamo's unpickler
    makes a mode per tensor, a third of a FLUX transformer's load). Left alone on a torch whose unpickler
    takes other arguments."""
    from torch._dynamo import guards

    pickler = guards.GuardsStatePickler
    original = pickler.__dict__.get("_unpickle_tensor")
    func = getattr(original, "__func__", None)
    if func is None or list(inspect.signature(func).parameters) != \
            ["cls", "meta_tensor", "device", "pytype", "dispatch_keys_raw", "grad"]:
        yield
        return
    from torch._subclasses.fake_tensor import FakeTensorConverter, FakeTensorMode

    mode, converter = FakeTensorMode(), FakeTensorConverter()

    def _unpickle_tensor(cls, meta_tensor, device, pytype, dispatch_keys_raw, grad):
        ret = converter.from_meta_and_device(mode, meta_tensor, device, pytype,
                                             torch._C.DispatchKeySet.from_raw_repr(dispatch_keys_raw))
        ret.grad = grad
        return ret

    _unpickle_tensor.__qualname__ = func.__qualname__
    pickler._unpickle_tensor = classmethod(_unpickle_tensor)
    try:
        yield
    finally:
        pickler._unpickle_tensor = original


# -------------------------------------------------------------------------------------------------
# The disk key and the store
# -------------------------------------------------------------------------------------------------
def _signature(value, out: list, depth: int = 0) -> None:
    t = type(value)
    if isinstance(value, torch.Tensor):
        out.append(f"T{tuple(value.shape)}{value.dtype}{value.device.type}{tuple(value.stride())}"
                   f"{int(value.requires_grad)}{type(value).__name__}")
    elif t in _PLAIN:
        out.append(f"{t.__name__}:{value.hex() if t is float else repr(value)}")
    elif depth < 6 and t in (tuple, list):
        out.append(t.__name__ + "(")
        for e in value:
            _signature(e, out, depth + 1)
            out.append(",")
        out.append(")")
    elif depth < 6 and isinstance(value, dict):
        out.append("{")
        for k, v in value.items():
            out.append(repr(k) + ":")
            _signature(v, out, depth + 1)
            out.append(",")
        out.append("}")
    else:
        out.append(f"<{t.__module__}.{t.__qualname__}>")


def _structure(module) -> str:
    h = hashlib.sha256()
    for name, sub in module.named_modules():
        h.update(f"{name}:{type(sub).__module__}.{type(sub).__qualname__}:{sub.training}\n".encode())
    for kind, items in (("p", module.named_parameters()), ("b", module.named_buffers())):
        for name, t in items:
            h.update(f"{kind}{name}:{tuple(t.shape)}:{t.dtype}:{t.device.type}:{t.requires_grad}\n".encode())
    return h.hexdigest()


def _package_version(module) -> str:
    from importlib import metadata

    top = type(module).__module__.split(".")[0]
    try:
        return f"{top} {metadata.version(top)}"
    except Exception:  # noqa: BLE001 - not an installed distribution (a script's module)
        return top


def disk_key(module, args, kwargs) -> str:
    from .. import config
    from ..runtime import stable_keys

    cls = type(module)
    parts: list = []
    _signature((args, kwargs), parts)
    return "\n".join([
        "compiled-module v1", f"{cls.__module__}.{cls.__qualname__}", _package_version(module), "".join(parts),
        _structure(module), torch.get_float32_matmul_precision(), str(torch.get_default_dtype()),
        # (the settings that change a program: device-side checks, float32 math, the kernels chosen ...)
        f"cpu-fallback:{config.settings().cpu_fallback}", stable_keys.environment(True)])


def _note(message: str) -> None:
    import logging

    logging.getLogger("torch_tpu").info("torch.compile(backend='tpu') warm start: %s", message)


# -------------------------------------------------------------------------------------------------
# The compiled call
# -------------------------------------------------------------------------------------------------
class _Forgotten(dict):
    """The entries of this process, emptied by ``torch_tpu.reset_caches()`` with what they were read from."""

    def clear(self):
        super().clear()
        _REFUSED.clear()
        _UNTRIED.clear()


_REFUSED: set = set()        # disk keys of calls that cannot be captured (compiled as usual)
# disk key -> the entries kept under it that no call of this process has used yet (bytes, or an entry loaded whose
# guards failed for the call that loaded it; the disk read once per key): a later call with the same key (another
# value of an attribute the forward reads: a second model, another block) tries them before it is traced
_UNTRIED: dict = {}
_ENTRIES: dict = _Forgotten()  # module class -> [entry]
_LOCK = threading.RLock()


def _eligible(module, args, kwargs) -> bool:
    from ..engine import launchers
    from ..runtime import disk_cache

    if not disk_cache.enabled() or launchers.current.verifies_each_op or torch.compiler.is_compiling():
        return False
    if torch.is_grad_enabled():
        if any(p.requires_grad for p in module.parameters()):
            return False
        leaves: list = []
        _tensors((args, kwargs), leaves)
        if any(t.requires_grad for t in leaves):
            return False
    return True


def _tensors(value, out: list, depth: int = 0) -> None:
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif depth < 6 and isinstance(value, (tuple, list)):
        for e in value:
            _tensors(e, out, depth + 1)
    elif depth < 6 and isinstance(value, dict):
        for e in value.values():
            _tensors(e, out, depth + 1)


def run(module, regular, backend, args, kwargs):
    """``module(*args, **kwargs)`` through a kept entry, a new capture with ``backend``, or ``regular`` (the
    module's ordinary ``torch.compile``)."""
    if not _eligible(module, args, kwargs):
        return regular(*args, **kwargs)
    cls = type(module)
    entries = _ENTRIES.get(cls, ())
    for entry in entries:
        if entry.matches(module, args, kwargs):
            return entry(module, args, kwargs)
    with _LOCK:
        key = disk_key(module, args, kwargs)
        if key in _REFUSED or len(entries) >= _MAX_ENTRIES:
            return regular(*args, **kwargs)
        entry = _read(key, module, args, kwargs, backend)
        if entry is None:
            entry = _capture_and_keep(key, module, args, kwargs, backend)
            if entry is None:
                return regular(*args, **kwargs)
        _ENTRIES.setdefault(cls, []).append(entry)
    return entry(module, args, kwargs)


_KEPT_PER_KEY = 4  # entries kept under one disk key (calls that differ only in what guards see: an attribute)


def _kept(key: str) -> list:
    """The entries' bytes kept under ``key``, the latest first."""
    from ..runtime import disk_cache

    data = disk_cache.load(key)
    if data is None:
        return []
    try:
        blobs = pickle.loads(data)
        return blobs if isinstance(blobs, list) and all(type(b) is bytes for b in blobs) else []
    except Exception:  # noqa: BLE001 - verified bytes of another layout: rebuilt
        return []


def _read(key: str, module, args, kwargs, backend):
    from ..runtime import counters

    if key not in _UNTRIED:
        _UNTRIED[key] = _kept(key)
    untried = _UNTRIED[key]
    for i, kept in enumerate(untried):
        entry = kept
        if type(kept) is bytes:
            try:
                entry = untried[i] = _load(kept, backend)
            except Exception as exc:  # noqa: BLE001 - stale or unreadable: traced again, and replaced
                _note(f"kept entry not used: {type(exc).__name__}: {exc}")
                counters.add("cache_rejects", 1)
                untried[i] = None
                continue
        if entry is not None and entry.matches(module, args, kwargs):
            del untried[i]
            counters.add("module_loads", 1)
            return entry
    if any(entry is not None for entry in untried):
        _note("no kept entry's guards hold for this call: it is traced")
    return None


def _capture_and_keep(key: str, module, args, kwargs, backend):
    from ..runtime import counters, disk_cache

    try:
        entry, data = _capture(module, args, kwargs, backend)
    except NotCapturable as exc:
        _note(f"compiled as usual: {exc}")
        _REFUSED.add(key)
        return None
    counters.add("module_captures", 1)
    if data is not None:
        disk_cache.store(key, pickle.dumps(([data] + [b for b in _kept(key) if b != data])[:_KEPT_PER_KEY]))
    return entry


def reset() -> None:
    """Forget the entries of this process (``torch_tpu.reset_caches()`` does too)."""
    with _LOCK:
        _ENTRIES.clear()


def _register_cache() -> None:
    from ..runtime import caches

    caches.register("compiled module entries", _ENTRIES)


class CompiledCall:
    """``module._compiled_call_impl`` for ``module.compile(backend="tpu", fullgraph=True)``."""

    def __init__(self, module, regular, backend):
        self._module = weakref.ref(module)
        self.regular, self.backend = regular, backend
        self._traced_by_dynamo = None

    def __call__(self, *args, **kwargs):
        module = self._module()
        if module is None or not self._traceable(module):
            return self.regular(*args, **kwargs)
        return run(module, self.regular, self.backend, args, kwargs)

    def _traceable(self, module) -> bool:
        """Whether dynamo traces this module's forward when it is the compiled frame (it skips torch.nn's own
        modules there: ``torch.nn.Linear(...).compile(fullgraph=True)`` raises torch's "no compiled frames")."""
        if self._traced_by_dynamo is None:
            from torch._dynamo import trace_rules

            forward = getattr(type(module).forward, "__code__", None)
            self._traced_by_dynamo = forward is not None and not trace_rules.check(forward)
        return self._traced_by_dynamo


_register_cache()
