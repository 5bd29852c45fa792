"""Offload groups Megatron keeps on the GPU beyond the activation offload fraction
(planner.model.layer_kept.kept_back, chunk_kept's tail, margin_bytes).

Oracle: Megatron-LM d98e8a64 megatron/core/pipeline_parallel/fine_grained_activation_offload.py:
should_bulk_offload (:1217-1225: on the chunk whose backward is next, each name's last group is
not offloaded: the last pipeline rank's last chunk, whose backward follows its own forward);
post_warmup_callback's offload margin (:622-639: as many names as a chunk opens, each name's last
group in the first handler to run backward, micro-batch 0 of the rank's last chunk, once per
step, the handlers cached and reused, :804-818), taken out of the fraction's count (:650-655); a
model chunk's MTP layers open their groups after its decoder layers' (gpt_model.py:628-712, one
chunk handler per forward, :600). The byte counts are hand arithmetic from Mixtral 8x7B's shapes
(h 4096, expert FFN 14336, gated, top-2) and DeepSeek-V3's (test_offload_attention_output)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_offload_fraction_groups import mixtral

from planner.inputs import catalog
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, load_plan
from planner.model import memory
from planner.model.fine_offload import Moved, group_bytes
from planner.model.layer_kept import PerLayer, chunk_kept, chunks_kept, per_layer
from planner.model.stage_activations import shard, stage_activations

RECIPE = (
    Path(__file__).parents[2] / "examples/recipes/deepseek-v3-pretrain-64gpu-gb300-bf16-fsdp.toml"
)
DSV3_QKV_OUT = 2 * 8192 * 128 * (2 * 192 + 128) + 2 * 8192 * 128 * 128
"""DeepSeek-V3 at 8192 tokens a micro-batch, t = 1: Q, K, V and the output, 1.25 GiB a layer."""


def _mixtral(fraction: float) -> tuple[Job, Layout]:
    # Mixtral 8x7B on 64 H100s, seq 6144, tp 1 pp 4 vpp 8 ep 8: one layer a chunk, 16
    # micro-batches; expert_fc1 and moe_act offloaded
    return mixtral(("expert_fc1", "moe_act"), fraction)


def _acts(j: Job, lay: Layout, rank: int) -> float:
    sh = shard(j, lay)
    chunks = lay.chunk_layers(j.arch.num_layers)[rank]
    return stage_activations(j, lay, rank, chunks, sh, per_layer(j.arch, sh))


def _x(j: Job, lay: Layout) -> float:
    """X: one Mixtral layer's two groups (expert_fc1, then moe_act), hand arithmetic checked."""
    sh = shard(j, lay)
    moe = next(k for k in j.arch.kinds if k.moe)
    x = sum(b for _, b in group_bytes(j.arch, moe, sh, frozenset(lay.offload_modules)))
    n = 6144 * 2 * sh.moe_load  # routed pairs on a GPU's layer (test_offload_fraction_groups)
    assert x == pytest.approx(n * 4096 * 2 + n * (2 * 14336 * 2 + 4))
    return x


def test_the_last_ranks_last_chunk_keeps_each_names_last_group() -> None:
    # rank 3 of pp 4, 8 chunks of one MoE layer: at fraction 1 every chunk moves both groups
    # but the last, whose backward follows its own forward and which keeps each name's last
    # group, here both (:1217-1225), for each of its micro-batches: X a micro-batch more
    j, one = _mixtral(1.0)
    sh = shard(j, one)
    chunks = one.chunk_layers(j.arch.num_layers)[3]
    pers = (per_layer(j.arch, sh),) * len(chunks)
    plain = chunks_kept(j.arch, one, pers, chunks)
    kept = chunks_kept(j.arch, one, pers, chunks, True)
    assert kept[:-1] == plain[:-1]
    assert kept[-1] - plain[-1] == pytest.approx(_x(j, one))
    # and at fraction 0, where both stay anyway, nothing more
    _, zero = _mixtral(0.0)
    sh0 = shard(j, zero)
    pers0 = (per_layer(j.arch, sh0),) * len(chunks)
    assert chunks_kept(j.arch, zero, pers0, chunks, True) == chunks_kept(
        j.arch, zero, pers0, chunks
    )


