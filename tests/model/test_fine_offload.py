"""Fine-grained activation offloading (Megatron --fine-grained-activation-offloading
--offload-modules; planner.model.fine_offload) in memory, time, rules and command lines.

Oracles: hand arithmetic from the published shapes in the comments (Llama 3.1 8B, DeepSeek-V3) and
the module list of TransformerConfig.offload_modules (Megatron-LM d98e8a64) as the module docstring
cites it; the rules as TransformerConfig asserts them."""

from __future__ import annotations

import pytest
from jobs import job

from planner.emit.megatron import parallel_args
from planner.inputs import catalog, megatron_args, plan_writer
from planner.inputs.arch import ModelArch
from planner.inputs.errors import InputError
from planner.inputs.layout import Layout
from planner.inputs.plan import parse_plan
from planner.model import fine_offload, host_link, stage_offload, stage_time
from planner.model.moe_activations import pairs
from planner.model.shard import Shard
from planner.model.stage_activations import per_layer, shard, stage_activations
from planner.search import rules
from planner.search.rules import check_plan

LLAMA8 = catalog.get_model("llama3.1-8b")  # h 4096, 32 heads / 8 groups of 128, F 14336
DSV3 = catalog.get_model("deepseek-v3")  # h 7168, expert F 2048, top-8, SwiGLU
T = 4096


def _off(arch: ModelArch, moe: bool, *mods: str, fp8: bool = False) -> float:
    sh = Shard(tokens=T, seq_per_cp_rank=T, linear_bytes=1.0 if fp8 else 2.0)
    return fine_offload.offloaded_bytes(arch, moe, sh, frozenset(mods))


def test_attention_modules_by_hand() -> None:
    # Llama 3.1 8B, t = 1, bf16, per token: core_attn offloads Q, K, V, 2 (a + 2g) d = 2 x 48 x
    # 128 = 12,288, and copies the flash output 2 a d = 8,192 too; in bf16 the output projection
    # saves that same output (attention.py:1626-1629 @d98e8a64), so it leaves the GPU only with
    # attn_proj (its 8-bit copy, a d = 4,096, under FP8, frees the bf16 one);
    # tests/model/test_offload_attention_output.py counts the copies; qkv_linear the fused
    # norm's input and output, 2h + 2h = 16,384 (2h + h under FP8); attn_norm and mlp_norm are
    # IdentityOps in a TE dense layer: nothing
    assert _off(LLAMA8, False, "core_attn") == T * 12288
    assert _off(LLAMA8, False, "core_attn", fp8=True) == T * 20480
    assert _off(LLAMA8, False, "core_attn", "attn_proj") == T * 20480
    assert _off(LLAMA8, False, "core_attn", "attn_proj", fp8=True) == T * (20480 + 4096)
    assert _off(LLAMA8, False, "qkv_linear") == T * 16384
    assert _off(LLAMA8, False, "qkv_linear", fp8=True) == T * 12288
    assert _off(LLAMA8, False, "attn_norm", "mlp_norm") == 0


def test_unfused_core_attention_offloads_its_scores() -> None:
    # Without a flash kernel core attention saves Q, K, V and, instead of the kernel's output, the
    # s^2 softmax output its second batched GEMM keeps (the offload context's saved-tensor hooks
    # take whatever the backend saves). Llama 3.1 8B, 4,096 tokens, no attention dropout: TE's
    # fused softmax keeps 2 bytes per score, 32 heads x 4096^2 x 2; Q, K, V 2 (a + 2g) d = 12,288
    # per token as with flash attention
    sh = Shard(tokens=T, seq_per_cp_rank=T, flash_attention=False, attention_dropout=False)
    got = fine_offload.offloaded_bytes(LLAMA8, False, sh, frozenset({"core_attn"}))
    assert got == T * 12288 + 2 * 32 * T * T
    # with attention dropout its mask and output go too (1 + 2 bytes per score)
    drop = Shard(tokens=T, seq_per_cp_rank=T, flash_attention=False)
    got = fine_offload.offloaded_bytes(LLAMA8, False, drop, frozenset({"core_attn"}))
    assert got == T * 12288 + 5 * 32 * T * T


