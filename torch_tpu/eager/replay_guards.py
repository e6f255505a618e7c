"""What a recorded module call depended on, and the checks that it still holds before the call's program
runs in place of its Python (``module_replay.py``).

A recording depends on, and a replay checks:
- the call's arguments (``signature``): their structure, each tpu tensor's type, shape, strides, storage offset,
  dtype, ``requires_grad``, which of them share a storage and which of their values are computed already (a
  view's cached value); every other argument by value (numbers, strings, None, dtypes) or by identity;
- the module tree (``ModuleTree``): every submodule's attributes (its ``__dict__``: which objects it holds, and
  the contents of the dicts, lists, sets and plain objects among them: parameters, buffers, children, hooks, a
  processor's own attributes), and every tensor it holds (its storage and layout);
- global state (``global_state``): grad and inference mode, autocast, the default dtype, float32 matmul
  precision, deterministic algorithms, torch function and dispatch modes, the eager launcher;
- the code that ran (``CodeWatch``): for each Python function the recording executed outside torch_tpu, the
  globals its code names (and, for a module or a class, the attributes of it the code names: ``F.gelu``,
  ``torch.nn.functional.scaled_dot_product_attention``) and the class attributes it reads through ``self``
  (a method patched on its class); small dicts and lists among those by their contents (global hooks).

A check compares objects by identity (a value set again, even an equal one, is a change: the call records
again) and is conservative: what it cannot see (a global that is not named by the code that reads it, a C
function's state) is what ``TORCH_TPU_REPLAY_VERIFY=1`` exists to catch.

Why one module: every kind of guard a recorded call depends on is built and checked by the same walk of the module
tree.
"""
from __future__ import annotations

import builtins
import enum
import functools
import itertools
import os
import sys
import types
import weakref

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from ..engine import launchers
from ..tensor import tensor as tensor_module
from ..tensor.tensor import TpuStorage, TpuTensor

_MISSING = object()
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # torch_tpu/
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_SMALL = 64          # dicts and lists up to this many entries are watched by content, larger ones by identity
_MAX_DEPTH = 3       # how deep plain objects and containers held by a module are looked into


class Refused(Exception):
    """Why a call cannot be recorded (its message is kept for ``explain``)."""


# --- global state ------------------------------------------------------------------------------------------
def global_state() -> tuple:
    """What every op's result depends on beyond its inputs, as one comparable tuple (the eager mode's launcher
    too: strict eager with ops waiting in line is strict eager)."""
    launcher = launchers.current
    if launcher is launchers.LINE:
        launcher = launchers.STRICT
    return (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), torch.is_autocast_enabled("tpu"),
            torch.get_autocast_dtype("tpu"), torch.is_autocast_enabled("cpu"), torch.get_default_dtype(),
            torch.get_float32_matmul_precision(), torch.are_deterministic_algorithms_enabled(),
            torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack(), launcher)


# --- arguments ---------------------------------------------------------------------------------------------
_IMMUTABLE = (int, bool, str, bytes, type(None), torch.dtype, torch.device, torch.memory_format, torch.layout)


def _flatten(value, leaves: list, parts: list) -> None:
    t = type(value)
    if t is tuple or t is list:
        parts.append((t, len(value)))
        for v in value:
            _flatten(v, leaves, parts)
    elif t is dict:
        parts.append((dict, tuple(value)))
        for v in value.values():
            _flatten(v, leaves, parts)
    else:
        leaves.append(value)


def tensor_layout(t: TpuTensor) -> tuple:
    """Everything of a tpu tensor a program built for it depends on (its values aside)."""
    storage = t._tpu_storage
    return (t.shape, t.stride(), t.storage_offset(), t.dtype, t.requires_grad, storage.shape, storage.dtype)


def _computed(t: TpuTensor) -> tuple:
    """Which of a view's values are computed already (fused mode reads a block's views first)."""
    storage = t._tpu_storage
    reshaped = storage.reshaped
    return (t._tpu_cache_version == storage.version,
            reshaped is not None and reshaped[0] == storage.version)


