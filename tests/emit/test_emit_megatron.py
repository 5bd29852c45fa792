"""planner.emit.megatron: the Megatron-LM arguments of a plan.

Oracles: Megatron-LM's own source (NVIDIA/Megatron-LM d98e8a64): every flag emitted is one its
parser accepts (planner/inputs/megatron_flags.txt, dumped from the parser); the combinations follow
validate_args / TransformerConfig.__post_init__. The round trip is
tests/emit/test_megatron_round_trip.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from megatron_plans import (
    GOLDEN_PLANS,
    MEGATRON_FLAGS,
    assert_same,
    flags,
    make_plan,
    round_trip,
)
from paths import PLANS

from planner.emit import megatron, megatron_model
from planner.emit.common import environment
from planner.emit.launch import render
from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.layout import Layout
from planner.inputs.pipeline_layout import compact, parse
from planner.inputs.plan import load_plan

# --- every flag is one Megatron has


@pytest.mark.parametrize("path", GOLDEN_PLANS, ids=lambda p: p.stem)
def test_every_flag_is_verified_against_megatron_source(path: Path) -> None:
    plan = load_plan(path)
    emitted = [w for w in megatron.arguments(plan).flat() if w.startswith("--")]
    assert emitted
    unknown = sorted(set(emitted) - MEGATRON_FLAGS)
    assert not unknown, f"flags not checked against Megatron-LM's parser: {unknown}"


def test_render_is_one_flag_per_line_and_reads_back_with_shlex() -> None:
    plan = load_plan(PLANS / "launch-deepseek-v3.toml")
    text = megatron.render(plan, "job")
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert all(ln.startswith("--") for ln in lines)
    assert megatron_args.tokens(text) == megatron.arguments(plan).flat()


# --- zero stages, overlap, precision, recompute


@pytest.mark.parametrize(
    ("zero", "present", "absent"),
    [
        (0, ["--overlap-grad-reduce"], ["--use-distributed-optimizer", "--overlap-param-gather"]),
        (1, ["--use-distributed-optimizer", "--overlap-param-gather"], ["--use-megatron-fsdp"]),
        # Megatron-FSDP v1 turns the distributed optimizer on itself, with a warning
        # (validate_args): it is said explicitly
        (2, ["--use-megatron-fsdp", "--ckpt-format", "--use-distributed-optimizer"], []),
        (3, ["--use-megatron-fsdp", "--init-model-with-meta-device"], []),
    ],
)
def test_zero_stage_flags(zero: int, present: list[str], absent: list[str]) -> None:
    plan = make_plan("llama3.1-8b", 16, {"tp": 2, "zero_stage": zero})
    f = flags(plan)
    for flag in present:
        assert flag in f
    for flag in absent:
        assert flag not in f
    if zero >= 2:  # Megatron-FSDP asserts the fsdp_dtensor checkpoint format
        assert f["--data-parallel-sharding-strategy"] == [megatron.FSDP_STRATEGY[zero]]
        assert f["--ckpt-format"] == ["fsdp_dtensor"]


def test_no_grad_overlap_without_data_parallelism() -> None:
    f = flags(make_plan("llama3.1-8b", 8, {"tp": 8}))
    assert "--overlap-grad-reduce" not in f and "--overlap-param-gather" not in f


def test_dp_overlap_flags_follow_the_plan() -> None:
    on = flags(make_plan("llama3.1-8b", 16, {"tp": 8}))
    assert "--overlap-grad-reduce" in on and "--overlap-param-gather" in on
    par = {"tp": 8, "overlap_param_gather": False}
    half = flags(make_plan("llama3.1-8b", 16, par))
    assert "--overlap-grad-reduce" in half and "--overlap-param-gather" not in half
    par = {"tp": 8, "overlap_grad_reduce": False, "overlap_param_gather": False}
    off = flags(make_plan("llama3.1-8b", 16, par))
    assert "--overlap-grad-reduce" not in off and "--overlap-param-gather" not in off


def test_precision_and_recompute_flags() -> None:
    par = {"tp": 2, "recompute": "full"}
    f = flags(make_plan("llama3.1-8b", 16, par, precision="fp8", main_grad_dtype="bf16"))
    assert f["--fp8-format"] == ["hybrid"] and "--bf16" in f and "--fp8-param-gather" in f
    assert "--grad-reduce-in-bf16" in f
    assert f["--recompute-granularity"] == ["full"]
    assert f["--recompute-method"] == ["uniform"] and f["--recompute-num-layers"] == ["1"]
    f = flags(make_plan("llama3.1-8b", 16, {"tp": 2, "recompute": "selective"}))
    assert f["--recompute-granularity"] == ["selective"] and "--recompute-method" not in f
    assert "--fp8-format" not in f and "--grad-reduce-in-bf16" not in f
    f = flags(make_plan("llama3.1-8b", 16, {"tp": 2}, precision="fp8", fp8_param_gather=False))
    assert "--fp8-param-gather" not in f


def test_fp8_param_gather_without_distributed_optimizer_is_refused() -> None:
    plan = make_plan("llama3.1-8b", 16, {"tp": 2, "zero_stage": 0}, precision="fp8")
    with pytest.raises(InputError, match="fp8_param_gather"):
        megatron.arguments(plan)


def test_bf16_optimizer_states_use_the_precision_aware_optimizer() -> None:
    plan = make_plan("llama3.1-8b", 16, {"tp": 2}, optimizer_state_dtype="bf16")
    f = flags(plan)
    assert "--use-precision-aware-optimizer" in f
    assert f["--exp-avg-dtype"] == ["bf16"] and f["--exp-avg-sq-dtype"] == ["bf16"]
    assert round_trip(plan).job.optimizer_state_dtype == "bf16"
    assert "--use-precision-aware-optimizer" not in flags(make_plan("llama3.1-8b", 16, {"tp": 2}))
    # Megatron: the precision-aware optimizer needs the distributed optimizer
    plan = make_plan("llama3.1-8b", 16, {"tp": 2, "zero_stage": 0}, optimizer_state_dtype="bf16")
    with pytest.raises(InputError, match="optimizer_state_dtype"):
        megatron.arguments(plan)


def test_bf16_gradients_with_the_precision_aware_optimizer_say_main_grads_dtype() -> None:
    # megatron_rules.md section 5: the optimizer's --main-grads-dtype defaults to fp32 and any
    # other value asserts without --use-precision-aware-optimizer (OptimizerConfig); Bridge's
    # DeepSeek-V3 recipes set main_grads bf16 with bf16 moments (bridge_recipes.md)
    both = {"optimizer_state_dtype": "bf16", "main_grad_dtype": "bf16"}
    f = flags(make_plan("llama3.1-8b", 16, {"tp": 2}, **both))
    assert f["--main-grads-dtype"] == ["bf16"] and "--grad-reduce-in-bf16" in f
    f = flags(make_plan("llama3.1-8b", 16, {"tp": 2}, optimizer_state_dtype="bf16"))
    assert "--main-grads-dtype" not in f  # fp32 gradients: Megatron's default
    f = flags(make_plan("llama3.1-8b", 16, {"tp": 2}, main_grad_dtype="bf16"))
    assert "--main-grads-dtype" not in f and "--use-precision-aware-optimizer" not in f


def test_mxfp8_param_gather_reuses_the_gradient_buffer() -> None:
    # Megatron-Bridge's MXFP8 preset sets reuse_grad_buf_for_mxfp8_param_ag with fp8 param
    # gather; Megatron asserts it needs --fp8-param-gather and turns it off under Megatron-FSDP
    # (megatron_rules.md section 4)
    def mx(zero: int, **training: object) -> dict[str, list[str]]:
        par = {"tp": 1, "zero_stage": zero}
        return flags(make_plan("llama3.1-8b", 8, par, "b200-sxm-180gb", **training))

    assert "--reuse-grad-buf-for-mxfp8-param-ag" in mx(1, precision="fp8", fp8_recipe="mxfp8")
    assert "--reuse-grad-buf-for-mxfp8-param-ag" not in mx(
        1, precision="fp8", fp8_recipe="mxfp8", fp8_param_gather=False
    )
    assert "--reuse-grad-buf-for-mxfp8-param-ag" not in mx(3, precision="fp8", fp8_recipe="mxfp8")
    f = mx(1, precision="fp8", fp8_recipe="tensorwise")
    assert "--reuse-grad-buf-for-mxfp8-param-ag" not in f and f["--fp8-recipe"] == ["tensorwise"]


def test_megatron_fsdp_fp32_gradients_are_said() -> None:
    # Megatron-FSDP's main grads default to the parameters' dtype (--megatron-fsdp-main-grads-
    # dtype auto; megatron_rules.md section 6): a plan with fp32 gradients says fp32
    f = flags(make_plan("llama3.1-8b", 16, {"tp": 1, "zero_stage": 3}))
    assert f["--megatron-fsdp-main-grads-dtype"] == ["fp32"]
    f = flags(make_plan("llama3.1-8b", 16, {"tp": 1, "zero_stage": 3}, main_grad_dtype="bf16"))
    assert "--megatron-fsdp-main-grads-dtype" not in f and "--grad-reduce-in-bf16" in f
    assert "--megatron-fsdp-main-grads-dtype" not in flags(make_plan("llama3.1-8b", 16, {"tp": 1}))


@pytest.mark.parametrize(
    ("gpu", "n", "parallel", "alloc", "margin"),
    [
        ("h100-sxm-80gb", 16, {"tp": 2}, True, True),
        ("h100-sxm-80gb", 16, {"tp": 8, "pp": 2}, True, True),
        ("h100-sxm-80gb", 1, {"tp": 1}, True, False),  # one GPU: no NCCL kernel to make room for
        ("h100-sxm-80gb", 16, {"tp": 1, "zero_stage": 3}, False, True),  # as Bridge's FSDP ones
        ("mi300x-192gb", 16, {"tp": 2}, False, False),  # NVIDIA / Transformer Engine names only
        # a Megatron-FSDP plan whose memory counts expandable segments gets them
        ("h100-sxm-80gb", 16, {"tp": 1, "zero_stage": 3, "expandable": True}, True, True),
    ],
)
def test_allocator_and_norm_sm_margin_as_the_bridge_recipes(
    gpu: str, n: int, parallel: dict[str, object], alloc: bool, margin: bool
) -> None:
    # bridge_recipes.md, environment table: every recipe sets NVTE_{F,B}WD_LAYERNORM_SM_MARGIN
    # (10-20) and, but for the Megatron-FSDP ones, PYTORCH_CUDA_ALLOC_CONF=expandable_segments
    parallel = dict(parallel)
    expandable = bool(parallel.pop("expandable", False))
    plan = make_plan(
        "llama3.1-8b", n, parallel, gpu, global_batch_size=16, expandable_segments=expandable
    )
    env = {e.name: e.value for e in environment(plan)}
    assert (env.get("PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True") == alloc
    # set where the plan's memory does not count it: the script says its peak errs high (read
    # back, the script is predicted 1.02 / 1.10 of the plan's fragmentation)
    why = " ".join(e.why for e in environment(plan) if e.name == "PYTORCH_CUDA_ALLOC_CONF")
    assert ("counts without it" in why) == (alloc and not expandable)
    assert (env.get("NVTE_FWD_LAYERNORM_SM_MARGIN") == "20") == margin
    assert env.get("NVTE_BWD_LAYERNORM_SM_MARGIN") == env.get("NVTE_FWD_LAYERNORM_SM_MARGIN")


def test_te_cuda_graphs_beside_expandable_segments_set_nccl_graph_register() -> None:
    """Megatron-LM d98e8a64 validate_args asserts, for --cuda-graph-impl transformer_engine, that
    PYTORCH_CUDA_ALLOC_CONF has no expandable_segments:True or NCCL_GRAPH_REGISTER is "0": the
    environment that exports the one sets the other (the script died at start-up before);
    Megatron-Core's own graphs need neither, and reading back a line without it exits 2."""
    par = {"tp": 1}
    te = make_plan("llama3.1-8b", 16, par, cuda_graphs=True, cuda_graph_impl="transformer_engine")
    env = {e.name: e.value for e in environment(te)}
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert env["NCCL_GRAPH_REGISTER"] == "0"
    local = make_plan("llama3.1-8b", 16, par, cuda_graphs=True, cuda_graph_impl="local")
    assert "NCCL_GRAPH_REGISTER" not in {e.name for e in environment(local)}
    script = "\n".join(
        [
            "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
            "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 8 --hidden-size 1024 "
            "--num-attention-heads 16 --seq-length 4096 --max-position-embeddings 4096 "
            "--micro-batch-size 1 --bf16 --vocab-size 32000 --tokenizer-type NullTokenizer "
            "--cuda-graph-impl transformer_engine",
        ]
    )
    with pytest.raises(InputError, match="NCCL_GRAPH_REGISTER: Megatron-LM asserts it is 0"):
        megatron_args.read(script, "h100-sxm-80gb", 8, "train.sh")
    fixed = "export NCCL_GRAPH_REGISTER=0\n" + script
    assert megatron_args.read(fixed, "h100-sxm-80gb", 8, "train.sh").doc["training"]["cuda_graphs"]


