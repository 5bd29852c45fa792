"""Every measured row of the dev set is physically possible on the GPU it names.

Oracle: the part's tensor-core peak. A run cannot do more model FLOPs per second per GPU than
its GPU's dense peak at the fastest precision its linear layers use (`Gpu.peak_linear`: the bf16,
FP8 or FP4 peak of the catalog), whatever it overlaps or fuses: model FLOPs (the 6N + attention
convention of `planner.model.flops`, recompute not counted) never exceed what the GPU executes.
A row that implies more was entered wrong (a GPU count, a batch, a step time or the model's
shape), as Megatron-LM's MoE layer benchmark was while it built its proxies' experts gated
(tests/model/test_moe_layer_perf.py). The highest measured rate in the dev set is 65% of the
peak (2026-12-04), so the bound is far from binding on a row entered right."""

from __future__ import annotations

from benchmarks import fidelity
from planner.model.flops import model_flops_per_token
from planner.model.layer_time import gpu_of


def test_no_row_beats_its_gpus_peak() -> None:
    rows = fidelity.dev_set(note=lambda _: None)
    assert len(rows) > 400  # published, MLPerf, functional and release rows all loaded
    over = []
    for c in rows:
        job = c.job
        rate = model_flops_per_token(job.arch, job.seq_length) * c.tokens_per_s_per_gpu
        peak = gpu_of(job).peak_linear
        if rate >= peak:
            over.append(f"{c.id}: {rate / peak:.0%} of the peak")
    assert over == []
