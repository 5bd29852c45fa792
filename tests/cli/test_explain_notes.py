"""explain's notes (planner/cli/explain_notes.py) and suggest's host line.

Oracles: the model's own figures the notes restate (routing_load.step_load and the memory's
planning value; the step time less the same layout's with whole-layer CUDA graphs), and the
5%-of-the-step threshold (BOTTLENECK_MIN_SHARE) below which no note is printed.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from cli_run import run, suggest_plan
from jobs import job
from paths import REPO
from rich.console import Console

from planner.cli import explain_notes, render_suggest
from planner.inputs.layout import Layout
from planner.inputs.plan import load_plan
from planner.model import cost, known_gaps, memory
from planner.model.performance import BOTTLENECK_MIN_SHARE
from planner.model.routing_load import memory_load, step_load
from planner.model.shard import MOE_LOAD_IMBALANCE
from planner.search.top_k import Candidate


def test_explain_states_the_load_it_times_and_the_one_it_stores(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the explain line carries step_load (three decimals) and the memory's planning value
    plan = REPO / "examples" / "recipes" / "deepseek-v3-pretrain-256gpu-gb200-bf16.toml"
    loaded = load_plan(plan)
    lay = loaded.require_layout()
    text = explain_notes.routing_text(loaded.job, lay)
    assert loaded.job.moe_router_force_load_balancing
    assert text is not None and "forced balance" in text
    kept = memory_load(loaded.job, lay)  # memory's bound: 7 spreads above the even share
    assert f"{step_load(loaded.job, lay):.3f}x" in text and f"{kept:.2f}x in memory" in text
    assert kept < MOE_LOAD_IMBALANCE
    code, out, _ = run(["explain", str(plan)], capsys)
    assert code == 0 and "MoE routing: the busiest expert-parallel rank runs" in out
    # a dense model has no routing line
    dense = load_plan(REPO / "examples" / "recipes" / "llama3-8b-pretrain-8gpu-h100-bf16.toml")
    assert explain_notes.routing_text(dense.job, dense.require_layout()) is None


def test_explain_names_torchtitans_round_robin() -> None:
    # torchtitan's forced balance is a round robin (b5bcd76c models common moe.py:216-233), not
    # random logits: Qwen3-30B-A3B at ep 8, seq 4096, each rank's 4096 x 8 slots are 256 for each
    # of the 128 experts, so the busiest rank runs exactly its share in time and memory
    lay = Layout(tp=1, pp=1, dp=32, ep=8, zero_stage=3)
    titan = job(
        "qwen3-30b-a3b",
        "h100-sxm-80gb",
        32,
        4096,
        64,
        framework="torchtitan",
        moe_router_force_load_balancing=True,
    )
    text = explain_notes.routing_text(titan, lay)
    assert text is not None and "torchtitan's round robin" in text and "random" not in text
    assert "runs 1.000x its share" in text and "1.00x in memory" in text
    megatron = explain_notes.routing_text(replace(titan, framework="megatron"), lay)
    assert megatron is not None and "random routing" in megatron


def test_explain_states_the_learned_routing_load_and_its_ranks() -> None:
    # DeepSeek-V3 on 1,024 H800 (learned routing, ep 64): the busiest of 64 ranks of 4 experts,
    # 1 + z(64) 0.274 / sqrt(4) = 1 + 2.3367 x 0.137 = 1.320 (routing_load.learned_routing_load),
    # and the memory's planning value
    loaded = load_plan(REPO / "examples" / "deepseek-v3-h800.toml")
    lay = loaded.require_layout()
    assert not loaded.job.moe_router_force_load_balancing and lay.ep == 64
    text = explain_notes.routing_text(loaded.job, lay)
    assert text is not None
    assert "runs 1.320x its share" in text and "busiest of 64 ranks of 4 experts" in text
    assert f"{MOE_LOAD_IMBALANCE:.2f}x in memory" in text


def test_explain_names_a_host_bound_plan_and_its_switch() -> None:
    # Qwen3-235B FP8-CS on 64 B200, eager (no CUDA graphs in the recipe): the host's issue adds
    # what the same plan with whole-layer graphs does not take; graphed, the note is gone
    plan = load_plan(
        REPO / "examples" / "recipes" / "qwen3-235b-a22b-pretrain-64gpu-b200-fp8cs.toml"
    )
    job, lay = plan.job, plan.require_layout()
    perf = cost.estimate(job, lay)
    graphed = replace(job, cuda_graphs=True)
    extra = perf.step_time_s - cost.estimate(graphed, lay).step_time_s
    assert extra >= BOTTLENECK_MIN_SHARE * perf.step_time_s
    text = explain_notes.host_text(job, lay, perf)
    assert text is not None and f"adds {extra:.3f} s" in text and "training.cuda_graphs" in text
    assert explain_notes.host_text(graphed, lay, cost.estimate(graphed, lay)) is None
    # a dense plan far above its floor has no host note
    dense = load_plan(REPO / "examples" / "recipes" / "llama3-8b-pretrain-8gpu-h100-bf16.toml")
    d_job, d_lay = dense.job, dense.require_layout()
    assert explain_notes.host_text(d_job, d_lay, cost.estimate(d_job, d_lay)) is None


def test_suggest_says_when_its_first_pick_is_host_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Qwen3-30B-A3B on 64 GB200 at one 2,048-token sequence per GPU: small layers, eager, on
    # Grace; the line is the written plan's own host note
    argv = ["suggest", "--model", "qwen3-30b-a3b", "--gpu", "gb200-nvl72", "--num-gpus", "64"]
    written, out = suggest_plan(
        [*argv, "--seq-length", "2048", "--global-batch-size", "64"], tmp_path, capsys
    )
    job, lay = written.job, written.require_layout()
    note = explain_notes.host_text(job, lay, cost.estimate(job, lay))
    assert note is not None and f"#1 is {note}" in out


def test_bf16_layers_note_says_how_many_and_what_they_cost() -> None:
    # the same plan with the layers in the plan's precision is faster: the note's seconds are
    # the difference of the two estimates, and no note without bf16 layers
    lay = Layout(dp=8)
    nvfp4 = job("llama3.1-8b", "b200-sxm-180gb", 8, 8192, 64, precision="fp4", cuda_graphs=True)
    kept = replace(nvfp4, bf16_layers_at_start=1, bf16_layers_at_end=2)
    perf = cost.estimate(kept, lay)
    text = explain_notes.bf16_layers_text(kept, lay, perf)
    extra = perf.step_time_s - cost.estimate(nvfp4, lay).step_time_s
    assert text is not None and "first 1 and last 2" in text and extra > 0
    assert f"adding {extra:.3f} s" in text
    assert explain_notes.bf16_layers_text(nvfp4, lay, cost.estimate(nvfp4, lay)) is None


@pytest.mark.parametrize(
    ("gpu", "waits_on"), [("b200-sxm-180gb", "exponential units"), ("b300-sxm-270gb", "CUDA cores")]
)
def test_fp8_attention_note_says_what_it_saves_and_what_the_forward_waits_on(
    gpu: str, waits_on: str
) -> None:
    # the saving is the bf16-attention estimate less the plan's; B200's forward waits on its
    # 4.5e12 exponentials per s in FP8, B300's doubled units leave the softmax's CUDA-core work
    # the bound (15.14 FLOPs a score at 80 TFLOP/s against 1 / (9.63e12 x 0.8414) s of
    # exponential and 512 FLOPs at 1.3609 x 2.25e15: planner.model.attention)
    lay = Layout(dp=8)
    plain = job("llama3.1-8b", gpu, 8, 8192, 64, precision="fp4", cuda_graphs=True)
    fast = replace(plain, fp8_attention=True)
    perf = cost.estimate(fast, lay)
    text = explain_notes.fp8_attention_text(fast, lay, perf)
    saved = cost.estimate(plain, lay).step_time_s - perf.step_time_s
    assert text is not None and saved > 0 and f"save {saved:.3f} s" in text
    assert waits_on in text
    assert explain_notes.fp8_attention_text(plain, lay, cost.estimate(plain, lay)) is None


def test_fused_mlp_note_says_what_it_saves_or_why_it_saves_nothing() -> None:
    # the saving is the unfused estimate less the plan's (planner.model.moe_time); on Hopper, or
    # with per-tensor FP8 scales, Transformer Engine registers no fused kernel (d0067d0d)
    # one rack (64 of an NVL72's 72 GPUs): on 256 the EP 32 group of ranks 64-95 straddles two
    # racks (planner.model.placement) and its all-to-all over InfiniBand leaves the fused MLP
    # under 1% of the step (SWITCH_ADVICE_SHARE), so no advice to test
    lay = Layout(tp=1, pp=2, dp=32, ep=32, etp=1)
    # CUDA graphs, as every fused-MLP recipe runs: eager, the host would floor these layers
    kw = {
        "precision": "fp8", "fp8_recipe": "mxfp8", "moe_fused_grouped_mlp": True,
        "cuda_graphs": True,
    }  # fmt: skip
    fused = job("deepseek-v3", "gb300-nvl72", 64, 4096, 256, **kw)
    perf = cost.estimate(fused, lay)
    text = explain_notes.fused_mlp_text(fused, lay, perf)
    saved = cost.estimate(replace(fused, moe_fused_grouped_mlp=False), lay).step_time_s
    saved -= perf.step_time_s
    assert text is not None and saved > 0 and f"save {saved:.3f} s" in text
    hopper = replace(fused, cluster=job("deepseek-v3", "h100-sxm-80gb", 64, 4096, 256).cluster)
    note = explain_notes.fused_mlp_text(hopper, lay, cost.estimate(hopper, lay))
    assert note is not None and "a Blackwell GPU" in note and "timed unfused" in note
    assert "mxfp8" not in note  # the recipe is not what it lacks
    tensorwise = replace(fused, fp8_recipe="tensorwise")
    note = explain_notes.fused_mlp_text(tensorwise, lay, cost.estimate(tensorwise, lay))
    assert note is not None and 'fp8_recipe "mxfp8"' in note and "Blackwell GPU" not in note
    # without it, on a layout that allows it (expert TP 1): what turning it on would save
    plain = replace(fused, moe_fused_grouped_mlp=False)
    advice = explain_notes.fused_mlp_text(plain, lay, cost.estimate(plain, lay))
    assert advice is not None and f"would save {saved:.3f} s" in advice
    assert "--use-transformer-engine-op-fuser --moe-mlp-glu-interleave-size 32" in advice
    # nothing to suggest with expert TP 2 (Megatron refuses the fused MLP there) or on Hopper
    etp2 = lay.with_(etp=2, ep=16)
    assert explain_notes.fused_mlp_text(plain, etp2, cost.estimate(plain, etp2)) is None
    h100 = replace(hopper, moe_fused_grouped_mlp=False)
    assert explain_notes.fused_mlp_text(h100, lay, cost.estimate(h100, lay)) is None


def test_one_micro_batch_with_model_parallel_collectives_is_flagged_optimistic() -> None:
    # Llama 3.1 8B on 128 H100 at 64 sequences per step: tp 2 dp 64 micro-batch 1 is one
    # micro-batch per step (64 / (64 x 1)), the layout of v5.1-cisco-8b-h100-128; the note names
    # the tp and the measured gap
    j = job("llama3.1-8b", "h100-sxm-80gb", 128, 8192, 64)
    one = Layout(tp=2, dp=64, sequence_parallel=True)
    text = explain_notes.one_micro_batch_text(j, one)
    assert text is not None and text.split(";")[0].endswith("with tp 2")
    assert f"{known_gaps.ONE_MICRO_BATCH_GAP:.0%}" in text
    # two micro-batches per step (128 sequences), or tp 1 at one: no note
    assert explain_notes.one_micro_batch_text(replace(j, global_batch_size=128), one) is None
    assert explain_notes.one_micro_batch_text(j, Layout(tp=1, dp=128)) is None
    # nor with 8,192 tokens per GPU (micro-batch 2 at tp 2: 2 x 8192 / 2), above the 4,096 of the
    # runs that showed the gap
    two = Layout(tp=2, dp=64, sequence_parallel=True, micro_batch_size=2)
    assert explain_notes.one_micro_batch_text(replace(j, global_batch_size=128), two) is None
    # expert parallelism alone counts too: gpt-oss-20b, ep 4 over dp 32 (cp 2), one micro-batch
    moe = job("gpt-oss-20b", "gb300-nvl72", 64, 8192, 32)
    text = explain_notes.one_micro_batch_text(moe, Layout(tp=1, dp=32, cp=2, ep=4))
    assert text is not None and text.split(";")[0].endswith("with ep 4")


def test_moe_with_tp_attention_over_unsplit_experts_is_flagged_optimistic() -> None:
    # DeepSeek-V3 on 512 GB200 in the layout of v6.0-nvidia-dsv3-gb200-512: tp 2 attention over
    # ep 32 experts at expert tp 1; the note names the degrees and the measured gap
    j = job("deepseek-v3", "gb200-nvl72", 512, 4096, 15360)
    folded = Layout(tp=2, pp=4, dp=64, ep=32, etp=1, sequence_parallel=True)
    text = explain_notes.folded_moe_text(j, folded)
    assert text is not None and "tp 2 attention over ep 32 experts" in text
    assert f"{known_gaps.FOLDED_MOE_GAP:.0%}" in text
    assert known_gaps.optimistic(j, folded)
    # tp 1 (v6.0-nvidia-dsv3-gb300-512's), the experts split as the attention (expert tp 2), no
    # expert parallelism, or a dense model at tp 2: no note
    assert explain_notes.folded_moe_text(j, Layout(tp=1, pp=4, dp=128, ep=32)) is None
    split = Layout(tp=2, pp=4, dp=64, ep=16, etp=2, sequence_parallel=True)
    assert explain_notes.folded_moe_text(j, split) is None
    assert (
        explain_notes.folded_moe_text(j, Layout(tp=2, pp=4, dp=64, sequence_parallel=True)) is None
    )
    dense = job("llama3.1-70b", "gb200-nvl72", 512, 4096, 512)
    assert explain_notes.folded_moe_text(dense, Layout(tp=2, pp=4, dp=64)) is None


def test_the_suggest_table_marks_the_optimistic_rows() -> None:
    # the step cell of a row in a known optimistic regime ends in "+", and the caption says why;
    # DeepSeek-V3 on 512 GB200 at tp 2 over ep 32 (expert tp 1) is, at tp 1 it is not
    j = job("deepseek-v3", "gb200-nvl72", 512, 4096, 15360)
    folded = Layout(tp=2, pp=4, dp=64, ep=32, etp=1, sequence_parallel=True)
    plain = Layout(tp=1, pp=4, dp=128, ep=32)
    cands = [
        Candidate(lay, memory.estimate(j, lay), cost.estimate(j, lay)) for lay in (folded, plain)
    ]
    console = Console(record=True, width=400, markup=False)
    console.print(render_suggest.candidates_table(j, cands, "step time"))
    text = console.export_text()
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.startswith("│ ")}
    step = [f"{c.performance.step_time_s:.3f}" for c in cands]
    assert f" {step[0]}+ " in rows["1"] and f" {step[1]} " in rows["2"]
    assert "step s + = a regime where measured runs took longer" in " ".join(text.split())


def test_json_marks_the_optimistic_regime(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # suggest --json: each candidate's performance.optimistic is the regime's rule on its own
    # parallel block (one micro-batch, tp or ep > 1, <= 4,096 tokens per GPU per micro-batch);
    # Llama 3.1 8B on 128 H100 at 64 sequences leaves dp <= 64, so tp 2 at one micro-batch is
    # among them
    plan = tmp_path / "plan.toml"
    argv = ["suggest", "--model", "llama3.1-8b", "--gpu", "h100-sxm-80gb", "--num-gpus", "128"]
    argv += ["--seq-length", "8192", "--global-batch-size", "64", "--json"]
    code, out, err = run([*argv, "--write-plan", str(plan)], capsys)
    assert code == 0, err
    cands = json.loads(out)["candidates"]
    for c in cands:
        par = c["parallel"]
        tokens = par["micro_batch_size"] * 8192 / (par["tp"] * par["cp"])
        rule = par["num_microbatches"] == 1 and max(par["tp"], par["ep"]) > 1 and tokens <= 4096
        assert c["performance"]["optimistic"] == rule
    assert any(c["performance"]["optimistic"] for c in cands)
    # explain --json on the written plan (suggest's first pick) carries the flag and the notes
    code, out, err = run(["explain", str(plan), "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["performance"]["optimistic"] == cands[0]["performance"]["optimistic"]
    assert (
        any(n.startswith("optimistic:") for n in data["notes"]) == data["performance"]["optimistic"]
    )


def test_deterministic_note_says_what_the_mode_adds() -> None:
    # the note's seconds are the plan's estimate less the same plan's without the mode (both
    # from cost.estimate); torchtitan's mode is not priced (determinism.fills), so no note there
    lay = Layout(tp=8, pp=1, dp=8, sequence_parallel=True)
    plain = job("llama3.1-70b", "h100-sxm-80gb", 64, 8192, 64, loss_fusion=False)
    det = replace(plain, deterministic=True)
    perf = cost.estimate(det, lay)
    extra = perf.step_time_s - cost.estimate(plain, lay).step_time_s
    text = explain_notes.deterministic_text(det, lay, perf)
    assert text is not None and extra > 0 and f"add {extra:.3f} s" in text
    assert explain_notes.deterministic_text(plain, lay, cost.estimate(plain, lay)) is None
    tt = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 16, framework="torchtitan")
    tt_det = replace(tt, deterministic=True)
    tt_lay = Layout(dp=8, zero_stage=3)
    assert explain_notes.deterministic_text(tt_det, tt_lay, cost.estimate(tt_det, tt_lay)) is None


def test_explain_restates_the_linear_mixers_bytes_and_kernel_time() -> None:
    # Qwen3-Next on 128 H100 (Megatron-Bridge's recipe X1, tp 1, 4,096 tokens a micro-batch):
    # 36 of 48 layers are gated delta nets; the note restates the model's own block bytes per
    # token (activations.linear_mixer_bytes: no recompute here) and the kernels' time
    # (gdn.scan_time)
    from planner.model import activations as act
    from planner.model import gdn, layer_time, stage_activations

    plan = load_plan(
        REPO / "examples" / "recipes" / "qwen3-next-80b-a3b-pretrain-128gpu-h100-bf16.toml"
    )
    lay = plan.require_layout()
    text = explain_notes.linear_mixer_text(plan.job, lay)
    assert text is not None and text.startswith("36 of 48 layers mix with a gated delta net")
    sh = stage_activations.shard(plan.job, lay)
    kept = act.linear_mixer_bytes(plan.job.arch, sh, gdn) / sh.tokens
    assert f"keeps {kept / 1e3:.1f} kB a token" in text
    fwd, bwd = gdn.scan_time(plan.job.arch, layer_time.gpu_of(plan.job), sh.tokens, 1)
    assert f"run {fwd * 1e3:.2f} + {bwd * 1e3:.2f} ms" in text
    # a transformer without linear-time mixers has no such line
    dense = load_plan(REPO / "examples" / "recipes" / "llama3-8b-pretrain-8gpu-h100-bf16.toml")
    assert explain_notes.linear_mixer_text(dense.job, dense.require_layout()) is None