def test_expert_modules_by_hand() -> None:
    # DeepSeek-V3, one GPU with every expert (ep 1), t = 1: pairs = 8 x T x 1.2 (the dropless
    # load); expert_fc1 offloads fc1's input 2h = 14,336 per pair, moe_act the SwiGLU input
    # 2 x 2F = 8,192 plus the fp32 probability 4 per pair; mlp_norm the pre-MLP norm's input 2h
    # per token; fused_group_mlp fc1's input, the SwiGLU input and fc2's input 2F = 4,096
    n = pairs(DSV3, Shard(tokens=T, seq_per_cp_rank=T))
    assert n == pytest.approx(8 * T * 1.2)
    assert _off(DSV3, True, "expert_fc1") == pytest.approx(n * 14336)
    assert _off(DSV3, True, "moe_act") == pytest.approx(n * 8196)
    assert _off(DSV3, True, "mlp_norm") == pytest.approx(T * 14336)
    assert _off(DSV3, True, "fused_group_mlp") == pytest.approx(n * (14336 + 8196 + 4096))
    # a dense layer of the same model has no experts to offload
    assert _off(DSV3, False, "expert_fc1", "moe_act") == 0


def test_small_tensors_stay_on_the_gpu() -> None:
    # Megatron skips tensors under 1M elements: 64 tokens of Llama 8B's Q, K, V and output are
    # 64 x 10,240 = 655,360 bf16 elements
    sh = Shard(tokens=64, seq_per_cp_rank=64)
    assert fine_offload.offloaded_bytes(LLAMA8, False, sh, frozenset({"core_attn"})) == 0


def test_one_stage_keeps_all_but_the_offloaded_bytes_plus_a_two_layer_window() -> None:
    # Llama 3.1 8B on one stage (one micro-batch in flight, 32 layers): offloading core_attn
    # removes what 31 layers' groups free (bf16: Q, K, V, 12,288 bytes a token, as above: one
    # stage's backward follows its forward, so the last layer's group stays, Megatron-LM
    # d98e8a64 fine_grained_activation_offload.py:1217-1225) and puts back the two of the
    # reload window, each Q, K, V and the output's reloaded copy beside the one the projection
    # keeps (12,288 + 8,192 = 20,480 a token)
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64)
    lay = Layout(dp=8)
    chunks = lay.chunk_layers(32)[0]
    sh = shard(j, lay)
    plain = stage_activations(j, lay, 0, chunks, sh, per_layer(j.arch, sh))
    off_lay = lay.with_(offload_modules=("core_attn",))
    off_sh = shard(j, off_lay)
    off = stage_activations(j, off_lay, 0, chunks, off_sh, per_layer(j.arch, off_sh))
    per = fine_offload.offloaded_bytes(j.arch, False, sh, frozenset({"core_attn"}))
    assert per == 8192 * 12288  # seq 8192, micro-batch 1, as above
    assert plain - off == pytest.approx(31 * per - 2 * 8192 * 20480)


def test_transfers_show_behind_the_forwards_queue() -> None:
    # each layer's groups go out on a side stream the forward never waits on; bf16: core_attn's
    # 20,480 bytes a token (as above), attn_proj's copy of the same output again, 8,192, and
    # qkv_linear's 16,384. One stage: the backward follows the forward at once, and the last
    # layer's groups stay on the GPU (should_bulk_offload, Megatron-LM d98e8a64
    # fine_grained_activation_offload.py:1217-1225). The copies out (longer than a forward) queue
    # back to back on the one d2h stream (:472), from the first group's end: layer 31's
    # attn_proj copy is out no sooner than 31 x sec, and its reload (:1185) back no sooner
    # than that plus its own 8192 x 2 x 8,192 bytes. Its backward starts at most one layer's
    # backward after layer 32's: by 32 fwd + 2 bwd. At least the difference shows
    # (tests/model/test_offload_groups.py replays the groups one by one).
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64)
    lay = Layout(dp=8, offload_modules=("core_attn", "attn_proj", "qkv_linear"))
    chunks = lay.chunk_layers(32)[0]
    t = stage_time.layout_times(j, lay)
    link = host_link.host_link_bandwidth(j)
    sec = (T * 2) * (20480 + 8192 + 16384) / link  # seq 8192 = 2 T tokens
    proj = (T * 2) * 8192 / link
    fwd, bwd = t.dense.fwd, t.dense.bwd
    assert fwd < sec < bwd
    want = 31 * sec + proj - 32 * fwd - 2 * bwd
    assert want > 0
    assert stage_offload.fine_offload_exposed(j, lay, 0, chunks, t) >= want


