"""planner launch --target megatron-bridge: the QA review of the override against Megatron-Bridge
067f987d (and the Megatron-LM 2a75ac12 it pins).

Each test names the Bridge (or Megatron) source line it follows: a preset or recipe that sets a
field the plan decides otherwise, or the check that refuses it. Each failed on the override that
left the field to the recipe or the preset.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_run import run
from megatron_plans import make_plan
from test_emit_bridge import accepted

from planner.emit import common
from planner.emit.launch import render
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan
from planner.model import dp_buckets


def _doc(plan: Plan) -> dict[str, Any]:
    text = render(plan, "megatron-bridge")[1]
    accepted(yaml.safe_load(text))  # (it takes the tables apart)
    return dict(yaml.safe_load(text))


def _notes(plan: Plan) -> list[str]:
    text = render(plan, "megatron-bridge")[1]
    return [ln.removeprefix("# note: ") for ln in text.splitlines() if ln.startswith("# note: ")]


def _hydra(plan: Plan) -> list[str]:
    """The header's one-word Hydra overrides."""
    text = render(plan, "megatron-bridge")[1]
    lines = [ln[2:] for ln in text.splitlines() if ln.startswith("# ") and "note:" not in ln]
    words = [shlex.split(ln) for ln in lines if "=" in ln and " " not in ln.strip("'")]
    return [w[0] for w in words if len(w) == 1]


FP8 = {"precision": "fp8", "fp8_recipe": "delayed"}


def test_zero0_under_a_preset_gathering_fp8_weights_is_refused_like_megatron_args() -> None:
    """Bridge's delayed (mixed_precision.py:231), MXFP8 (:264) and tensorwise (:302) presets set
    fp8_param_gather=True, synced to fp8_param (:81-87) and written over the model and DDP
    whatever the plan says; Megatron-LM asserts the distributed optimizer or FSDP under it
    (arguments.py:1061-1063), and --target megatron-args refuses such a ZeRO-0 plan. The Bridge
    target wrote it (the run then gathered FP8 weights the plan has not): now it exits 2 too,
    naming the plan's parallel.zero_stage. The blockwise preset (:384) gathers none: written."""
    par = {"tp": 4, "zero_stage": 0}
    for training, gpu in (
        (FP8, "h100-sxm-80gb"),
        ({"precision": "fp8", "fp8_recipe": "tensorwise"}, "h100-sxm-80gb"),
        ({"precision": "fp8", "fp8_recipe": "mxfp8"}, "b200-sxm-180gb"),
    ):
        plan = make_plan("llama3.1-8b", 8, par, gpu, **training)
        with pytest.raises(InputError, match=r"test-plan\.toml: parallel\.zero_stage: .*got 0"):
            render(plan, "megatron-bridge")
        with pytest.raises(InputError, match=r"training\.fp8_param_gather"):
            render(plan, "megatron-args")
    # the preset gathers whatever the plan's own switch: megatron-args writes this one
    off = make_plan("llama3.1-8b", 8, par, fp8_param_gather=False, **FP8)
    assert render(off, "megatron-args")[1]
    with pytest.raises(InputError, match=r"parallel\.zero_stage: .*fp8_param_gather=True"):
        render(off, "megatron-bridge")
    blockwise = make_plan("llama3.1-8b", 8, par, precision="fp8", fp8_recipe="blockwise")
    assert _doc(blockwise)["mixed_precision"] == "bf16_with_fp8_subchannel_scaling_mixed"
    assert _doc(make_plan("llama3.1-8b", 8, {"tp": 4}, **FP8))["ddp"]["use_distributed_optimizer"]


