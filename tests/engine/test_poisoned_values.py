"""A value whose device-side check failed stays an error: it, and everything computed from it, raises at every
read after the first wait reported the failure; values not computed from it stay readable.

CPU torch raises at the op (``y[[1, 12, 3]]`` with 10 elements), so there neither the result nor anything
computed from it exists. The tpu runs the op asynchronously with a clamped index and reports the check at the
next wait (``DeviceAssertError``, like CUDA's device-side assert); before this, reading the result again gave
the clamped values and ``(bad + 1).sum()`` computed silently.
"""
import io

import pytest
import torch

import torch_tpu
from torch_tpu.engine import deferred_errors, poisoned
from torch_tpu.errors import DeviceAssertError

BAD_INDEX = [1, 12, 3]
MODES = {"strict": torch_tpu.EagerMode.DEFER_NEVER, "fused": torch_tpu.EagerMode.DEFER_AND_FUSE}

# What a user does with the failed value after the first wait: each reads it, or something computed from it.
# CPU never has the value (its op raised), so each raises there too.
READS = {
    "re-read": lambda e: e["bad"].cpu(),
    ".item()": lambda e: e["bad"][0].item(),
    ".tolist()": lambda e: e["bad"].tolist(),
    "arithmetic": lambda e: (e["bad"] + 1).sum().item(),
    "with a clean value": lambda e: (e["bad"] * e["y"][:3]).cpu(),
    "computed before the wait": lambda e: e["before"].cpu(),
    "view made before the wait": lambda e: e["view"].cpu(),
    "view": lambda e: e["bad"][1:].cpu(),
    "reshaped": lambda e: e["bad"].view(3, 1).cpu(),
    "in-place add_": lambda e: e["bad"].add_(1).cpu(),
    "in-place into a view": lambda e: e["bad"][:2].mul_(2).cpu(),
    "setitem": lambda e: e["bad"].__setitem__(0, 5.0),
    "overwritten whole": lambda e: e["bad"].__setitem__(slice(None), 5.0),
    "copy_ into it": lambda e: e["bad"].copy_(torch.ones(3)),
    "fill_": lambda e: e["bad"].fill_(1.0),
    "copy into a CPU tensor": lambda e: torch.empty(3).copy_(e["bad"]),
    "torch.equal": lambda e: torch.equal(e["bad"], e["bad"]),
    "nonzero (data-dependent)": lambda e: e["bad"].nonzero().cpu(),
    "to_jax": lambda e: torch_tpu.to_jax(e["bad"]),
    "torch.save": lambda e: torch.save(e["bad"], io.BytesIO()),
}
# Values not computed from it: CPU has them, the tpu gives the same.
CLEAN = {
    "its input": lambda e: e["y"].cpu(),
    "computed before the wait": lambda e: e["other"].cpu(),
    "computed after": lambda e: (e["y"] * 3).sum().item(),
}


def _cpu_reference():
    y = torch.arange(10.0) * 2
    with pytest.raises(IndexError, match="out of bounds"):
        y[torch.tensor(BAD_INDEX)]  # CPU raises at the op: no `bad`, nothing computed from it
    e = {"y": y, "other": y + 1}
    return {name: read(e) for name, read in CLEAN.items()}


def _make_bad(mode: str):
    y = torch.arange(10.0, device="tpu") * 2
    idx = torch.tensor(BAD_INDEX, device="tpu")
    if mode == "compiled":
        bad = torch.compile(lambda y, i: y[i] * 1, backend="tpu", dynamic=False)(y, idx)
    else:
        bad = y[idx]
    return {"y": y, "bad": bad, "before": (bad + 1) * 2, "view": bad[1:], "other": y + 1}


def _assert_poisoned(read, e, label):
    for attempt in range(2):  # every read, not only the first
        with pytest.raises(DeviceAssertError, match=r"aten\.index\.Tensor"):
            read(e)
            pytest.fail(f"{label}: read #{attempt + 1} of a value computed from a failed check returned")


