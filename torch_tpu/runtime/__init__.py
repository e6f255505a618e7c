"""Runtime layer: the PJRT client (through JAX), the device, host transfer, memory and RNG state."""
