"""Which outputs a fused graph's program returns and which inputs it donates, kept per graph structure
so that steps which differ only in what happens to be alive or free share one program (``fused.py``);
and which of its Python numbers it takes as inputs rather than as constants, kept per place in the code.

Both sets are also kept on disk (verified entries, by the graph's structural key), so a warm process starts
from the sets the last process ended with: the first occurrence of a graph in a process may see another
set (in a process compiling in the background, a value is still held by a graph waiting to launch), and
without the last run's sets it would compile a program the cache holds under a neighbouring key."""
from __future__ import annotations

import json
import math

import numpy as np

from ..runtime import caches, counters, disk_cache, prefetch, program_cache, stable_keys

# graph key less its outputs -> the outputs its program returns (see outputs_for)
_OUTPUT_SETS: dict = caches.register("fused output sets", caches.Bounded(program_cache.max_programs))
# graph key less its donation and outputs -> the inputs its program donates (see donation_for)
_DONATIONS: dict = caches.register("fused donation sets", caches.Bounded(program_cache.max_programs))

# where a number enters a graph -> the value seen there, or _Varies(the first value seen there)
_NUMBER_SITES: dict = caches.register("fused number sites", caches.Bounded(program_cache.max_programs))

_OUTPUTS_KIND = "fused-output-set"
_DONATION_KIND = "fused-donation-set"


def outputs_for(base, live_sig: tuple) -> tuple:
    """The outputs the program of graph ``base`` (its key less the outputs) returns: which values are
    still referenced when a graph ends changes between otherwise identical steps (a loss kept in a list
    during warm-up, dropped later), so a program returning a superset of the live values is reused (the
    others are dropped), and a new live value makes one program returning the union of both."""
    known = _OUTPUT_SETS.get(base)
    if known is None:
        known = _load(_OUTPUTS_KIND, base)
    if known is None or known == live_sig:
        out = live_sig
    elif set(live_sig) <= set(known):
        out = known
    else:
        out = tuple(sorted(set(known) | set(live_sig)))
    _remember(_OUTPUT_SETS, _OUTPUTS_KIND, base, out)
    return out


def donation_for(base, donatable: tuple) -> tuple:
    """The inputs the program of graph ``base`` (its key less donation and outputs) donates: which
    buffers are free to reuse changes between otherwise identical steps (the first denoising step's
    latents are still referenced when its scheduler update runs, the next steps' are not), and a program
    per donation set would compile the same graph again. A program donating a subset of what may be
    donated now is reused (the others are simply not donated); else the graph donates what both allow,
    so the set only shrinks and a graph compiles at most a few times."""
    known = _DONATIONS.get(base)
    if known is None:
        known = _load(_DONATION_KIND, base)
    if known is None:
        out = donatable
    elif set(known) <= set(donatable):
        out = known
    else:
        out = tuple(i for i in known if i in donatable)
    _remember(_DONATIONS, _DONATION_KIND, base, out)
    return out


def dynamic_numbers(sites: dict, numbers: dict) -> tuple[set, set]:
    """Which of a graph's Python numbers (``{input position: number}``) its program takes as inputs; the
    others are constants of the program. ``sites``: for each, where it enters the graph (the op, its place
    in the code, ``call_sites.number_site``, the argument): a number's history is kept per place, so the
    table grows with the code, not with shapes.

    A model's numbers (``x * 0.5``, ``1 + scale``, ``eps``, ``alpha=``) are the same at every step: as
    constants XLA folds them, where as inputs each was a parameter of its own (a fused chain of 1000
    ``v + 1`` compiled 7x slower than with constants, and each run copied 1000 scalars to the device). A
    number whose value changes at its place in the code (a loop's counter, a scheduled learning rate, a
    timestep) is an input from the time a second value is seen there, in this graph or an earlier one,
    and stays one: so a denoising loop whose glue takes ``1 - i / steps`` compiles that glue once with
    it as an input, not once per value. Ints past int64 are always inputs (they fail as on CPU).

    Returns ``(inputs, firsts)``: ``firsts`` are numbers that are the first value seen at a place that varies
    since. Such a number stays a constant where the graph holding it was compiled with it as one
    (``known_with_constants``: the next identical pipeline call's first step reuses its first program), and
    is an input elsewhere (a periodic schedule's first value, met again in other graphs, makes no second
    program for each). A place whose number changes inside this graph (a loop's steps fused into one graph)
    is an input at each of its uses, its first value's too."""
    history = _NUMBER_SITES
    dynamic, firsts = set(), set()
    in_graph: dict = {}  # site -> the value this graph holds there, or _VARIES_HERE
    for i, site in sites.items():
        number = numbers[i]
        value = value_key(number)
        here = in_graph.get(site, value)
        in_graph[site] = value if here == value else _VARIES_HERE
        seen = history.get(site)
        if seen is None:
            history[site] = value
        elif type(seen) is _Varies:
            (firsts if value == seen.first else dynamic).add(i)
        elif seen != value:
            history[site] = _Varies(seen)
            dynamic.add(i)
        if type(number) is int and not -2 ** 63 <= number < 2 ** 63:
            dynamic.add(i)
    if _VARIES_HERE in in_graph.values():
        dynamic.update(i for i, site in sites.items() if in_graph[site] is _VARIES_HERE)
    firsts -= dynamic
    return dynamic, firsts