@pytest.mark.parametrize("mode", ["strict", "fused", "compiled"])
def test_a_failed_check_poisons_its_value_and_what_is_computed_from_it(mode):
    expected = _cpu_reference()
    torch._dynamo.reset()
    with torch.tpu.set_eager_mode(MODES.get(mode, MODES["strict"])):
        e = _make_bad(mode)
        with pytest.raises(DeviceAssertError, match=r"aten\.index\.Tensor.*index out of bounds"):
            e["other"].cpu()  # the first wait reports the failure, whatever it reads (as CUDA)
        for name, read in READS.items():
            _assert_poisoned(read, e, name)
        for name, read in CLEAN.items():
            got = read(e)
            torch.testing.assert_close(got, expected[name], msg=lambda m: f"{name}: {m}")
        torch.tpu.synchronize()  # reported once: a later wait does not raise it again
        for name in ("re-read", "arithmetic", "computed before the wait"):
            _assert_poisoned(READS[name], e, name)


def test_launch_blocking_raises_at_the_op_and_the_input_stays_readable():
    with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING):
        y = torch.arange(10.0, device="tpu") * 2
        with pytest.raises(DeviceAssertError, match=r"aten\.index\.Tensor"):
            y[torch.tensor(BAD_INDEX, device="tpu")]
        torch.testing.assert_close(y.cpu(), torch.arange(10.0) * 2)
        torch.testing.assert_close((y + 1).sum().item(), 100.0)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_failed_in_place_write_keeps_cpus_partial_write_readable(mode):
    """An in-place write whose index fails leaves the in-range entries written (as CPU's kernel does before
    it reaches the bad one, last here): the target is not a value the failed op made, so it stays readable."""
    x_cpu = torch.zeros(10)
    with pytest.raises(IndexError):
        x_cpu.index_put_((torch.tensor([1, 3, 12]),), torch.tensor(5.0))
    with torch.tpu.set_eager_mode(MODES[mode]):
        x = torch.zeros(10, device="tpu")
        x.index_put_((torch.tensor([1, 3, 12], device="tpu"),), torch.tensor(5.0, device="tpu"))
        with pytest.raises(DeviceAssertError, match="index_put"):
            torch.tpu.synchronize()
        torch.testing.assert_close(x.cpu(), x_cpu)
        torch.testing.assert_close((x * 2).cpu(), x_cpu * 2)


def test_a_compiled_function_given_a_poisoned_value_raises_at_the_call():
    torch._dynamo.reset()
    e = _make_bad("strict")
    double = torch.compile(lambda t: t * 2, backend="tpu", dynamic=False)
    with pytest.raises(DeviceAssertError, match=r"aten\.index\.Tensor"):
        torch.tpu.synchronize()
    for _ in range(2):
        with pytest.raises(DeviceAssertError, match=r"an input of .*aten\.index\.Tensor"):
            double(e["bad"])
    torch.testing.assert_close(double(e["y"]).cpu(), torch.arange(10.0) * 4)


def test_gradients_computed_from_a_failed_lookup_are_poisoned():
    """CPU raises in the forward; the tpu's backward ran on the clamped rows: the gradient raises too."""
    w = torch.randn(10, 3, device="tpu", requires_grad=True)
    out = torch.nn.functional.embedding(torch.tensor([1, 12], device="tpu"), w)
    out.sum().backward()
    with pytest.raises(DeviceAssertError, match="embedding"):
        torch.tpu.synchronize()
    with pytest.raises(DeviceAssertError, match="embedding"):
        w.grad.cpu()
    w.detach().cpu()  # the weight itself was not computed from the lookup


