"""Error types and the words they use: every error names the aten op and its inputs' devices, shapes
and dtypes, never a JAX stack alone."""
from __future__ import annotations

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