def storage_pattern(tensors) -> tuple:
    """Per tensor: its type, its layout and the first of ``tensors`` that shares its storage: what a program
    recorded over a module's tensors depends on besides their values."""
    first: dict = {}
    return tuple((type(t), tensor_layout(t), first.setdefault(id(t._tpu_storage), i)) for i, t in enumerate(tensors))


def signature(args: tuple, kwargs: dict):
    """(signature, leaves) of a call's arguments: a hashable description of everything a recording of the
    call depends on in its arguments, and the arguments' leaves (tensors and other values, in order). The
    signature is None for a call no recording can serve (a tensor of another device among its arguments)."""
    leaves: list = []
    parts: list = []
    _flatten((args, kwargs), leaves, parts)
    storages: dict = {}
    for i, leaf in enumerate(leaves):
        t = type(leaf)
        if t is TpuTensor:
            storage = leaf._tpu_storage
            first = storages.setdefault(id(storage), i)
            parts.append((tensor_layout(leaf), _computed(leaf), first))
        elif t is float:
            parts.append((float, leaf.hex()))  # -0.0 and NaN told apart
        elif t is complex:
            parts.append((complex, leaf.real.hex(), leaf.imag.hex()))
        elif isinstance(leaf, torch.Tensor):
            return None, leaves  # a CPU or meta tensor: its values would be constants of the program
        elif t in _IMMUTABLE:
            parts.append((t, leaf))
        else:
            parts.append((t, id(leaf)))  # an object: by identity (its state is the recording's to check)
    return tuple(parts), leaves


# --- the module tree ---------------------------------------------------------------------------------------
def _fingerprint(obj):
    """What a container or plain object holds, by identity: compared again before every replay (a dict's keys
    are as many as its values, and a key renamed while its value stays in place is not a change a forward
    sees)."""
    t = type(obj)
    if t is dict or isinstance(obj, dict):
        return tuple(map(id, obj.values()))
    if t is list or t is tuple:
        return tuple(map(id, obj))
    if t is set or t is frozenset:
        return frozenset(map(id, obj))
    return tuple(map(id, obj.__dict__.values()))


def _plain_object(value) -> bool:
    """An object whose attributes a forward may read (a processor, a config): not a class, a function, a
    module, a tensor, a number."""
    return (hasattr(value, "__dict__") and not isinstance(value, (type, types.FunctionType, types.MethodType,
            types.BuiltinFunctionType, types.ModuleType, torch.nn.Module, torch.Tensor, functools.partial)))


# a module's dicts of hooks that run when it is called (those of state dicts, or the bookkeeping beside
# these, do not change what a call computes)
_CALL_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_NOT_CALLED = frozenset(("_forward_hooks_with_kwargs", "_forward_hooks_always_called",
                         "_forward_pre_hooks_with_kwargs", "_is_full_backward_hook", "_state_dict_hooks",
                         "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks",
                         "_non_persistent_buffers_set"))