def test_non_megatron_training_code_is_noted() -> None:
    par = {"tp": 2, "recompute": "selective"}
    plan = make_plan(
        "llama3.1-8b",
        16,
        par,
        cross_entropy="pytorch",
        selective_recompute="per_op",
        tp_backward_overlap=False,
    )
    notes = " ".join(megatron.arguments(plan).notes)
    assert "cross_entropy" in notes and "selective_recompute" in notes
    assert "tp_backward_overlap" in notes
    assert "tp_backward_overlap" not in " ".join(
        megatron.arguments(make_plan("llama3.1-8b", 16, par)).notes
    )


def test_tp_comm_overlap_and_sequence_parallel() -> None:
    f = flags(make_plan("llama3.1-8b", 16, {"tp": 4, "tp_comm_overlap": True}))
    assert "--sequence-parallel" in f and "--tp-comm-overlap" in f
    f = flags(make_plan("llama3.1-8b", 16, {"tp": 1}))
    assert "--sequence-parallel" not in f


def test_ep_comm_overlap_flags_and_connections() -> None:
    # Megatron's MoE README: --overlap-moe-expert-parallel-comm --delay-wgrad-compute, with
    # CUDA_DEVICE_MAX_CONNECTIONS > 1 (validate_args does not assert 1 with it)
    par = {"tp": 1, "pp": 2, "vpp": 4, "ep": 8, "ep_comm_overlap": True}
    plan = make_plan("mixtral-8x7b", 64, par)
    f = flags(plan)
    assert "--overlap-moe-expert-parallel-comm" in f and "--delay-wgrad-compute" in f
    assert f["--moe-token-dispatcher-type"] == ["alltoall"]
    env = {e.name: e for e in environment(plan)}
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"].value == "32"
    assert "EP all-to-all" in env["CUDA_DEVICE_MAX_CONNECTIONS"].why
    plain = make_plan("mixtral-8x7b", 64, {**par, "ep_comm_overlap": False})
    assert "--overlap-moe-expert-parallel-comm" not in flags(plain)
    # tp = cp = 1: 1 is not required, and Megatron-Bridge's recipes then set 32
    env = {e.name: e for e in environment(plain)}
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"].value == "32"
    assert "EP all-to-all" not in env["CUDA_DEVICE_MAX_CONNECTIONS"].why


