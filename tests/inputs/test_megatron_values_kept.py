"""Megatron-LM flags whose value the reader used to lose (a QA pass), each against Megatron-LM
d98e8a64:
- the activation: argument_utils.py:314-326 (--swiglu: F.silu, gated, bias_activation_fusion from
  --no-bias-swiglu-fusion; --quick-geglu: quick_gelu, gated, the fusion from
  --no-bias-gelu-fusion); transformer_config.py:2440-2444 (a nonzero glu_linear_offset under the
  fusion needs quick_gelu); mlp.py:317-318 (the dense MLP fuses no quick_gelu) and :322-333 (the
  unfused GLU: activation_func(x_glu) * (x_linear + offset));
- the experts without --moe-grouped-gemm: SequentialMLP (transformer_engine_spec_provider.py
  :75-108);
- each Adam moment's dtype (arguments.py:3675-3684; TE FusedAdam keeps each state in its own);
- --optimizer soap (emerging_optimizers SOAP: Kronecker factors and eigenbases per matrix).
"""

from __future__ import annotations

import pytest
from jobs import TINY_LINE

from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan
from planner.model import adam_step
from tests.emit.megatron_plans import flags, make_plan, round_trip

GPU = "h100-sxm-80gb"
MOE = " --num-experts 8 --moe-router-topk 2 --moe-grouped-gemm --expert-model-parallel-size 8"
OFFSET = " --glu-linear-offset 1.0"
AWARE = " --use-distributed-optimizer --use-precision-aware-optimizer"


def read(extra: str) -> megatron_args.Reading:
    return megatron_args.read(TINY_LINE + extra, GPU, 8, "run.sh")


def launched(extra: str) -> dict[str, list[str]]:
    """The flags `planner launch --target megatron-args` writes for the line's plan."""
    return flags(parse_plan(megatron_args.to_plan(TINY_LINE + extra, GPU, 8)))


def test_a_silu_glu_with_an_offset_launches_as_itself() -> None:
    # --swiglu --no-bias-swiglu-fusion --glu-linear-offset 1.0: silu(x_glu) * (x_linear + 1)
    # unfused (mlp.py:322-333); the launch wrote --quick-geglu, quick_gelu's model, before
    line = " --swiglu --no-bias-swiglu-fusion" + OFFSET
    doc = read(line).doc
    assert doc["model"]["activation"] == "swiglu" and doc["model"]["glu_linear_offset"] == 1.0
    assert doc["training"]["fused_swiglu"] is False
    out = launched(line)
    assert "--quick-geglu" not in out
    assert out["--swiglu"] == [] and out["--glu-linear-offset"] == ["1.0"]
    assert "--no-bias-swiglu-fusion" in out


def test_a_fused_swiglu_with_an_offset_is_refused_as_megatron_does() -> None:
    # transformer_config.py:2440-2444: ValueError under bias_activation_fusion (--swiglu's default)
    with pytest.raises(InputError, match=r"transformer_config\.py:2440-2444"):
        read(" --swiglu" + OFFSET)
    # an offset of 0 is no offset
    assert read(" --swiglu --glu-linear-offset 0").doc["model"]["activation"] == "swiglu"
    # a plan asking for it fused is refused at the launch, not written as quick-GEGLU
    plan = make_plan("llama3.1-8b", 8, {"tp": 2})
    arch = plan.job.arch.model_dump(exclude={"name"}) | {"name": "x", "glu_linear_offset": 1.0}
    with pytest.raises(InputError, match="fused_swiglu = false"):
        flags(make_plan(arch, 8, {"tp": 2}))
    assert flags(make_plan(arch, 8, {"tp": 2}, fused_swiglu=False))["--glu-linear-offset"] == [
        "1.0"
    ]


def test_quick_geglu_with_and_without_offset_reads_and_launches_as_quick_geglu() -> None:
    # argument_utils.py:323-326: --quick-geglu is quick_gelu, gated; all-MoE, no shared expert:
    # the routed experts fuse it with the probabilities (experts.py:974-981)
    for extra in (MOE + " --quick-geglu", MOE + " --quick-geglu" + OFFSET):
        model = read(extra).doc["model"]
        assert model["activation"] == "quick_geglu" and model["gated_linear_unit"] is True
        out = launched(extra)
        assert out["--quick-geglu"] == [] and "--swiglu" not in out
        assert ("--glu-linear-offset" in out) == (OFFSET in extra)
    # the same offset under --swiglu (unfused) is another model: another plan
    silu = read(MOE + " --swiglu --no-bias-swiglu-fusion" + OFFSET).doc["model"]
    assert silu["activation"] == "swiglu"


def test_a_dense_quick_geglu_runs_only_unfused() -> None:
    # mlp.py:317-318 raises "Only support fusion of gelu and swiglu" for a dense MLP's quick_gelu
    with pytest.raises(InputError, match=r"mlp\.py:317-318"):
        read(" --quick-geglu")
    with pytest.raises(InputError, match=r"shared_experts\.py:292-293"):
        read(MOE + " --quick-geglu --moe-shared-expert-intermediate-size 256")
    doc = read(" --quick-geglu --no-bias-gelu-fusion").doc
    assert doc["model"]["activation"] == "quick_geglu"
    assert doc["training"]["fused_swiglu"] is False
    # argument_utils.py:319: --quick-geglu's fusion is --no-bias-gelu-fusion's, not SwiGLU's
    out = launched(" --quick-geglu --no-bias-gelu-fusion")
    assert "--no-bias-gelu-fusion" in out and "--no-bias-swiglu-fusion" not in out