class ModuleTree:
    """The state of a module and its submodules a recording depends on: the containers to fingerprint, the
    number of hooks of each submodule (torch_tpu's own block pre-hook at most) and the tensors it holds (with
    their storages and layouts). A tensor is held through the container that holds it (a module's
    ``_parameters``, a plain object's attributes: the place a replay reads it from), never by a reference of
    its own: a recording must not keep a weight's device memory alive after the module let it go (offloaded to
    the host, replaced), and a weak reference to a parameter would make ``torch.utils.swap_tensors`` refuse it
    (a move between the host and the tpu would then give the module new parameter objects, and an optimizer
    built before it would hold the old ones). Storages are held weakly.

    A tensor subclass that wraps tpu tensors (torchao's and optimum-quanto's quantized weights) is reached the
    same way, from its place, and its inner tensors by attribute from it (a place is ``(holder, key, path)``):
    torch moves such a parameter with ``swap_tensors``, which gives the same parameter object another
    ``__dict__``, so the wrapped tensors' old dict, held here, would keep the old device arrays alive (twice
    the weights' memory after an offload round trip) and would still be read."""

    __slots__ = ("containers", "fingerprints", "hooks", "hook_counts", "tensors", "storages", "pattern",
                 "layout_epoch", "wrapped", "_dicts", "_sequences", "_sets", "_recorded")

    def __init__(self, root: torch.nn.Module, inside_hooks: bool = False):
        """``inside_hooks``: the recording is of the root's own forward, inside the hooks diffusers wrapped it
        in (they run at every call): the root's forward attribute and hook registry are watched by identity
        only (a hook added or removed replaces the forward), not looked into."""
        self.containers: list = []
        self.hooks: list = []
        self.tensors: list = []
        self.wrapped: list = []  # (place, its type, its other attributes) per tensor subclass with attributes
        seen: set = set()
        for name, module in root.named_modules(remove_duplicate=True):
            hooks_around = inside_hooks and module is root
            if not _own_hooks_only(module, ignore_forward=hooks_around):
                raise Refused(f"{name or type(root).__name__} has hooks or a forward of its own")
            d = module.__dict__
            seen.add(id(d))
            self.containers.append(d)
            for key, value in d.items():
                if key in _CALL_HOOKS:
                    self.hooks.append(value)
                elif key not in _NOT_CALLED and not (hooks_around and key in _HOOK_WRAPPERS):
                    self._value(value, name, seen, 0, d, key)
        self._group()
        self.fingerprints = self._now()
        self._recorded = {id(c): _fingerprint(c) for c in self.containers}  # (for ``difference``)
        self.hook_counts = [len(h) for h in self.hooks]
        self.storages = [weakref.ref(t._tpu_storage) for t, _, _ in self.tensors]
        self.pattern = storage_pattern([t for t, _, _ in self.tensors])
        self.tensors = [(place, where) for _, where, place in self.tensors]
        self.layout_epoch = tensor_module.LAYOUT_EPOCH[0]

    def _value(self, value, where: str, seen: set, depth: int, holder, key, path: tuple = ()) -> None:
        """Walk ``value``, found at ``holder[key]`` then by the attributes ``path`` names (holder None: in a
        set, ``key`` unused)."""
        t = type(value)
        if t is TpuTensor or isinstance(value, TpuTensor):  # (a subclass: diffusers' GGUF weights on the tpu,
            if id(value) not in seen:                       # their quantization kind among its attributes)
                seen.add(id(value))
                place = (holder, key, path) if holder is not None else (None, weakref.ref(value), ())
                self.tensors.append((value, where, place))
                if t is not TpuTensor and holder is not None:
                    self.wrapped.append((place, t, _metadata(value)))
        elif isinstance(value, torch.Tensor):
            if value.device.type == "meta" or value.numel() == 0:
                return
            if value.device.type == "tpu" and is_traceable_wrapper_subclass(value):
                if holder is None:
                    raise Refused(f"{where or 'the module'} holds a {type(value).__qualname__} in a set: a replay "
                                  "could not find its tensors after a move")
                self._wrapped(value, where, seen, depth, (holder, key, path))
                return
            if value.device.type == "tpu":
                raise Refused(f"{where or 'the module'} holds a {type(value).__qualname__} whose tensors cannot be "
                              "listed (no __tensor_flatten__): a replay could not find its values")
            raise Refused(f"{where or 'the module'} holds a {value.device} tensor: its values would be "
                          "constants of the program")
        elif isinstance(value, torch.nn.Module):
            return  # its own entry
        elif depth < _MAX_DEPTH and (t in (dict, list, tuple, set, frozenset) or isinstance(value, dict)
                                     or _plain_object(value)):
            if id(value) in seen:
                return
            seen.add(id(value))
            self.containers.append(value)
            if isinstance(value, (dict, list, tuple)) and len(value) > 4 * _SMALL:
                return  # a large container (a cache, a table): by its own fingerprint only
            if isinstance(value, (set, frozenset)):
                for v in value:
                    self._value(v, where, seen, depth + 1, None, None)
                return
            items = (value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple))
                     else value.__dict__.items())
            inner = value if isinstance(value, (dict, list, tuple)) else value.__dict__
            for k, v in items:
                self._value(v, where, seen, depth + 1, inner, k)

    def _wrapped(self, value, where: str, seen: set, depth: int, place: tuple) -> None:
        """A tensor subclass that wraps device tensors (torchao's and optimum-quanto's quantized weights), found
        at ``place``: its inner tensors are the program's inputs, read by attribute from whatever object is at
        that place, and its attributes (inner tensors, quantization metadata) are watched, read through the
        place too, so that replacing one records again. Its metadata's own containers are watched as a plain
        object's."""
        if id(value) in seen:
            return
        seen.add(id(value))
        names, _ = value.__tensor_flatten__()
        self.wrapped.append((place, type(value), _metadata(value)))
        holder, key, path = place
        for name in names:
            self._value(getattr(value, name), where, seen, depth, holder, key, path + (name,))
        attributes = getattr(value, "__dict__", None) or {}
        for name, v in attributes.items():
            if name not in names and not isinstance(v, torch.Tensor) and depth < _MAX_DEPTH:
                self._value(v, where, seen, depth + 1, attributes, name)

    def _group(self) -> None:
        """The containers by kind, so that ``_now`` reads them all in a few C loops (a replay's check of a FLUX
        block's 160 containers took 120 us one Python call each, 10 us so)."""
        dicts, sequences, sets = [], [], []
        for c in self.containers:
            if isinstance(c, dict):
                dicts.append(c)
            elif isinstance(c, (list, tuple)):
                sequences.append(c)
            elif isinstance(c, (set, frozenset)):
                sets.append(c)
            else:
                dicts.append(c.__dict__)  # a plain object: its attributes (replacing its __dict__ is not seen)
        self._dicts, self._sequences, self._sets = dicts, sequences, sets

    def _now(self) -> tuple:
        chain = itertools.chain.from_iterable
        return (tuple(map(len, self._dicts)), tuple(map(id, chain(map(dict.values, self._dicts)))),
                tuple(map(len, self._sequences)), tuple(map(id, chain(self._sequences))),
                tuple(map(_fingerprint, self._sets)), self._wrapped_now())

    def _wrapped_now(self) -> tuple:
        """Per wrapping subclass: the object now at its place, its type and its attributes, by identity (None
        where its place is gone)."""
        now = []
        for place, _, _ in self.wrapped:
            try:
                w = _read(place)
            except (KeyError, IndexError, AttributeError):
                now.append(None)
                continue
            d = getattr(w, "__dict__", None)
            now.append((id(w), type(w), tuple(d) if d is not None else (), _fingerprint(w) if d is not None else ()))
        return tuple(now)

    def holds(self, follow: bool = True) -> bool:
        """Whether the tree is as it was recorded (``follow``: or its tensors only moved, see ``_follow``)."""
        if list(map(len, self.hooks)) != self.hook_counts:
            return False
        if self._now() != self.fingerprints:
            return follow and self._follow()
        tensors = self.live_tensors()
        if tensors is None:
            return False
        for t, storage in zip(tensors, self.storages):
            held = storage()
            if held is None or getattr(t, "_tpu_storage", None) is not held:
                return follow and self._follow()
        if tensor_module.LAYOUT_EPOCH[0] != self.layout_epoch:  # a layout changed in place somewhere
            if storage_pattern(tensors) != self.pattern:
                return False
            self.layout_epoch = tensor_module.LAYOUT_EPOCH[0]
        return True

    def _follow(self) -> bool:
        """Whether a tree whose tensors changed only in where their values are still serves, and if so, follow
        them. Their values went to the host and came back (model, sequential and group offload; ``.to("cpu")``
        then ``.to("tpu")``, which gives a module's buffers new tensor objects), or ``p.data =`` took another
        tensor's: the program reads every tree tensor's current value from its place, so it serves when the
        containers changed only at those places, and the tensors there are laid out and share storages as when
        recorded."""
        tensors = self.live_tensors()
        if tensors is None or not all(isinstance(t, TpuTensor) for t in tensors):
            return False
        now = self._now()
        if now != self.fingerprints:
            # a place may hold a new object of the type recorded there (a tpu tensor or a subclass: GGUF's)
            movable = {(id(holder), key): recorded[0] for ((holder, key, path), _), recorded
                       in zip(self.tensors, self.pattern) if holder is not None and not path}
            movable.update(((id(holder), key), t) for (holder, key, path), t, _ in self.wrapped if not path)
            for c in self.containers:
                found, then = _fingerprint(c), self._recorded[id(c)]
                if found == then:
                    continue
                if type(found) is frozenset or len(found) != len(then):
                    return False
                holder = c if isinstance(c, (dict, list, tuple)) else c.__dict__
                keys = holder.keys() if isinstance(holder, dict) else range(len(holder))
                for k, a, b in zip(keys, found, then):
                    # (a subclass's own attributes are compared by ``_wrapped_follow``)
                    if a != b and type(holder[k]) is not movable.get((id(holder), k)):
                        return False
            if not self._wrapped_follow(now[-1]):
                return False
        if storage_pattern(tensors) != self.pattern:
            return False
        self.fingerprints = now
        self._recorded = {id(c): _fingerprint(c) for c in self.containers}
        self.storages = [weakref.ref(t._tpu_storage) for t in tensors]
        self.layout_epoch = tensor_module.LAYOUT_EPOCH[0]
        return True

    def _wrapped_follow(self, wrapped_now: tuple) -> bool:
        """Whether each tensor subclass with attributes changed only in the tensors it holds (a move: the same
        object with another ``__dict__``, or a new object of its type), its other attributes (a quantization's
        kind, block size, shape) equal to those recorded."""
        for (place, kind, metadata), now, then in zip(self.wrapped, wrapped_now, self.fingerprints[-1]):
            if now == then:
                continue
            if now is None or now[1] is not kind or now[2] != then[2]:
                return False
            attributes = getattr(_read(place), "__dict__", {})
            if any(not _same_value(attributes.get(name, _MISSING), value) for name, value in metadata.items()):
                return False
        return True

    def live_tensors(self):
        """The tree's tensors (None when one of them is gone)."""
        try:
            tensors = [_read(place) for place, _ in self.tensors]
        except (KeyError, IndexError, AttributeError):  # (taken out of its container)
            return None
        return None if any(t is None for t in tensors) else tensors

    def tensor(self, index: int):
        try:
            t = _read(self.tensors[index][0])
        except (KeyError, IndexError, AttributeError):
            t = None
        if t is None:  # (holds() said it lives: internal error)
            raise RuntimeError("tpu: a recorded module call's tensor is gone (internal error)")
        return t

    def difference(self) -> str:
        """What changed (for ``ReplayMismatch`` and the log); empty when nothing did."""
        if list(map(len, self.hooks)) != self.hook_counts:
            return "a hook was added to a submodule"
        if self._now() != self.fingerprints:
            for c in self.containers:
                if _fingerprint(c) != self._recorded.get(id(c)):
                    return f"an attribute of {_short(c)} changed"
            if self._wrapped_now() != self.fingerprints[-1]:
                return "a quantized weight's tensors or attributes changed"
            return "an attribute of a submodule changed"
        tensors = self.live_tensors()
        if tensors is None:
            return "a tensor of the module was let go"
        if not all(isinstance(t, TpuTensor) for t in tensors):
            return "a tensor of the module left the tpu"
        for (_, where), now, then in zip(self.tensors, storage_pattern(tensors), self.pattern):
            if now != then:
                return f"a tensor of {where or 'the module'} was laid out or shared otherwise"
        return ""


