"""Megatron-FSDP's unit buffers (`megatron_fsdp`) coupled with the activations they coexist
with: what they add to a pipeline rank's activation peak.

`megatron_fsdp.profile_and_resident` gives the buffers' bytes at each moment of a micro-batch's
forward and backward through a model chunk, with how many of the chunk's layers (forward order)
hold that micro-batch's activations then (`megatron_fsdp.Moment`). The queue empties at each
micro-batch's post-backward (megatron_fsdp.py:876-901 d98e8a64, reduce and reset every backward
under optim_grads and optim_grads_params), so every micro-batch's backward starts it empty. The
activations then are at most the rank's peak A (`stage_activations`) less what the chunk kept
of the layers whose backward is done (or whose forward has not run): A - freed(h) with h layers
holding (`freed_bytes`); the buffers add max over moments of (bytes - freed(h)) to A
(`coupled`), never less than 0. What the layers keep, A - freed(h) counts exactly where the
running micro-batch's backward starts at the rank's peak: pp 1 (every micro-batch's backward
starts with all its layers held), and 1F1B's first steady backward; elsewhere (interleaved
chunks, a forward's window) it bounds what is held from above, since what is held before the
moment is at most A. The working set on top stays the peak's at every moment (the safe side:
the loss's logits, freed before the decoder layers' backward, stay counted).

A layer's activations are freed by its backward (autograd releases its saved tensors). Under
Megatron's CPU offloading of whole layers (--cpu-offloading-num-layers k, pp 1, no recompute)
Transformer Engine reloads layer i as the backward reaches layer n - 1 - k + i, having released
the layer before (TransformerEngine d0067d0d pytorch/cpu_offload.py:538-539, :616-624,
:646-647): layer L's backward holds layers L - (n - k) + 1 .. L, the n - k layers the forward
held at its peak (`cpu_offload.peak_window`), so with equal layers nothing is freed until the
window reaches layer 0.

The bound (freed 0 at every moment: the buffers' largest moment on top of A) is kept where the
held activations do not follow the layers this way: full recompute (a recomputed group's
working set rebuilt ahead of its backward), fine-grained activation offloading (reload windows
and the offload margin), CUDA graphs (their static buffers and private pool), bf16 layers
among quantised ones (their bytes blended per chunk, `bf16_blend`), and the EP overlap
(combined 1F1B runs a micro-batch's forward inside another's backward). Double buffering's pool
is held all step (`Moment` None). Megatron-LM's --use-torch-fsdp2 lines (`Layout.use_torch_fsdp2`)
have torch FSDP2's buffers (`planner.model.torch_fsdp2`), counted whole on top of the peak: no
profile, no coupling."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

from planner.inputs.layout import Layout
from planner.model.layer_kept import PerLayer
from planner.model.megatron_fsdp import Profile
from planner.model.schedule import Chunks
from planner.model.shard import Shard

Freed = tuple[float, ...] | None
"""A chunk's `freed_bytes` by count of layers holding (None: the bound, nothing freed)."""


def freed_bytes(layers: Sequence[float], offloaded: int = 0) -> tuple[float, ...]:
    """For h = 0 .. n layers of a chunk (`layers`: each one's kept bytes, forward order) holding
    a micro-batch's activations, the chunk's kept bytes (`layer_kept.chunk_kept`: all of them,
    or under CPU offloading of the first `offloaded` the largest n - k consecutive) less those
    held: layers 0 .. h - 1, or under offloading the n - k up to h - 1."""
    n = len(layers)
    k = min(offloaded, n - 1)
    sums = [0.0, *accumulate(layers)]
    if k <= 0:
        return tuple(sums[n] - sums[h] for h in range(n + 1))
    span = n - k
    kept = max(sums[a + span] - sums[a] for a in range(k + 1))
    return tuple(kept - (sums[h] - sums[max(0, h - span)]) for h in range(n + 1))


def coupled(profile: Profile, freed: Sequence[Freed]) -> float:
    """The bytes Megatron-FSDP's unit buffers add to the activations' peak: over each chunk's
    moments (`profile`), the buffers' bytes less what the chunk has freed by then (`freed`, one
    per chunk; a moment past the chunk's layers, its MTP units, frees nothing more than all
    held); at least 0."""
    most = 0.0
    for moments, fr in zip(profile, freed, strict=True):
        for h, alive in moments:
            if fr is not None and h is not None:
                alive -= fr[min(h, len(fr) - 1)]
            if alive > most:
                most = alive
    return most


def chunk_freed(
    kinds: Sequence[int],
    layout: Layout,
    chunks: Chunks,
    sh: Shard,
    per: PerLayer,
    blended: bool,
) -> tuple[Freed, ...]:
    """Each chunk's `freed_bytes` on a rank with `chunks`, its layers of kinds `kinds` (indices in
    `ModelArch.kinds`, by layer), kept bytes `per`; None (the bound) where the held activations
    do not follow the layers (module docstring; `blended`: bf16 layers among quantised ones)."""
    bound = layout.recompute == "full" or bool(sh.offload) or sh.cuda_graphs
    if bound or blended or layout.ep_comm_overlap:
        return tuple(None for _ in chunks)
    k = layout.cpu_offloading_num_layers
    return tuple(freed_bytes([per.kept[kinds[i]] for i in c], k) for c in chunks)
