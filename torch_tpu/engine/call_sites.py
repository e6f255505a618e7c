"""Where a recorded op comes from in the user's code: the file:line an error report names, and the place a
Python number handed to an op was written (``graph_sets.dynamic_numbers`` keys a number's history by it).
Both walk the caller's frames at every recorded op, remembering per code object what it is."""
from __future__ import annotations

import os
import sys


def user_location() -> str:
    """file:line of the innermost frame outside torch and torch_tpu (where the user's code made the op)."""
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        inside = _INSIDE.get(code)
        if inside is None:
            name = code.co_filename
            inside = _INSIDE[code] = f"{os.sep}torch{os.sep}" in name or f"{os.sep}torch_tpu{os.sep}" in name
        if not inside:
            return f"{code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


_INSIDE: dict = {}  # code object -> whether it is torch's or torch_tpu's (every recorded op asks)


def number_site() -> tuple:
    """(file, line) of the innermost frame outside torch_tpu and torch's operator glue: where a Python
    number handed to a recorded op was written. Library code counts (``torch.optim``'s step size is one
    place, whichever line of the user's calls ``opt.step()``); ``Tensor.__rsub__`` and the like do not."""
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        glue = _GLUE.get(code)
        if glue is None:
            name = code.co_filename
            glue = _GLUE[code] = f"{os.sep}torch_tpu{os.sep}" in name or name.endswith(_GLUE_FILES)
        if not glue:
            return code.co_filename, frame.f_lineno
        frame = frame.f_back
    return "<unknown>", 0


_GLUE: dict = {}  # code object -> whether number_site passes it
_GLUE_FILES = tuple(os.sep.join(("torch", *f)) for f in (("_tensor.py",), ("_ops.py",), ("overrides.py",),
                                                           ("utils", "_python_dispatch.py")))
