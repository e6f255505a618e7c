"""Tensor layer: the tpu tensor (a strided view of a versioned storage holding one immutable device
array), reading and writing strided views, and the minimal storage kernels every mode shares."""