def test_a_gated_erf_gelu_is_still_refused() -> None:
    # Gemma's gated tanh GELU ("geglu") is not quick_gelu: Megatron-LM has no flag for it
    plan = make_plan("gemma2-2b", 8, {"tp": 1})
    assert plan.job.arch.activation == "geglu"
    with pytest.raises(InputError, match="no flag for a gated geglu MLP"):
        flags(plan)


def test_gpt_oss_round_trips_as_quick_geglu() -> None:
    plan = make_plan("gpt-oss-20b", 8, {"ep": 8})
    back = round_trip(plan)
    assert back.job.arch.activation == plan.job.arch.activation == "quick_geglu"
    assert back.job.arch.glu_linear_offset == 1.0


def test_experts_without_grouped_gemm_are_noted() -> None:
    # transformer_engine_spec_provider.py:75-108: SequentialMLP without --moe-grouped-gemm
    sequential = read(MOE.replace(" --moe-grouped-gemm", "") + " --swiglu").not_modelled
    assert any(n.startswith("--moe-grouped-gemm: not given with --num-experts") for n in sequential)
    grouped = read(MOE + " --swiglu").not_modelled
    assert not any("--moe-grouped-gemm" in n for n in grouped)
    assert not any("--moe-grouped-gemm" in n for n in read("").not_modelled)  # dense


@pytest.mark.parametrize(
    ("moments", "fields", "per_param"),
    [
        # fp32 master 4 + exp_avg bf16 2 + exp_avg_sq fp32 4 = 10 (12 before: both fp32)
        (" --exp-avg-dtype bf16", {"exp_avg_dtype": "bf16"}, 10.0),
        # 4 + fp8 1 + 4 = 9
        (" --exp-avg-dtype fp8", {"exp_avg_dtype": "fp8"}, 9.0),
        # 4 + fp8 1 + bf16 2 = 7 (12 before: not both 16-bit)
        (
            " --exp-avg-dtype fp8 --exp-avg-sq-dtype bf16",
            {"exp_avg_dtype": "fp8", "exp_avg_sq_dtype": "bf16"},
            7.0,
        ),
        # both 16-bit: the pair's field, 4 + 2 + 2 = 8
        (" --exp-avg-dtype bf16 --exp-avg-sq-dtype fp16", {"optimizer_state_dtype": "bf16"}, 8.0),
    ],
)
def test_each_moment_is_counted_in_its_dtype(
    moments: str, fields: dict[str, str], per_param: float
) -> None:
    line = " --tensor-model-parallel-size 2" + AWARE + moments
    training = read(line).doc["training"]
    assert {k: training[k] for k in fields} == fields
    plan = parse_plan(megatron_args.to_plan(TINY_LINE + line, GPU, 8))
    assert plan.job.optimizer_bytes == per_param
    # FusedAdam unscales each non-fp32 state into fp32 at the step (get_unscaled_state)
    assert adam_step.unscaled_states(plan.job, 1) == sum(
        d != "fp32" for d in plan.job.moment_dtypes
    )
    # and the launch writes each moment back as read
    out = flags(plan)
    for flag, dtype in zip(
        ("--exp-avg-dtype", "--exp-avg-sq-dtype"), plan.job.moment_dtypes, strict=True
    ):
        assert out.get(flag, ["fp32"]) == [dtype]
    assert round_trip(plan).job.moment_dtypes == plan.job.moment_dtypes


def test_llama_8b_bf16_first_moment_saves_two_bytes_a_sharded_parameter() -> None:
    # Llama 3.1 8B tp2 dp4, distributed optimizer: each rank's optimizer shard is 1/4 of its
    # 1/2 of the parameters; a bf16 exp_avg saves 2 bytes each of those over fp32
    base = make_plan(
        "llama3.1-8b", 8, {"tp": 2, "zero_stage": 1}, use_precision_aware_optimizer=True
    )
    half = make_plan("llama3.1-8b", 8, {"tp": 2, "zero_stage": 1}, exp_avg_dtype="bf16")
    assert base.job.optimizer_bytes - half.job.optimizer_bytes == 2.0


def test_soap_is_refused_and_lion_noted() -> None:
    # emerging_optimizers SOAP: 8 (m^2 + n^2) fp32 bytes per m x n matrix, e.g. a 64,128 x 4,096
    # embedding shard: 8 x (64,128^2 + 4,096^2) / 2^30 = 30.76 GiB, not per-parameter bytes
    assert pytest.approx(30.76, abs=0.01) == 8 * (64_128**2 + 4_096**2) / 2**30
    with pytest.raises(InputError, match="--optimizer soap: planner does not model it"):
        read(" --optimizer soap")
    lion = read(" --optimizer lion").not_modelled
    assert any(n.startswith("--optimizer:") for n in lion)
