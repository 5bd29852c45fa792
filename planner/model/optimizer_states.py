"""Optimizer-state bytes on one GPU under Megatron's Muon (`Job.optimizer = "muon"`).

Megatron-LM d98e8a64 (megatron/core/optimizer/emerging_optimizers.py `_is_muon_excluded`) hands
every 2-D parameter that is not an embedding or output layer (the decoder layers' matrices) to
Muon and the rest (embeddings, output layer, norms, biases) to Adam. A Muon matrix keeps the
fp32 master and one momentum buffer, `zeros_like` the master's fp32 gradient
(NVIDIA-NeMo/Emerging-Optimizers faee14cd, orthogonalized_optimizers/orthogonalized_optimizer.py
`step`): MUON_STATE_BYTES against Adam's 12 (Adam's --exp-avg-dtype does not apply to it). Its
Newton-Schulz iterations run on one matrix at a time in the step, when no activations are held,
beside the step's gradient copies: `planner.model.muon_step` counts the largest matrix's working
set there (`rank_states.step_bytes`).

With the distributed optimizer Megatron runs its layer-wise optimizer (arguments.py validate_args:
--use-distributed-optimizer becomes use_layer_wise_distributed_optimizer). Its default path
(the layer-wise parameter layout) gives each data-parallel rank whole matrices of a bucket,
about a dp-th of the states each (states / dp here); its gradient and parameter buffers are
padded so that every shard is as long as the longest, which `planner.model.muon_layout` counts
(`rank_states`: the run logs it, "Layerwise param layout ... overhead="). Its legacy path
(--no-use-layer-wise-param-layout, `Job.muon_whole_params`; layer_wise_optimizer.py
`_shard_params_ping_pong`) gives each data-parallel rank whole parameters, sorted by size and
dealt out ping-pong: one rank keeps the largest parameter's states whole (the word embedding or
output layer, 12 bytes per element on Adam) and about a dp-th of the rest. Planner counts that
rank, the one every rank must fit.
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job

MUON_STATE_BYTES = 8.0
"""Per Muon-managed parameter: its fp32 master (Megatron's Float16OptimizerWithFloat16Params,
which the layer-wise optimizer wraps each of its optimizers in), 4, and the fp32 momentum, 4."""


def muon_optimizer_bytes(
    job: Job,
    layout: Layout,
    stage: tuple[float, float],
    decoder: tuple[float, float],
    largest: float,
    shards: tuple[int, int],
) -> float:
    """Optimizer bytes on one GPU of a stage holding `stage` (dense, expert) parameters, of which
    `decoder` are decoder-layer (Muon) ones and the rest Adam's; `largest` is the stage's largest
    Adam parameter on one GPU (its word embedding or output layer; 0 without one); `shards` the
    (dense, expert) groups ZeRO-1 shards over."""
    (dense, expert), (dense_dec, expert_dec) = stage, decoder
    muon, adam = MUON_STATE_BYTES, job.optimizer_bytes
    dense_total = muon * dense_dec + adam * (dense - dense_dec)
    expert_total = muon * expert_dec + adam * (expert - expert_dec)
    if layout.zero_stage < 1:
        return dense_total + expert_total
    dense_dp, expert_dp = shards
    if job.muon_whole_params and dense_dp > 1 and largest > 0:
        # the rank that is dealt the largest parameter keeps it whole
        whole = adam * largest
        return (dense_total - whole) / dense_dp + whole + expert_total / expert_dp
    return dense_total / dense_dp + expert_total / expert_dp
