"""`python -m torch_tpu` in subprocesses: info, generate (tiny, 2 steps, 64x64) and compiled mode."""

import os
import subprocess
import sys



def _run(args, tmp_path, timeout=240):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TORCH_TPU_TINY_PIPELINES_DIR=str(tmp_path / "pipes"))
    return subprocess.run([sys.executable, "-m", "torch_tpu", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=tmp_path)


def test_info(tmp_path):
    r = _run(["info"], tmp_path)
    assert r.returncode == 0, r.stderr
    for key in ("platform:", "devices:", "memory:", "torch ", "jax ", "jaxlib ", "diffusers ", "transformers ",
                "torch_tpu "):
        assert key in r.stdout, (key, r.stdout)


def test_generate_tiny(tmp_path):
    out = tmp_path / "img.png"
    r = _run(["generate", "--steps", "2", "--height", "64", "--width", "64", "--output", str(out)], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert out.is_file() and out.stat().st_size > 0
    from PIL import Image

    assert Image.open(out).size == (64, 64)
    for line in ("platform: ", "device: tpu:0", "load", "move to device", "text encoding",
                 "denoising step 1", "denoising step 2", "vae decode", "total", "peak device memory:",
                 "compiles=", "cache_hits=", "cache_loads=", "loaded ", "from cache", "saved:"):
        assert line in r.stdout, (line, r.stdout)
    assert "denoising step 3" not in r.stdout
    assert "it/s" in r.stderr or "s/it" in r.stderr  # diffusers' progress bar


def test_generate_compile_mode(tmp_path):
    out = tmp_path / "compiled.png"
    r = _run(["generate", "--mode", "compile", "--steps", "2", "--height", "64", "--width", "64",
              "--output", str(out)], tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert out.exists() and "graph_compiles=" in r.stdout, r.stdout
