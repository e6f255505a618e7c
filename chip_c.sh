cd "$(dirname "$0")"
python3 -m pytest -q -o addopts="-p no:cacheprovider" tests/ops/test_half_matmul_precision.py tests/ops/test_linear_whole.py tests/integrations/test_diffusers_embeddings.py 2>&1 | tail -8
