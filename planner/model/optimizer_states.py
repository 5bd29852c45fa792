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
(the layer-wise parameter layout) gives each data-parallel rank whole matrices of a bucket and
their states (layer_wise_optimizer.py:645-707: shard r of every bucket on rank r), as
`planner.model.muon_layout` re-derives: a rank may hold up to 1.3 x a bucket's even share
(:313-326), more where the emptiest-shard fallback fires, and the worst GPU keeps the fullest
shard's states (`muon_layout.largest_shards`); Adam's parameters go to a distributed optimizer
of their own, sharded evenly by bytes (optimizer/__init__.py:837-875, :905-930). The buffers are
padded so that every shard is as long as the longest: the padding is in the gradient and
parameter buffers (`muon_layout.padding`), not in the states, which are `zeros_like` each
parameter's. Its legacy path (--no-use-layer-wise-param-layout, `Job.muon_whole_params`) deals
every parameter whole, Muon's and Adam's, ping-pong by size (`planner.model.muon_shards`): the
rank dealt the word embedding or output layer keeps its states whole. Planner counts the
fullest rank, the one every rank must fit.

The dense and the expert states' fullest shards are added, as if one GPU held both (it does
where the expert group has one rank or the experts share the dense buffer; else a bound).
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import muon_layout, muon_shards
from planner.model.schedule import Chunks

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
    at: tuple[int, Chunks],
    per: tuple[float, float] | None = None,
) -> float:
    """Optimizer bytes on the fullest GPU of a stage holding `stage` (dense, expert) parameters,
    of which `decoder` are decoder-layer ones; `largest` is the stage's largest Adam parameter on
    one GPU (its word embedding or output layer; 0 without one); `shards` the (dense, expert)
    groups ZeRO-1 shards over; `at` the stage's (pipeline rank, decoder-layer chunks). The
    matrices Muon takes (`muon_layout.matrix_elements`) at MUON_STATE_BYTES, everything else
    (`_is_muon_excluded`, emerging_optimizers.py:145-147: norms, biases, embeddings, output
    layer) at Adam's bytes, the Muon states of the fullest shard (module docstring). `per`:
    (Muon's, Adam's) bytes per parameter the GPU keeps, in place of their states' (the step's
    fp32 gradient copies of the parameters it updates, `rank_states.step_grad_copy`)."""
    rank, chunks = at
    muon, adam = per or (MUON_STATE_BYTES, job.optimizer_bytes)
    mat_d, mat_e = muon_layout.matrix_elements(job, layout, chunks)
    rest = (max(stage[0] - mat_d, 0.0), max(stage[1] - mat_e, 0.0))
    if layout.zero_stage < 1:
        return muon * (mat_d + mat_e) + adam * (rest[0] + rest[1])
    dp, edp = shards
    if job.muon_whole_params:
        words = job.arch.padded_vocab(layout.tp) * job.arch.hidden_size / layout.tp
        count = min(2, int((stage[0] - decoder[0]) // words)) if largest > 0 else 0
        rest = (rest[0] - count * words, rest[1])
        per = (muon, adam)
        return muon_shards.whole_params_bytes(job, layout, at, rest, (words, count), per, shards)
    held = (mat_d / dp, mat_e / edp)
    if muon_layout.applies(job, layout):
        held = muon_layout.largest_shards(job, layout, rank, chunks)
    return muon * (held[0] + held[1]) + adam * (rest[0] / dp + rest[1] / edp)
