"""Values computed from a device-side check: pending until the check is read, poisoned when it failed.

A checked op (an index in range, an integer divisor not zero) returns its values at once and its check's
result later (``deferred_errors``). CPU torch raises at such an op, so neither its result nor anything
computed from it ever exists there. Here they exist, computed from clamped indices, until the check is
read at the next wait, which raises ``DeviceAssertError`` once. From then on every such value is
poisoned: reading it (``.cpu()``, ``.item()``, ``to_jax``) raises, and so does an op taking it (an
in-place update of it, arithmetic on it, a view read), naming the op whose check failed. Values not
computed from it stay readable. Checks the device has finished are read early, without a wait, while
lineage is kept (``deferred_errors.read_ready``): when all held, lineage stops there.

Lineage is kept per device array (a ``jax.Array`` or a fused ``LazyArray``): while some check is pending,
each launch gives its outputs the union of its inputs' pending checks (a bit set, bit ``k`` = the check
numbered ``base + k``), and a checked op adds its own. Checks are numbered in the order they were added
and read in that order (all at a wait, the oldest first when a long loop compacts them), so reading them
moves ``base`` on: a set made before that is shifted on its next use. A read where every check held
forgets every set at once; one where some failed turns the sets holding a failed check into poisoned
values. Nothing is kept while no check is pending and nothing is poisoned (``active`` is False).
"""
from __future__ import annotations

import threading
import weakref

from ..errors import DeviceAssertError, device_assert
from .fused import LazyArray

active = False  # any pending lineage or poisoned value: launches look at their inputs only then

_LOCK = threading.RLock()
_BASE = [0]            # number of the check that bit 0 of a lineage set stands for
_LINEAGE: dict = {}    # id(array) -> (weak ref, base, bits): the pending checks an array was computed from
_POISONED: dict = {}   # id(array) -> (weak ref, Failure)
_SWEEP_AT = [4096]     # dead entries are dropped when the lineage table grows past this
_NUMBERS = (int, float, bool, complex)


class Failure:
    """A check that failed: what it was and what its error said."""

    __slots__ = ("what", "message")

    def __init__(self, what: str, message: str):
        self.what, self.message = what, message

    def error(self, where: str) -> DeviceAssertError:
        return device_assert(
            f"tpu: {where} was computed from the result of {self.what}, whose device-side check failed "
            f"({self.message}); that failure was reported at an earlier wait. CPU torch raises at that op, so "
            "neither its result nor anything computed from it exists there: every read of them, and every op "
            "taking them, raises")


def _set_active() -> None:
    global active
    active = bool(_LINEAGE or _POISONED)


def _at(entry, base: int) -> int:
    """An entry's bits relative to ``base`` (checks read since it was made held: shifted out)."""
    made, bits = entry[1], entry[2]
    return bits >> (base - made) if made <= base else bits << (made - base)


def _current(entry) -> int:
    return _at(entry, _BASE[0])


# While lineage is kept, every ``_POLL_EVERY``-th launch asks ``deferred_errors.read_ready`` (set there) to
# read the pending checks if the device has computed them all: a prompt's embedding lookups checked in
# the text encoders otherwise kept every op of a whole denoising loop tracking lineage until its end
_POLL = [None, 0]  # the reader, launches since it last ran
_POLL_EVERY = 32


def read_early_with(reader) -> None:
    """``reader()``: reads the pending checks if the device has computed them all (deferred_errors)."""
    _POLL[0] = reader


def lineage(arrays, where) -> tuple:
    """(base, bits) of the pending checks ``arrays`` were computed from; raises ``DeviceAssertError`` for
    an array computed from a failed one (``where``: what takes them, an op or a program's name)."""
    if _POLL[0] is not None:
        _POLL[1] += 1
        if _POLL[1] >= _POLL_EVERY:
            _POLL[1] = 0
            _POLL[0]()
    return _lineage(arrays, where)


def _lineage(arrays, where) -> tuple:
    base, bits = _BASE[0], 0
    if _POISONED:
        for a in arrays:
            p = _POISONED.get(id(a))
            if p is not None and p[0]() is a:
                raise p[1].error(f"an input of {where}")
    for a in arrays:
        e = _LINEAGE.get(id(a))
        if e is not None and e[0]() is a:
            bits |= _at(e, base)
    return base, bits