def test_unfused_attention_is_the_unfused_backend() -> None:
    f = flags(make_plan("llama3.1-8b", 8, {"tp": 8}, flash_attention=False))
    assert f["--attention-backend"] == ["unfused"]


# --- model shape


def test_gqa_swiglu_and_positions_for_llama() -> None:
    f = flags(make_plan("llama3.1-70b", 64, {"tp": 8, "pp": 2}, seq_length=8192))
    assert "--group-query-attention" in f and f["--num-query-groups"] == ["8"]
    assert "--swiglu" in f and f["--normalization"] == ["RMSNorm"]
    assert "--disable-bias-linear" in f and "--untie-embeddings-and-output-weights" in f
    assert f["--position-embedding-type"] == ["rope"]
    # max(model's 131072, seq 8192); Megatron requires it and checks >= seq_length
    assert f["--max-position-embeddings"] == ["131072"]


def test_rope_model_without_a_table_uses_seq_length() -> None:
    f = flags(make_plan("hagemann-llama-13b", 8, {"tp": 8}, seq_length=2048))
    assert f["--max-position-embeddings"] == ["2048"]
    assert "--group-query-attention" not in f  # MHA


def test_learned_positions_keep_the_model_table() -> None:
    plan = make_plan("gpt3-175b", 64, {"tp": 8, "pp": 8}, seq_length=2048)
    f = flags(plan)
    assert f["--position-embedding-type"] == ["learned_absolute"]
    assert f["--max-position-embeddings"] == ["2048"]
    assert "--swiglu" not in f and "--disable-bias-linear" not in f


