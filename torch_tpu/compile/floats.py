"""Python floats that change between calls become program arguments, not one compile per value.

``torch.compile(fn, backend="tpu", dynamic=False)`` (the documented way: one program per input shape)
turns dynamo's *automatic dynamic shapes* off. dynamo decides with the same switch whether a Python
float it has seen with two values is traced as a constant (guarded by value: a new value recompiles the
frame) or as an input (an "unspecialised" float: a 0-d float64 tensor graph input read with ``.item()``,
whose symbolic float AOTAutograd turns back into tensor operations; the program takes it as an
argument). With the switch off every float is a constant, so a compiled optimizer step with an LR
scheduler (``torch.compile(opt.step, backend="tpu", dynamic=False)``) recompiled every step until
dynamo's recompile limit (8), then ran uncompiled.

``install()`` wraps dynamo's frame-state update (``torch._dynamo.pgo.update_automatic_dynamic``) so that,
for frames compiled with backend "tpu" only, the entry of a *float* scalar merges over calls as it does
with automatic dynamic shapes on: a float that took a second value is traced as an input from then on
(one more compile, then none), while tensor shapes and Python ints stay specialised (one program per
shape, as ``dynamic=False`` asks). What dynamo specialises anyway stays a constant: nan and inf (its
guards cannot hold them symbolically), a float that decides a shape or a branch (guarded by value).
On a torch without that function floats stay specialised: correct, one compile per value.
"""
from __future__ import annotations

_INSTALLED: list = []  # the backend function, once installed


def _is_tpu_backend(fn, depth: int = 0) -> bool:
    """dynamo's compiler function wraps the backend (``WrapBackendDebug`` -> ``torch.compile``'s
    ``_TorchCompileWrapper`` -> ``tpu_backend``)."""
    if fn is None or depth > 6:
        return False
    if fn is _INSTALLED[0]:
        return True
    return any(_is_tpu_backend(getattr(fn, attr, None), depth + 1)
               for attr in ("_torchdynamo_orig_backend", "compiler_fn", "__wrapped__")
               if getattr(fn, attr, None) is not fn)


def install(backend) -> None:
    """``backend``: the dynamo backend function whose frames get changing floats as inputs."""
    if _INSTALLED:
        return
    _INSTALLED.append(backend)
    import torch._dynamo.config as dynamo_config
    from torch._dynamo import pgo

    original = getattr(pgo, "update_automatic_dynamic", None)
    if original is None or getattr(original, "_tpu_float_scalars", False):
        return

    def update_automatic_dynamic(tx, name, entry, *args, **kwargs):
        if type(getattr(entry, "scalar", None)) is float and not dynamo_config.automatic_dynamic_shapes \
                and dynamo_config.assume_static_by_default \
                and _is_tpu_backend(getattr(getattr(tx, "output", None), "compiler_fn", None)):
            with dynamo_config.patch(automatic_dynamic_shapes=True):
                return original(tx, name, entry, *args, **kwargs)
        return original(tx, name, entry, *args, **kwargs)

    update_automatic_dynamic._tpu_float_scalars = True
    update_automatic_dynamic.__wrapped__ = original
    pgo.update_automatic_dynamic = update_automatic_dynamic
    _install_signed_zero_guard()
    _install_zero_constants()


def _install_zero_constants() -> None:
    """A float input whose value is a zero stays a constant (as dynamo keeps nan and inf): dynamo's
    symbolic float holds its value as a sympy number, which has no -0.0, so a symbolic float that an op
    specialises (``torch.full((3,), s)``, ``x.clamp(min=s)``, ``F.pad(x, p, value=s)``) was traced as
    ``0.0`` for ``s=-0.0`` and its ``s == 0.0`` guard let ``0.0`` and ``-0.0`` share that graph. As a
    constant, the signed-zero guard tells them apart (one graph per sign)."""
    from torch._dynamo import guards
    from torch._dynamo.variables import builder
    from torch._dynamo.variables.constant import ConstantVariable

    original = getattr(builder.VariableBuilder, "wrap_symfloat", None)
    if original is None or getattr(original, "_tpu_zero_constant", False):
        return

    def wrap_symfloat(self, value, *args, **kwargs):
        if type(value) is float and value == 0.0 and self.name not in self.tx.output.unspec_variable_map \
                and _is_tpu_backend(getattr(self.tx.output, "compiler_fn", None)):
            try:
                self.install_guards(guards.GuardBuilder.CONSTANT_MATCH)
                return ConstantVariable.create(value=value, source=self.source)
            except (AttributeError, TypeError):  # another dynamo's API: its own wrapping
                pass
        return original(self, value, *args, **kwargs)

    wrap_symfloat._tpu_zero_constant = True
    wrap_symfloat.__wrapped__ = original
    builder.VariableBuilder.wrap_symfloat = wrap_symfloat


_FRAMES: "weakref.WeakSet" = None  # the code objects of frames whose graphs this backend compiled
ORIGINAL_EQUALS_MATCH = None  # dynamo's own EQUALS_MATCH, once wrapped (see _install_signed_zero_guard)


def note_frame() -> None:
    """Called by the backend while dynamo traces a frame: its constant floats' guards keep zero's sign."""
    from torch._guards import TracingContext

    ctx = TracingContext.try_get()
    if _FRAMES is not None and ctx is not None:
        for code in getattr(ctx, "traced_code", None) or ():
            _FRAMES.add(code)


def _install_signed_zero_guard() -> None:
    """dynamo guards a constant float with ``==``, which holds for -0.0 and 0.0: the program compiled for
    ``x.clamp(min=0.0)`` ran for ``-0.0`` (CPU gives -0.0 where x is negative). For frames this backend
    compiled, a constant zero's guard also checks its sign (a new sign recompiles the frame)."""
    global _FRAMES
    import math
    import weakref

    from torch._dynamo import guards

    original = getattr(guards.GuardBuilder, "EQUALS_MATCH", None)
    if original is None or getattr(original, "_tpu_signed_zero", False) or _FRAMES is not None:
        return
    _FRAMES = weakref.WeakSet()

    def EQUALS_MATCH(self, guard, *args, **kwargs):  # noqa: N802 - dynamo's name
        original(self, guard, *args, **kwargs)
        val = self.get(guard)
        if type(val) is float and val == 0.0 and getattr(self, "f_code", None) in _FRAMES:
            sign = math.copysign(1.0, val)
            code = f"__math_copysign(1.0, {self.arg_ref(guard)}) == {sign}"
            try:  # dynamo's guard-manager API of this torch (checked on 2.13); else the == guard alone
                self.get_guard_manager(guard).add_lambda_guard(
                    lambda x: type(x) is not float or math.copysign(1.0, x) == sign,
                    guards.get_verbose_code_parts(code, guard), guard.user_stack)
            except (AttributeError, TypeError):
                pass

    EQUALS_MATCH._tpu_signed_zero = True
    EQUALS_MATCH.__wrapped__ = original
    # dynamo pickles a guard's builder function by module and qualified name (a compiled module's guards
    # saved for a later process, ``warm_start.py``): each must be found under its own name. Guards built
    # with the original (some dynamo code holds it from before this patch) find it here.
    global ORIGINAL_EQUALS_MATCH
    ORIGINAL_EQUALS_MATCH = original
    original.__module__, original.__qualname__ = __name__, "ORIGINAL_EQUALS_MATCH"
    EQUALS_MATCH.__module__, EQUALS_MATCH.__qualname__ = guards.__name__, "GuardBuilder.EQUALS_MATCH"
    guards.GuardBuilder.EQUALS_MATCH = EQUALS_MATCH
