"""The module Megatron's selective recompute rebuilds in the backward: working memory on top of
what the layers keep, as full recompute's rebuilt layer is (`layer_kept.recompute_working`).

A checkpointed module keeps only its inputs; its backward runs the forward again and holds what
the forward would have kept until its own backward frees it (Megatron-LM d98e8a64
tensor_parallel/random.py:591-687, `CheckpointFunction.backward`: the forward is replayed,
then `torch.autograd.backward` on its outputs). The mlp module checkpoints the dense MLP on its
input (transformer_layer.py:992-1010); core_attn without flash attention rebuilds the scores and
softmax (attention.py:446-495). One module is rebuilt at a time: the backward's peak holds the
largest of the set, in the layer kinds the stage has. The MoE modules have their own working set
(`planner.model.moe_working`, which rebuilds the MoE block with the tokens in flight)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import LayerKind
from planner.model import activations as act
from planner.model.job_memo import ModelMemo
from planner.model.shard import Shard

MOE_OWN = frozenset({"moe"})
"""The selective module whose rebuilt activations `planner.model.moe_working` counts."""


_REBUILT: ModelMemo[tuple[Shard, tuple[LayerKind, ...]], float] = ModelMemo()
"""`rebuilt_bytes` per model, shard and kinds present (each stage's activation estimate asks)."""


def rebuilt_bytes(arch: ModelArch, sh: Shard, kinds: Iterable[LayerKind]) -> float:
    """Bytes the largest module of the selective set adds while the backward rebuilds it: what
    a layer of the kinds present keeps with the module left out of the set, less what it keeps
    with it; 0 outside selective recompute."""
    if sh.recompute != "core_attn":
        return 0.0
    present = tuple(kinds)
    return _REBUILT.get(arch, (sh, present), lambda: _rebuilt(arch, sh, present))


def _rebuilt(arch: ModelArch, sh: Shard, kinds: tuple[LayerKind, ...]) -> float:
    best = 0.0
    for kind in kinds:
        kept = act.layer_bytes(arch, kind, sh, recompute=False)
        for module in sh.modules - MOE_OWN:
            whole = act.layer_bytes(arch, kind, replace(sh, modules=sh.modules - {module}), False)
            best = max(best, whole - kept)
    return best
