"""Integrations with the Hugging Face libraries: loading diffusers pipelines tensor-parallel over a
``DeviceMesh("tpu", ...)`` (transformers' text encoders included)."""
