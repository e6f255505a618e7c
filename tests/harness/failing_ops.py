"""Ops made to fail on purpose, for tests of how errors surface."""
import torch


def boom_op():
    """A custom op whose lowering fails while the program runs (not while it compiles)."""
    if hasattr(torch.ops, "tputest") and hasattr(torch.ops.tputest, "boom"):
        return torch.ops.tputest.boom.default
    import jax

    from torch_tpu.ops import registry

    @torch.library.custom_op("tputest::boom", mutates_args=())
    def boom(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @boom.register_fake
    def _(x):
        return torch.empty_like(x)

    def fail(a):
        raise ValueError("device-side failure for the test")

    @registry.register(torch.ops.tputest.boom.default)
    def _lower(x):
        return jax.pure_callback(fail, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    return torch.ops.tputest.boom.default


def boom_everywhere_op():
    """``tputest::boom_everywhere``: on CPU it raises at the call; on the tpu its lowering is a host callback
    that raises while the program runs (registered through the op table)."""
    if hasattr(torch.ops, "tputest") and hasattr(torch.ops.tputest, "boom_everywhere"):
        return torch.ops.tputest.boom_everywhere.default
    import jax

    from torch_tpu.ops import registry

    @torch.library.custom_op("tputest::boom_everywhere", mutates_args=())
    def boom(x: torch.Tensor) -> torch.Tensor:
        raise ValueError("tputest.boom_everywhere: failure for the test")

    @boom.register_fake
    def _(x):
        return torch.empty_like(x)

    def fail(a):
        raise ValueError("tputest.boom_everywhere: device-side failure for the test")

    @registry.register(torch.ops.tputest.boom_everywhere.default)
    def _lower(x):
        return jax.pure_callback(fail, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    return torch.ops.tputest.boom_everywhere.default