def test_a_fused_value_read_in_strict_mode_stays_poisoned():
    with pytest.raises(DeviceAssertError, match=r"aten\.index\.Tensor"):
        with torch.tpu.set_eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
            e = _make_bad("fused")
    # (leaving fused mode waited) strict eager takes the fused values over, their lineage with them
    _assert_poisoned(READS["arithmetic"], e, "arithmetic in strict mode")
    _assert_poisoned(READS["view made before the wait"], e, "a view in strict mode")
    torch.testing.assert_close(e["other"].cpu(), torch.arange(10.0) * 2 + 1)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_many_checks_folded_and_compacted_still_poison_exactly_what_came_from_the_failure(mode, monkeypatch):
    """Hundreds of checked ops between waits are stacked into a few arrays, and a loop that never waits
    reads them (compacts) every ``_COMPACT_AT``: the one that failed still poisons its own value and what
    was computed from it, and no other."""
    monkeypatch.setattr(deferred_errors, "_COMPACT_AT", 300)
    x_cpu = torch.arange(20.0).reshape(4, 5)
    with torch.tpu.set_eager_mode(MODES[mode]):
        x = x_cpu.to("tpu")
        acc = torch.zeros(4, 1, device="tpu")
        for k in range(400):
            acc = acc + x.index_select(1, torch.tensor([k % 5], device="tpu"))
            if k == 100:
                bad = x.index_select(1, torch.tensor([7], device="tpu"))
                derived = bad * 2
        after = bad + acc  # computed after the compaction that found the failure
        with pytest.raises(DeviceAssertError, match="index_select"):
            acc.cpu()
        expected = sum(x_cpu.index_select(1, torch.tensor([k % 5])) for k in range(400))
        torch.testing.assert_close(acc.cpu(), expected)
        for value in (bad, derived, after):
            for _ in range(2):
                with pytest.raises(DeviceAssertError, match="index_select"):
                    value.cpu()
        assert deferred_errors.pending() == 0


def test_nothing_is_tracked_once_every_check_held():
    """The lineage of pending checks costs a look-up per launch only while a check is pending: a wait
    where all held forgets it."""
    torch.tpu.synchronize()
    x = torch.arange(10.0, device="tpu")
    y = x[torch.tensor([1, 2], device="tpu")] + 1
    assert poisoned._LINEAGE
    torch.testing.assert_close(y.cpu(), torch.tensor([2.0, 3.0]))
    assert not poisoned._LINEAGE


def test_a_check_the_device_finished_is_read_without_a_wait():
    """A checked op before a long run of ops (a prompt's embedding lookup before a denoising loop): once the
    device has computed its check, a launch reads it (no wait) and lineage stops being kept after it held;
    every value is CPU torch's."""
    torch.tpu.synchronize()
    x_cpu = torch.arange(10.0)
    x = x_cpu.to("tpu")
    reads = torch_tpu.stats()["device_check_reads"]
    y = x[torch.tensor([1, 2], device="tpu")] + 1
    # the device may have computed the check already and the ``+ 1`` launch read it (a loaded CI machine):
    # while it is pending, lineage is kept
    assert deferred_errors.pending() in (0, 1)
    if deferred_errors.pending():
        assert poisoned._LINEAGE
    z, z_cpu, launches = y, x_cpu[torch.tensor([1, 2])] + 1, 0
    # (``poisoned.active`` also stays on while values poisoned by earlier tests are alive: lineage is what stops)
    while deferred_errors.pending() and launches < 5000:
        z, z_cpu, launches = z * 1.001, z_cpu * 1.001, launches + 1
    assert deferred_errors.pending() == 0 and not poisoned._LINEAGE, launches
    z = z * 1.001
    z_cpu = z_cpu * 1.001
    assert not poisoned._LINEAGE  # nothing tracked after it
    assert torch_tpu.stats()["device_check_reads"] == reads + 1
    torch.testing.assert_close(z.cpu(), z_cpu)
    torch.testing.assert_close(y.cpu(), torch.tensor([2.0, 3.0]))


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_failed_check_read_early_still_raises_at_the_wait_only(mode):
    """The early read finds a failed check: nothing raises before the next wait, which reports it; the value
    and what was computed from it, before and after the early read, are poisoned; others stay readable."""
    torch.tpu.synchronize()
    with torch.tpu.set_eager_mode(MODES[mode]):
        x = (torch.arange(10.0) * 2).to("tpu")
        bad = x[torch.tensor(BAD_INDEX, device="tpu")]
        before = bad + 1
        clean = x + 0
        for _ in range(200):  # past several early reads
            clean = clean * 1.0
        after = before * 2
        with pytest.raises(DeviceAssertError, match="index"):
            clean.cpu()
        torch.testing.assert_close(clean.cpu(), torch.arange(10.0) * 2)
        for value in (bad, before, after):
            with pytest.raises(DeviceAssertError):
                value.cpu()
    assert deferred_errors.pending() == 0


