"""The token rows Megatron adds to each expert's segment so that grouped FP8 / FP4 GEMMs get
aligned row counts (`padding`: the pairs a GPU's experts receive beyond the routed ones, the
rows its alltoall send buffer gains, and whether the experts pad their own input).

Megatron-LM d98e8a64 aligns every expert's token count to `align_size` rows
(moe_utils.py:1463-1480 `get_align_size_for_quantization`): 256 under Transformer Engine's op
fuser or grouped tensor, else 16 for FP8 (32 for MXFP8: fp8_utils.py:356-361) and 32 for NVFP4
(fp4_utils.py:176), in one of two places:

- **The experts** (TEGroupedMLP.forward, experts.py:890-903, unpadded at :1041-1043; the op-fuser
  path :730-745, :824-826) copy their input into a padded buffer under FP8 / FP4 (or a grouped
  tensor), aligned to the recipe's size, 256 under the grouped tensor alone (:305-314, not under
  the op fuser: `_experts_align`), unless `skip_routed_expert_padding` holds
  (moe_utils.py:1494-1509): router padding,
  the HybridEP / NCCL-EP dispatchers (HybridEP pads in its dispatch instead, `pad_multiple`
  token_dispatcher.py:1142-1163: up to a - 1 rows per local expert), or DeepEP's fused
  permute-and-pad (moe_utils.py:1483-1491), which needs a Transformer Engine that has
  `fused_permute_and_pad_with_probs`: a version a plan does not say, so that one case is counted
  as padding in the experts (a padded copy that may not exist: an over-count, the safe side). At
  most a - 1 rows per local expert.
- **The router** (--moe-router-padding-for-quantization, alias --moe-router-padding-for-fp8;
  Megatron refuses it without FP8 / FP4 and with the allgather dispatcher,
  transformer_config.py:2641-2659): alltoall pads each source rank's routing map before the
  dispatch (token_dispatcher.py:649-654, `pad_routing_map` moe_utils.py:731-763: each expert's
  count on that rank is rounded up to a multiple of a by routing more of the rank's tokens to
  it), so every one of the ep x etp source ranks adds up to a - 1 rows for each of the GPU's
  experts, and its own send buffer up to a - 1 for each of the E experts; DeepEP pads the
  received routing map at the destination (token_dispatcher.py:1393-1436): up to a - 1 rows per
  local expert. The padded rows are real tokens through fc1, the activation and fc2, kept for
  the backward like the routed ones; the experts then skip their own padding copy.

Memory takes the bound, a - 1 rows per (rank, expert) segment, not the expectation. With
counts far above a and their residues mod a uniform, a segment pads (a - 1) / 2 on average and
the sum over the segments a GPU receives concentrates there; but a segment of fewer than a
routed tokens (small micro-batches, many experts, skewed learned routing) pads a - count, near
a - 1, and Megatron's learned routing is not uniform over experts, so no expectation holds for
every run, while the bound does (`planner check` must never call a layout that runs out of
memory one that fits, as `routing_load` bounds the load; a segment with no token pads none, so
the bound is never short). Over the uniform expectation it counts (a - 1) / 2 rows a segment
more: with router padding E x etp x (a - 1) / 2 rows a layer (DeepSeek-V3's 256 experts at
a = 16: 1,920 beside its 32,768 x load routed rows, 6 %); at a = 256 (op fuser, grouped tensor)
a segment of 128 routed rows pads 128 and the bound counts 255. The step time does not count
the padded rows (`planner.model.moe_time`)"""

from __future__ import annotations

from typing import NamedTuple

from planner.inputs.job import Job
from planner.inputs.layout import Layout

GROUPED_TENSOR_ALIGN = 256
"""Rows per expert segment under Transformer Engine's op fuser or grouped tensor: Megatron-LM
d98e8a64 moe_utils.py:1471-1473 (TE's grouped-tensor and fused grouped-MLP kernels)."""

FP8_ALIGN = 16
"""Rows per expert segment for FP8 GEMMs other than MXFP8 (fp8_utils.py:356-361 d98e8a64)."""

BLOCK_ALIGN = 32
"""Rows per expert segment for MXFP8 (fp8_utils.py:358-359) and NVFP4 (fp4_utils.py:176-195:
TMA's 16-byte alignment is 32 FP4 values) d98e8a64."""


TE_NVFP4_ALIGN = 128
"""Rows per expert segment of the experts' own NVFP4 padding: Transformer Engine d0067d0d's
Fp8Padding takes its recipe's alignment when Megatron passes none (module/fp8_padding.py:117-119),
quantization.py:274-278 `get_align_size_for_quantization`: 32 for MXFP8, 128 for NVFP4, else 16
(Megatron's own 32 for NVFP4, `BLOCK_ALIGN`, is the router's and HybridEP's)."""


