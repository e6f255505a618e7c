"""``TORCH_TPU_CHECK_LOWERING=tpu``: every program this backend builds is also lowered for a TPU.

A program that runs on the CPU platform can still fail to lower for a TPU (a Pallas/Mosaic kernel traced
with 64-bit index arithmetic, an op XLA:TPU has no lowering for), and CI has no TPU. With the check on,
each program traced for the platform in use (a per-op program, a fused graph, a compiled graph, a
collective over a mesh) is traced again as it would be for a TPU (``platform.Targeting("tpu")``: the
attention kernel, the precise float32 functions) and lowered with ``jax.export(..., platforms=("tpu",))``,
which needs no TPU. A failure raises ``TpuLoweringError`` naming the program; ``stats()["tpu_lowerings"]``
counts the programs checked. Programs found in the persistent cache by key were checked when they were
built (the setting is part of their keys' environment).
"""
from __future__ import annotations

import re

import numpy as np

from .. import config
from ..errors import OpError
from . import counters, platform


class TpuLoweringError(OpError):
    """A program of this backend does not lower for a TPU."""


def enabled() -> bool:
    return config.settings().check_lowering == "tpu"


def _abstract(a, jax):
    if isinstance(a, jax.ShapeDtypeStruct):
        return jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=getattr(a, "weak_type", False))
    if type(a) in (bool, int, float, complex):
        return jax.ShapeDtypeStruct((), np.asarray(a).dtype, weak_type=True)
    weak = bool(getattr(getattr(a, "aval", None), "weak_type", False))
    return jax.ShapeDtypeStruct(np.shape(a), a.dtype, weak_type=weak)


def check(fn, example_args: tuple, name: str) -> None:
    """Lower ``fn`` for a TPU at the shapes and dtypes of ``example_args``; raise naming ``name``."""
    jax = platform.jax()

    def as_for_tpu(*args):  # a new function each time: JAX never serves the trace made for this platform
        return fn(*args)

    specs = tuple(_abstract(a, jax) for a in example_args)
    _export(jax, jax.jit(as_for_tpu), specs, name)