def test_moe_and_mla_flags_for_deepseek() -> None:
    f = flags(load_plan(PLANS / "launch-deepseek-v3.toml"))
    assert "--multi-latent-attention" in f and "--group-query-attention" not in f
    assert f["--q-lora-rank"] == ["1536"] and f["--kv-lora-rank"] == ["512"]
    assert f["--qk-head-dim"] == ["128"] and f["--qk-pos-emb-head-dim"] == ["64"]
    assert f["--v-head-dim"] == ["128"]
    assert f["--num-experts"] == ["256"] and f["--moe-router-topk"] == ["8"]
    assert f["--moe-ffn-hidden-size"] == ["2048"]
    assert f["--moe-shared-expert-intermediate-size"] == ["2048"]
    assert f["--moe-layer-freq"] == ["[0]*3+[1]*58"]
    assert f["--expert-model-parallel-size"] == ["64"]
    assert f["--expert-tensor-parallel-size"] == ["1"]
    assert f["--moe-token-dispatcher-type"] == ["alltoall"] and "--moe-grouped-gemm" in f
    assert f["--mtp-num-layers"] == ["1"]


def test_moe_layer_freq_is_the_python_list_megatron_evaluates() -> None:
    pattern = (0, 0, 1, 1, 1, 0, 1)
    text = megatron_model.moe_layer_freq(pattern)
    assert text == "[0]*2+[1]*3+[0]+[1]"
    # Megatron's moe_freq_type: only ,digits[]()+* allowed, then eval
    assert set(text) <= set(",0123456789[]()+*")
    assert eval(text) == list(pattern)  # Megatron's own oracle
    assert megatron_model.moe_layer_freq(2) == "2"


