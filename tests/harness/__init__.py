"""Helpers the tests share (no tests here): ``differential`` (run a case on CPU torch and on tpu in each mode
and compare), ``twins``/``twin_cases``/``twin_disk`` (two calls that differ in one attribute), ``jobs``
(multi-process jobs with torchrun's environment). Tests import them as ``from tests.harness import
differential as D``; ``REPO`` is the repository root (what a child process needs on ``PYTHONPATH``)."""
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
