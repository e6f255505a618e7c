"""Which outputs a fused graph's program returns, and how a flush reuses a program returning other outputs
than the values alive now (``engine/fused.py``: ``_run``, ``_fill``; ``engine/graph_sets.py``: ``outputs_for``).

A denoising loop's first step keeps values its later steps drop (or the reverse): one program serves every
flush whose live values are a subset of its outputs, and those values are picked out of its results by
position. Every path is checked by value against CPU torch and by the compilations it takes:
  * the same live values: the program is reused as it is;
  * a subset (the first, a middle, the last output; one output of a node with several): reused, its
    results picked out and reordered;
  * a superset or a new value: one program returning the union, reused after by every subset;
  * the same, with the output sets read back from disk by a process that starts warm.
"""
import pytest
import torch

import torch_tpu
from torch_tpu import EagerMode
from torch_tpu.engine import fused, graph_sets

FUSE = EagerMode.DEFER_AND_FUSE
X = torch.arange(-3.0, 9.0).reshape(3, 4)


def _values(x: torch.Tensor) -> dict:
    """The graph on a tpu input (recorded), or its expected values on a CPU one."""
    return {"a": x + 1, "b": x * 10, "c": x - 3, "d": x.exp()}


def _compiles() -> int:
    return torch_tpu.stats()["compiles"]


def _flush_keeping(x, alive, flush: str) -> dict:
    """Record the graph, drop the values not in ``alive``, flush (``flush``: how the graph ends) and
    return the values kept."""
    values = _values(x)
    kept = {k: v for k, v in values.items() if k in alive}
    del values
    if flush == "sync":
        torch_tpu.sync()
    elif flush == "read":  # reading one value runs the graph
        next(iter(kept.values())).cpu()
    else:
        raise AssertionError(flush)
    assert fused.pending_nodes() == 0
    return kept


def _check(kept: dict, where: str) -> None:
    want = _values(X)
    for name, value in kept.items():
        torch.testing.assert_close(value.cpu(), want[name], msg=lambda m: f"{where}, value {name}: {m}")


# each case: the live sets of successive flushes of the same graph, and how many programs each compiles
SEQUENCES = {
    "same": ([("a", "b"), ("a", "b")], [1, 0]),
    "subset_last": ([("a", "b"), ("b",)], [1, 0]),  # the case: b must not read a's values
    "subset_first": ([("a", "b"), ("a",)], [1, 0]),
    "subset_middle": ([("a", "b", "c", "d"), ("c",), ("b", "d"), ("a", "c")], [1, 0, 0, 0]),
    "superset": ([("b",), ("a", "b", "c")], [1, 1]),
    "superset_then_subsets": ([("c",), ("a", "c", "d"), ("d",), ("a", "d"), ("c", "d")], [1, 1, 0, 0, 0]),
    "new_value": ([("a",), ("c",), ("a", "c"), ("c",)], [1, 1, 0, 0]),  # {a} then {c}: one program of both
    "new_values_grow": ([("d",), ("b",), ("a",), ("b", "d"), ("a", "b", "d")], [1, 1, 1, 0, 0]),
}


@pytest.mark.parametrize("flush", ["sync", "read"])
@pytest.mark.parametrize("name", list(SEQUENCES))
def test_each_live_set_gets_its_values(fresh_programs, name, flush):
    alive_sets, compiles = SEQUENCES[name]
    x = X.to("tpu")
    with torch.tpu.set_eager_mode(FUSE):
        for step, (alive, expected) in enumerate(zip(alive_sets, compiles)):
            before = _compiles()
            kept = _flush_keeping(x, alive, flush)
            assert fused.last_flush()[1] == len(alive)
            assert _compiles() - before == expected, f"step {step} (alive {alive}) compiled {_compiles() - before}"
            _check(kept, f"step {step} (alive {alive})")


def test_a_graph_ended_by_leaving_fused_mode_reuses_the_program_of_one_ended_by_sync(fresh_programs):
    """Leaving fused mode flushes what is pending: the same graph, the same program, its values picked the
    same way; and the values then feed strict ops."""
    x = X.to("tpu")
    with torch.tpu.set_eager_mode(FUSE):
        kept = _flush_keeping(x, ("a", "b", "c"), "sync")
        _check(kept, "sync")
    before = _compiles()
    with torch.tpu.set_eager_mode(FUSE):
        values = _values(x)
        b, c = values["b"], values["c"]
        del values
        assert fused.pending_nodes() > 0
    assert fused.pending_nodes() == 0 and fused.last_flush()[1] == 2
    assert _compiles() == before, "leaving the mode compiled the same graph again"
    torch.testing.assert_close((c - b).cpu(), (X - 3) - X * 10)  # strict ops on the picked values
    _check({"b": b, "c": c}, "after leaving fused mode")