def check_spmd(body, example_args: tuple, ndevices: int, axis: str, in_specs, out_specs, name: str) -> None:
    """As ``check`` for a program over a 1-D mesh of ``ndevices`` (collectives over ``axis``)."""
    jax = platform.jax()
    mesh = jax.sharding.AbstractMesh((ndevices,), (axis,))

    def as_for_tpu(*args):
        return body(*args)

    mapped = jax.shard_map(as_for_tpu, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    specs = []
    for a, spec in zip(example_args, in_specs):
        local = _abstract(a, jax)
        shape = ((local.shape[0] * ndevices,) + tuple(local.shape[1:])) if local.shape else ()
        specs.append(jax.ShapeDtypeStruct(shape, local.dtype, weak_type=local.weak_type,
                                          sharding=jax.sharding.NamedSharding(mesh, spec)))
    _export(jax, jax.jit(mapped), tuple(specs), name)


def _export(jax, jitted, specs, name) -> None:
    with platform.Targeting("tpu"), platform.X64():
        # traced first, outside the conversion below: an error of the program itself (a lowering's own check,
        # a wrong shape) is raised as it is, not as a failure to lower for a TPU (the check runs before the
        # platform's own lowering, which would have raised it first)
        jitted.trace(*specs)
        try:
            text = jax.export.export(jitted, platforms=("tpu",))(*specs).mlir_module()
        except Exception as exc:
            raise TpuLoweringError(
                f"tpu: {name} does not lower for TPU (TORCH_TPU_CHECK_LOWERING=tpu): "
                f"{type(exc).__name__}: {str(exc)[:2000]}") from exc
    refuse_uncompilable(text, name, "lowers for TPU but ")
    counters.add("tpu_lowerings", 1)


# XLA:TPU rewrites 64-bit integers into pairs of 32-bit ones when it compiles, and has no such rewrite for a dot
# or a convolution ("While rewriting computation to not contain X64 element types ... not implemented", on a
# v5e): a program with one lowers everywhere and fails only when the chip compiles it.
_INTEGER_64 = re.compile(r"tensor<(?:[0-9?]+x)*u?i64>")
_PRODUCTS = ("stablehlo.dot_general", "stablehlo.dot ", "stablehlo.convolution")
# XLA:TPU's own decompositions, by custom-call target, and the operand types they lack (on a v5e: "Only F32 and
# C64 types are implemented in LuDecomposition; got shape f64[...]")
_FLOAT_64 = re.compile(r"tensor<(?:[0-9?]+x)*(?:f64|complex<f64>)>")
_DECOMPOSITIONS_WITHOUT_FLOAT_64 = ("@LuDecomposition",)
# complex128: on a v5e XLA:TPU's compiler aborted the whole process (a failed CHECK, "Unsupported CVT X{64|128}
# expansion ... to c128") on every converted value, select, exp and abs of complex128 tried and on its Cholesky,
# eigh, QR, triangular solve, and refused its FFT ("Unexpected operand type for FFT: c128"); only its dot, sum,
# cumsum and sort compiled. A program holding complex128 is refused before XLA:TPU sees it.
_COMPLEX_128 = "complex<f64>"


# A shift of a float64's bits read as a 64-bit integer: XLA:TPU fails to compile it ("Binary op
# shift-right-arithmetic with different element types: s32[] and u32[]", on a v5e: jnp.signbit and jnp.copysign
# of float64 do this), where a shift of any other 64-bit integer compiles
# (bench/results/tpu/tpu_signbit_probe.json, regression_probe.json). Followed through reshapes, broadcasts and
# slices of those bits within one function.
_FLOAT_64_BITS = re.compile(r"(%[\w#.]+) = stablehlo\.bitcast_convert %[\w#.]+ : \(tensor<(?:[0-9?]+x)*f64>\) -> "
                            r"tensor<(?:[0-9?]+x)*u?i64>")
_SAME_BITS = re.compile(r"(%[\w#.]+) = stablehlo\.(?:reshape|broadcast_in_dim|slice|transpose|dynamic_slice) "
                        r"(%[\w#.]+)")
_SHIFT = re.compile(r"stablehlo\.shift_(?:left|right_arithmetic|right_logical) (%[\w#.]+), (%[\w#.]+)")


# XLA:TPU's Jacobi eigh: in one program, a call asking for sorted eigenvalues beside one asking for them unsorted
# (XLA:TPU's own SVD algorithm does) returned the sorted one's values unsorted, on a v5e
# (bench/results/tpu/eigh_sort_probe.json): a wrong result, not a failure. Its backend_config is
# "lower,sort,sweeps,tolerance".
_EIGH_SORT_FLAG = re.compile(r"stablehlo\.custom_call @Eigh\(.*backend_config = \"\d,(\d),")


def _uncompilable_on_tpu(text: str) -> str:
    """What XLA:TPU is known not to compile, or to compute wrong, in the module ``text`` lowered for a TPU (empty
    when nothing is)."""
    float_64_bits: set = set()  # SSA values of the current function holding a float64's bits
    eigh_sort_flags: set = set()  # over the whole module: XLA:TPU compiles it as one program
    for line in text.splitlines():
        eigh = _EIGH_SORT_FLAG.search(line)
        if eigh:
            eigh_sort_flags.add(eigh.group(1))
            if len(eigh_sort_flags) > 1:
                return ("eigh calls asking XLA:TPU for sorted and for unsorted eigenvalues in one program, where "
                        "it returns the sorted ones unsorted (use torch_tpu.ops.linalg._eigh, which asks for them "
                        f"unsorted and sorts them) ({line.strip()[:300]})")
        if "func.func" in line:
            float_64_bits.clear()
        bits = _FLOAT_64_BITS.search(line)
        if bits:
            float_64_bits.add(bits.group(1))
        same = _SAME_BITS.search(line)
        if same and same.group(2) in float_64_bits:
            float_64_bits.add(same.group(1))
        shift = _SHIFT.search(line)
        if shift and float_64_bits.intersection(shift.groups()):
            return ("a shift of a float64's bits, which XLA:TPU does not compile (jnp.signbit or jnp.copysign of "
                    f"float64: use torch_tpu.ops._util.signbit) ({line.strip()[:300]})")
        operand_types = line.rpartition(" : ")[2]
        if any(op in line for op in _PRODUCTS) and _INTEGER_64.search(operand_types):
            return f"a 64-bit integer product ({line.strip()[:300]})"
        if any(call in line for call in _DECOMPOSITIONS_WITHOUT_FLOAT_64) and _FLOAT_64.search(operand_types):
            return f"a 64-bit float decomposition XLA:TPU has for 32-bit types only ({line.strip()[:300]})"
        if _COMPLEX_128 in line and not line.lstrip().startswith("#loc"):
            return ("complex128 values, which XLA:TPU's compiler aborts the process on (converts, selects, exp, "
                    f"abs, decompositions) or refuses (FFT): use complex64 ({line.strip()[:300]})")
    return ""


def refuse_uncompilable(text: str, name: str, how: str = "") -> None:
    """Raise ``TpuLoweringError`` naming ``name`` if the module ``text`` lowered for a TPU holds what XLA:TPU is
    known not to compile: the check's last step (``how`` says so in the message), and on a TPU the step before
    XLA compiles a program (where the failure was an error deep in XLA, or the process aborting)."""
    uncompilable = _uncompilable_on_tpu(text)
    if uncompilable:
        what = f"{name} {how}XLA:TPU is known to fail on it (TORCH_TPU_CHECK_LOWERING=tpu)" if how else \
            f"{name}: XLA:TPU is known to fail on it"
        raise TpuLoweringError(f"tpu: {what}: {uncompilable}")
