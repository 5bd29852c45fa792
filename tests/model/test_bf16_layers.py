"""The decoder layers an FP8 / NVFP4 job keeps in bf16 (planner.model.bf16_layers; Megatron
--first-last-layers-bf16): which layers of a rank they are, their time (the job's bf16 twin's
layer), their weights (bf16, out of the quantised ones) and activations (16-bit inputs), and the
plan's checks.

Oracles: Megatron-Core's rule (fp4_utils.py `get_fp4_context` d98e8a64: layer i is bf16 when
i < start or i >= num_layers - end), a brute-force walk over a rank's layers, and hand counts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from jobs import job
from plan_text import CLUSTER, MODEL, PARALLEL, load_error, plan_text, write

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import memory
from planner.model.bf16_layers import bf16_ranges, bf16_twin
from planner.model.rank_mix import rank_mix
from planner.model.stage_params import quantised_params
from planner.model.stage_time import layout_times
from planner.search import rules

B200 = "b200-sxm-180gb"


def _fp4(**kw: object) -> Job:
    return job("llama3.1-8b", B200, 8, 8192, 64, precision="fp4", **kw)


def test_which_layers_of_a_rank_are_bf16() -> None:
    # 32 layers, pp 4 x vpp 2: chunks of 4; rank 0 holds 0-3 and 16-19, rank 3 12-15 and 28-31;
    # start 2, end 3: layers 0, 1 and 29, 30, 31
    j = _fp4(bf16_layers_at_start=2, bf16_layers_at_end=3)
    chunks = Layout(pp=4, vpp=2).chunk_layers(32)
    assert bf16_ranges(j, chunks[0]) == (range(0, 2),)
    assert bf16_ranges(j, chunks[1]) == bf16_ranges(j, chunks[2]) == ()
    assert bf16_ranges(j, chunks[3]) == (range(29, 32),)
    plain = job("llama3.1-8b", B200, 8, 8192, 64, bf16_layers_at_start=2)  # a bf16 job: none
    assert bf16_ranges(plain, chunks[0]) == ()


@pytest.mark.parametrize(
    ("recompute", "method", "k"),
    [("none", "uniform", 1), ("full", "block", 2), ("full", "uniform", 1)],
)
def test_a_ranks_mix_times_each_layer_as_a_walk_over_its_layers_does(
    recompute: str, method: str, k: int
) -> None:
    # brute force: each decoder layer of the rank, bf16 or not, recomputed (the first k of its
    # chunk under block recompute) or plain, timed by the job's or its bf16 twin's layer
    j = _fp4(bf16_layers_at_start=3, bf16_layers_at_end=1)
    lay = Layout(pp=2, vpp=2, dp=4, recompute=recompute, recompute_method=method,
                 recompute_num_layers=k)  # fmt: skip
    low, high = layout_times(j, lay), layout_times(bf16_twin(j), lay)
    for rank, chunks in enumerate(lay.chunk_layers(32)):
        mix, _ = rank_mix(j, lay, rank, chunks, layout_times(j, lay))
        walked = 0.0
        for c in chunks:
            for i in c:
                bf16 = i < 3 or i >= 31
                recomputed = method != "block" or i - c.start < k
                t = high if bf16 else low
                layer = (t.layers if recomputed else t.plain)[0]
                walked += layer.fwd + layer.bwd + layer.recompute
        assert sum(n * (x.fwd + x.bwd + x.recompute) for x, n in mix) == pytest.approx(walked)
        assert sum(n for _, n in mix) == 16


def test_bf16_layers_are_slower_and_keep_bf16_weights() -> None:
    lay = Layout(dp=8, zero_stage=1)
    j = _fp4(bf16_layers_at_end=4)
    t = layout_times(j, lay)
    assert t.bf16[0].fwd > t.layers[0].fwd  # no FP4 tensor cores for them
    chunks = lay.chunk_layers(32)[0]
    # 28 of 32 identical layers stay quantised
    all_q = quantised_params(_fp4(), lay, 0, chunks)[0]
    assert quantised_params(j, lay, 0, chunks)[0] == pytest.approx(all_q * 28 / 32)
    # so more weight bytes and 16-bit activations: never less memory than with none
    more = memory.estimate(j, lay).peak
    assert more > memory.estimate(_fp4(), lay).peak


def test_plan_checks(tmp_path: Path) -> None:
    b200 = '[cluster]\ngpu = "b200-sxm-180gb"\nnum_gpus = 8\n'
    base = "[training]\nseq_length = 8192\nglobal_batch_size = 64\n"
    cases = {
        "bf16_layers_at_end = 2\n": 'layers kept in bf16 need precision "fp8" or "fp4"',
        'precision = "fp8"\nbf16_layers_at_start = 1\n': "delayed FP8 scaling does not support",
        'precision = "fp4"\nbf16_layers_at_start = 16\nbf16_layers_at_end = 16\n': "leave none",
    }
    for extra, message in cases.items():
        err = load_error(write(tmp_path, plan_text(MODEL, b200, base + extra, PARALLEL)))
        assert "training.bf16_layers_at_" in err and message in err
    h100 = load_error(write(tmp_path, plan_text(MODEL, CLUSTER, base + 'precision = "fp4"\n')))
    assert 'training.precision: "fp4"' in h100 and "no FP4 tensor cores" in h100


def test_megatron_bounds_the_bf16_layers_per_stage_under_fp8_only() -> None:
    # TransformerConfig: at most num_layers // pp = 32 // 8 = 4 at each end under FP8
    fp8 = job("llama3.1-8b", B200, 8, 8192, 64, precision="fp8", fp8_recipe="tensorwise",
              bf16_layers_at_start=5)  # fmt: skip

    def broken(j: Job, lay: Layout) -> set[str]:
        return {v.rule for v in rules.violations(j, lay)}

    assert "bf16_layers" in broken(fp8, Layout(pp=8))
    assert "bf16_layers" not in broken(fp8, Layout(pp=4))
    assert "bf16_layers" not in broken(_fp4(bf16_layers_at_start=5), Layout(pp=8))
