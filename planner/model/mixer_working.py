"""The working set a linear-time mixer's backward (a hybrid stack's M and G layers, a
transformer's gated delta nets: `planner.model.mixers`) adds on top of what a pipeline rank keeps
(`planner.model.stage_activations`): its scan's backward rebuilds what the forward did not keep
(`backward_working`: chunk states, the recomputed convolution output, the gradients it allocates),
and where the layer itself was recomputed (full or per-op recompute) the layer's rebuilt
activations are alive beside it: the recomputed forward's checkpoint
(megatron/core/tensor_parallel/random.py CheckpointFunction.backward, Megatron-LM d98e8a64)
rebuilds the layer whole, then runs its backward, which reaches the scan with zxBCdt and out_x
still held. Counted whole (the layer's blocks after the mixer have freed theirs by then: the
safe side), as a recomputed MoE layer's are (`stage_activations`)."""

from __future__ import annotations

from collections.abc import Callable

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import LayerKind
from planner.model import mixers
from planner.model.schedule import Chunks
from planner.model.shard import Shard


def mixer_working(
    arch: ModelArch, cp: int, sh: Shard, chunks: Chunks, rebuilt: Callable[[LayerKind], float]
) -> float:
    """The largest working set one linear-time mixer's backward adds on the rank holding
    `chunks` (0 without such mixers): its `backward_working` at the shard's tokens, TP, CP and
    value bytes, plus `rebuilt(kind)`, the recomputed layers of its kind alive beside it (0
    without recompute)."""
    out = 0.0
    for kind, n in zip(arch.kinds, arch.kind_counts(chunks), strict=True):
        if n and (linear := mixers.of(kind)) is not None:
            work = linear.backward_working(arch, sh.tokens, sh.tp, cp, sh.value_bytes)
            out = max(out, work + rebuilt(kind))
    return out
