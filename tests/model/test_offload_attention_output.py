"""Fine-grained offloading of core attention's output (planner.model.fine_offload): what the
core_attn and attn_proj groups free on the GPU, copy to the host and reload.

Oracles, Megatron-LM d98e8a64: core attention runs in the core_attn group and that group releases
only Q, K and V by force (attention.py:1566-1607; MLA multi_latent_attention.py:393-432); the
output projection, outside it, saves the kernel's output in bf16 (attention.py:1626-1629, MLA
:463-466), released only by attn_proj (:1629); each group copies every tensor it holds and
replaces only its own reference (fine_grained_activation_offload.py:895-935, :1093-1124: no
dedup across groups); mla_up_proj discards Q, K and V after the group has copied them
(multi_latent_attention.py:430-457); a checkpointed core attention runs outside the group
(attention.py:1555-1564). The byte counts are hand arithmetic from the shapes in the comments."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from jobs import job

from planner.inputs import catalog
from planner.inputs.layout import Layout
from planner.inputs.plan import load_plan
from planner.inputs.units import GIB
from planner.model import host_link, host_memory, memory, stage_offload, stage_time
from planner.model.fine_offload import Moved, moved
from planner.model.shard import Shard

LLAMA8 = catalog.get_model("llama3.1-8b")  # h 4096, 32 heads / 8 groups of 128
T = 4096
QKV, OUT = 12288, 8192
"""Llama 3.1 8B, bf16, t = 1, bytes a token: Q, K, V 2 (a + 2g) d = 2 x 48 x 128; the flash
output 2 a d = 2 x 32 x 128."""

RECIPE = (
    Path(__file__).parents[2] / "examples/recipes/deepseek-v3-pretrain-64gpu-gb300-bf16-fsdp.toml"
)
DSV3_QKV = 2 * 8192 * 128 * (2 * 192 + 128)
DSV3_OUT = 2 * 8192 * 128 * 128
"""DeepSeek-V3 at micro-batch 2 x 4096 = 8192 tokens, t = 1, bf16: Q, K (qk 128 + rope 64 = 192)
and V (128) of 128 heads, 1 GiB a layer; the output 128 x 128 a token, 0.25 GiB."""


def _moved(*mods: str, fp8: bool = False, recomputed: bool = False) -> Moved:
    """Llama 3.1 8B's attention groups at T tokens (FP8: 8-bit linear inputs; recomputed:
    selective recompute of core_attn)."""
    sh = Shard(tokens=T, seq_per_cp_rank=T, linear_bytes=1.0 if fp8 else 2.0)
    if recomputed:
        sh = replace(sh, recompute="core_attn", modules=frozenset({"core_attn"}))
    return moved(LLAMA8, False, sh, frozenset(mods))


def test_the_output_leaves_the_gpu_only_with_attn_proj_in_bf16() -> None:
    # bf16, core_attn alone: Q, K, V freed; the output copied and reloaded, but the projection
    # keeps it on the GPU
    assert _moved("core_attn") == Moved(T * QKV, T * (QKV + OUT), T * (QKV + OUT))
    # with attn_proj: freed; copied by both groups (twice), reloaded one after the other
    both = _moved("core_attn", "attn_proj")
    assert both == Moved(T * (QKV + OUT), T * (QKV + 2 * OUT), T * (QKV + OUT))


def test_a_quantised_projection_frees_the_output() -> None:
    # FP8: the projection saves its own 8-bit copy (a d = 4,096 bytes a token), so core_attn's
    # copy frees the bf16 output; attn_proj moves the 8-bit copy
    assert _moved("core_attn", fp8=True) == Moved(*(3 * [T * (QKV + OUT)]))
    assert _moved("core_attn", "attn_proj", fp8=True) == Moved(*(3 * [T * (QKV + OUT + 4096)]))


def test_the_output_gate_and_a_checkpointed_core_attention() -> None:
    # the output gate (attention.py:1617-1619, outside both groups) keeps the kernel's output:
    # copied by core_attn, never freed; the projection saves the gated output, its own tensor
    gated = LLAMA8.model_copy(update={"attention_output_gate": True})
    sh = Shard(tokens=T, seq_per_cp_rank=T)
    got = moved(gated, False, sh, frozenset({"core_attn", "attn_proj"}))
    assert got == Moved(T * (QKV + OUT), T * (QKV + 2 * OUT), T * (QKV + 2 * OUT))
    # selective recompute of core_attn: nothing runs in its group; attn_proj frees the
    # projection's input (the checkpoint's output)
    assert _moved("core_attn", recomputed=True) == Moved()
    assert _moved("core_attn", "attn_proj", recomputed=True) == Moved(*(3 * [T * OUT]))


def _peaks(path: Path, *sets: tuple[str, ...]) -> tuple[float, list[float]]:
    """(the allocator's fragmentation, the plan's activations at its peak with each set of
    offload modules: pp 1, one stage). The activations, not the stage's total: Megatron-FSDP's
    unit buffers beside them are coupled with the layers the backward has freed only without
    fine-grained offloading (planner/model/fsdp_coupling.py), a difference of its own."""
    plan = load_plan(path)
    lay = plan.require_layout()
    assert lay.pp == 1
    reports = [memory.estimate(plan.job, lay.with_(offload_modules=s)) for s in sets]
    return memory.fragmentation(plan.job), [r.stages[0].activations for r in reports]


def test_core_attn_alone_does_not_shrink_a_bf16_plan() -> None:
    # DeepSeek-V3 on 64 GB300 (Megatron-Bridge's bf16 FSDP recipe), core_attn alone: mla_up_proj
    # already discards Q, K, V and the projection keeps the output, so nothing is freed, while
    # the reload window puts 2 layers' Q, K, V and output copies back: the peak is the plan's
    # without offloading plus 2 x (1 + 0.25) GiB (before the allocator's fragmentation)
    frag, (plain, core) = _peaks(RECIPE, (), ("core_attn",))
    assert core >= plain
    assert core - plain == pytest.approx(frag * 2 * (DSV3_QKV + DSV3_OUT))


def test_core_attn_alone_under_fp8_frees_the_output(tmp_path: Path) -> None:
    # the same plan in FP8 (tensorwise) without mla_up_proj: each of the 61 layers and the MTP
    # layer frees Q, K, V and the output, 1.25 GiB, but the last to open (the MTP layer's: pp 1,
    # the backward follows the forward, fine_grained_activation_offload.py:1217-1225), less the
    # window's 2 layers
    text = RECIPE.read_text().replace(
        'precision = "bf16"', 'precision = "fp8"\nfp8_recipe = "tensorwise"'
    )
    text = text.replace('"layernorm", "mla_up_proj", "moe_act"', '"layernorm", "moe_act"')
    path = tmp_path / "fp8.toml"
    path.write_text(text)
    frag, (plain, core) = _peaks(path, (), ("core_attn",))
    assert plain - core == pytest.approx(frag * (62 - 1 - 2) * (DSV3_QKV + DSV3_OUT))


def test_the_host_holds_the_output_twice() -> None:
    # Llama 3.1 8B on one stage, 8192 tokens, bf16, core_attn and attn_proj: 32 layers copy
    # Q, K, V and the output twice, 8192 x (12,288 + 2 x 8,192) bytes each, all 32 on the host:
    # the first step (the warm-up) copies every group, the last layer's too, which the steady
    # steps keep on the last rank (should_bulk_offload, fine_grained_activation_offload.py
    # :1211-1212 before :1217-1225 d98e8a64), and the pinned copies stay (:241-244, :347-359);
    # one micro-batch in flight; the 8192 x 4096 x 2 = 2^26-byte hidden state rounds up by 1
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64)
    lay = Layout(dp=8, zero_stage=1, offload_modules=("core_attn", "attn_proj"))
    per = 8192 * (QKV + 2 * OUT)
    assert host_memory.activation_bytes(j, lay) == pytest.approx(32 * per)
    # and the copies take that long each way on the host link (32: the time model's own count
    # of the steady step, `offload_one_way` with no rank)
    chunks = lay.chunk_layers(32)[0]
    t = stage_time.layout_times(j, lay)
    want = 32 * per / host_link.host_link_bandwidth(j)
    assert stage_offload.offload_one_way(j, lay, chunks, t) == pytest.approx(want)


def test_the_host_holds_what_mla_up_proj_discards() -> None:
    # the recipe itself (core_attn, attn_proj, mla_up_proj recomputed), pp 1, one micro-batch in
    # flight: 61 layers and the MTP layer copy Q, K, V (discarded on the GPU by the recompute)
    # and the output twice, all 62 in the first step (the warm-up copies every group, the MTP
    # layer's last ones too: test_the_host_holds_the_output_twice); the 8192 x 7168 x 2 = 112
    # MiB hidden state takes a 128 MiB pinned block (8 / 7). (Before: 61, the steady step's.)
    plan = load_plan(RECIPE)
    assert plan.job.arch.mtp_num_layers == 1
    want = 62 * (DSV3_QKV + 2 * DSV3_OUT) * 8 / 7
    assert host_memory.activation_bytes(plan.job, plan.require_layout()) == pytest.approx(want)
    assert want / GIB == pytest.approx(62 * 1.5 * 8 / 7)
