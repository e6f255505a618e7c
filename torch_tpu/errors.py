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


def out_of_memory(exc: BaseException, what: str):
    """``torch.OutOfMemoryError`` naming ``what`` when ``exc`` (a JAX/PJRT runtime error) says the device
    ran out of memory, as CUDA raises it; None otherwise. The JAX error stays chained as the cause."""
    text = str(exc)
    if "RESOURCE_EXHAUSTED" not in text and "ut of memory" not in text:
        return None
    detail = next((line.strip() for line in text.splitlines() if "memory" in line), text.splitlines()[0]).rstrip(".")
    return torch.OutOfMemoryError(
        f"tpu: out of memory {what}: {detail}. Free tensors that are no longer needed (del them; "
        "gc.collect() frees those held in reference cycles), or use smaller batches or sizes.")


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