def test_the_zero0_fp8_refusal_exits_2_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The QA's repro (`planner suggest --precision fp8 --zero 0 --write-plan`, then `launch
    --target megatron-bridge`): exit 2, the plan file and the field named, no traceback."""
    path = tmp_path / "z0.toml"
    path.write_text(
        '[model]\nname = "llama3.1-8b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
        '[training]\nseq_length = 4096\nglobal_batch_size = 256\nprecision = "fp8"\n'
        'fp8_recipe = "delayed"\n'
        "[parallel]\ntp = 4\nzero_stage = 0\n"
    )
    code, _, err = run(["launch", str(path), "--target", "megatron-bridge"], capsys)
    assert code == 2, err
    assert f"{path}: parallel.zero_stage:" in err and "Traceback" not in err


def test_the_tensorwise_presets_bf16_layers_are_noted() -> None:
    """bf16_with_fp8_current_scaling_mixed sets first_last_layers_bf16=True with 1 layer at each
    end (mixed_precision.py:299-301), written over the model's (:148-156): a plan timed with
    every layer in FP8 is told so, with the run's step and peak under the preset, and to set
    first_last_layers_bf16=False; one with 2 and 2 the counts to set; one with the preset's 1
    and 1 nothing. The delayed preset keeps none (MixedPrecisionConfig's False, :53)."""
    tw = {"precision": "fp8", "fp8_recipe": "tensorwise"}
    none = make_plan("llama3.1-8b", 16, {"tp": 2}, **tw)
    note = next(n for n in _notes(none) if n.startswith("bf16 layers:"))
    assert "bf16_with_fp8_current_scaling_mixed keeps the first 1 and last 1" in note
    assert note.endswith("set first_last_layers_bf16=False on the recipe's MixedPrecisionConfig")
    run_s, plan_s = (float(x) for x in re.findall(r"(\d+\.\d{3}) s\b", note))
    assert run_s >= plan_s  # two layers' GEMMs in bf16, not FP8
    both = make_plan(
        "llama3.1-8b", 16, {"tp": 2}, bf16_layers_at_start=2, bf16_layers_at_end=2, **tw
    )
    note = next(n for n in _notes(both) if n.startswith("bf16 layers:"))
    assert "num_layers_at_start_in_bf16=2, num_layers_at_end_in_bf16=2" in note
    same = make_plan(
        "llama3.1-8b", 16, {"tp": 2}, bf16_layers_at_start=1, bf16_layers_at_end=1, **tw
    )
    assert not any(n.startswith("bf16 layers:") for n in _notes(same))
    assert not any(
        "bf16 layers" in n for n in _notes(make_plan("llama3.1-8b", 16, {"tp": 2}, **FP8))
    )


def test_a_plan_that_does_not_defer_writes_the_deferral_off() -> None:
    """Bridge's GPT-3 175B H100 recipe (gpt3_175b.py:115-119, and
    perf_recipes/llama/h100/llama3.py:312) set comm_overlap.defer_embedding_wgrad_compute True;
    Bridge's setup keeps a user value over its own False (comm_overlap.py:436,
    `_override_user_cfgs`), so the override left it to the recipe where the plan does not
    defer: now False, in the table and as a Hydra line."""
    plan = make_plan("llama3.1-8b", 16, {"tp": 2, "pp": 2})
    assert _doc(plan)["comm_overlap"]["defer_embedding_wgrad_compute"] is False
    assert "comm_overlap.defer_embedding_wgrad_compute=false" in _hydra(plan)


def test_the_mxfp8_gather_note_names_the_buffer_reuse_too() -> None:
    """bf16_with_mxfp8_mixed sets reuse_grad_buf_for_mxfp8_param_ag=True beside
    fp8_param_gather (mixed_precision.py:264-265), and Megatron-Core's DDP config asserts the
    reuse only with the gather (distributed_data_parallel_config.py:259-260, 2a75ac12): a plan
    without the gather is told to clear both. The delayed preset has no reuse to clear."""
    mx = make_plan(
        "llama3.1-8b", 16, {"tp": 2}, "b200-sxm-180gb", precision="fp8", fp8_recipe="mxfp8",
        fp8_param_gather=False,
    )  # fmt: skip
    note = next(n for n in _notes(mx) if "sets fp8_param_gather=True" in n)
    assert "set fp8_param_gather=False and reuse_grad_buf_for_mxfp8_param_ag=False on" in note
    delayed = make_plan("llama3.1-8b", 16, {"tp": 2}, fp8_param_gather=False, **FP8)
    note = next(n for n in _notes(delayed) if "sets fp8_param_gather=True" in n)
    assert "set fp8_param_gather=False on" in note and "reuse_grad_buf" not in note


def test_the_plans_device_connections_go_into_env_vars() -> None:
    """perf_recipes/llama/h100/llama3.py:58 and llama31.py:55 set env_vars
    CUDA_DEVICE_MAX_CONNECTIONS 1, which Bridge asserts against under Megatron-FSDP
    (training/config.py:1110): the plan's own value (planner.emit.common.environment: 32 under
    Megatron-FSDP, 1 with TP > 1 on Hopper) goes into ConfigContainer.env_vars (config.py:965),
    as a table merged over the recipe's (OmegaConf, --config-file) and as a `++env_vars` Hydra
    line, a string as env_vars holds it."""
    for par, want in (({"zero_stage": 3}, "32"), ({"tp": 2}, "1")):
        plan = make_plan("llama3.1-8b", 16, par)
        planned = {v.name: v.value for v in common.environment(plan)}
        assert planned["CUDA_DEVICE_MAX_CONNECTIONS"] == want
        assert _doc(plan)["env_vars"]["CUDA_DEVICE_MAX_CONNECTIONS"] == want
        assert f"++env_vars.CUDA_DEVICE_MAX_CONNECTIONS={want}" in _hydra(plan)
    # on AMD the plan leaves it unset (common.environment): no value to write, a note instead
    amd = make_plan("llama3.1-8b", 16, {"zero_stage": 3}, "mi300x-192gb")
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in _doc(amd).get("env_vars", {})
    assert any(n.startswith("CUDA_DEVICE_MAX_CONNECTIONS must be unset") for n in _notes(amd))


def test_a_recipes_bucket_count_is_cleared() -> None:
    """perf_recipes/nemotronh/common.py:146 sets ddp.num_buckets 48, which Megatron-Core's DDP
    config refuses beside the bucket size the override writes
    (distributed_data_parallel_config.py:275-276): a plan without a count writes it null."""
    ddp = _doc(make_plan("llama3.1-8b", 16, {"tp": 2}))["ddp"]
    assert ddp["num_buckets"] is None and isinstance(ddp["bucket_size"], int)


def test_the_deprecated_graph_switches_are_written_off() -> None:
    """perf_recipes/qwen/gb200/qwen3_moe.py:823 sets model.external_cuda_graph True, which
    Megatron-Core (transformer_config.py:2457-2473, 2a75ac12) refuses beside cuda_graph_impl
    "transformer_engine" and turns an eager plan's "none" into graphs; enable_cuda_graph likewise
    into "local". Both TransformerConfig fields (in the schema) written False, eager or not."""
    for extra in ({}, {"cuda_graphs": True}):
        m = _doc(make_plan("llama3.1-8b", 16, {"tp": 2}, **extra))["model"]
        assert m["external_cuda_graph"] is False and m["enable_cuda_graph"] is False


def test_the_buckets_are_the_size_the_plan_was_timed_with() -> None:
    """With the distributed optimizer and dp > 1 Bridge's setup gives DDP 128 MiB buckets unless
    comm_overlap.bucket_size is set (comm_overlap.py:577), and without it Megatron-Core's DDP
    takes max(40M, 1M x dp) over dp alone (distributed_data_parallel.py:68-69); the plan was
    timed with Megatron-LM's max(40M, 1M x dp x cp) (training.py resolve_ddp_bucket_size,
    planner.model.dp_buckets.bucket_params). Both tables carry it, for ZeRO 0 and 1; a plan's own
    size wins."""
    for par in ({"dp": 128}, {"dp": 32, "cp": 2}, {"dp": 32, "cp": 2, "zero_stage": 0}):
        plan = make_plan("llama3.1-8b", 64 if "cp" in par else 128, {"tp": 1, **par})
        lay = plan.require_layout()
        want = dp_buckets.bucket_params(lay, lay.dense_dp, 0.0)
        doc = _doc(plan)
        assert doc["ddp"]["bucket_size"] == doc["comm_overlap"]["bucket_size"] == want
        assert want != 128 * 2**20 and want == 1_000_000 * lay.dense_dp
    sized = make_plan("llama3.1-8b", 16, {"tp": 2, "ddp_bucket_size": 50_000_000})
    doc = _doc(sized)
    assert doc["ddp"]["bucket_size"] == doc["comm_overlap"]["bucket_size"] == 50_000_000