@pytest.mark.parametrize("alive", [("values",), ("indices",), ("values", "indices"), ("indices", "sum")])
def test_one_output_of_a_node_with_several(fresh_programs, alive):
    """``max(dim)`` is one node with two outputs (float values, int64 indices): a program returning both
    and the sum serves a flush that keeps any of them, each at its own position."""
    x = X.to("tpu")
    want_v, want_i = X.max(1)
    want = {"values": want_v, "indices": want_i, "sum": want_v.sum()}

    def record():
        v, i = x.max(1)
        return {"values": v, "indices": i, "sum": v.sum()}

    with torch.tpu.set_eager_mode(FUSE):
        values = record()
        torch_tpu.sync()
        del values
        before = _compiles()
        values = record()
        kept = {k: values[k] for k in alive}
        del values
        torch_tpu.sync()
        assert _compiles() == before
        assert fused.last_flush()[1] == len(alive)
    for k, v in kept.items():
        assert v.dtype == want[k].dtype, (k, v.dtype)
        torch.testing.assert_close(v.cpu(), want[k], msg=lambda m: f"{k}: {m}")


def test_output_sets_read_back_from_disk_serve_a_subset(fresh_programs):
    """A process that starts warm reads the last process's output set from disk (here: the in-memory
    caches emptied, the disk cache kept): its first flush of the graph keeping one value reuses the program
    returning both, and the value is picked from the right position."""
    x = X.to("tpu")
    with torch.tpu.set_eager_mode(FUSE):
        _flush_keeping(x, ("a", "d"), "sync")
        from torch_tpu.runtime import disk_cache
        disk_cache.flush_writes()
        torch_tpu.reset_caches()
        torch_tpu.reset_stats()
        kept = _flush_keeping(x, ("d",), "sync")
        stats = torch_tpu.stats()
    assert stats["graph_set_loads"] >= 1, stats
    assert stats["compiles"] == 0 and stats["cache_loads"] >= 1, stats
    _check(kept, "after a warm start")


def test_graphs_differing_only_in_their_values_shapes_keep_programs_of_their_own(fresh_programs):
    """A graph's key holds its nodes' output shapes: an op's key alone does not say whether its result comes in
    torch's layout or as its flat memory (a program found on disk returned (25,) where the graph expected
    (5, 5)). Two graphs of the same op keys and inputs whose values' shapes differ each get their own program;
    sharing one key, each flush found the other's program, dropped it and replayed op by op."""
    import jax.numpy as jnp
    import numpy as np

    base = jnp.arange(25.0, dtype=jnp.float32).reshape(5, 5)

    def flush(flat: bool):
        fn = (lambda a: (a * 2).reshape(-1)) if flat else (lambda a: a * 2)
        shape = (25,) if flat else (5, 5)
        out, = fused.record(("test-layout-node",), fn, (base,), avals=[(shape, jnp.float32)])
        return fused.materialize(out)

    with torch.tpu.set_eager_mode(FUSE):
        torch_tpu.reset_stats()
        for _ in range(2):
            for flat in (False, True):
                got = flush(flat)
                assert got.shape == ((25,) if flat else (5, 5))
                np.testing.assert_array_equal(np.asarray(got).reshape(-1), np.arange(25.0) * 2)
        stats = torch_tpu.stats()
    assert stats["compiles"] == 2 and stats.get("fused_graph_replays", 0) == 0, stats


# ----------------------------------------------------------------------------------------------------------
# outputs_for itself: the rule, case by case


@pytest.fixture
def base():
    """A graph key less its outputs that no real graph has (kept in memory only: the disk cache is off)."""
    torch_tpu.reset_caches()
    yield ("test-graph", object())
    torch_tpu.reset_caches()


def test_outputs_for_the_first_set_is_the_live_set(base):
    assert graph_sets.outputs_for(base, ((0, 0), (2, 0))) == ((0, 0), (2, 0))


def test_outputs_for_a_subset_keeps_the_known_program(base):
    graph_sets.outputs_for(base, ((0, 0), (1, 0), (2, 0)))
    assert graph_sets.outputs_for(base, ((1, 0),)) == ((0, 0), (1, 0), (2, 0))
    assert graph_sets.outputs_for(base, ((0, 0), (2, 0))) == ((0, 0), (1, 0), (2, 0))


def test_outputs_for_a_new_value_takes_the_union_in_graph_order(base):
    graph_sets.outputs_for(base, ((2, 0),))
    assert graph_sets.outputs_for(base, ((0, 1), (1, 0))) == ((0, 1), (1, 0), (2, 0))
    # and the union is kept: a subset of it, or it again, is served by it
    assert graph_sets.outputs_for(base, ((2, 0),)) == ((0, 1), (1, 0), (2, 0))
    assert graph_sets.outputs_for(base, ((0, 1), (2, 0))) == ((0, 1), (1, 0), (2, 0))


def test_outputs_for_keeps_graphs_apart(base):
    other = ("test-graph", object())
    graph_sets.outputs_for(base, ((0, 0), (1, 0)))
    assert graph_sets.outputs_for(other, ((1, 0),)) == ((1, 0),)


def test_fill_picks_each_live_value_by_its_position_in_the_program():
    """``_fill`` on its own: results in the program's order, values in the live order."""
    class Value:
        concrete = node = launch = "pending"

    live = [(0, 0, Value()), (2, 1, Value()), (3, 0, Value())]
    out_sig = ((0, 0), (1, 0), (2, 1), (3, 0))
    fused._fill(live, ["r00", "r10", "r21", "r30"], out_sig, ((0, 0), (2, 1), (3, 0)))
    assert [la.concrete for *_, la in live] == ["r00", "r21", "r30"]
    assert all(la.node is None and la.launch is None for *_, la in live)