def test_the_margin_keeps_one_layers_groups_once_a_step() -> None:
    # rank 2 of the same plan. At fraction 0 every group stays (int(2 x 1) = 2 of 2), no reload
    # window; at fraction 1 every group moves but micro-batch 0 of the last chunk's, the
    # margin's (two names, :622-639), once a step; plus the 2 layers of the reload window. In
    # flight at the peak: the warm-up's 2 (3 - 2) + 7 x 4 forwards and one more, 31, all chunks
    # alike (one MoE layer each). So f0 - f1 = (31 - 1 - 2) X; before, (31 - 2) X.
    j, zero = _mixtral(0.0)
    _, one = _mixtral(1.0)
    assert _acts(j, zero, 2) - _acts(j, one, 2) == pytest.approx((31 - 1 - 2) * _x(j, one))


def test_mtp_groups_open_last_in_the_last_chunk() -> None:
    # a chunk of three layers, one group each freeing 10 bytes, and one MTP layer's group of 10
    # after them, fraction 0.5: int(4 x 0.5) = 2 stay, the last two (the third layer's and the
    # MTP layer's): 20 kept back. Counted apart, the chunk int(3 x 0.5) = 1 and the MTP layer
    # int(1 x 0.5) = 0: 10.
    g = (Moved(10.0, 10.0, 10.0),)
    per = PerLayer((5.0,), (50.0,), (5.0,), (g,), (g,), 0.5, (("core_attn",),))
    lay = Layout(dp=1)
    arch = catalog.get_model("llama3.1-8b")
    chunk = range(0, 3)
    assert chunk_kept(arch, lay, per, chunk) == pytest.approx(3 * 5 + 10)
    tail = (("core_attn", Moved(10.0, 10.0, 10.0)),)
    assert chunk_kept(arch, lay, per, chunk, tail=tail) == pytest.approx(3 * 5 + 20)
    # the last rank's last chunk: each name's last group (the MTP layer's) stays too; already
    assert chunk_kept(arch, lay, per, chunk, None, True, tail) == pytest.approx(3 * 5 + 20)


def test_mtp_layer_joins_the_fraction_of_the_last_chunk(tmp_path: Path) -> None:
    # DeepSeek-V3 on 64 GB300 in FP8 (pp 1: one chunk of 61 layers, the MTP layer's groups
    # last), core_attn at fraction 0.5: of 62 groups int(62 x 0.5) = 31 stay (the MTP layer's
    # among them, also the last to open on a stage whose backward follows its forward), so
    # 62 - 31 = 31 layers free Q, K, V and the output, 1.25 GiB each, less the window's 2.
    # (Before: the decoder's int(61 x 0.5) = 30 and the MTP layer's int(0.5) = 0 stayed: 32.)
    text = RECIPE.read_text().replace(
        'precision = "bf16"', 'precision = "fp8"\nfp8_recipe = "tensorwise"'
    )
    text = text.replace('"layernorm", "mla_up_proj", "moe_act"', '"layernorm", "moe_act"')
    path = tmp_path / "fp8.toml"
    path.write_text(text)
    plan = load_plan(path)
    lay = plan.require_layout()
    frag = memory.fragmentation(plan.job)
    # the activations of its one stage (Megatron-FSDP's buffers beside them are coupled with
    # the freed layers only without fine-grained offloading, planner/model/fsdp_coupling.py)
    plain = memory.estimate(plan.job, lay.with_(offload_modules=())).stages[0].activations
    half = lay.with_(offload_modules=("core_attn",), activation_offload_fraction=0.5)
    core = memory.estimate(plan.job, half).stages[0].activations
    assert plain - core == pytest.approx(frag * (31 - 2) * DSV3_QKV_OUT)
