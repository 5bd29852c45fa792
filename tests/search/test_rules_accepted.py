"""Settings the real training code runs although they change nothing (it ignores them, or reads
them once): `planner check` accepts them (exit 0) with a warning naming the file, the field and
the value, predicts what runs (the same memory and step as the plan without them), and `launch`
writes what the tool takes; the one combination the tool does refuse stays refused, its message
citing the line. Each test's oracle is the source line in its comment: NVIDIA/Megatron-LM at
d98e8a64, pytorch/torchtitan at b5bcd76c (today's) and e347b1e5 (the TOML era planner models)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run
from plan_text import CLUSTER, MODEL, load_error, write

from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.plan import load_plan, parse_plan
from planner.model import cost, memory
from planner.search.rules import check_plan

TRAINING = '[training]\nseq_length = 8192\nglobal_batch_size = 128\nprecision = "bf16"\n'
PARALLEL = "[parallel]\ntp = 2\npp = 1\nmicro_batch_size = 1\nzero_stage = 1\n"
TITAN = (
    '[training]\nframework = "torchtitan"\nseq_length = 8192\nglobal_batch_size = 64\n'
    '[parallel]\ntp = 1\npp = 1\nmicro_batch_size = 1\nzero_stage = 3\nrecompute = "full"\n'
)


def _same_prediction(a: Path, b: Path) -> None:
    """Both plans pass the rules and predict the same peak memory and step."""
    pa, pb = check_plan(load_plan(a)), check_plan(load_plan(b))
    la, lb = pa.require_layout(), pb.require_layout()
    assert memory.estimate(pa.job, la).peak == memory.estimate(pb.job, lb).peak
    assert cost.estimate(pa.job, la).step_time_s == cost.estimate(pb.job, lb).step_time_s


def _check(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """`planner check PATH`: exit 0 (the plan runs and fits); its stderr."""
    code, _, err = run(["check", str(path)], capsys)
    assert code == 0, err
    return " ".join(err.split())  # rich wraps the warnings


def _launch(path: Path, capsys: pytest.CaptureFixture[str], target: str) -> str:
    code, out, err = run(["launch", str(path), "--target", target], capsys)
    assert code == 0, err
    return out


# --- 1. recompute_modules without selective recompute


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_recompute_modules_without_selective_are_read_as_megatron_reads_them(
    tmp_path: Path, recompute: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # TransformerConfig.__post_init__ checks the modules only under `if recompute_granularity ==
    # "selective"` (transformer_config.py:1943 d98e8a64), and every module asks for selective
    # first (attention.py:392-395, transformer_layer.py:473-475): beside none or full they run
    # as if not given
    base = MODEL + CLUSTER + TRAINING + PARALLEL + f'recompute = "{recompute}"\n'
    given = write(tmp_path, base + 'recompute_modules = ["core_attn", "mlp"]\n', "given.toml")
    plain = write(tmp_path, base, "plain.toml")
    err = _check(given, capsys)
    assert f"{given}: parallel.recompute_modules: " in err and '["core_attn", "mlp"]' in err
    _same_prediction(given, plain)
    launched = _launch(given, capsys, "megatron-args")
    assert "--recompute-modules" not in launched and "mlp" not in launched.split()


def test_moe_recompute_module_beside_the_expert_overlap_stays_refused(tmp_path: Path) -> None:
    # the one check outside selective: with --overlap-moe-expert-parallel-comm TransformerConfig
    # asserts "moe" not in recompute_modules whatever the granularity
    # (transformer_config.py:3030-3032 d98e8a64)
    moe = '[model]\nname = "qwen3-30b-a3b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 16\n'
    text = (
        moe + TRAINING + '[parallel]\ntp = 1\nep = 8\nzero_stage = 1\nrecompute = "none"\n'
        'recompute_modules = ["moe"]\nep_comm_overlap = true\n'
    )
    msg = load_error(write(tmp_path, text))
    assert "parallel.recompute_modules: " in msg and '["moe"]' in msg, msg
    assert "transformer_config.py:3030-3032" in msg, msg
    # the same from a Megatron-LM line, which has no granularity flag here
    line = (
        "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --vocab-size 32000 "
        "--seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --bf16 "
        "--global-batch-size 64 --num-experts 8 --moe-router-topk 2 "
        "--expert-model-parallel-size 4 --moe-grouped-gemm --moe-token-dispatcher-type alltoall "
        "--recompute-modules moe"
    )
    doc = megatron_args.to_plan(line, "h100-sxm-80gb", 8)
    check_plan(parse_plan(doc))  # without the overlap: runs, modules unread
    overlapped = megatron_args.to_plan(
        line + " --overlap-moe-expert-parallel-comm", "h100-sxm-80gb", 8
    )
    with pytest.raises(InputError, match=r"transformer_config\.py:3030-3032"):
        parse_plan(overlapped)


# --- 2. an offload module named twice


def test_an_offload_module_named_twice_is_offloaded_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Megatron only asks `"core_attn" in config.offload_modules` (transformer_layer.py:1551,
    # attention.py:402-405 d98e8a64) and never counts the list: twice runs as once
    base = MODEL + CLUSTER + TRAINING + PARALLEL + 'recompute = "none"\n'
    twice = write(tmp_path, base + 'offload_modules = ["core_attn", "core_attn"]\n', "twice.toml")
    once = write(tmp_path, base + 'offload_modules = ["core_attn"]\n', "once.toml")
    err = _check(twice, capsys)
    assert f"{twice}: parallel.offload_modules: " in err and "core_attn more than once" in err
    assert load_plan(twice).require_layout().offload_modules == ("core_attn",)
    _same_prediction(twice, once)
    launched = _launch(twice, capsys, "megatron-args")
    assert "\n--offload-modules core_attn\n" in launched, launched


# --- 3. the fused grouped MLP on a dense model


def test_the_fused_grouped_mlp_on_a_dense_model_is_read_as_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Megatron-LM builds the fused grouped MLP in the experts only (TEGroupedMLP, transformer
    # MoE experts.py:286-291 d98e8a64); Llama 3.1 8B has none, so the plan runs as without it,
    # and the launch leaves --use-transformer-engine-op-fuser out (on a dense model that flag
    # would build TEFusedMLP instead, gpt_layer_specs.py:534-539, which is not what is timed)
    base = MODEL + CLUSTER + TRAINING
    fused = write(tmp_path, base + "moe_fused_grouped_mlp = true\n" + PARALLEL, "fused.toml")
    plain = write(tmp_path, base + PARALLEL, "plain.toml")
    err = _check(fused, capsys)
    assert f"{fused}: training.moe_fused_grouped_mlp: " in err and "no experts" in err
    assert not load_plan(fused).job.moe_fused_grouped_mlp
    _same_prediction(fused, plain)
    assert "--use-transformer-engine-op-fuser" not in _launch(fused, capsys, "megatron-args")


# --- 4. torchtitan's async TP at tp 1


def test_torchtitan_async_tp_at_tp_1_is_ignored_but_needs_compile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # b5bcd76c distributed/compile.py:49-52 passes no TP mesh at tp 1 and :80 returns without
    # one (e347b1e5 calls it under tp_enabled only, llama3/infra/parallelize.py:76-96): ignored;
    # CompileConfig.__post_init__ raises without compile whatever the tp (configs.py:306-313)
    base = MODEL + CLUSTER + TITAN + "[torchtitan]\ncompile = true\n"
    on = write(tmp_path, base + "async_tp = true\n", "on.toml")
    off = write(tmp_path, base, "off.toml")
    err = _check(on, capsys)
    assert f"{on}: torchtitan.async_tp: " in err and "tp is 1" in err
    _same_prediction(on, off)
    eager = write(tmp_path, MODEL + CLUSTER + TITAN + "[torchtitan]\nasync_tp = true\n", "e.toml")
    msg = load_error(eager)
    assert f"{eager}: torchtitan.async_tp: " in msg and "configs.py:306-313" in msg, msg


# --- 5. torchtitan refusals whose reasons b5bcd76c changed


@pytest.mark.parametrize(
    ("model", "cluster", "training", "parallel", "field", "cites"),
    [
        # b5bcd76c has parallelism.enable_sequence_parallel (config/configs.py:169), which the
        # refusal used to deny ("torchtitan always runs sequence parallelism")
        ("llama3.1-8b", "h100-sxm-80gb", "", "tp = 2\nsequence_parallel = false\n",
         "parallel.sequence_parallel", "enable_sequence_parallel"),
        # b5bcd76c has an NVFP4 linear converter (components/quantization/nvfp4.py:268-305),
        # which the refusal used to deny ("float8 (and MX) recipes")
        ("llama3.1-8b", "b200-sxm-180gb", 'precision = "fp4"\n', "tp = 1\n",
         "training.precision", "NVFP4LinearConverter"),
        # b5bcd76c builds HybridEP for moe_comm_backend "hybridep"
        # (torchtitan models common config_utils.py:402-408), which the refusal used to deny
        ("qwen3-30b-a3b", "h100-sxm-80gb", "",
         'tp = 1\nep = 8\nmoe_token_dispatcher_type = "flex"\n'
         'moe_flex_dispatcher_backend = "hybridep"\n',
         "parallel.moe_flex_dispatcher_backend", "config_utils.py:402-408"),
    ],
)  # fmt: skip
def test_torchtitan_refusals_say_what_b5bcd76c_has(
    tmp_path: Path, model: str, cluster: str, training: str, parallel: str, field: str, cites: str
) -> None:
    text = (
        f'[model]\nname = "{model}"\n[cluster]\ngpu = "{cluster}"\nnum_gpus = 16\n'
        '[training]\nframework = "torchtitan"\nseq_length = 8192\nglobal_batch_size = 64\n'
        f'{training}[parallel]\n{parallel}zero_stage = 3\nrecompute = "full"\n'
    )
    path = write(tmp_path, text)
    msg = load_error(path)
    assert f"{path}: {field}: " in msg and cites in msg, msg
    assert "b5bcd76c" in msg and "not modelled" in msg, msg
