"""Eager front end: the ``__torch_dispatch__`` router, the per-op path (structural program keys ->
cached entries), op rewrites, fallbacks and the PrivateUse1 factory kernels."""