class Padding(NamedTuple):
    """Padding rows of one MoE layer per micro-batch on one GPU, bounds (module docstring)."""

    pairs: float = 0.0
    """Rows the GPU's experts receive beyond the routed pairs, in `moe_activations.pairs`' units
    (before the expert-TP gather)."""
    sent: float = 0.0
    """Rows the alltoall dispatcher's permuted local tokens gain (router padding)."""
    experts_pad: bool = False
    """The experts copy their input into a padded buffer (`Shard.expert_padding`)."""


def align_size(job: Job) -> int:
    """Megatron's row alignment per expert segment (moe_utils.py:1463-1480): 256 under the op
    fuser or grouped tensor, else the quantised recipe's; 0 (no padding) in bf16."""
    if job.moe_fused_grouped_mlp or job.moe_grouped_tensor:
        return GROUPED_TENSOR_ALIGN
    return _recipe_align(job)


def _recipe_align(job: Job) -> int:
    """Megatron's alignment of the quantised recipe (fp8_utils.py:356-361, fp4_utils.py:176):
    16, 32 for MXFP8 and NVFP4; 0 in bf16."""
    if not job.quantised:
        return 0
    return BLOCK_ALIGN if job.block_scaled else FP8_ALIGN


def _hybridep(lay: Layout) -> bool:
    return lay.moe_token_dispatcher_type == "flex" and lay.moe_flex_dispatcher_backend == "hybridep"


def router_padding_runs(job: Job, lay: Layout) -> bool:
    """Whether Megatron takes --moe-router-padding-for-quantization for this job and layout: a
    Megatron MoE job in FP8 / FP4 whose dispatcher is not allgather (transformer_config.py
    :2649-2659 raises otherwise; the launch writes the flag only here)."""
    return (
        job.moe_router_padding
        and job.framework == "megatron"
        and job.arch.is_moe
        and job.quantised
        and lay.moe_token_dispatcher_type != "allgather"
    )


def router_pads(job: Job, lay: Layout) -> bool:
    """Whether the router pads the routing map: `router_padding_runs`, with the alltoall or
    DeepEP dispatcher (HybridEP aligns the tokens in its own dispatch)."""
    return router_padding_runs(job, lay) and not _hybridep(lay)


def padding(job: Job, lay: Layout) -> Padding:
    """The padding rows of one MoE layer on one GPU (module docstring), bounds."""
    if job.framework != "megatron" or not job.arch.is_moe:
        return Padding()
    a = align_size(job)
    if a == 0:
        return Padding()
    experts = job.arch.num_moe_experts or 1
    local = experts / lay.ep
    if router_pads(job, lay):
        if lay.moe_token_dispatcher_type == "alltoall":
            # ep x etp source ranks x `local` experts, gathered over etp: / etp in pairs' units
            return Padding(pairs=lay.ep * local * (a - 1), sent=experts * (a - 1))
        return Padding(pairs=local * (a - 1) / lay.expert_tp)  # DeepEP: at the destination
    if _hybridep(lay):  # aligns in its own dispatch (pad_multiple, token_dispatcher.py:1142-1163,
        # fused_a2a.py:563-565): the same rows, and no copy in the experts
        cf = job.moe_expert_rank_capacity_factor
        if cf is None:
            return Padding(pairs=local * (a - 1) / lay.expert_tp)
        # under a rank budget the padded rows sit inside it, the budget k x T x cf rounded up
        # to a multiple of a (token_dispatcher.py:1098-1110)
        budget = int(job.arch.moe_router_topk * _rank_tokens(job, lay) * cf)
        return Padding(pairs=(-budget) % a)
    own = _experts_align(job)
    if own == 0:
        return Padding()
    return Padding(pairs=local * (own - 1) / lay.expert_tp, experts_pad=True)


def _experts_align(job: Job) -> int:
    """The rows the experts pad their own input to (experts.py:305-314: Fp8Padding with
    `align_size` from `align_size` under the grouped tensor alone, else None, which Transformer
    Engine d0067d0d takes as the recipe's, module/fp8_padding.py:117-119; and only under FP8 /
    FP4 or the grouped tensor, experts.py:736, :896): 256 under the grouped tensor, the recipe's
    16, 32 (MXFP8) or 128 (NVFP4, `TE_NVFP4_ALIGN`) under FP8 / FP4 even with the op fuser on, 0
    (no padding) in bf16 without the grouped tensor."""
    if job.moe_grouped_tensor:
        return GROUPED_TENSOR_ALIGN
    if job.quantised and job.quant_recipe == "nvfp4":
        return TE_NVFP4_ALIGN
    return _recipe_align(job)


def _rank_tokens(job: Job, lay: Layout) -> float:
    """Tokens one GPU routes per micro-batch (`moe_activations.pairs`' T / tp, with CP's share)."""
    return job.seq_length // lay.cp * lay.micro_batch_size / lay.tp
