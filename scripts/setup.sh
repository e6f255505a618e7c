#!/usr/bin/env bash
# Installs torch_tpu and what its demo and tests need into the current Python environment.
# torch goes first and on its own: a plain `torch` requirement on a machine without torch pulls a
# multi-GB CUDA build. An existing torch >= 2.11 is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if ! "$PY" -c 'import sys, torch; v = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]); sys.exit(0 if v >= (2, 11) else 1)' 2>/dev/null; then
  "$PY" -m pip install -q "torch==2.13.0"
fi
"$PY" -m pip install -q -e ".[diffusers,test]"
# byte-compile the package once: pip does it for wheels, not for an editable install, and where
# PYTHONDONTWRITEBYTECODE is set every process (each test worker, the demo's first call importing the
# op table) would compile ~120 modules from source again
"$PY" -m compileall -q torch_tpu >/dev/null
"$PY" -c 'import torch, torch_tpu; print(f"torch {torch.__version__}, torch_tpu {torch_tpu.__version__}: ready")'
