"""Megatron-LM's --use-torch-fsdp2 (`Layout.use_torch_fsdp2`): PyTorch FSDP2's transient buffers on
one GPU, from `planner.model.fsdp2`'s pieces, in place of Megatron-FSDP's
(`planner.model.megatron_fsdp`). The model states are ZeRO 3's (`rank_states`): bf16 parameter
and gradient shards (2 / N bytes each), Megatron's Float16Optimizer's fp32 master and Adam
moments (12 / N), N = dp x cp (the data-parallel group with context parallelism,
torch_fully_sharded_data_parallel.py:76-77).

Mechanisms, from Megatron-LM d98e8a64:

- `fully_shard` on every TransformerLayer, the LanguageModelEmbedding, the RotaryEmbedding (no
  parameters) and the output ColumnParallelLinear, then on the root
  (distributed/torch_fully_sharded_data_parallel.py:60-65, :127-148): each decoder layer, the
  embedding and the output layer are units; the final norm is the root's.
- reshard_after_forward True for every unit, the output layer's too, unless
  --torch-fsdp2-no-reshard-after-forward (training.py:2627-2629, :84): `fsdp2.policy`
  "always" / "never".
- No MixedPrecisionPolicy (:82-85) on a model Float16Module made bf16 (training.py:2468-2470):
  parameters gathered, gradients written and reduce-scattered in bf16 (`fsdp2.dtypes`).
- no_sync does nothing (data_parallel_base.py:24-32): every micro-batch's backward
  reduce-scatters each unit's gradient, so no unsharded gradient outlives its unit's backward.
- With recompute the backward prefetch is set to the previous unit (:138-143), FSDP2's default
  order otherwise: one unit ahead either way.

So, at the peak (the loss's and then each layer's backward, every activation held): resharding,
the unit running and the one prefetched (two decoder layers' parameters), the running layer's
gradient and the previous layer's reduce-scatter input (held until this layer's post-backward
makes its own, `fsdp2.output_layer_transient`), and at the loss the output layer gathered again
beside the last layer prefetched, with its gradient and its reduce-scatter input; without
resharding, every unit's parameters gathered from its forward to its backward, the largest at
the loss. The embedding's own moment, at the end of the backward, is the loss's with the
vocabulary rows (an untied model, as FSDP2 asserts: the same size) and no activation left, so it
never sets the peak. The layers are taken at their largest kind (an MoE layer's experts are in
it: ep 1). At the optimizer step nothing of this is held: FSDP2 reshards each unit after its
backward and its root's final callback waits for the last reduce-scatter and drops it
(`rank_states.fsdp_step` gives 0)."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import fsdp2, params
from planner.model.schedule import Chunks
from planner.model.stage_params import stage_params


def applies(job: Job, layout: Layout) -> bool:
    """Whether the plan runs Megatron-LM's torch FSDP2 (its buffers are this module's)."""
    return layout.use_torch_fsdp2 and job.framework == "megatron"


def largest_layer(job: Job, layout: Layout, chunks: Chunks) -> float:
    """The parameters of the largest decoder layer among the rank's `chunks` on one GPU (TP- and
    EP x expert-TP-split, but for what every TP rank holds whole, as `decoder_params`)."""
    counts = job.arch.kind_counts(chunks)
    table, whole = params.kind_table(job.arch), params.replicated_table(job.arch)
    experts = layout.ep * layout.expert_tp
    sizes = (
        (d - w) / layout.tp + w + e / experts
        for n, (d, e), w in zip(counts, table, whole, strict=True)
        if n
    )
    return max(sizes, default=0.0)


def transient(job: Job, layout: Layout, rank: int, chunks: Chunks) -> float:
    """Bytes of FSDP2's transient buffers at the peak on one GPU of pipeline rank `rank` (pp 1:
    the only one), the module docstring's moments."""
    d = fsdp2.dtypes(job)
    layer = largest_layer(job, layout, chunks)
    out = fsdp2.output_share(job, layout, rank)
    block = (d.grad + d.reduce) * layer
    if fsdp2.keeps_unsharded(job, layout):
        gathered = d.param * sum(stage_params(job, layout, rank, chunks))
        return gathered + fsdp2.output_layer_transient(job, layout, out, layer, block)
    block += 2 * d.param * layer
    prefetched = d.param * layer
    return fsdp2.output_layer_transient(job, layout, out, layer, block, prefetched=prefetched)