# ---------------------------------------------------------------------------------------------------------
# lineage across reads of the checks (found by the mutation check: tests/mutation/run.py)


@pytest.mark.parametrize("read", [".cpu()", "to_jax"])
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_the_first_read_of_a_value_whose_check_is_pending_raises(mode, read, monkeypatch):
    """Reading a value whose own check has not been read yet reads that check first: the read raises, it never
    returns or hands out the clamped values (CPU raised at the op). ``to_jax`` is no wait of its own: only the
    value's lineage sends it to the checks."""
    monkeypatch.setattr(poisoned, "_POLL", [None, 0])  # no early read of the check: it stays pending
    torch.tpu.synchronize()
    with torch.tpu.set_eager_mode(MODES[mode]):
        y = (torch.arange(10.0) * 2).to("tpu")
        bad = y[torch.tensor(BAD_INDEX, device="tpu")]
        with pytest.raises(DeviceAssertError, match=r"aten\.index\.Tensor"):
            bad.cpu() if read == ".cpu()" else torch_tpu.to_jax(bad)
    assert deferred_errors.pending() == 0


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_checked_op_on_a_pending_value_keeps_that_values_checks(mode, monkeypatch):
    """A checked op (an index_select) whose input came from a failed check: its own check holds, but its value
    was computed from the failed one, so it is poisoned too; its own check must add to its input's, not
    replace them."""
    monkeypatch.setattr(poisoned, "_POLL", [None, 0])  # no early read of the checks: they stay pending
    torch.tpu.synchronize()
    with torch.tpu.set_eager_mode(MODES[mode]):
        y = (torch.arange(10.0) * 2).to("tpu")
        bad = y[torch.tensor(BAD_INDEX, device="tpu")]
        picked = bad.index_select(0, torch.tensor([0, 2], device="tpu"))  # a check of its own, which holds
        clean = y.index_select(0, torch.tensor([0, 2], device="tpu"))
        with pytest.raises(DeviceAssertError, match=r"aten\.index\.Tensor"):
            torch.tpu.synchronize()
        for value in (bad, picked):
            with pytest.raises(DeviceAssertError, match=r"aten\.index\.Tensor"):
                value.cpu()
        torch.testing.assert_close(clean.cpu(), torch.tensor([0.0, 4.0]))


def test_a_value_from_checks_a_compaction_read_stays_clean(monkeypatch):
    """A value computed from checks that held, used after a long loop's compaction read them (its lineage set
    made before the read, shifted to the checks still pending), stays clean when a later check fails: CPU has
    it. A set shifted the wrong way pointed at that later check and poisoned a value CPU computes."""
    monkeypatch.setattr(deferred_errors, "_COMPACT_AT", 300)  # read every 512 checks (two folds of 256)
    monkeypatch.setattr(poisoned, "_POLL", [None, 0])  # no early read: the compactions alone move the checks on
    torch.tpu.synchronize()
    x_cpu = torch.arange(20.0).reshape(4, 5)
    x = x_cpu.to("tpu")
    first = deferred_errors._COUNTS["next"]
    good = torch.tensor([1], device="tpu")

    def checks_until(number):
        while deferred_errors._COUNTS["next"] < number:
            x.index_select(1, good)

    v = x.index_select(1, torch.tensor([0], device="tpu"))  # check `first`: holds
    checks_until(first + 512)  # a compaction read checks first .. first + 511
    w = v + 1  # made after that read, from a value whose set was made before it
    checks_until(first + 1024)  # a second compaction
    bad = x.index_select(1, torch.tensor([7], device="tpu"))  # check first + 1024: fails
    with pytest.raises(DeviceAssertError, match="index_select"):
        torch.tpu.synchronize()
    torch.testing.assert_close(w.cpu(), x_cpu[:, :1] + 1)
    torch.testing.assert_close(v.cpu(), x_cpu[:, :1])
    with pytest.raises(DeviceAssertError, match="index_select"):
        bad.cpu()
