"""Error types and the words they use: every error names the aten op and its inputs' devices, shapes
and dtypes, never a JAX stack alone. Warnings name the user's line (``warn_at_user``)."""
from __future__ import annotations

import functools
import os
import sys
import warnings

import torch


class OpError(RuntimeError):
    """An aten op failed to lower, compile or run on the tpu device."""


class DeviceAssertError(IndexError, RuntimeError):
    """A check computed on the device failed (an index out of range, a loss target out of bounds ...).
    Raised at the next point that waits for the device, like CUDA's device-side assert; an IndexError and
    a RuntimeError, as the CPU kernels' own errors are one or the other."""


class DeviceLinAlgError(DeviceAssertError, torch.linalg.LinAlgError):
    """A linear algebra check computed on the device failed (a singular matrix, one not positive-definite):
    also ``torch.linalg.LinAlgError``, the class CPU torch raises, so code that catches it catches this."""


# a check's message ending so names the class CPU raises (ops/linalg.py): the error is of that class too
LINALG_MARK = "(torch._C._LinAlgError on the CPU)"


def device_assert(message: str) -> DeviceAssertError:
    """The error of a failed device-side check whose message is ``message`` (its op's check message inside):
    ``DeviceLinAlgError`` for a linear algebra check (its message holds ``LINALG_MARK``)."""
    return (DeviceLinAlgError if LINALG_MARK in message else DeviceAssertError)(message)


def leaves(x):
    """The non-list leaves of nested lists/tuples, in order."""
    if type(x) in (list, tuple):
        for e in x:
            yield from leaves(e)
    else:
        yield x


def describe(args, kwargs=None) -> str:
    """``tpu[7, 3]:float32, cpu[]:int64`` for the tensors among an op's arguments."""
    parts = []
    for x in leaves(list(args) + list((kwargs or {}).values())):
        if isinstance(x, torch.Tensor):
            parts.append(f"{x.device.type}{list(x.shape)}:{str(x.dtype).replace('torch.', '')}")
    return ", ".join(parts) or "no tensors"


def device_mismatch(func, other: torch.Tensor) -> RuntimeError:
    return RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, tpu:0 and "
        f"{other.device}! (when checking arguments for {func})")


def no_lowering(func, args, kwargs) -> NotImplementedError:
    sparse = ("sparse tensors have no tpu layout (nn.Embedding/EmbeddingBag(sparse=True) gradients, "
              "torch.sparse): use sparse=False (dense gradients) or keep sparse work on the CPU. "
              if "sparse" in str(func) else "")
    return NotImplementedError(
        f"torch_tpu: the aten op {func} has no tpu lowering (inputs: {describe(args, kwargs)}). {sparse}"
        "Set TORCH_TPU_CPU_FALLBACK=1 to run such ops on the CPU (slow, counted in "
        "torch_tpu.stats()['cpu_fallbacks']), or report the op.")


class OutOfMemoryError(torch.OutOfMemoryError):
    """``torch.tpu.OutOfMemoryError``: the device ran out of memory (a ``torch.OutOfMemoryError``, as
    ``torch.cuda.OutOfMemoryError`` is). The message says what was asked, what the device holds and which way
    of running a model larger than the device would fit; the process goes on (the values held stay)."""


# () -> (bytes tensors on the device hold, the device's bytes or None, whether the first counts storages made
# but maybe not yet allocated): set by runtime/memory.py
_memory_report = None


def set_memory_report(report) -> None:
    global _memory_report
    _memory_report = report


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.1f} MiB"


def _asked_bytes(text: str):
    """The allocation a PJRT out-of-memory message names ("allocating 4398046511104 bytes",
    "Attempting to allocate 24.00G", "2.5GiB")."""
    import re

    m = re.search(r"allocat\w* (\d+) bytes", text)
    if m:
        return int(m.group(1))
    m = re.search(r"allocate ([\d.]+) ?([KMGT])i?B?\b", text)
    if m:
        return int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2)))
    return None


FIT_ADVICE = (
    "A model larger than the device fits with pipe.enable_model_cpu_offload() (one model on the device at a "
    "time), model.enable_group_offload(onload_device='tpu', offload_type='block_level', num_blocks_per_group=1, "
    "use_stream=True) (a block at a time, the next one uploaded while this one computes), "
    "pipe.enable_sequential_cpu_offload() (one layer at a time, slowest), or 8-bit weights (torchao's "
    "Int8WeightOnlyConfig, optimum-quanto's qint8, GGUF Q8_0: half of bfloat16's bytes)")


def out_of_memory_message(what: str, detail: str, asked: int | None = None) -> str:
    """The text of the device's out-of-memory error (see ``OutOfMemoryError``)."""
    parts = [f"tpu: out of memory {what}: {detail}."]
    if asked is not None:
        parts.append(f"Asked for {_gib(asked)}.")
    if _memory_report is not None:
        try:
            held, limit, counted = _memory_report()
        except Exception:  # noqa: BLE001 - the report must never hide the error
            held, limit, counted = None, None, False
        if counted and asked is not None and held is not None and held >= asked:
            held -= asked  # (a storage is counted from its making on; the one asked for is not held)
        if held is not None and counted:
            parts.append(f"Tensors made on the device hold {_gib(held)} (torch_tpu's count: this platform reports "
                         "no device memory).")
        elif held is not None:
            parts.append(f"Tensors on the device hold {_gib(held)}" + (f" of its {_gib(limit)}." if limit else "."))
            if asked is not None and limit and asked > limit:
                parts.append("That one allocation is larger than the whole device.")
    parts.append("Free tensors that are no longer needed (del them; gc.collect() frees those held in reference "
                 "cycles), or use smaller batches or sizes. " + FIT_ADVICE + ".")
    return " ".join(parts)


def out_of_memory(exc: BaseException, what: str):
    """``torch.tpu.OutOfMemoryError`` naming ``what`` when ``exc`` (a JAX/PJRT runtime error) says the device
    ran out of memory, as CUDA raises it; None otherwise. The JAX error stays chained as the cause."""
    text = str(exc)
    if "RESOURCE_EXHAUSTED" not in text and "ut of memory" not in text:
        return None
    if isinstance(exc, OutOfMemoryError):
        return exc
    detail = next((line.strip() for line in text.splitlines() if "memory" in line), text.splitlines()[0]).rstrip(".")
    return OutOfMemoryError(out_of_memory_message(what, detail, _asked_bytes(text)))


def warn_at_user(message: str, category=UserWarning, libraries: tuple = ("torch_tpu", "torch")) -> None:
    """``warnings.warn`` attributed to the innermost frame outside ``libraries`` (packages by name): the line of the user's code that made the op (or called the pipeline), not torch_tpu's
    file the warning is raised in. Python shows it once per that line, as any warning."""
    folders = _folders(libraries)
    frame, level = sys._getframe(1), 2  # (stacklevel 2: the frame that called this function)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(folders):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


@functools.lru_cache(maxsize=None)
def _folders(libraries: tuple) -> tuple:
    found = ["<frozen "]
    for name in libraries:
        if name == "torch_tpu":
            found.append(os.path.dirname(os.path.abspath(__file__)) + os.sep)
            continue
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            found.append(os.path.dirname(module.__file__) + os.sep)
    return tuple(found)
