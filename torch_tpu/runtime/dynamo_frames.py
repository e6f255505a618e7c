"""Keep torch.compile's frame hook out of the package's callbacks.

While a ``torch.compile``'d function runs, dynamo's frame hook looks at every Python frame that starts,
and treats each frame that is not in its skip list as user code to trace and compile. torch calls back
into this package from C++ (``__torch_dispatch__``, kernels registered for the tpu device, autocast
kernels, the device hooks) whenever a tpu op runs eagerly inside a compiled region: in the code a graph
break leaves to Python, or in frames dynamo does not trace at all (``nn.Linear(...).compile()`` runs
torch's own ``Module._call_impl`` and ``Linear.forward`` untraced). Without this, dynamo would start
tracing our router, then JAX's internals, and fail (or worse) instead of running the op.

``keep_out(fn)`` marks fn's code object so that dynamo runs the frame, and every frame it calls, as
plain Python (the recursive "skip" strategy dynamo itself uses for code it gave up on). Costs nothing
when torch.compile is not running: the mark is read only by dynamo's frame hook. torch's C extension
provides it; importing it does not import dynamo.
"""
from __future__ import annotations

import types

_MARKED: set = set()


def keep_out(fn):
    """Mark ``fn`` (a function, bound method or callable object with ``__call__``) so torch.compile never
    traces it or anything it calls as a frame of its own. Returns fn (usable as a decorator)."""
    code = _code_of(fn)
    if code is None or code in _MARKED:
        return fn
    try:
        from torch._C._dynamo.eval_frame import (
            _FrameAction as Action,
            _FrameExecStrategy as Strategy,
            set_code_exec_strategy,
        )
    except ImportError:  # a torch without dynamo: nothing to keep out of
        return fn
    set_code_exec_strategy(code, Strategy(Action.SKIP, Action.SKIP))
    _MARKED.add(code)
    return fn


def keep_out_all(fns) -> None:
    for fn in fns:
        keep_out(fn)


def is_kept_out(fn) -> bool:
    return _code_of(fn) in _MARKED


def _code_of(fn):
    if isinstance(fn, (classmethod, staticmethod)):
        fn = fn.__func__
    fn = getattr(fn, "__func__", fn)  # bound method
    code = getattr(fn, "__code__", None)
    if isinstance(code, types.CodeType):
        return code
    call = getattr(type(fn), "__call__", None)  # a callable object (a fallback's handler)
    code = getattr(getattr(call, "__func__", call), "__code__", None)
    return code if isinstance(code, types.CodeType) else None


def host_only(fn):
    """``keep_out`` for a host-side entry point users call (a mode switch, a wait): inside a
    ``torch.compile``'d function dynamo never inlines it either (it would trace the package's flushes
    and JAX into a graph and fail mid-way) but breaks the graph and runs the call as plain Python."""
    keep_out(fn)
    fn._torchdynamo_disable = True
    return fn