def test_models_megatron_cannot_express_are_refused_by_name() -> None:
    with pytest.raises(InputError, match="ALiBi"):
        megatron.arguments(make_plan("bloom-176b", 64, {"tp": 8, "pp": 2}, seq_length=2048))
    with pytest.raises(InputError, match="relu"):
        megatron.arguments(make_plan("opt-175b", 64, {"tp": 8, "pp": 2}, seq_length=2048))


# --- pipeline split


def test_even_split_with_interleaving() -> None:
    plan = load_plan(PLANS / "launch-llama3.1-70b.toml")
    f = flags(plan)
    # 80 layers / pp 4 = 20 per rank, / vpp 5 = 4 per virtual stage
    assert f["--num-layers-per-virtual-pipeline-stage"] == ["4"]
    assert "--decoder-first-pipeline-num-layers" not in f


def test_first_and_last_stage_one_fewer() -> None:
    f = flags(load_plan(PLANS / "launch-llama3.1-405b.toml"))
    assert f["--decoder-first-pipeline-num-layers"] == ["7"]
    assert f["--decoder-last-pipeline-num-layers"] == ["7"]
    assert "--num-layers-per-virtual-pipeline-stage" not in f
    assert "--pipeline-model-parallel-layout" not in f


def test_uneven_with_interleaving_uses_virtual_stages_per_rank() -> None:
    # 32 layers, pp 4, vpp 2: (6, 10, 10, 6) -> first/last 6, middle 10, all even
    par = {"tp": 2, "pp": 4, "vpp": 2, "pipeline_layers": [6, 10, 10, 6]}
    f = flags(make_plan("llama3.1-8b", 16, par, global_batch_size=64))
    assert f["--decoder-first-pipeline-num-layers"] == ["6"]
    assert f["--decoder-last-pipeline-num-layers"] == ["6"]
    assert f["--num-virtual-stages-per-pipeline-rank"] == ["2"]
    assert "--num-layers-per-virtual-pipeline-stage" not in f