def _metadata(value) -> dict:
    """A tensor subclass's attributes that are neither tensors nor storages (what its values mean: GGUF's
    quantization kind and shape, torchao's block size)."""
    return {name: v for name, v in getattr(value, "__dict__", {}).items()
            if not isinstance(v, (torch.Tensor, TpuStorage))}


def _same_value(a, b) -> bool:
    """``a`` is ``b``, or both are the same immutable value (a new ``torch.Size`` equal to the old)."""
    return a is b or (type(a) is type(b) and _immutable(a) and a == b)


def _immutable(v) -> bool:
    return type(v) in _IMMUTABLE or type(v) is float or isinstance(v, enum.Enum) or \
        (type(v) in (tuple, torch.Size) and all(_immutable(x) for x in v))


def _read(place: tuple):
    """The value at a tree's place: ``holder[key]`` (a weak reference's target where holder is None), then the
    attributes ``path`` names in turn."""
    holder, key, path = place
    value = key() if holder is None else holder[key]
    for name in path:
        value = getattr(value, name)
    return value


def _short(obj) -> str:
    """A container or object, named without reading its contents (a tensor's repr reads its values)."""
    if isinstance(obj, dict):
        return f"a {type(obj).__name__} with keys {list(obj)[:6]}"
    if isinstance(obj, (list, tuple, set, frozenset)):
        return f"a {type(obj).__name__} of {len(obj)} items"
    return f"a {type(obj).__name__} object"


