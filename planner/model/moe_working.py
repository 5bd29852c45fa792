"""What one mixture-of-experts layer holds while it runs, beyond what the stage keeps: the stage's
working set for its MoE layers (`planner.model.stage_activations`), one layer at a time.

The dispatcher's and the experts' tokens in flight (`moe_activations.dispatch_working_bytes`);
under selective recompute of "moe" the block its backward rebuilds, with the forward's or the
backward's tokens in flight on top (`_rebuilt_moe`); with the EP communication overlap the
layer merged beyond a micro-batch; with the paged stash the expert tensors at the budget's rows
(`_unstashed_bytes`).
"""

from __future__ import annotations

from dataclasses import replace

from planner.inputs.arch import ModelArch
from planner.inputs.layout import Layout
from planner.model import activations as act
from planner.model.job_memo import ModelMemo
from planner.model.moe_activations import dispatch_working_bytes, moe_bytes
from planner.model.shard import Shard

_WORKING: ModelMemo[tuple[object, ...], float] = ModelMemo()
"""`moe_working` per model and what it reads of the rest (the shard, the layout's dispatcher, EP
degree and EP overlap, and `full`): the search asks it of each pipeline rank a memory estimate
computes, on the same shard (DeepSeek-V3 on 2,048 H800: 4,492 calls, 756 distinct). All it reads
is model arithmetic, no calibrated constant (`memory.ACTIVATION_SCALE` is applied by the
caller)."""


def moe_working(arch: ModelArch, sh: Shard, layout: Layout, full: tuple[float, ...]) -> float:
    """Bytes an MoE layer of the stage holds while it runs, not kept afterwards; `full`, each
    layer kind's whole activations (`layer_kept.PerLayer.full`). Remembered (`_WORKING`)."""
    dispatcher = _dispatcher(layout)
    key = (sh, dispatcher, layout.ep, layout.ep_comm_overlap, full)
    overlap = layout.ep_comm_overlap
    return _WORKING.get(
        arch, key, lambda: _moe_working(arch, sh, dispatcher, layout.ep, overlap, full)
    )


def _moe_working(
    arch: ModelArch, sh: Shard, dispatcher: str, ep: int, overlap: bool, full: tuple[float, ...]
) -> float:
    """`moe_working`, computed."""
    moe = dispatch_working_bytes(arch, sh, dispatcher, ep)
    if sh.drops("moe"):
        # the checkpointed MoE block rebuilt whole in its backward, alive while the rebuild's
        # forward tokens and then its backward's are in flight (the larger: `moe`)
        moe += _rebuilt_moe(arch, sh)
    if overlap:
        # the merged forward and backward hold one layer beyond a micro-batch (`in_flight`)
        moe += max(b for b, k in zip(full, arch.kinds, strict=True) if k.moe)
    return moe + _unstashed_bytes(arch, sh, full)


def _rebuilt_moe(arch: ModelArch, sh: Shard) -> float:
    """What the backward of a layer whose MoE block selective recompute checkpoints ("moe":
    moe_layer.py runs custom_forward under tensor_parallel.checkpoint, d98e8a64) rebuilds before
    it runs: the block's activations it did not keep (the other modules the policy drops, such
    as moe_act, still dropped inside it)."""
    whole = replace(sh, modules=sh.modules - {"moe"})
    return moe_bytes(arch, whole) - moe_bytes(arch, sh)


def _unstashed_bytes(arch: ModelArch, sh: Shard, full: tuple[float, ...]) -> float:
    """What the MoE layer running holds beyond what it keeps (`Shard.moe_work_load`, Megatron's
    paged stash beside HybridEP's budget): its expert tensors at the budget's rows until the
    stash takes them at its own, the largest MoE kind's difference; 0 where the two are one."""
    if sh.moe_work_load is None:
        return 0.0
    work = replace(sh, moe_load=sh.moe_work_load)
    return max(
        act.layer_bytes(arch, k, work, recompute=False) - whole
        for k, whole in zip(arch.kinds, full, strict=True)
        if k.moe
    )


def _dispatcher(layout: Layout) -> str:
    if layout.moe_token_dispatcher_type == "flex":
        return "hybridep" if layout.moe_flex_dispatcher_backend == "hybridep" else "flex"
    return layout.moe_token_dispatcher_type
