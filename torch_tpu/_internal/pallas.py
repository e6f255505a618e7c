"""Imported by torch inductor's built-in "tpu" (Pallas) code generator, written for Google's TorchTPU.

This backend has no Pallas kernel bridge: inductor cannot compile graphs over its tpu tensors.
Fail with a message that says what to do instead of a bare ModuleNotFoundError.
"""
raise ImportError(
    "torch.compile(backend='inductor') does not support tensors on this 'tpu' device (torch_tpu has no "
    "Pallas bridge for inductor's TPU code generator). Use torch.compile(module, backend='tpu', "
    "fullgraph=True, dynamic=False), which compiles the whole graph to one XLA program.")
