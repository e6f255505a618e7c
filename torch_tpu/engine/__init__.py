"""Engine layer: the execution modes, the launcher each mode chooses (run a program now, or record it
into the fused graph), the fused graph with its flush points, and ``sync``."""