_OWN_HOOKS: list = []  # predicates naming torch_tpu's own module hooks (fused mode's block pre-hook)


def own_hook(predicate) -> None:
    _OWN_HOOKS.append(predicate)


_HOOK_WRAPPERS = ("forward", "_diffusers_hook")  # what diffusers' HookRegistry sets on a module it wraps


def _own_hooks_only(module, ignore_forward: bool = False) -> bool:
    if module._forward_hooks or module._backward_hooks or module._backward_pre_hooks or \
            ("forward" in module.__dict__ and not ignore_forward):
        return False
    return all(any(p(h) for p in _OWN_HOOKS) for h in module._forward_pre_hooks.values())


# --- the code that ran -------------------------------------------------------------------------------------
_CLASS_DICTS: dict = {}  # class -> one mappingproxy of its __dict__ (each ``cls.__dict__`` makes a new proxy)


def _class_dict(klass):
    d = _CLASS_DICTS.get(klass)
    if d is None:
        d = _CLASS_DICTS[klass] = klass.__dict__
    return d


def _resolve(cls: type, name: str):
    """(class dict, value) of the class of ``cls``'s MRO that defines ``name``, else None."""
    for klass in cls.__mro__:
        d = _class_dict(klass)
        value = d.get(name, _MISSING)
        if value is not _MISSING:
            return d, value
    return None


