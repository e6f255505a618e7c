"""The backend's result in a form a later process loads without tracing (``warm_start.py`` keeps it on disk).

While a module is captured for a warm start (``warm_start.capturing()``), AOTAutograd runs with its bundled
cache on (torch's ``aot_compile`` sets it): it keeps each aten graph's compiled result with everything its
runtime wrappers need (which inputs are written back, which outputs alias which, ...) in one picklable
entry, provided the graph compiler returns an ``OutputCode``. ``GraphCode`` is that: one compiled graph's
runner, kept as its program's key and the plain values the runner needs (``lowering.GraphProgram``); a later
process loads the program by that key from the disk cache, never tracing the graph. ``TpuCompiled`` is the
backend's result around it, in torch's ``SerializableCallable`` form that ``aot_compile`` saves beside
dynamo's guards and bytecode.

Only what can be rebuilt from plain values is kept: a graph that needs dynamo's own torch-level graph at run
time (an in-place write that may alias another input, a Python float checked at each call) is not
(``NotCapturable``), and the module keeps tracing in every process, as before.
"""
from __future__ import annotations

import pickle

from torch._dynamo.aot_compile_types import SerializableCallable
from torch._inductor.output_code import OutputCode

from .graph_outputs import with_host_outputs
from .warm_start import NotCapturable, StaleEntry


class GraphCode(OutputCode):
    """One compiled aten graph's runner, as AOTAutograd's bundled cache keeps a compiled graph."""

    def __init__(self, run, n_outputs: int, views: list, host: list):
        self._boxed_call = True  # (an instance attribute: AOTAutograd's wrapper copies the instance's)
        program = getattr(run, "program", None)
        if program is None:  # a graph run op by op (user kernels, CPU fallback): no program to keep
            raise NotCapturable("a compiled graph runs op by op")
        self._program, self._n_outputs, self._views, self._host = program, n_outputs, views, host
        self._run = with_host_outputs(run, n_outputs, views, host)

    def __call__(self, inputs):
        return self._run(inputs)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_run"] = None
        return state

    def prepare_for_serialization(self) -> None:
        self._run = None

    def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
        """In a later process: the runner over the program the disk cache holds under its key."""
        if self._run is not None:
            return
        run = self._program.load()
        if run is None:
            raise StaleEntry(f"the program of {self._program.how['what']} is not in the disk cache")
        self._run = with_host_outputs(run, self._n_outputs, self._views, self._host)

    def set_triton_bundle(self, triton_bundle) -> None:
        pass


class TpuCompiled(SerializableCallable):
    """The backend's result for one dynamo graph: ``live`` runs it (in the capturing process, with the
    wrappers the backend adds); ``aot`` is AOTAutograd's function, whose bundled entry is what is kept."""

    def __init__(self, aot, live):
        self.aot, self.live = aot, live

    def __call__(self, *args):
        return self.live(*args)

    @classmethod
    def serialize_compile_artifacts(cls, fn: "TpuCompiled") -> bytes:
        serialize = getattr(fn.aot, "serialize", None)
        entry = serialize() if serialize is not None else None
        if entry is None:
            raise NotCapturable("AOTAutograd kept no entry for this graph")
        return pickle.dumps(entry)

    @classmethod
    def deserialize_compile_artifacts(cls, data: bytes) -> "TpuCompiled":
        from torch._functorch._aot_autograd.aot_autograd_result import deserialize_bundled_cache_entry

        fn = deserialize_bundled_cache_entry(pickle.loads(data))  # (GraphCode.post_compile loads programs)
        return cls(fn, fn)


def backend_result(aot, live, gm, example_inputs) -> TpuCompiled:
    """``live`` (the backend's callable for ``gm``) as a ``TpuCompiled``, or ``NotCapturable`` when a later
    process could not run it without ``gm`` itself."""
    from . import aliasing, scalar_checks

    if aliasing.may_write_in_place(gm):
        raise NotCapturable("the graph may write into an input that shares memory with another")
    if scalar_checks.checks_floats(gm, example_inputs):
        raise NotCapturable("the graph checks Python floats at each call")
    return TpuCompiled(aot, live)