_VARIES_HERE = object()

# (graph structure, input signature with its constants) of the graphs flushed with numbers as constants
_WITH_CONSTANTS: dict = caches.register("fused graphs with constants",
                                        caches.Bounded(program_cache.max_programs))


def known_with_constants(structure, in_sig) -> bool:
    """Whether a graph of this structure was flushed before with these constants (its program exists)."""
    return (structure, in_sig) in _WITH_CONSTANTS


def flushed_with_constants(structure, in_sig) -> None:
    _WITH_CONSTANTS[(structure, in_sig)] = True


class _Varies:
    """A place in the code where a number took a second value: ``first`` is the value seen first."""

    __slots__ = ("first",)

    def __init__(self, first):
        self.first = first


def number_key(value) -> tuple:
    """A constant number's part of a program key: its type and exact value (``1`` and ``1.0``, ``0.0`` and
    ``-0.0`` differ; NaN equals NaN)."""
    return ("const", value_key(value))


_NAN = ("f", float("nan"))  # one NaN object: equal to itself as a tuple item (tuples compare items by identity first)
_ZERO, _NEG_ZERO = ("f", 0.0), ("f-0",)
_COMPLEX64 = np.complex64


def value_key(v) -> tuple:
    """A Python number as a key: its type and exact value (``1``, ``1.0`` and ``True``, ``0.0`` and ``-0.0``
    differ; every NaN is one key)."""
    t = type(v)
    if t is float:
        if v != v:
            return _NAN
        if v == 0.0:
            return _NEG_ZERO if math.copysign(1.0, v) < 0 else _ZERO
        return ("f", v)
    if t is complex:
        return ("c", v.real.hex(), v.imag.hex())
    if t is _COMPLEX64:  # (a complex Scalar passed as complex64: eager/arguments.py)
        return ("c64", float(v.real).hex(), float(v.imag).hex())
    return ("b" if t is bool else "i", v)


def _disk_key(kind: str, base) -> str | None:
    if not disk_cache.enabled():
        return None
    text = stable_keys.text(base)
    if text is None:
        return None
    return kind + "\n" + text + "\n" + stable_keys.environment(True)


def _remember(memory: dict, kind: str, base, value: tuple) -> None:
    """Keep ``value`` in memory and, when it changed, on disk (written off the critical path)."""
    if memory.get(base) == value:
        return
    memory[base] = value
    key = _disk_key(kind, base)
    if key is not None:
        disk_cache.store(key, json.dumps(_plain(value)).encode())


def _load(kind: str, base) -> tuple | None:
    """The set the last process kept for ``base``, or None."""
    key = _disk_key(kind, base)
    if key is None:
        return None
    payload = prefetch.read(key)
    if payload is None:
        return None
    try:
        value = _tuple(json.loads(payload))
    except (ValueError, TypeError):  # verified bytes we cannot read: the set is learnt again
        disk_cache.forget(key)
        return None
    memory = _OUTPUT_SETS if kind == _OUTPUTS_KIND else _DONATIONS
    memory[base] = value
    counters.add("graph_set_loads", 1)
    return value


def _plain(value: tuple) -> list:
    return [list(v) if type(v) is tuple else v for v in value]


def _tuple(value) -> tuple:
    """A set read back: ints (donated inputs) or pairs of ints (outputs: node, output)."""
    if type(value) is not list:
        raise TypeError("not a set")
    out = []
    for v in value:
        if type(v) is int:
            out.append(v)
        elif type(v) is list and len(v) == 2 and all(type(n) is int for n in v):
            out.append(tuple(v))
        else:
            raise TypeError("not a set")
    return tuple(out)


prefetch.set_loader(_OUTPUTS_KIND, disk_cache.load, small=True)
prefetch.set_loader(_DONATION_KIND, disk_cache.load, small=True)
