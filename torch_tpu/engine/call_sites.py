"""Where a recorded op comes from in the user's code: the file:line an error report names, and the place a
Python number handed to an op was written (``graph_sets.dynamic_numbers`` keys a number's history by it).
Both walk the caller's frames at every recorded op, remembering per code object what it is; an op recorded
from the op path starts the walk outside ``__torch_dispatch__`` (``set_dispatch_code``), so the frames of
torch_tpu between it and the recording are skipped at once."""
from __future__ import annotations

import os
import sys

from ..runtime import caches


def user_location() -> str:
    """file:line of the innermost frame outside torch and torch_tpu (where the user's code made the op)."""
    frame = _innermost(sys._getframe(1), _INSIDE, _torch_or_ours)
    return "<unknown>" if frame is None else _place(frame)[3]


def number_site() -> tuple:
    """(file, line) of the innermost frame outside torch_tpu and torch's operator glue: where a Python
    number handed to a recorded op was written. Library code counts (``torch.optim``'s step size is one
    place, whichever line of the user's calls ``opt.step()``); ``Tensor.__rsub__`` and the like do not."""
    frame = _innermost(sys._getframe(1), _GLUE, _ours_or_glue)
    return ("<unknown>", 0) if frame is None else _place(frame)[1:3]


def op_sites(depth: int, numbers: bool) -> tuple:
    """(``user_location()``, ``number_site()`` or None unless ``numbers``) of an op recorded ``depth``
    frames below ``__torch_dispatch__`` (the caller's frame counts 0): one walk for both, from the frame
    outside the dispatch. Every frame below it is torch_tpu's own; when the frame at ``depth`` is not the
    dispatch (another way in), the walk starts at the caller, as ``user_location`` does."""
    try:
        frame = sys._getframe(depth + 1)
    except ValueError:
        frame = None
    if frame is not None and frame.f_code is _DISPATCH[0]:
        frame = frame.f_back
    else:
        frame = sys._getframe(1)
    site = None
    if numbers:
        found = _innermost(frame, _GLUE, _ours_or_glue)
        site = ("<unknown>", 0) if found is None else _place(found)[1:3]
        frame = found  # (the user's frame is this one or further out: glue and torch_tpu are torch's or ours)
    found = _innermost(frame, _INSIDE, _torch_or_ours)
    return ("<unknown>" if found is None else _place(found)[3]), site


_DISPATCH = [None]  # the code object of ``__torch_dispatch__`` (the router's), set by ``set_dispatch_code``


def set_dispatch_code(code) -> None:
    """The code object of the function through which every op enters torch_tpu (``eager/router.py``)."""
    _DISPATCH[0] = code


# Keyed by id(code), the value holding the code object (so its id stays its own): a code object's hash is
# computed from its bytecode and constants at every lookup, microseconds for a long function. Bounded (each
# torch.compile graph and generated function brings code objects of its own, which the values keep alive) and
# emptied by ``torch_tpu.reset_caches()``.
# id(code object) -> (code, whether user_location passes it) (every recorded op asks)
_INSIDE: dict = caches.register("call site frames", caches.Bounded(lambda: 1 << 16))
# id(code object) -> (code, whether number_site passes it)
_GLUE: dict = caches.register("number site frames", caches.Bounded(lambda: 1 << 16))
# (id(code), f_lasti) -> (code, file, line, "file:line"): a frame's line number is found by scanning its code's
# line table, and an op's call site is asked at every recorded op
_PLACES: dict = caches.register("call site lines", caches.Bounded(lambda: 1 << 16))
_GLUE_FILES = tuple(os.sep.join(("torch", *f)) for f in (("_tensor.py",), ("_ops.py",), ("overrides.py",),
                                                           ("utils", "_python_dispatch.py")))


def _torch_or_ours(name: str) -> bool:
    return f"{os.sep}torch{os.sep}" in name or f"{os.sep}torch_tpu{os.sep}" in name


def _ours_or_glue(name: str) -> bool:
    return f"{os.sep}torch_tpu{os.sep}" in name or name.endswith(_GLUE_FILES)


def _innermost(frame, passed: dict, passes):
    """The innermost frame from ``frame`` out whose file ``passes`` does not accept (the answer kept per
    code object in ``passed``), or None."""
    while frame is not None:
        code = frame.f_code
        found = passed.get(id(code))
        if found is None:
            found = passed[id(code)] = (code, passes(code.co_filename))
        if not found[1]:
            return frame
        frame = frame.f_back
    return None


def _place(frame) -> tuple:
    """(code, file, line, "file:line") of where ``frame`` is now."""
    code = frame.f_code
    key = (id(code), frame.f_lasti)
    found = _PLACES.get(key)
    if found is None:
        line = frame.f_lineno
        found = _PLACES[key] = (code, code.co_filename, line, f"{code.co_filename}:{line}")
    return found
