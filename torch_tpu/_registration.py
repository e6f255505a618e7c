"""Wiring: registers PrivateUse1 as the "tpu" device (name, device module, guard, hooks), the factory
kernels, ``__torch_dispatch__``, autocast, serialization, the c10d backend and its collectives, and
``torch.compile``'s default backend for tpu graphs.

Light on purpose: runs at ``import torch`` through the ``torch.backends`` entry point, so it must
not import JAX (that happens on first device use), and it never fails ``import torch`` over a
malformed setting (that error is raised, by name, on first device use).
"""
from __future__ import annotations

import functools
import operator
import sys
import warnings

import torch

from . import config, device_module, distributed
from .integrations import diffusers_embeddings, gguf_weights, group_offloading, safetensors_devices
from .integrations import tokenizers as _tokenizers  # noqa: F401  (diffusers finds pipeline components only in imported modules)
from .compile import default_backend, module_compile
from .eager import (amp, attention, autocast, backward_errors, fused_optim, derived_backward, factories, router,
                    whole_ops)
from .engine import events, modes, module_graphs, streams
from .runtime import dynamo_frames, generators
from .tensor import data_moves, interop, kernels, module_moves, pinned_memory, serialization, untyped

_DONE = False
_LIB = None
_FACTORY_KERNELS: list = []  # the callables registered (each wraps a factories.KERNELS entry)


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    # Not a Python function: torch's C++ side calls it from noexcept code (stream guards, autograd
    # metadata), where a Python frame could be intercepted (torch.compile's frame hook) or raise, and
    # an exception aborts the process. A partial of a C builtin runs no Python frame.
    type_ = functools.partial(operator.itemgetter(0), (torch._C._autograd.DeviceType.PrivateUse1,))


def _typed_storage_to_tpu(self, device=None, non_blocking=False):
    """``legacy_storage.tpu()``: torch's generated method wraps the moved bytes only if they are exactly
    ``UntypedStorage`` (a tpu storage is its subclass), so it failed with an AssertionError."""
    untyped = self._untyped_storage.tpu(device, non_blocking)
    return torch.TypedStorage(wrap_storage=untyped, dtype=self.dtype, _internal=True)


def register() -> None:
    global _DONE
    if _DONE:
        return
    _DONE = True
    if torch._C._get_privateuse1_backend_name() not in ("privateuseone", "tpu"):
        raise RuntimeError(
            f"torch_tpu: PrivateUse1 is already registered as {torch._C._get_privateuse1_backend_name()!r} "
            "(another backend such as torchax was imported first); the two cannot share a process")
    if torch._C._get_privateuse1_backend_name() != "tpu":
        torch.utils.rename_privateuse1_backend("tpu")
        torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)  # t.tpu(), storage.tpu()
        torch.TypedStorage.tpu = _typed_storage_to_tpu
        torch._register_device_module("tpu", device_module)
        torch._C._acc.register_python_privateuseone_hook(_Hooks())
        torch._C._acc.register_python_privateuseone_device_guard(_Guard())
    device_module.install_accelerator_api()
    _register_memory_module()
    _register_factories()
    pinned_memory.install()  # x.pin_memory() for the tpu: a copy is_pinned() knows
    _register_log()
    attention.define()  # scaled_dot_product_attention as one op (tpu::attention)
    diffusers_embeddings.install()  # diffusers' position embeddings as one op each (tpu::rotary_embedding ...)
    router.install()
    backward_errors.install()  # user hooks raising on autograd's tpu thread must not abort
    derived_backward.register()
    whole_ops.register()
    router.add_handlers(amp.HANDLERS)
    router.add_handlers(fused_optim.HANDLERS)
    _register_autocast()
    serialization.install()
    module_moves.install()  # module.to("tpu") keeps tied parameters tied
    module_graphs.set_block_installer(_install_replayers)  # repeated blocks replay their recorded calls
    data_moves.install()  # t.data = other between the CPU and the tpu, as between the CPU and CUDA
    safetensors_devices.install()  # safetensors.torch.load_file(path, device="tpu")
    gguf_weights.install()  # diffusers' GGUFParameter on the tpu
    group_offloading.install()  # a group-offloaded model's blocks replay inside diffusers' hooks
    untyped.install()
    interop.install()
    events.install()  # torch.Event("tpu") records, synchronizes and times (torch's asks C++ hooks)
    streams.install()  # torch.Stream("tpu"): the compute queue, or a queue of uploads (engine/streams.py)
    device_module.install_accelerator_streams()
    router.add_handlers({torch.ops.aten.record_stream.default: streams.record_stream})
    generators.install()  # torch.Generator(device="tpu") (torch asks C++ hooks for it)
    _register_distributed()
    default_backend.install()  # torch.compile(model) on tpu tensors: backend "tpu" (inductor cannot)
    module_compile.install()  # module.compile(backend="tpu"): a later process reads what this one traced
    _keep_callbacks_out_of_dynamo()
    try:
        modes.init_from_settings()
    except config.ConfigError as exc:
        warnings.warn(f"torch_tpu: {exc}; the tpu device will refuse to start until it is fixed")


