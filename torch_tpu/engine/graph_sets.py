"""Which outputs a fused graph's program returns and which inputs it donates, kept per graph structure
so that steps which differ only in what happens to be alive or free share one program (``fused.py``)."""
from __future__ import annotations

from ..runtime import caches, program_cache

# graph key less its outputs -> the outputs its program returns (see _outputs_for)
_OUTPUT_SETS: dict = caches.register("fused output sets", caches.Bounded(program_cache.max_programs))
# graph key less its donation and outputs -> the inputs its program donates (see _donation_for)
_DONATIONS: dict = caches.register("fused donation sets", caches.Bounded(program_cache.max_programs))


def outputs_for(base, live_sig: tuple) -> tuple:
    """The outputs the program of graph ``base`` (its key less the outputs) returns: which values are
    still referenced when a graph ends changes between otherwise identical steps (a loss kept in a list
    during warm-up, dropped later), so a program returning a superset of the live values is reused (the
    others are dropped), and a new live value makes one program returning the union of both."""
    known = _OUTPUT_SETS.get(base)
    if known is None or known == live_sig:
        out = live_sig
    elif set(live_sig) <= set(known):
        out = known
    else:
        out = tuple(sorted(set(known) | set(live_sig)))
    _OUTPUT_SETS[base] = out
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
        out = donatable
    elif set(known) <= set(donatable):
        out = known
    else:
        out = tuple(i for i in known if i in donatable)
    _DONATIONS[base] = out
    return out
