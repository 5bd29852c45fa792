"""The world size of a functional-test run read off its allocated memory, and the check that a
run's speed is possible on its named GPU (benchmarks/functional_gpus.py).

Oracles: the CI recipes' world sizes of the regular cases (the inference never sees them), hand
arithmetic in the comments, and golden_values.json read directly.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest
from paths import BENCHMARKS, REPO

sys.path.insert(0, str(REPO))

from benchmarks import functional_gpus as fg
from benchmarks import functional_steps as fs
from benchmarks.runs import cluster
from planner.model import flops

DATA = BENCHMARKS / "data" / "megatron_functional_tests"
GIB = 2**30


def test_decide_by_hand() -> None:
    # measured 16.49 GiB; candidates 29.66 / 20.81 / 16.39 / 14.18 GiB at 32 / 64 / 128 / 256
    # GPUs (Mixtral 8x7B, tp 2 pp 4 ep 4): |log| 0.587, 0.233, 0.006, 0.151 -> 128, and the
    # runner-up 256 at 0.151 >= max(0.10, 2 x 0.006)
    measured = 16.49 * GIB
    got = fg.decide(
        [(32, 29.66 * GIB), (64, 20.81 * GIB), (128, 16.39 * GIB), (256, 14.18 * GIB)], measured
    )
    assert got is not None and got.num_gpus == 128
    assert got.error == pytest.approx(16.39 / 16.49 - 1)
    assert got.runner_up is not None and got.runner_up[0] == 256
    # two counts the memory cannot tell apart (12.39 vs 11.93 GiB against 12.36: |log| 0.002 and
    # 0.035 < 0.10): undecided
    assert fg.decide([(128, 12.39 * GIB), (192, 11.93 * GIB)], 12.36 * GIB) is None
    # the best 12% off (|log| 0.113 > MATCH 0.10): undecided
    assert fg.decide([(64, 1.12 * GIB)], 1.0 * GIB) is None
    assert fg.decide([], 1.0 * GIB) is None


def test_never_wrong_where_the_recipe_gives_the_count() -> None:
    # oracle: the CI recipes' nodes x GPUs per node of the regular cases, which `infer` never
    # reads; it must decide some and get none wrong
    right, wrong, _undecided, wrongs = fg.check_known()
    assert wrong == 0, wrongs
    assert right >= 20


def test_release_rows_take_the_inferred_count() -> None:
    # oracle: golden_values.json; Mixtral 8x7B alltoall on H100 reads 128 GPUs (the hand
    # arithmetic of test_decide_by_hand), and tokens/s/GPU = 1024 x 4096 / step / 128
    cases = fs.load_release_steps()
    assert len(cases) >= 6
    assert not any(c.raw["gpus_from_memory"] for c in fs.load_functional_steps())
    assert all(c.group.startswith("release-") for c in cases)
    c = next(
        c for c in cases if c.id == "mixtral/mixtral_8x7b_alltoall_tp2pp4ep4_release@dev_dgx_h100"
    )
    assert c.job.cluster.num_gpus == 128
    assert c.job.global_batch_size == 1024 and c.job.seq_length == 4096
    assert c.tokens_per_s_per_gpu == pytest.approx(1024 * 4096 / c.raw["step_time_s"] / 128)
    lines = {x["name"]: x for x in json.loads((DATA / "command_lines.json").read_text())["cases"]}
    assert all(lines[c.raw["case"]]["test_type"] == fg.RELEASE for c in cases)


def test_faster_than_gpu_by_hand() -> None:
    # Mixtral 8x22B (39B active of 141B) at 1187 tokens/s/GPU is about 6 x 39e9 x 1187 = 278
    # TFLOP/s of model FLOPs: above A100's matmul ceiling (312 x its MAMF fraction, 271 TFLOP/s),
    # far under H100's; the golden file named A100 is left out, its H100 twin kept
    skipped = dict(fs.load_with_skips()[1])
    assert "not run on it" in skipped["mixtral/mixtral_8x22b_tp2pp8ep8vpp1_release (lts_dgx_a100)"]
    rows = {c.id: c for c in fs.load_release_steps()}
    c = rows["mixtral/mixtral_8x22b_tp2pp8ep8vpp1_release@dev_dgx_h100"]
    # the rule at its edge: the step time at which the run does exactly A100's ceiling
    a100 = replace(c.job, cluster=cluster("a100-sxm-80gb", c.job.cluster.num_gpus))
    gpu = a100.cluster.gpu
    ceiling = gpu.peak_flops("bf16") * (gpu.mamf_tflops_bf16 or 0) / gpu.peak_tflops_bf16
    model = flops.model_flops(c.job.arch, c.job.seq_length, c.job.global_batch_size)
    edge = model / c.job.cluster.num_gpus / ceiling
    assert fg.faster_than_gpu(a100, 0.99 * edge) and not fg.faster_than_gpu(a100, 1.01 * edge)
    assert not fg.faster_than_gpu(c.job, c.raw["step_time_s"])
