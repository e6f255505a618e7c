"""``python -m torch_tpu info`` (the platform, devices, memory, caches, settings and versions) and ``bench``
(where the benchmarks are)."""
from __future__ import annotations

import os

from .report import mib


def _versions() -> dict:
    from importlib import metadata

    out = {}
    for name in ("torch", "jax", "jaxlib", "diffusers", "transformers"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    import torch_tpu

    out["torch_tpu"] = torch_tpu.__version__
    return out


def cmd_info(args) -> int:
    import torch
    import torch_tpu
    from ..runtime import platform

    print(f"platform: {torch_tpu.platform()}")
    n = len(platform.devices())
    print(f"devices: {n} on this host (a process uses one, as tpu:0: torch.tpu.device_count() is "
          f"{torch.tpu.device_count()})")
    for i, dev in enumerate(platform.devices()):
        print(f"  [{i}] {dev}  name: {platform.device_name(i)}")
    free, total = torch.tpu.mem_get_info()
    print(f"memory: total {mib(total)}, free {mib(free)}, allocated {mib(torch.tpu.memory_allocated())}")
    print(f"eager mode: {torch.tpu.eager_mode.name}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in _versions().items()))
    _print_info_extras()
    return 0


# PJRT plugins JAX may load (TPU: libtpu; NVIDIA: the CUDA plugin and its PJRT part; AMD: ROCm)
_PLUGINS = ("libtpu", "libtpu-nightly", "jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin",
            "jax-cuda13-pjrt", "jax-rocm7-plugin", "jax-rocm7-pjrt")


def _folder_size(path: str) -> tuple[int, int]:
    total = files = 0
    for root, _, names in os.walk(path):
        for n in names:
            try:
                total += os.path.getsize(os.path.join(root, n))
                files += 1
            except OSError:
                pass
    return total, files


def _print_info_extras() -> None:
    """Caches (where, how big), the TORCH_TPU_* settings in effect, and the PJRT plugins installed."""
    from importlib import metadata

    from .. import config
    from ..testing.tiny_pipelines import specs

    cache = config.compile_cache_dir()
    if cache is None:
        print("compile cache: off (TORCH_TPU_CACHE_DIR is empty)")
    else:
        size, files = _folder_size(cache)
        print(f"compile cache: {cache} ({mib(size)}, {files} files)")
    tiny = str(specs.default_root())
    size, files = _folder_size(tiny)
    print(f"offline pipelines: {tiny} ({mib(size)}, {files} files)")
    settings = config.in_effect()
    print("TORCH_TPU_* settings: " + (", ".join(f"{k}={v}" for k, v in settings.items()) if settings
                                       else "none set (defaults)"))
    found = []
    for name in _PLUGINS:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    print("PJRT plugins: " + (", ".join(found) if found else "none (JAX's built-in CPU platform only)"))


def cmd_bench(args) -> int:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    print(f"Benchmarks live in bench/ of the torch_tpu source tree ({os.path.join(root, 'bench')}); "
          "bench/README.md says which one answers which question. Run them from the tree's root. "
          "For a single timed image use `python -m torch_tpu generate`.")
    return 0