@pytest.mark.parametrize(
    ("model", "mods", "extra", "rule"),
    [
        ("llama3.1-8b", ("attn_proj",), {}, "offload_attn_proj"),
        ("llama3.1-8b", ("expert_fc1",), {}, "offload_moe"),
        ("llama3.1-8b", ("core_attn",), {"cpu_offloading_num_layers": 4}, "offload_both"),
        ("mixtral-8x7b", ("fused_group_mlp", "moe_act"), {}, "offload_fused"),
        (
            "mixtral-8x7b",
            ("moe_act",),
            {"recompute": "selective", "recompute_modules": ("moe",)},
            "offload_moe",
        ),
    ],
)
def test_megatrons_rules(model: str, mods: tuple[str, ...], extra: dict, rule: str) -> None:
    j = job(model, "h100-sxm-80gb", 8, 4096, 64)
    lay = Layout(dp=8, offload_modules=mods, **extra)  # type: ignore[arg-type]
    found = {v.rule for v in rules.violations(j, lay)}
    assert rule in found
    assert not {v.rule for v in rules.violations(j, lay.with_(offload_modules=()))} & {
        "offload_attn_proj",
        "offload_moe",
        "offload_fused",
        "offload_both",
    }


@pytest.mark.parametrize(
    ("impl", "regions", "mods", "refused"),
    [
        # local (None: what planner emits): expert modules only, and only with regions listed
        (None, ("attn",), ("moe_act",), None),
        (None, ("attn",), ("core_attn",), "parallel.offload_modules"),
        (None, (), ("moe_act",), "training.cuda_graph_modules"),  # "whole-layer capture"
        ("local", ("moe_router",), ("expert_fc1",), None),
        # transformer_engine and full_iteration: any module (planner refused them before)
        ("transformer_engine", (), ("core_attn",), None),
        ("transformer_engine", ("attn",), ("qkv_linear", "moe_act"), None),
        ("full_iteration", (), ("core_attn", "attn_proj"), None),
        # any implementation: no moe region beside offloading ("Token-drop MoE")
        ("transformer_engine", ("moe",), ("moe_act",), "training.cuda_graph_modules"),
    ],
)
def test_megatrons_cuda_graphs_beside_fine_grained_offloading(
    impl: str | None, regions: tuple[str, ...], mods: tuple[str, ...], refused: str | None
) -> None:
    """TransformerConfig.__post_init__ (d98e8a64, transformer_config.py 2929-2975) with CUDA
    graphs and fine-grained offloading: local only expert_fc1 / moe_act / fused_group_mlp and
    asserts cuda_graph_modules non-empty; transformer_engine and full_iteration take any module;
    every implementation asserts moe not among the regions."""
    extra = {"moe_expert_capacity_factor": 1.0, "moe_pad_expert_input_to_capacity": True}
    j = job(
        "mixtral-8x7b",
        "h100-sxm-80gb",
        8,
        4096,
        64,
        cuda_graphs=True,
        cuda_graph_impl=impl,
        cuda_graph_modules=regions,
        **(extra if "moe" in regions else {}),
    )
    lay = Layout(dp=8, ep=8, offload_modules=mods)
    found = [v for v in rules.violations(j, lay) if v.rule == "offload_graphs"]
    assert [v.field for v in found] == ([refused] if refused else [])
    # a module listed twice is read as listed once (Megatron only asks whether a module is in
    # the list, transformer_layer.py:1544-1553, experts.py:254-267 d98e8a64), and asks the CUDA
    # graph check nothing new (a doubled list once made it ask the first module outside the
    # experts of a list that had none: a fuzzer's StopIteration)
    once = [(v.rule, v.field) for v in rules.violations(j, lay.with_(offload_modules=mods[:1]))]
    twice = [
        (v.rule, v.field) for v in rules.violations(j, lay.with_(offload_modules=mods[:1] * 2))
    ]
    assert twice == once