def _install_replayers(root) -> None:
    from .eager import module_replay  # (the first model moved to the device loads it, not ``import torch``)

    module_replay.install(root)


def _register_memory_module() -> None:
    # ``torch.tpu.memory`` (and ``import torch.tpu.memory``), as ``torch.cuda.memory``; its functions that
    # torch.cuda also has at the top (memory_snapshot, set_per_process_memory_fraction) on torch.tpu too
    from . import device_memory

    sys.modules.setdefault("torch.tpu.memory", device_memory)
    device_module.memory = device_memory
    for name in ("memory_snapshot", "set_per_process_memory_fraction", "get_per_process_memory_fraction"):
        setattr(device_module, name, getattr(device_memory, name))


def _keep_callbacks_out_of_dynamo() -> None:
    # every Python function torch's C++ calls for a tpu op: run as plain Python (with what it calls)
    # when that happens inside a torch.compile'd region (see runtime/dynamo_frames.py)
    dynamo_frames.keep_out_all([
        router.torch_dispatch, *factories.KERNELS.values(), *_FACTORY_KERNELS, *derived_backward.KERNELS,
        _Hooks.is_available, _Hooks.has_primary_context, _Hooks.is_built])


def _register_log() -> None:
    # TORCH_LOGS=torch_tpu turns the compile log on (torch parses TORCH_LOGS right after autoloading
    # device backends, so the name is known by then)
    from torch._logging._internal import register_log

    register_log("torch_tpu", "torch_tpu")


def _register_factories() -> None:
    global _LIB
    _LIB = torch.library.Library("aten", "IMPL")
    from .runtime.platform import with_x64

    for name, fn in factories.KERNELS.items():
        kernel = with_x64(fn)
        _FACTORY_KERNELS.append(kernel)
        _LIB.impl(name, kernel, "PrivateUse1")
    # torch.tensor([t0, t1]) of 0-dim tpu tensors reads each with the Python key excluded, so the read
    # reaches the PrivateUse1 kernel instead of __torch_dispatch__
    scalar = with_x64(_local_scalar_dense)
    _FACTORY_KERNELS.append(scalar)
    _LIB.impl("_local_scalar_dense", scalar, "PrivateUse1")


def _local_scalar_dense(x):
    return kernels.local_scalar_dense(None, (x,), {})


def _register_autocast() -> None:
    _register_autocast.libs = autocast.register()  # CUDA's policy, eager/autocast.py


def _register_distributed() -> None:
    # the c10d backend "tpu_dist" (alias "tpu"); light: the implementation loads on first use.
    distributed.register()
    router.add_handlers(distributed.dispatch_handlers())
    # ``torch.tpu`` is a plain module (no __path__): ``import torch.tpu.distributed`` and
    # ``python -m torch.tpu.distributed`` resolve only through sys.modules.
    sys.modules.setdefault("torch.tpu.distributed", distributed)
    device_module.distributed = distributed
