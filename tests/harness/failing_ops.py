"""Ops made to fail on purpose, for tests of how errors surface."""
import torch


def _failing_op(name: str, cpu_message: str | None, device_message: str):
    """``torch.ops.tputest.NAME``: a custom op whose tpu lowering is a host callback that raises
    ``device_message`` while the program runs (not while it compiles), registered through the op table; on
    CPU it returns a copy of its input, or raises ``cpu_message`` at the call. Defined once per process."""
    if hasattr(torch.ops, "tputest") and hasattr(torch.ops.tputest, name):
        return getattr(torch.ops.tputest, name).default
    import jax

    from torch_tpu.ops import registry

    @torch.library.custom_op(f"tputest::{name}", mutates_args=())
    def op(x: torch.Tensor) -> torch.Tensor:
        if cpu_message is not None:
            raise ValueError(cpu_message)
        return x.clone()

    @op.register_fake
    def _(x):
        return torch.empty_like(x)

    def fail(a):
        raise ValueError(device_message)

    overload = getattr(torch.ops.tputest, name).default

    @registry.register(overload)
    def _lower(x):
        return jax.pure_callback(fail, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    return overload


def boom_op():
    """A custom op whose lowering fails while the program runs (not while it compiles); on CPU a copy."""
    return _failing_op("boom", None, "device-side failure for the test")


def boom_everywhere_op():
    """``tputest::boom_everywhere``: on CPU it raises at the call; on the tpu its lowering is a host callback
    that raises while the program runs (registered through the op table)."""
    return _failing_op("boom_everywhere", "tputest.boom_everywhere: failure for the test",
                       "tputest.boom_everywhere: device-side failure for the test")