def test_command_line_round_trip() -> None:
    # read from Megatron's two flags, emitted back as the same two
    line = (
        "--num-layers 2 --hidden-size 512 --num-attention-heads 8 --vocab-size 1000 "
        "--seq-length 128 --bf16 --micro-batch-size 1 --global-batch-size 8 "
        "--fine-grained-activation-offloading --offload-modules core_attn attn_proj"
    )
    doc = megatron_args.to_plan(line, "h100-sxm-80gb", 8)
    assert doc["parallel"]["offload_modules"] == ["core_attn", "attn_proj"]
    plan = check_plan(parse_plan(doc))
    words = [w for a in parallel_args(plan) for w in a]
    i = words.index("--offload-modules")
    assert "--fine-grained-activation-offloading" in words
    assert words[i + 1 : i + 3] == ["core_attn", "attn_proj"]


def test_an_offload_fraction_keeps_the_later_layers_groups() -> None:
    # Megatron --activation-offload-fraction f: the first f of the offload groups in forward order
    # go to the host, the rest stay (fine_grained_activation_offloading.md @d98e8a64). Llama 3.1
    # 8B on one stage: 32 layers, core_attn's group freeing 8192 x 12,288 bytes each in bf16 (as
    # above); at f = 0.5 the GPU keeps 16 of them, at f = 1 the last (one stage: its backward
    # follows its forward, fine_grained_activation_offload.py:1217-1225), so 15 more at f = 0.5,
    # the reload window the same
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64)
    chunks = Layout(dp=8).chunk_layers(32)[0]

    def peak(f: float) -> float:
        lay = Layout(dp=8, offload_modules=("core_attn",), activation_offload_fraction=f)
        sh = shard(j, lay)
        return stage_activations(j, lay, 0, chunks, sh, per_layer(j.arch, sh))

    def peak_without() -> float:
        lay = Layout(dp=8)
        sh = shard(j, lay)
        return stage_activations(j, lay, 0, chunks, sh, per_layer(j.arch, sh))

    assert peak(0.5) - peak(1.0) == pytest.approx(15 * 8192 * 12288)
    # at f = 0 every group stays (int(32 x 1) = 32 of 32, :650-668): nothing copied out, nothing
    # reloaded, so no reload window either (two groups of 8192 x 20,480 bytes copied: Q, K, V and
    # the flash output); the GPU holds what it holds with no module offloaded, 31 groups more
    # than at f = 1 (the last stays there)
    assert peak(0.0) - peak(1.0) == pytest.approx(31 * 8192 * 12288 - 2 * 8192 * 20480)
    assert peak(0.0) == pytest.approx(peak_without())
    # the transfers move half the groups: half the seconds on the host link
    lay = Layout(dp=8, offload_modules=("core_attn",))
    t = stage_time.layout_times(j, lay)
    full = stage_offload.offload_one_way(j, lay, chunks, t)
    half = lay.with_(activation_offload_fraction=0.5)
    assert stage_offload.offload_one_way(j, half, chunks, t) == pytest.approx(full / 2)
    shown = stage_offload.fine_offload_exposed(j, lay, 0, chunks, t)
    assert stage_offload.fine_offload_exposed(j, half, 0, chunks, t) == pytest.approx(shown / 2)


def test_the_fraction_on_a_command_line() -> None:
    line = (
        "--num-layers 2 --hidden-size 512 --num-attention-heads 8 --vocab-size 1000 "
        "--seq-length 128 --bf16 --micro-batch-size 1 --global-batch-size 8 "
        "--fine-grained-activation-offloading --offload-modules core_attn "
        "--activation-offload-fraction 0.8"
    )
    plan = check_plan(parse_plan(megatron_args.to_plan(line, "h100-sxm-80gb", 8)))
    assert plan.require_layout().activation_offload_fraction == 0.8
    words = [w for a in parallel_args(plan) for w in a]
    assert words[words.index("--activation-offload-fraction") + 1] == "0.8"
    text = plan_writer.render(plan.job, plan.require_layout(), {"name": "m"}, [])
    assert "activation_offload_fraction = 0.8" in text
    with pytest.raises(InputError, match="--activation-offload-fraction: expected 0 to 1"):
        megatron_args.to_plan(line.replace("0.8", "1.5"), "h100-sxm-80gb", 8)
    # without fine-grained offloading Megatron offloads nothing: the flag is not read
    bare = line.replace("--fine-grained-activation-offloading ", "")
    assert (
        "activation_offload_fraction"
        not in megatron_args.to_plan(bare, "h100-sxm-80gb", 8)["parallel"]
    )
