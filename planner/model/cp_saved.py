"""What Transformer Engine's all-to-all context parallelism (Megatron --cp-comm-type a2a,
AttnFuncWithCPAndQKVOA2A) saves beyond a plain attention: the head-sharded output before the
return all-to-all, `out_part` (TransformerEngine d0067d0d context_parallel.py:4545-4576, in 16
bits unless the attention itself runs in FP8), while the output projection saves the tensor the
all-to-all returns, a new one (:4486-4500, :4517): the attention output twice per layer.
A recomputed core attention (the selective default) runs that function under the checkpoint,
which saves nothing of it (Megatron-LM d98e8a64 attention.py:1555-1556)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar, Protocol, TypeVar

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model.cp_time import a2a_bytes
from planner.model.shard import Shard


class _Bytes(Protocol):  # `stage_activations.PerLayer`, a dataclass
    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def kept(self) -> tuple[float, ...]: ...
    @property
    def full(self) -> tuple[float, ...]: ...
    @property
    def whole(self) -> tuple[float, ...]: ...


P = TypeVar("P", bound=_Bytes)


def out_part_bytes(job: Job, layout: Layout, sh: Shard) -> tuple[float, ...]:
    """Per kind of layer (`ModelArch.kinds`), the 16-bit `out_part` one attention layer keeps
    for a micro-batch under the a2a exchange (module docstring): the rank's t tokens over its
    1/tp of the heads, each the value's width; 0 elsewhere (no CP, another exchange, DeepSeek
    sparse attention's own gather, torchtitan's CP, unfused attention: TE's CP runs only the
    fused and flash kernels, or the core attention recomputed)."""
    arch = job.arch
    if (
        layout.cp <= 1
        or layout.cp_comm_type != "a2a"
        or arch.has_dsa
        or job.framework == "torchtitan"
        or not sh.flash_attention
        or sh.drops("core_attn")
    ):
        return tuple(0.0 for _ in arch.kinds)
    o = a2a_bytes(arch, sh.tokens, layout.tp)[1]
    return tuple(o if k.mixer == "attention" else 0.0 for k in arch.kinds)


def plus(per: P, more: tuple[float, ...], full_recompute: bool) -> P:
    """`per` with `more` added to each kind's bytes: to the layers run whole and to the one
    being recomputed; to the kept ones unless full recompute keeps only their inputs."""

    def add(a: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(x + y for x, y in zip(a, more, strict=True))

    kept = per.kept if full_recompute else add(per.kept)
    return replace(per, kept=kept, full=add(per.full), whole=add(per.whole))
