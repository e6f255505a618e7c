"""Compiled mode: ``torch.compile(module, backend="tpu")``.

Dynamo hands us a torch-level FX graph (parameters and buffers lifted to inputs). AOTAutograd
functionalises it and decomposes it to core aten on fake tensors of the tpu device (static shapes), giving
a forward graph (and a backward graph when gradients are needed). Each aten graph becomes ONE XLA program built
from the same op table as eager (``lowering.py``), compiled ahead of time for the example shapes
through the runtime's program cache (``runtime/program_cache.py``: identical graphs, e.g. repeated transformer
blocks, share a program).
AOTAutograd's runtime wrappers write mutated inputs back (``copy_`` on the tpu tensor) and glue
forward and backward into a ``torch.autograd.Function``.

Registered as the dynamo backend "tpu" through the ``torch_dynamo_backends`` entry point, so
``import torch`` never imports dynamo.

The package's face only: the backend is ``backend.py`` (what a graph dynamo hands over becomes), static shapes
``static_shapes.py``, the in-place calls refused before AOTAutograd ``inplace_checks.py``, AOTAutograd and the
compiler of each aten graph ``aot.py``, the program built from an aten graph ``lowering.py``.
"""
from .backend import tpu_backend
from .static_shapes import StaticShapeError

__all__ = ["tpu_backend", "StaticShapeError"]
