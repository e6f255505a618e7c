"""Internal, unstable entry points (kept for the documented launch commands)."""
