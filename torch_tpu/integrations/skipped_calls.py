"""Whether one op may stand for several modules' calls: it skips those calls, so nothing may be watching or
replacing them.

A module call is watched by torch's hooks on the module (``register_forward_hook``/``_pre_hook``: user hooks,
``enable_sequential_cpu_offload``'s weight moves) or by global module hooks other than fused mode's own (those
mark graph boundaries at model and block calls only); it is replaced by a ``forward`` set on the instance
(diffusers' ``HookRegistry``: group offloading, caches; accelerate's hooks), which the one op would bypass.
"""
from __future__ import annotations


def hooked(*modules) -> bool:
    """Whether a hook would see, or an instance forward replace, a call of one of ``modules`` (None entries
    skipped) that the one op skips."""
    from ..engine import module_graphs  # (the engine loads on first device use, not at import torch)

    for m in modules:
        if m is None:
            continue
        if m._forward_hooks or m._forward_pre_hooks or "forward" in vars(m):
            return True
    return module_graphs.foreign_global_hooks()
