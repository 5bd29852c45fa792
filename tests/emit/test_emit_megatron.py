"""planner.emit.megatron: the Megatron-LM arguments of a plan's parallelism, precision,
recompute, allocator, CUDA graphs and overlaps.

Oracles: Megatron-LM's own source (NVIDIA/Megatron-LM d98e8a64): every flag emitted is one its
parser accepts (planner/inputs/megatron_flags.txt, dumped from the parser); the combinations follow
validate_args / TransformerConfig.__post_init__. The round trip is
tests/emit/test_megatron_round_trip.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from megatron_plans import (
    GOLDEN_PLANS,
    MEGATRON_FLAGS,
    flags,
    make_plan,
    round_trip,
)
from paths import PLANS

from planner.emit import megatron
from planner.emit.common import environment
from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.layout import FSDP_STRATEGY
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
        assert f["--data-parallel-sharding-strategy"] == [FSDP_STRATEGY[zero]]
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
        tp_backward_overlap=False,
    )
    notes = " ".join(megatron.arguments(plan).notes)
    assert "cross_entropy" in notes
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
