"""torchtitan's routed-expert rows without expert parallelism, for memory
(planner.model.routing_load.memory_load at ep 1, titan_local_load).

Oracles: each rank reorders its own T x k copies and nothing else (pytorch/torchtitan b5bcd76c
models/common token_dispatcher.py:92-100, :129-139: N = T x K rows, no dropping, no
all-to-all); e347b1e5 first pads them for its grouped GEMMs wherever the experts have no ep mesh
(its models moe moe.py:166-175): `_permute` (utils.py:42-59) gathers
round_up(T k + E a, a) rows, TOKEN_GROUP_ALIGN_SIZE_M a = 8 (utils.py:15), 16 under the float8
grouped converter (components/quantization/__init__.py:17, float8.py:202), the index vector
allocated at that length (kernels.py:81, :117). Hand arithmetic for the figures; a brute force of
generate_permute_indices' group sizes (kernels.py:184-188: each expert's count clamped to at least
a and rounded up to a) for the bound.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.inputs.torchtitan import TorchtitanSection
from planner.model.routing_load import memory_load, memory_loads
from planner.model.shard import MOE_LOAD_IMBALANCE

TITAN = {"framework": "torchtitan"}


def test_qwen3_30b_at_ep1_is_its_padded_rows() -> None:
    # T = 1 x 4096, k = 8: 32,768 copies; E = 128 experts of 8 rows' room: 1,024;
    # round_up(33,792, 8) = 33,792 rows: 33,792 / 32,768 = 1.03125 (not the 1.2 planning value)
    j = job("qwen3-30b-a3b", "h100-sxm-80gb", 8, 4096, 8, **TITAN)
    lay = Layout(dp=8, zero_stage=3)
    assert memory_load(j, lay) == pytest.approx(33_792 / 32_768)
    assert memory_loads(j, lay) == (pytest.approx(1.03125), pytest.approx(1.03125))


def test_float8_experts_align_to_16_rows() -> None:
    # float8.py:202 sets 16: 128 x 16 = 2,048 rows of room: 34,816 / 32,768 = 1.0625
    j = job(
        "qwen3-30b-a3b", "h100-sxm-80gb", 8, 4096, 8, precision="fp8", fp8_recipe="rowwise",
        torchtitan=TorchtitanSection(float8_experts=True), **TITAN,
    )  # fmt: skip
    assert memory_load(j, Layout(dp=8, zero_stage=3)) == pytest.approx(34_816 / 32_768)


def test_whole_tokens_under_tp_and_a_cp_share() -> None:
    # deepseek-v2-lite, mbs 2, seq 4096, cp 2, tp 2 at ep 1: the experts are tensor-parallel
    # over the tp mesh and see the whole 2 x 4096 / 2 = 4,096 tokens, k = 6: 24,576 copies;
    # 64 x 8 = 512 rows of room: 25,088 / 24,576
    j = job("deepseek-v2-lite", "h100-sxm-80gb", 8, 4096, 8, **TITAN)
    lay = Layout(tp=2, cp=2, dp=2, micro_batch_size=2, sequence_parallel=True, zero_stage=3)
    assert memory_load(j, lay) == pytest.approx(25_088 / 24_576)


def test_rows_round_up_to_the_alignment() -> None:
    # seq 1001, k = 6: 6,006 copies; + 512 = 6,518, rounded up to a multiple of 8: 6,520
    j = job("deepseek-v2-lite", "h100-sxm-80gb", 8, 1001, 8, **TITAN)
    assert memory_load(j, Layout(dp=8, zero_stage=3)) == pytest.approx(6_520 / 6_006)


def test_megatron_at_ep1_keeps_the_planning_value() -> None:
    # Megatron's ep-1 rows are calibrated with MOE_LOAD_IMBALANCE (unchanged)
    j = job("qwen3-30b-a3b", "h100-sxm-80gb", 8, 4096, 8)
    assert memory_load(j, Layout(dp=8, zero_stage=1)) == MOE_LOAD_IMBALANCE


@pytest.mark.parametrize(("align", "float8"), [(8, False), (16, True)])
def test_bound_covers_every_routing(align: int, float8: bool) -> None:
    # brute force: generate_permute_indices' groups (each expert's count clamped to >= a,
    # rounded up to a) never need more rows than the bound, under skewed and empty routings
    j = job(
        "qwen3-30b-a3b", "h100-sxm-80gb", 8, 1024, 8, precision="fp8" if float8 else "bf16",
        torchtitan=TorchtitanSection(float8_experts=float8), **TITAN,
    )  # fmt: skip
    experts, k, tokens = 128, 8, 1024
    bound = memory_load(j, Layout(dp=8, zero_stage=3)) * tokens * k
    rng = np.random.default_rng(7)
    for skew in (0.0, 1.0, 3.0):
        for _ in range(200):
            weights = rng.random(experts) ** (1 + skew * 4)
            counts = rng.multinomial(tokens * k, weights / weights.sum())
            groups = sum(math.ceil(max(c, align) / align) * align for c in counts)
            assert groups <= bound + 1e-9