def test_two_stages_use_only_the_first_stage_flag() -> None:
    f = flags(make_plan("llama3.1-8b", 16, {"tp": 4, "pp": 2, "pipeline_layers": [15, 17]}))
    assert f["--decoder-first-pipeline-num-layers"] == ["15"]
    assert "--decoder-last-pipeline-num-layers" not in f


def test_other_uneven_splits_use_the_layout_string() -> None:
    f = flags(make_plan("llama3.1-8b", 16, {"tp": 4, "pp": 4, "pipeline_layers": [7, 9, 7, 9]}))
    assert f["--pipeline-model-parallel-layout"] == ["Et*7|t*9|t*7|t*9L"]
    assert "--decoder-first-pipeline-num-layers" not in f


def test_layout_string_for_deepseek_interleaved() -> None:
    # pipeline_layers (5, 4 x 13, 2, 2) in 2 chunks per rank: rank 0 [3, 2], ranks 1-13 [2, 2],
    # ranks 14-15 [1, 1]; stage k on rank k % 16; MTP and loss on the last stage
    per_rank = (5, *[4] * 13, 2, 2)
    text = compact(Layout(pp=16, vpp=2, pipeline_layers=per_rank).stages(61, 1))
    assert text == "Et*3|(t*2|)*13(t|)*2(t*2|)*14t|tmL"
    assert parse(text) == Layout(pp=16, vpp=2, pipeline_layers=per_rank).stages(61, 1)


def test_even_split_whose_ranks_do_not_divide_by_vpp_uses_the_layout() -> None:
    # 2 x 6 layers with vpp 4 is not a Megatron even split (6 % 4): chunks [2, 2, 1, 1]
    layout = compact(Layout(pp=2, vpp=4, pipeline_layers=(6, 6)).stages(12, 0))
    assert layout == "Et*2|(t*2|)*3(t|)*3tL"
    assert parse(layout) == Layout(pp=2, vpp=4, pipeline_layers=(6, 6)).stages(12, 0)


@pytest.mark.parametrize("gather", [True, False])
def test_nvfp4_flags_and_bf16_layers_read_back(gather: bool) -> None:
    # Megatron-LM d98e8a64: --fp4-format e2m1, --fp4-recipe nvfp4, --fp4-param-gather;
    # --first-last-layers-bf16 with the two counts (TransformerConfig)
    training = {"precision": "fp4", "fp4_param_gather": gather, "bf16_layers_at_end": 4}
    plan = make_plan("llama3.1-8b", 8, {"tp": 1, "zero_stage": 1}, "b200-sxm-180gb", **training)
    f = flags(plan)
    assert f["--fp4-format"] == ["e2m1"] and f["--fp4-recipe"] == ["nvfp4"]
    assert ("--fp4-param-gather" in f) is gather and "--fp8-format" not in f
    assert "--first-last-layers-bf16" in f and f["--num-layers-at-end-in-bf16"] == ["4"]
    assert f["--num-layers-at-start-in-bf16"] == ["0"]
    assert_same(plan, round_trip(plan))


