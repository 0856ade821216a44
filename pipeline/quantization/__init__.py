"""Precision on the CPU and with ModelOpt: quantize, calibration, simulated numerics (shared by convert, evaluate
and the reference runtime)."""
