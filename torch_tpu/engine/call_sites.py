"""Where a recorded op comes from in the user's code: the file:line an error report names, and the place a
Python number handed to an op was written (``graph_sets.dynamic_numbers`` keys a number's history by it).
Both walk the caller's frames at every recorded op, remembering per code object what it is."""
from __future__ import annotations

import os
import sys


def user_location() -> str:
    """file:line of the innermost frame outside torch and torch_tpu (where the user's code made the op)."""
    frame = _innermost(_INSIDE, _torch_or_ours)
    return "<unknown>" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


def number_site() -> tuple:
    """(file, line) of the innermost frame outside torch_tpu and torch's operator glue: where a Python
    number handed to a recorded op was written. Library code counts (``torch.optim``'s step size is one
    place, whichever line of the user's calls ``opt.step()``); ``Tensor.__rsub__`` and the like do not."""
    frame = _innermost(_GLUE, _ours_or_glue)
    return ("<unknown>", 0) if frame is None else (frame.f_code.co_filename, frame.f_lineno)


_INSIDE: dict = {}  # code object -> whether user_location passes it (every recorded op asks)
_GLUE: dict = {}  # code object -> whether number_site passes it
_GLUE_FILES = tuple(os.sep.join(("torch", *f)) for f in (("_tensor.py",), ("_ops.py",), ("overrides.py",),
                                                           ("utils", "_python_dispatch.py")))


def _torch_or_ours(name: str) -> bool:
    return f"{os.sep}torch{os.sep}" in name or f"{os.sep}torch_tpu{os.sep}" in name


def _ours_or_glue(name: str) -> bool:
    return f"{os.sep}torch_tpu{os.sep}" in name or name.endswith(_GLUE_FILES)


def _innermost(passed: dict, passes):
    """The innermost frame of the caller's caller and up whose file ``passes`` does not accept (the answer
    kept per code object in ``passed``), or None."""
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        skip = passed.get(code)
        if skip is None:
            skip = passed[code] = passes(code.co_filename)
        if not skip:
            return frame
        frame = frame.f_back
    return None