def test_fp8_output_proj_flag_reads_back() -> None:
    # Megatron-LM d98e8a64: --fp8-output-proj (TransformerConfig.fp8_output_proj, with fp8 and
    # the mxfp8 recipe); the plan read back from the launch line has it, and the same memory
    training = {"precision": "fp8", "fp8_recipe": "mxfp8", "fp8_output_proj": True}
    plan = make_plan("llama3.1-8b", 8, {"tp": 1, "zero_stage": 1}, "b200-sxm-180gb", **training)
    assert "--fp8-output-proj" in flags(plan)
    back = round_trip(plan)
    assert back.job.fp8_output_proj
    assert_same(plan, back)
    plain = make_plan("llama3.1-8b", 8, {"tp": 1}, "b200-sxm-180gb", precision="fp8")
    assert "--fp8-output-proj" not in flags(plain) and not round_trip(plain).job.fp8_output_proj


def test_fused_grouped_mlp_flags_env_and_read_back() -> None:
    # Megatron-LM d98e8a64: --use-transformer-engine-op-fuser (TransformerConfig field) builds the
    # experts as Transformer Engine's fused grouped MLP; its GLU kernel needs
    # --moe-mlp-glu-interleave-size 32 (TE d0067d0d validate_grouped_mlp_dims) and its kernels are
    # registered only with NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 (`is_supported`)
    training = {"precision": "fp8", "fp8_recipe": "mxfp8", "moe_fused_grouped_mlp": True}
    par = {"tp": 1, "ep": 8, "etp": 1}
    plan = make_plan("mixtral-8x7b", 64, par, "b200-sxm-180gb", **training)
    f = flags(plan)
    assert "--use-transformer-engine-op-fuser" in f and "--moe-grouped-gemm" in f
    assert f["--moe-mlp-glu-interleave-size"] == ["32"]
    env = {e.name: e.value for e in environment(plan)}
    assert env["NVTE_CUTEDSL_FUSED_GROUPED_MLP"] == "1"
    back = round_trip(plan)
    assert back.job.moe_fused_grouped_mlp and back.job.grouped_mlp_fused
    assert_same(plan, back)
    plain = make_plan("mixtral-8x7b", 64, par, "b200-sxm-180gb", precision="fp8")
    assert "--use-transformer-engine-op-fuser" not in flags(plain)
    assert "NVTE_CUTEDSL_FUSED_GROUPED_MLP" not in {e.name for e in environment(plain)}
    # a GLU without the 32-wide interleave is not fused: read as unfused, and the reading says so
    text = megatron.render(plan, "job").replace("--moe-mlp-glu-interleave-size 32", "")
    reading = megatron_args.read(text, "b200-sxm-180gb", 64)
    assert not reading.doc["training"].get("moe_fused_grouped_mlp")
    assert any("GLU interleave of 32" in n for n in reading.notes)


def test_fp8_attention_has_no_megatron_lm_flag_and_is_noted() -> None:
    # Megatron-LM d98e8a64 leaves TransformerConfig.fp8_dot_product_attention out of its command
    # line (arguments.py `_add_network_size_args` exclude list): no flag to emit, a note instead
    plan = make_plan(
        "llama3.1-8b", 8, {"tp": 1}, "b200-sxm-180gb", precision="fp4", fp8_attention=True
    )
    args = megatron.arguments(plan)
    assert not any("dot-product" in f or "dpa" in f for f in flags(plan))
    assert any("fp8_attention" in n and "no Megatron-LM flag" in n for n in args.notes)
    plain = make_plan("llama3.1-8b", 8, {"tp": 1}, "b200-sxm-180gb", precision="fp4")
    assert not any("fp8_attention" in n for n in megatron.arguments(plain).notes)


def test_rope_fusion_flags() -> None:
    # Megatron-LM d98e8a64 arguments.py: --no-rope-fusion is store_false into apply_rope_fusion,
    # so a line without it fuses; TransformerConfig's own default is False, so the
    # Megatron-Bridge override states it either way
    plain = make_plan("llama3.1-8b", 16, {"tp": 2})
    assert plain.job.fused_rope and "--no-rope-fusion" not in flags(plain)
    eager = make_plan("llama3.1-8b", 16, {"tp": 2}, fused_rope=False)
    assert "--no-rope-fusion" in flags(eager)
    assert not round_trip(eager).job.fused_rope and round_trip(plain).job.fused_rope
    for plan, want in ((plain, True), (eager, False)):
        doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
        assert doc["model"]["apply_rope_fusion"] is want
