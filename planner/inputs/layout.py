"""Layout: one parallel layout (the `[parallel]` table, with dp resolved), a frozen value.

Degree names follow torchtitan's ParallelDims; each says what 1 means. Megatron's rank order is
tp-cp-ep-dp-pp: TP varies fastest (consecutive ranks, inside a node), PP slowest.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

Recompute = Literal["none", "selective", "full"]
RecomputePolicy = Literal["none", "core_attn", "per_op", "full"]
"""What is recomputed: "selective" resolved by the training code (`Job.recompute_policy`)."""
ZeroStage = Literal[0, 1, 2, 3]

FSDP_STRATEGY: dict[int, str] = {
    0: "no_shard",
    1: "optim",
    2: "optim_grads",
    3: "optim_grads_params",
}
"""ZeRO stage -> Megatron-FSDP `--data-parallel-sharding-strategy` (ecosystem.md 3.2)."""


@dataclass(frozen=True)
class Layout:
    """A resolved parallel layout, built from a plan's `[parallel]` table
    (`planner.inputs.plan.layout_from_section`) or by the search."""

    tp: int = 1
    """Tensor-parallel degree (1 = weights not split inside a layer)."""
    pp: int = 1
    """Pipeline stages (1 = no pipeline)."""
    dp: int = 1
    """Data-parallel replicas of the dense part (1 = no data parallelism)."""
    cp: int = 1
    """Context-parallel degree: the sequence is split across cp ranks (1 = not split)."""
    ep: int = 1
    """Expert-parallel degree: experts spread over ep ranks (1 = every rank holds every expert)."""
    etp: int | None = None
    """Expert tensor-parallel degree (None = tp, Megatron's default)."""
    vpp: int = 1
    """Virtual pipeline chunks per rank (1 = plain 1F1B, >1 = interleaved)."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism inside the TP group (only meaningful with tp > 1)."""
    micro_batch_size: int = 1
    """Sequences per micro-batch."""
    zero_stage: ZeroStage = 1
    """0 replicated; 1 optimizer sharded (distributed optimizer); 2 + grads; 3 + params (FSDP)."""
    recompute: Recompute = "none"
    """Activation recomputation: none, selective (attention core), full (every layer)."""
    pipeline_layers: tuple[int, ...] | None = field(default=None)
    """Decoder layers per pipeline rank (pp entries); None = even split."""
    tp_comm_overlap: bool = False
    """Overlap TP communication with GEMMs (Megatron --tp-comm-overlap; needs SP)."""
    ep_comm_overlap: bool = False
    """Hide the expert all-to-all under another micro-batch's compute by running the forward of one
    micro-batch and the backward of another as one merged op (Megatron
    --overlap-moe-expert-parallel-comm --delay-wgrad-compute; needs ep > 1, and vpp > 1 when
    pp > 1)."""
    overlap_grad_reduce: bool = True
    """Reduce gradients in buckets during the backward (Megatron --overlap-grad-reduce). False:
    the whole reduction runs after the last micro-batch's backward, exposed."""
    overlap_param_gather: bool = True
    """All-gather ZeRO-sharded parameters in buckets during the next forward (Megatron
    --overlap-param-gather; needs overlap_grad_reduce). False: after the optimizer step, exposed."""

    @property
    def expert_tp(self) -> int:
        return self.etp if self.etp is not None else self.tp

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def dense_dp(self) -> int:
        """The group dense gradients are reduced and the optimizer is sharded over: dp x cp
        (Megatron shards the distributed optimizer over the data-parallel x context group)."""
        return self.dp * self.cp

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel size: world / (etp x ep x pp) (Megatron's MoE folding)."""
        return self.num_gpus // (self.expert_tp * self.ep * self.pp)

    def num_microbatches(self, global_batch_size: int) -> int:
        """Micro-batches per pipeline per step: global_batch / (dp x micro_batch_size)."""
        return global_batch_size // (self.dp * self.micro_batch_size)

    def stage_layers(self, num_layers: int) -> tuple[int, ...]:
        """Decoder layers on each pipeline rank (given split, or the even one)."""
        if self.pipeline_layers is not None:
            return self.pipeline_layers
        base, extra = divmod(num_layers, self.pp)
        return tuple(base + (1 if r < extra else 0) for r in range(self.pp))

    def with_(self, **changes: object) -> Layout:
        """A copy with some fields changed."""
        return replace(self, **changes)  # type: ignore[arg-type]

    def describe(self) -> str:
        """Short human form, e.g. 'tp8 pp16 dp128 mbs1 zero1 recompute=none'."""
        parts = [f"tp{self.tp}", f"pp{self.pp}", f"dp{self.dp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.etp is not None and self.etp != self.tp:
            parts.append(f"etp{self.etp}")
        if self.vpp > 1:
            parts.append(f"vpp{self.vpp}")
        if self.sequence_parallel:
            parts.append("sp")
        if self.tp_comm_overlap:
            parts.append("tpov")
        if self.ep_comm_overlap:
            parts.append("epov")
        if not self.overlap_grad_reduce:
            parts.append("grad-sync-exposed")
        if self.zero_stage >= 1 and not self.overlap_param_gather:
            parts.append("param-gather-exposed")
        parts += [f"mbs{self.micro_batch_size}", f"zero{self.zero_stage}"]
        parts.append(f"recompute={self.recompute}")
        return " ".join(parts)
