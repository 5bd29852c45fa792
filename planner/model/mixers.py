"""The linear-time sequence mixers, by name: the Mamba-2 mixer (`planner.model.mamba`) and the gated
delta net (`planner.model.gdn`). Both are a column-parallel in_proj, a short convolution, a
chunked scan whose state is carried across chunks, a gated norm and a row-parallel out_proj, and
their modules share one interface (`LinearMixer`), which the per-layer models call through
`of`."""

from __future__ import annotations

from typing import Protocol

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import LayerKind
from planner.model import gdn, mamba
from planner.model.gemm import Gpu


class LinearMixer(Protocol):
    """What `planner.model.mamba` and `planner.model.gdn` each define."""

    def mixer_params(self, arch: ModelArch) -> int: ...

    def mixer_forward(self, arch: ModelArch) -> float: ...

    def mixer_gemms(
        self, arch: ModelArch, t: float, tp: int
    ) -> list[tuple[float, float, float, float]]: ...

    def saved_widths(self, arch: ModelArch, tp: int = 1, cp: int = 1) -> tuple[float, float]: ...

    def fp32_widths(self, arch: ModelArch) -> float: ...

    def backward_working(
        self, arch: ModelArch, tokens: float, tp: int, cp: int = 1, value_bytes: float = 2.0
    ) -> float: ...

    def scan_time(
        self, arch: ModelArch, gpu: Gpu, tokens: float, tp: int
    ) -> tuple[float, float]: ...

    def context_parallel_bytes(
        self, arch: ModelArch, tokens: float, tp: int, cp: int = 1
    ) -> tuple[float, float]: ...

    def context_parallel_a2as(
        self, arch: ModelArch, tokens: float, tp: int, cp: int = 1
    ) -> tuple[float, ...]: ...


_MODULES: dict[str, LinearMixer] = {"mamba": mamba, "gdn": gdn}


def of(kind: LayerKind) -> LinearMixer | None:
    """The module of a layer's linear-time mixer; None for attention or no mixer."""
    return _MODULES.get(kind.mixer) if kind.mixer is not None else None
