"""Fine-grained offloading's memos (`fine_offload._GROUP_MOVES`, `offload_chunks._MOVING` and
`_SUMS`, `layer_kept._MARGIN`) against the figures computed afresh: filled first by a grid of
Mixtral layouts that differ in every field they read (the offloaded modules, the fraction, the
recompute policy, method and N, the split into ranks and chunks, the micro-batch), so a key
that left out something they read would return another layout's; then each layout's GPU
memory, host memory and per-rank host copies are checked bit for bit against the same figures
with every memo emptied (the oracle: the model's own code, without the memos)."""

from __future__ import annotations

import itertools

from jobs import job

from planner.inputs.layout import Layout
from planner.model import fine_offload, host_memory, layer_kept, memory, offload_chunks
from planner.model.job_memo import JobMemo
from planner.model.stage_offload import offload_one_way
from planner.model.stage_time import layout_times

MODULES = (("expert_fc1",), ("expert_fc1", "moe_act"), ("core_attn", "attn_proj"), ("moe_act",))
RECOMPUTE = (
    {"recompute": "none"},
    {"recompute": "full", "recompute_method": "block", "recompute_num_layers": 1},
    {"recompute": "full", "recompute_method": "block", "recompute_num_layers": 2},
    {"recompute": "full", "recompute_method": "uniform", "recompute_num_layers": 1},
    {"recompute": "selective"},
)


def _forget() -> None:
    JobMemo.forget_all()
    for memo in (
        fine_offload._GROUP_MOVES,
        offload_chunks._MOVING,
        offload_chunks._SUMS,
        layer_kept._MARGIN,
        layer_kept._KEPT,
    ):
        memo.clear()


def test_offload_figures_read_from_the_memos_are_computed_afresh() -> None:
    j = job("mixtral-8x7b", "h100-sxm-80gb", 64, 4096, 256)
    lays = [
        Layout(
            dp=64 // pp,
            pp=pp,
            vpp=vpp,
            ep=8,
            sequence_parallel=True,
            zero_stage=1,
            micro_batch_size=mbs,
            offload_modules=mods,  # type: ignore[arg-type]
            activation_offload_fraction=fraction,
            **rec,  # type: ignore[arg-type]
        )
        for pp, vpp, mbs, mods, fraction, rec in itertools.product(
            (2, 4), (1, 2), (1, 2), MODULES, (1.0, 0.5), RECOMPUTE
        )
    ]

    def figures(lay: Layout) -> tuple[object, ...]:
        t = layout_times(j, lay)
        ranks = lay.chunk_layers(j.arch.num_layers)
        return (
            memory.estimate(j, lay),
            host_memory.activation_bytes(j, lay),
            tuple(offload_one_way(j, lay, c, t, r) for r, c in enumerate(ranks)),
        )

    _forget()
    warm = [figures(lay) for lay in lays]
    # shared between layouts and ranks: fewer entries than the chunks the layouts hold
    assert 0 < len(offload_chunks._SUMS._entries) < sum(lay.pp * lay.vpp for lay in lays)
    for lay, want in zip(lays, warm, strict=True):
        _forget()
        assert figures(lay) == want, lay.describe()
