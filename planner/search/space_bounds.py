"""What the user pins, bounds, allows or forbids in `planner suggest`'s search (`Space`, each
degree's `Bound`), and the search's own bounds where the user gives none. The space those bounds
leave (structures, options, bases) is `planner.search.space`'s."""

from __future__ import annotations

from dataclasses import dataclass

from planner.inputs.layout import Dispatcher, Recompute
from planner.model import memory

RECOMPUTE_ORDER: tuple[Recompute, ...] = ("none", "selective", "full")
MAX_MICRO_BATCH = 16
"""Largest micro-batch searched unless the user bounds it (larger ones only add memory)."""
MAX_CP = 16
"""Largest context-parallel degree searched unless the user bounds it (--cp, --max-cp)."""

CP_BOUND = f"bound on cp (--cp, --max-cp, --no-cp; at most {MAX_CP} by default)"
"""The rejection a structure's cp outside the search's bound gets: that bound is the user's, or
MAX_CP where the user set none, so the reason names both rather than calling it the user's."""


UNBOUNDED = 1 << 30
"""A bound's upper end where the user gives none."""


@dataclass(frozen=True)
class Bound:
    """An inclusive range for one degree; pin with lo == hi."""

    lo: int = 1
    hi: int = UNBOUNDED

    def admits(self, value: int) -> bool:
        return self.lo <= value <= self.hi

    def bounded_above(self) -> bool:
        """Whether the user gave an upper end (a pin, `LO-HI`, `-HI`, `--max-X`)."""
        return self.hi < UNBOUNDED


@dataclass(frozen=True)
class Space:
    """What the user pins, bounds, allows or forbids."""

    tp: Bound = Bound()
    pp: Bound = Bound()
    cp: Bound = Bound(1, MAX_CP)
    ep: Bound = Bound()
    dp: Bound = Bound()
    vpp: Bound = Bound()
    mbs: Bound = Bound(1, MAX_MICRO_BATCH)
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    recompute: tuple[Recompute, ...] = RECOMPUTE_ORDER
    tp_across_nodes: bool = False
    """Allow TP groups larger than the scale-up (NVLink) domain."""
    uneven: bool = True
    """Consider uneven pipeline splits (Megatron's first/last stage layer counts)."""
    expert_tp: tuple[str, ...] = ("1", "tp")
    """Expert-TP choices: 1 and/or equal to tp (Megatron's default)."""
    tp_comm_overlap: bool = True
    """Use --tp-comm-overlap wherever sequence parallelism allows it."""
    ep_comm_overlap: bool = True
    """Also try Megatron's EP all-to-all overlap wherever it is allowed."""
    dispatchers: tuple[Dispatcher, ...] = ("alltoall", "flex")
    """MoE token dispatchers to try where experts are spread (flex: DeepEP, or HybridEP on a
    multi-node NVLink domain)."""
    offload: bool = True
    """Try offloading activations to host memory (one pipeline stage, no recompute)."""
    headroom_pct: float = memory.DEFAULT_HEADROOM_PCT
    framework: str = "megatron"
    """The training code searched for: "torchtitan" searches what torchtitan runs (FSDP2 as
    ZeRO 3, no Megatron-only overlap, offloading, recompute modules or block recompute)."""
