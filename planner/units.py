"""The one place units are converted.

Inside planner everything is SI: bytes, seconds, FLOP/s, bytes/s. Data files carry their units in
their key names (`bandwidth_gb_per_s_per_gpu`, `memory_gib`, `peak_tflops_bf16`) and are converted
here, once, at load time.
"""

from __future__ import annotations

KIB = 1024
MIB = 1024**2
GIB = 1024**3
GB = 10**9  # decimal gigabyte, as in link bandwidths and vendor "GB/s"
TERA = 10**12


def gib(n_bytes: float) -> float:
    """Bytes -> GiB (2^30 bytes)."""
    return n_bytes / GIB


def from_gib(n_gib: float) -> float:
    """GiB -> bytes."""
    return n_gib * GIB


def gb_per_s(value_gb_per_s: float) -> float:
    """Decimal GB/s -> bytes/s."""
    return value_gb_per_s * GB


def gbit_per_s(value_gbit_per_s: float) -> float:
    """Line rate in Gb/s -> bytes/s."""
    return value_gbit_per_s * GB / 8


def tflops(value_tflops: float) -> float:
    """TFLOP/s -> FLOP/s."""
    return value_tflops * TERA


def microseconds(value_us: float) -> float:
    """Microseconds -> seconds."""
    return value_us * 1e-6
