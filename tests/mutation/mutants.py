"""The mutants ``run.py`` applies: one wrong line each, in the core's subjects, with the tests of that subject
that must notice it. ``line`` is the exact text replaced (it must occur once in ``file``); keep it short and
update it when the code moves (``run.py`` reports a mutant whose line is gone as stale).

Each mutant below is killed by the tests named; the ones marked "survived until" stayed green in the first run
(2026-12-07) and became the test named. An equivalent mutant (one that cannot change a result) does not belong
here: replace it by one that can.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    file: str           # relative to the repository
    line: str           # the exact text replaced
    replacement: str
    tests: tuple        # test paths or node ids, relative to the repository
    why: str            # what a user would see


FUSED = ("tests/engine/test_fused_outputs.py", "tests/engine/test_fused.py")
PROMOTION = ("tests/ops/test_zero_dim_promotion.py", "tests/ops/test_int_float_promotion.py")
VIEWS = ("tests/tensor/test_storage_views.py", "tests/tensor/test_aliasing.py")
KEYS = ("tests/eager/test_cache_keys.py",)
POISONED = ("tests/engine/test_poisoned_values.py",)
ATTENTION = ("tests/ops/test_attention_op.py",)

MUTANTS = [
    # --- fused graphs: which outputs a program returns, and how a flush picks its values from them
    Mutant("fused-fill-order", "torch_tpu/engine/fused.py",
           "    if out_sig != live_sig:\n        position",
           "    if False:\n        position", FUSED,
           "a flush reusing a program whose outputs are a superset reads its values by live position "
           "(b reads a's values)"),
    Mutant("fused-fill-position", "torch_tpu/engine/fused.py",
           "position = {o: k for k, o in enumerate(out_sig)}",
           "position = {o: k for k, o in enumerate(sorted(out_sig, reverse=True))}", FUSED,
           "results picked at the wrong positions"),
    Mutant("fused-program-returns-live", "torch_tpu/engine/fused.py",
           "        return tuple(env[i][j] for i, j in out_sig)",
           "        return tuple(env[i][j] for i, j in live_sig)", FUSED,
           "a program traced for the live values stored under the key of the output set"),
    Mutant("fused-key-without-outputs", "torch_tpu/engine/fused.py",
           'key = ("fused", structure, in_sig, out_sig, donate, g.mesh)',
           'key = ("fused", structure, in_sig, donate, g.mesh)', FUSED,
           "programs returning other outputs share one key"),
    # (survived until test_fused_outputs.py::
    #  test_graphs_differing_only_in_their_values_shapes_keep_programs_of_their_own)
    Mutant("fused-key-without-node-shapes", "torch_tpu/engine/fused.py",
           "parts.append((node.key, node.inputs, node.out_sig))",
           "parts.append((node.key, node.inputs))", FUSED,
           "a graph's key no longer holds its nodes' output shapes"),
    Mutant("outputs-subset-not-reused", "torch_tpu/engine/graph_sets.py",
           "    elif set(live_sig) <= set(known):\n        out = known",
           "    elif set(live_sig) <= set(known):\n        out = live_sig", FUSED,
           "every step of a loop whose live set shrinks compiles again"),
    Mutant("outputs-union-dropped", "torch_tpu/engine/graph_sets.py",
           "        out = tuple(sorted(set(known) | set(live_sig)))",
           "        out = live_sig", FUSED,
           "alternating live sets compile at every step, never one program for both"),
    Mutant("outputs-union-unsorted", "torch_tpu/engine/graph_sets.py",
           "        out = tuple(sorted(set(known) | set(live_sig)))",
           "        out = tuple(known) + tuple(o for o in live_sig if o not in known)", FUSED,
           "the union's order depends on history (a warm process's key differs)"),
    Mutant("outputs-known-ignored", "torch_tpu/engine/graph_sets.py",
           "    if known is None or known == live_sig:",
           "    if True:", FUSED,
           "the output set is never reused"),

    # --- type promotion: a 0-dim operand of the same category does not widen
    Mutant("promotion-0dim-widens", "torch_tpu/ops/_util.py",
           "    if cat == 0 or any(_category(z.dtype) > cat for z in zero):",
           "    if cat == 0 or any(_category(z.dtype) >= cat for z in zero):", PROMOTION,
           "int8 == torch.tensor(1000) compared in int64 (CPU: in int8, 1000 being -24)"),
    Mutant("promotion-0dim-counted-as-dimensioned", "torch_tpu/ops/_util.py",
           "    dimmed = [x for x in arrays if x.ndim > 0]",
           "    dimmed = [x for x in arrays if x.ndim >= 0]", PROMOTION,
           "0-dim operands take part in the common dtype"),
    Mutant("promotion-higher-category-cast-down", "torch_tpu/ops/_util.py",
           "        return xs  # a 0-dim operand of a higher category",
           "        pass  # a 0-dim operand of a higher category", PROMOTION,
           "int8 < torch.tensor(1.5) compared as 1 < 1"),
    Mutant("promotion-add-widens", "torch_tpu/ops/elementwise.py",
           "    x, y = torch_operands(x, y)\n    return _plus_scaled(x, y, alpha)",
           "    return _plus_scaled(x, y, alpha)", PROMOTION,
           "float32 + a float64 0-dim tensor computed in float64"),
    Mutant("promotion-opmath-dropped", "torch_tpu/ops/_util.py",
           "        return x.astype(jnp.float32), y.astype(jnp.float32)\n    return None",
           "        return None\n    return None", PROMOTION,
           "half // torch.tensor(0.1) divides by 0.1 rounded to half"),
    Mutant("promotion-int-float-number", "torch_tpu/ops/_util.py",
           "    if not tensors or any(jnp.issubdtype(v.dtype, jnp.inexact) for v in tensors):",
           "    if True:", PROMOTION,
           "int_tensor * 0.1 computed in float64"),

    # --- views: writing through a view updates its storage
    Mutant("view-write-key-without-strides", "torch_tpu/tensor/strided.py",
           'key = ("view-write", storage.shape, storage.dtype, t.dtype, size, stride, where)',
           'key = ("view-write", storage.shape, storage.dtype, t.dtype, size, where)', VIEWS,
           "two views of one shape and other strides share a write program"),
    Mutant("view-write-offset-zero", "torch_tpu/tensor/strided.py",
           "    return launch(key, fn, (storage.value(), value, offset_arg(offset)),",
           "    return launch(key, fn, (storage.value(), value, offset_arg(0)),", VIEWS,
           "a write into x[1] lands in x[0]"),
    Mutant("view-placement-ignores-offset", "torch_tpu/tensor/strided.py",
           '    if whole and offset == 0:\n        return "zero"',
           '    if whole:\n        return "zero"', VIEWS,
           "a whole-window view at an offset read and written at offset 0"),
    Mutant("view-write-order-dropped", "torch_tpu/tensor/strided.py",
           "        box = jnp.transpose(box, [kept.index(k) for k in order])",
           "        box = box", VIEWS,
           "a write into a transposed window lands transposed"),

    # --- program keys: what makes two calls share a program
    # (survived until test_cache_keys.py::test_static_numbers_equal_in_value_keep_their_type_in_the_key)
    Mutant("key-float-by-value", "torch_tpu/eager/arguments.py",
           '        return ("f", x.hex())',
           "        return x", KEYS,
           "1 and 1.0, 0.0 and -0.0 share a static key"),
    Mutant("key-without-dtype", "torch_tpu/eager/arguments.py",
           "            sig.append((storage.shape, storage.dtype))",
           "            sig.append(storage.shape)", KEYS,
           "a float32 call's program serves a bfloat16 one"),
    # (survived until test_cache_keys.py::test_the_default_dtype_is_in_an_ops_key)
    Mutant("key-without-default-dtype", "torch_tpu/eager/arguments.py",
           '        sig.append(("default_dtype", default))',
           "        pass", KEYS,
           "an entry built under float32 serves a call under set_default_dtype(bfloat16)"),
    # (survived until test_fused.py::test_a_constant_zero_changing_sign_is_another_number)
    Mutant("graph-number-signed-zero", "torch_tpu/engine/graph_sets.py",
           "            return _NEG_ZERO if math.copysign(1.0, v) < 0 else _ZERO",
           "            return _ZERO", FUSED + KEYS,
           "a fused graph's constant -0.0 served by the program of 0.0"),

    # --- poisoned values: what was computed from a failed device-side check
    Mutant("poison-lineage-last-input-only", "torch_tpu/engine/poisoned.py",
           "            bits |= _at(e, base)",
           "            bits = _at(e, base)", POISONED,
           "an op's output keeps the pending checks of its last input only"),
    # (survived until test_poisoned_values.py::test_a_value_from_checks_a_compaction_read_stays_clean)
    Mutant("poison-shift-direction", "torch_tpu/engine/poisoned.py",
           "    return bits >> (base - made) if made <= base else bits << (made - base)",
           "    return bits << (base - made) if made <= base else bits >> (made - base)", POISONED,
           "a set made before a read points at the wrong checks"),
    Mutant("poison-check-bit-absolute", "torch_tpu/engine/poisoned.py",
           "        _mark(outputs, 1 << (number - _BASE[0]))",
           "        _mark(outputs, 1 << number)", POISONED,
           "a check's bit not relative to the checks read before"),
    # (survived until test_poisoned_values.py::test_a_checked_op_on_a_pending_value_keeps_that_values_checks)
    Mutant("poison-op-check-replaces-lineage", "torch_tpu/engine/poisoned.py",
           "            _LINEAGE[key] = (e[0], base, bits | _current(e))",
           "            _LINEAGE[key] = (e[0], base, bits)", POISONED,
           "an op's own check replaces the checks its inputs carried"),
    # (survived until test_poisoned_values.py::test_the_first_read_of_a_value_whose_check_is_pending_raises)
    Mutant("poison-readable-pending", "torch_tpu/engine/poisoned.py",
           "        if e is not None and e[0]() is x and _current(e):\n            return True",
           "        if e is not None and e[0]() is x and _current(e):\n            return False", POISONED,
           "a value computed from a pending check read without waiting for it"),
    Mutant("poison-first-failure-off-by-one", "torch_tpu/engine/poisoned.py",
           "        if number >= base and (bits >> (number - base)) & 1:",
           "        if number > base and (bits >> (number - base)) & 1:", POISONED,
           "the first check of a set never poisons"),

    # --- attention
    Mutant("attention-causal-diagonal", "torch_tpu/ops/attention.py",
           "        s = jnp.where(cols <= rows, s, -jnp.inf)",
           "        s = jnp.where(cols < rows, s, -jnp.inf)", ATTENTION,
           "a causal query no longer sees its own key"),
    Mutant("attention-chunk-offset", "torch_tpu/ops/attention.py",
           "        rows = jax.lax.broadcasted_iota(jnp.int32, (lq, lk), 0) + q_offset",
           "        rows = jax.lax.broadcasted_iota(jnp.int32, (lq, lk), 0)", ATTENTION,
           "causal attention in query-row chunks masks every chunk as the first"),
    Mutant("attention-default-scale", "torch_tpu/ops/attention.py",
           "        scale = 1.0 / math.sqrt(q.shape[-1])",
           "        scale = 1.0 / math.sqrt(v.shape[-1])", ATTENTION,
           "the default scale from the value's width (differs when Ev != E)"),
    Mutant("attention-masked-row", "torch_tpu/ops/attention.py",
           "    return jnp.where(masked, 0.0, pv / jnp.where(masked, 1.0, denom))",
           "    return pv / denom", ATTENTION,
           "a fully masked row gives NaN (torch: 0)"),
    Mutant("attention-additive-mask-sign", "torch_tpu/ops/attention.py",
           "s + mask.astype(f32)",
           "s - mask.astype(f32)", ATTENTION,
           "a float mask subtracted"),
]