def mark(outputs, taken: tuple, inputs) -> None:
    """Give ``outputs`` the lineage ``taken`` (from ``lineage``) of the ``inputs`` they were computed from."""
    base, bits = taken
    if not bits:
        return
    with _LOCK:
        if base != _BASE[0]:  # checks were read meanwhile (another thread waited): ask the inputs again
            for a in inputs:
                p = _POISONED.get(id(a))
                if p is not None and p[0]() is a:
                    for o in outputs:
                        _poison(o, p[1])
                    _set_active()
                    return
            bits = _lineage(inputs, "")[1]  # (no early read here: it would move the base under these bits)
            if not bits:
                return
        _mark(outputs, bits)


def _mark(outputs, bits: int) -> None:
    global active
    base = _BASE[0]
    for o in outputs:
        if o is None or type(o) in _NUMBERS:
            continue
        key = id(o)
        e = _LINEAGE.get(key)
        if e is not None and e[0]() is o:  # (an op's check adds to what its inputs gave it)
            _LINEAGE[key] = (e[0], base, bits | _current(e))
            continue
        try:
            _LINEAGE[key] = (weakref.ref(o), base, bits)
        except TypeError:  # not weakly referenceable: no lineage (never seen in practice)
            continue
    if len(_LINEAGE) > _SWEEP_AT[0]:
        _sweep()
    active = True


def mark_check(outputs, number: int) -> None:
    """``outputs`` come from the op whose check is numbered ``number``: called under ``deferred_errors``'
    lock as the check is added, so no read of the checks has passed it yet."""
    with _LOCK:
        _mark(outputs, 1 << (number - _BASE[0]))


def carry(old, new) -> None:
    """``new`` is ``old``'s concrete array (a fused value taken over by strict eager): same lineage."""
    key = id(old)
    with _LOCK:
        p = _POISONED.get(key)
        if p is not None and p[0]() is old:
            _poison(new, p[1])
        e = _LINEAGE.get(key)
        if e is not None and e[0]() is old:
            _mark((new,), _current(e))


def forget(a) -> None:
    """``a`` (a check's code, read once by ``deferred_errors``) needs no lineage."""
    _LINEAGE.pop(id(a), None)  # (one dict operation: atomic, no lock needed)


def readable(a, where: str = "this tensor's value") -> bool:
    """Raise ``DeviceAssertError`` if ``a`` was computed from a failed check; True when it may have been
    computed from one not read yet (the caller waits for the checks, then asks again), else False."""
    for x in (a, a.concrete if type(a) is LazyArray else None):
        if x is None:
            continue
        p = _POISONED.get(id(x))
        if p is not None and p[0]() is x:
            raise p[1].error(where)
        e = _LINEAGE.get(id(x))
        if e is not None and e[0]() is x and _current(e):
            return True
    return False


def resolve(upto: int, failures: dict, everything: bool) -> None:
    """Checks numbered below ``upto`` were read: ``failures`` maps the failed ones to their ``Failure``.
    ``everything``: no check is pending any more."""
    with _LOCK:
        old = _BASE[0]
        if upto <= old:
            return
        if failures:
            for key, entry in list(_LINEAGE.items()):
                a = entry[0]()
                if a is None:
                    del _LINEAGE[key]
                    continue
                failure = _failed_among(failures, entry[1], entry[2])
                if failure is not None:
                    del _LINEAGE[key]
                    _poison(a, failure)
        _BASE[0] = upto
        if everything:
            _LINEAGE.clear()
        _set_active()


def _failed_among(failures: dict, base: int, bits: int):
    """The first of ``failures`` (check number -> Failure) in the set ``bits`` made at ``base``, or None."""
    for number in sorted(failures):
        if number >= base and (bits >> (number - base)) & 1:
            return failures[number]
    return None


def _poison(a, failure: Failure) -> None:
    if a is None or type(a) in _NUMBERS:
        return
    key = id(a)
    try:
        _POISONED[key] = (weakref.ref(a, lambda _, key=key: _forget(key)), failure)
    except TypeError:
        pass


def _forget(key) -> None:
    entry = _POISONED.get(key)
    if entry is not None and entry[0]() is None:
        del _POISONED[key]
        _set_active()


def _sweep() -> None:
    """Drop the entries of arrays that died and of sets whose checks all held."""
    for key, entry in list(_LINEAGE.items()):
        if entry[0]() is None or not _current(entry):
            del _LINEAGE[key]
    _SWEEP_AT[0] = max(4096, 2 * len(_LINEAGE))
