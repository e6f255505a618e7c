"""Where a recorded op comes from in the user's code: the file:line an error report names, and the place a
Python number handed to an op was written (``graph_sets.dynamic_numbers`` keys a number's history by it).
Both walk the caller's frames at every recorded op, remembering per code object what it is; an op recorded
from the op path starts the walk outside ``__torch_dispatch__`` (``set_dispatch_code``), so the frames of
torch_tpu between it and the recording are skipped at once."""
from __future__ import annotations

import os
import sys


def user_location() -> str:
    """file:line of the innermost frame outside torch and torch_tpu (where the user's code made the op)."""
    frame = _innermost(sys._getframe(1), _INSIDE, _torch_or_ours)
    return "<unknown>" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


def number_site() -> tuple:
    """(file, line) of the innermost frame outside torch_tpu and torch's operator glue: where a Python
    number handed to a recorded op was written. Library code counts (``torch.optim``'s step size is one
    place, whichever line of the user's calls ``opt.step()``); ``Tensor.__rsub__`` and the like do not."""
    frame = _innermost(sys._getframe(1), _GLUE, _ours_or_glue)
    return ("<unknown>", 0) if frame is None else (frame.f_code.co_filename, frame.f_lineno)


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
        site = ("<unknown>", 0) if found is None else (found.f_code.co_filename, found.f_lineno)
        frame = found  # (the user's frame is this one or further out: glue and torch_tpu are torch's or ours)
    found = _innermost(frame, _INSIDE, _torch_or_ours)
    return ("<unknown>" if found is None else f"{found.f_code.co_filename}:{found.f_lineno}"), site


_DISPATCH = [None]  # the code object of ``__torch_dispatch__`` (the router's), set by ``set_dispatch_code``


def set_dispatch_code(code) -> None:
    """The code object of the function through which every op enters torch_tpu (``eager/router.py``)."""
    _DISPATCH[0] = code


_INSIDE: dict = {}  # code object -> whether user_location passes it (every recorded op asks)
_GLUE: dict = {}  # code object -> whether number_site passes it
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
        skip = passed.get(code)
        if skip is None:
            skip = passed[code] = passes(code.co_filename)
        if not skip:
            return frame
        frame = frame.f_back
    return None
