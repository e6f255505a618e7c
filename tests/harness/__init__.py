"""Helpers the tests share (no tests here): ``differential`` (run a case on CPU torch and on tpu in each mode and
compare) and its parts ``inputs``, ``compare``, ``errors``, ``modes``, ``counting`` and ``isolated``; ``hangs`` (a hang
told from a slow machine), ``failing_ops``, ``twins``/``twin_cases``/``twin_disk`` (two calls that differ in one
attribute), ``jobs`` (multi-process jobs with torchrun's environment). tests/README.md maps them. Tests import
``from tests.harness import differential as D`` for the checks and other names from the module that holds them;
``REPO`` is the repository root (what a child process needs on ``PYTHONPATH``)."""
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