class CodeWatch:
    """Records, while a call runs, what its Python code looked up: ``watches`` lists (mapping, key, value)
    triples, ``contents`` (container, fingerprint) pairs, both checked by ``holds``. Also refuses a call that
    prints or logs (a replay would not)."""

    def __init__(self):
        self.watches: list = []
        self._groups: list = []
        self.contents: list = []
        self.refusal = None
        self._seen_code: set = set()
        self._seen_watch: set = set()
        self._own_depth = 0
        self._previous = None

    # (sys.setprofile callback: runs for every Python call and return of the recording thread)
    def _event(self, frame, event, arg):
        if event == "call":
            code = frame.f_code
            if code.co_filename.startswith(_OWN_DIR):
                self._own_depth += 1
            elif not self._own_depth:
                self._called(frame, code)
        elif event == "return":
            if self._own_depth and frame.f_code.co_filename.startswith(_OWN_DIR):
                self._own_depth -= 1
        elif event == "c_call" and not self._own_depth and arg is builtins.print:
            self.refusal = "it prints"

    def start(self) -> None:
        self._previous = sys.getprofile()
        if self._previous is not None:
            raise Refused("a profiler is active (sys.setprofile)")
        sys.setprofile(self._event)

    def stop(self) -> None:
        sys.setprofile(None)

    def _watch(self, mapping, key, value) -> None:
        k = (id(mapping), key)
        if k in self._seen_watch:
            return
        self._seen_watch.add(k)
        self.watches.append((mapping, key, value))
        t = type(value)
        if (t is dict or t is list) and len(value) <= _SMALL:
            self.contents.append((value, _fingerprint(value)))

    def _called(self, frame, code) -> None:
        if code.co_name == "_log" and code.co_filename.endswith(os.path.join("logging", "__init__.py")):
            self.refusal = "it logs a message"
        this = None
        if code.co_argcount and code.co_varnames[0] in ("self", "cls"):
            this = frame.f_locals.get(code.co_varnames[0])
        cls = this if isinstance(this, type) else (type(this) if this is not None else None)
        key = (code, cls)
        if key in self._seen_code:
            return
        self._seen_code.add(key)
        if cls is not None:  # the method running: where its class finds it (a method patched on its class)
            self._method(cls, code.co_name)
        if code.co_filename.startswith(_TORCH_DIR):
            # torch's own code (nn.Module's call, a layer's forward, functional's wrappers): what it looks up
            # is torch's (a user patches torch's functions where their code names them, which is watched there)
            return
        names = code.co_names
        g = frame.f_globals
        for name in names:
            value = g.get(name, _MISSING)
            if value is _MISSING:
                continue
            self._watch(g, name, value)
            self._attributes(value, names, 0)
        if cls is not None:
            instance = this.__dict__ if this is not cls and hasattr(this, "__dict__") else {}
            for name in names:
                if name not in instance:  # (an instance attribute: the module tree's fingerprints hold it)
                    self._method(cls, name)

    def _method(self, cls, name) -> None:
        """Watch where ``cls`` finds ``name``: the class of its MRO that defines it (nothing when none does: a
        module's parameter or submodule, found by ``__getattr__``), and ``cls`` itself when that is a base."""
        found = _resolve(cls, name)
        if found is not None:
            mapping, value = found
            self._watch(mapping, name, value)
            own = _class_dict(cls)
            if mapping is not own:
                self._watch(own, name, _MISSING)  # (a patch on the class itself would hide it)

    def _attributes(self, value, names, depth: int) -> None:
        """The attributes of a module or class the code names (``torch.nn.functional.gelu``)."""
        if depth > 3:
            return
        if isinstance(value, types.ModuleType):
            d = value.__dict__
            for name in names:
                attr = d.get(name, _MISSING)
                if attr is not _MISSING:
                    self._watch(d, name, attr)
                    if isinstance(attr, (types.ModuleType, type)):
                        self._attributes(attr, names, depth + 1)
        elif isinstance(value, type):
            for name in names:
                found = _resolve(value, name)
                if found is not None:
                    self._watch(found[0], name, found[1])

    def freeze(self) -> None:
        """After the recording: the watches grouped by mapping, for ``holds``'s C loops."""
        groups: dict = {}
        for mapping, key, value in self.watches:
            group = groups.setdefault(id(mapping), (mapping, [], []))
            group[1].append(key)
            group[2].append(value)
        self._groups = [(m.get, keys, tuple(map(id, values)), [_MISSING] * len(keys))
                        for m, keys, values in groups.values()]

    def holds(self) -> bool:
        for get, keys, ids, missing in self._groups:
            if tuple(map(id, map(get, keys, missing))) != ids:
                return False
        for container, fp in self.contents:
            if _fingerprint(container) != fp:
                return False
        return True

    def difference(self) -> str:
        for mapping, key, value in self.watches:
            if mapping.get(key, _MISSING) is not value:
                return f"{key!r} now names another object than when the call was recorded"
        for container, fp in self.contents:
            if _fingerprint(container) != fp:
                return f"the contents of {_short(container)} changed"
        return ""
