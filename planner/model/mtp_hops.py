"""Pipeline point-to-point with the MTP layers on their own stage (Megatron's `mtp_standalone`).

Megatron-LM d98e8a64: a layout whose MTP layers end a rank other than the last sets
`mtp_standalone` (transformer/pipeline_parallel_layer_layout.py:137-151, transformer_config.py
:2290). The MTP block returns the main hidden states and each depth's, concatenated along the
sequence (transformer/multi_token_prediction.py:2038 `torch.chunk(hidden_states, 1 + offset)`,
:2136-2139 `torch.cat(hidden_states_list, dim=0)`), which the loss stage splits again (:976):
every hop from the MTP rank on to the loss stage carries (1 + D) x the ordinary s x h message,
forward and, as its gradient, backward. The MTP rank's chunk is its last, and the chunks after it
(the last chunk of each later rank) hold no decoder layer: in 1F1B and the interleaved schedule
alike the wide hops are the pp - 1 - r_mtp ones between rank r_mtp and the last rank.

Since the receiving rank no longer knows the shape, every `_communicate` call under
`mtp_standalone` first swaps the shapes (pipeline_parallel/p2p_communication.py:327-329
`_communicate_shapes`, :191-283: a 3-element int64 tensor each way, batch_isend_irecv waited
on, then torch.cuda.synchronize), on every rank, blocking: one more small message before each
exchange, which the interleaved schedule's overlap does not hide.

The loss stage's receive buffer is the received hidden states the MTP depths' output layer keeps
(`mtp_activations.mtp_loss_kept`).
"""

from __future__ import annotations

from collections.abc import Callable

from planner.inputs.layout import Layout
from planner.inputs.plan import Job

SHAPE_BYTES = 3 * 8
"""`_communicate_shapes`' message: a (3,) int64 shape (p2p_communication.py:214-229)."""

Hops = tuple[tuple[float, float], ...]
"""Per pipeline rank, the (previous, next) hop in seconds (`pools.rank_hops`' form)."""


def standalone_rank(job: Job, lay: Layout) -> int | None:
    """The rank whose last chunk holds the MTP layers where that is not the loss stage's rank
    (Megatron's `mtp_standalone`), else None."""
    arch = job.arch
    if job.framework != "megatron" or lay.pp <= 1:
        return None
    mtp = lay.mtp_rank(arch.num_layers, arch.mtp_num_layers)
    return mtp if mtp is not None and mtp != lay.output_rank else None


def standalone_hops(job: Job, lay: Layout, size: float, at: Callable[[float], Hops]) -> Hops:
    """Each rank's (previous, next) hop under `mtp_standalone` (module docstring): a message of
    `size` bytes, (1 + D) x `size` between the MTP rank and the last rank, each after its shape
    swap; () without a standalone MTP stage. `at(nbytes)`: each rank's hops for one message of
    nbytes (its pool's links, or the cluster's)."""
    mtp = standalone_rank(job, lay)
    if mtp is None:
        return ()
    plain, wide = at(size), at((1 + job.arch.mtp_num_layers) * size)
    shape = at(SHAPE_BYTES)
    out = []
    for r in range(lay.pp):
        prev = (wide if r > mtp else plain)[r][0] + shape[r][0]
        nxt = (wide if r >= mtp else plain)[r][1] + shape[r][1]
        out.append((prev, nxt))
    return tuple(out)


def interleaved_extra(
    job: Job, lay: Layout, m: int, size: float, at: Callable[[float], Hops]
) -> float:
    """Seconds the interleaved schedule exposes beyond `schedule.interleaved_p2p_exposed` of the
    ordinary `size`-byte message: each wide hop's excess over it once on the fill and once on
    the drain (as that formula counts every hop of the first micro-batch's way), and the shape
    swap before each of a rank's two `_communicate` calls per micro-batch and chunk (forward and
    backward; blocking, so the overlap does not hide it), on the slowest link; 0 without a
    standalone MTP stage (module docstring)."""
    mtp = standalone_rank(job, lay)
    if mtp is None:
        return 0.0
    plain, wide = at(size), at((1 + job.arch.mtp_num_layers) * size)
    shape = max(max(h) for h in at(SHAPE_BYTES))
    excess = sum(wide[r][1] - plain[r][1] for r in range(mtp, lay.pp - 1))
    return 2 * excess + 2 * m * lay.vpp * shape
