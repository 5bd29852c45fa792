"""planner launch --target torchtitan-module: the Python configuration torchtitan takes since
it dropped TOML job configs, and its scripts.

Oracles: check_module (titan_module_check.py: tests/data/torchtitan_config_schema.json, the
modules, classes and functions of pytorch/torchtitan at the commit it names). The plan for the
numbers (degrees, tokens = sequences x sequence length, micro-batches per rank = the per-rank
batch over the micro-batch size); torchtitan's refusals as benchmarks/data/
torchtitan_head_config.md cites them; bash -n and shellcheck for the scripts.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from plan_text import plan_text, write
from shell_check import check_script
from titan_module_check import SCHEMA, check_module

from planner.emit import torchtitan_module
from planner.emit.launch import launch, render
from planner.inputs import torchtitan_config
from planner.inputs.errors import InputError
from planner.inputs.job_request import JobArgs, load_job
from planner.inputs.plan import Plan, load_plan
from planner.model import cost, memory
from planner.search.rules import check_plan, violations
from planner.search.space import Space
from planner.search.suggest import search_rows
from planner.search.titan_variants import candidate_job

TITAN = "[training]\nframework = 'torchtitan'\nseq_length = 8192\nglobal_batch_size = 128\n"


PLANS = {
    "8b-fsdp": (
        "llama3.1-8b",
        8,
        "[parallel]\nzero_stage = 3\nrecompute = 'none'\n",
        "",
        "\n[torchtitan]\nloss_chunks = 8\n",
    ),
    "405b-pp-fp8": (
        "llama3.1-405b",
        512,
        "[parallel]\ntp = 8\npp = 8\nzero_stage = 3\nrecompute = 'full'\n",
        "precision = 'fp8'\nfp8_recipe = 'rowwise'\n",
        "\n[torchtitan]\ncompile = true\nasync_tp = true\n",
    ),
    "70b-interleaved-hsdp": (
        "llama3.1-70b",
        64,
        "[parallel]\ntp = 4\npp = 4\nvpp = 2\nzero_stage = 3\nrecompute = 'selective'\n",
        "",
        "\n[torchtitan]\ndp_replicate = 2\nreshard_after_forward = 'never'\n",
    ),
    "qwen3-ep-deepep": (
        "qwen3-30b-a3b",
        64,
        "[parallel]\ntp = 2\nep = 8\netp = 1\nzero_stage = 3\nrecompute = 'full'\n"
        "moe_token_dispatcher_type = 'flex'\n",
        "seq_length = 4096\n",
        "",
    ),
    "gpt-oss-cp": (
        "gpt-oss-20b",
        16,
        "[parallel]\ncp = 2\nzero_stage = 3\nrecompute = 'full'\n",
        "",
        "\n[torchtitan]\ncp_load_balance = false\n",
    ),
    "qwen3-235b": (
        "qwen3-235b-a22b",
        256,
        "[parallel]\ntp = 4\npp = 4\nep = 16\netp = 1\nzero_stage = 3\nrecompute = 'full'\n",
        "seq_length = 4096\nglobal_batch_size = 256\ndeterministic = true\n",
        "",
    ),
}


def _emitted(tmp_path: Path, key: str) -> tuple[Any, str]:
    model, gpus, parallel, training, extra = PLANS[key]
    # a later seq_length / global_batch_size in [training] wins over TITAN's (TOML keys once)
    training_lines = dict(
        line.split(" = ", 1) for line in (TITAN + training).splitlines()[1:] if " = " in line
    )
    training_text = "[training]\n" + "".join(f"{k} = {v}\n" for k, v in training_lines.items())
    text = plan_text(
        model=f'[model]\nname = "{model}"\n',
        cluster=f'[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = {gpus}\n',
        training=training_text,
        parallel=parallel,
    )
    path = write(tmp_path, text + extra)
    plan = check_plan(load_plan(path))
    _, module = render(plan, "torchtitan-module", "job")
    return plan, module


# --- the tests ------------------------------------------------------------------------------


def test_schema_is_the_cited_commit() -> None:
    assert SCHEMA["commit"] == torchtitan_module.HEAD_COMMIT


@pytest.mark.parametrize("key", sorted(PLANS))
def test_the_module_names_only_what_torchtitan_defines(tmp_path: Path, key: str) -> None:
    _, text = _emitted(tmp_path, key)
    check_module(text)


def test_the_checker_catches_a_wrong_name(tmp_path: Path) -> None:
    """The oracle can fail: a misspelt field, keyword, import or Literal value is caught."""
    _, text = _emitted(tmp_path, "8b-fsdp")
    for good, bad in [
        ("config.training.max_context_length", "config.training.max_context_len"),
        (
            "tensor_parallel_degree=",
            "tensor_parallel=",
        ),
        ("import CompileConfig", "import CompilerConfig"),
        ("fsdp_reshard_after_forward='default'", "fsdp_reshard_after_forward='sometimes'"),
        ("decay_type='cosine'", "decay_type='cosinus'"),
    ]:
        assert good in text
        with pytest.raises((AssertionError, KeyError)):
            check_module(text.replace(good, bad))


def _values(text: str) -> dict[str, object]:
    """`config.x.y = constant` assignments and ParallelismConfig's keywords, as Python values."""
    out: dict[str, object] = {}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute):
            try:
                out[ast.unparse(node.targets[0])] = ast.literal_eval(node.value)
            except ValueError:
                out[ast.unparse(node.targets[0])] = ast.unparse(node.value)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "ParallelismConfig":
            out.update({f"p.{k.arg}": ast.literal_eval(k.value) for k in node.keywords})
    return out


def test_the_numbers_are_the_plans(tmp_path: Path) -> None:
    plan, text = _emitted(tmp_path, "70b-interleaved-hsdp")
    v = _values(text)
    lay = plan.require_layout()
    # 64 GPUs = tp 4 x pp 4 x dp 4, dp = replicate 2 x shard 2
    assert (v["p.tensor_parallel_degree"], v["p.pipeline_parallel_degree"]) == (4, 4)
    assert (v["p.data_parallel_replicate_degree"], v["p.data_parallel_shard_degree"]) == (2, 2)
    assert v["p.fsdp_reshard_after_forward"] == "never"
    assert v["p.pipeline_parallel_schedule"] == "Interleaved1F1B"
    # 128 sequences / dp 4 = 32 per rank, in micro-batches of the plan's size
    assert v["p.num_pp_microbatches"] == 32 // lay.micro_batch_size
    parts = v["p.module_fqns_per_model_part"]
    assert isinstance(parts, list) and len(parts) == 4 * 2  # pp x vpp stages
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "lm_head"]
    layers = [m for part in parts for m in part if m.startswith("layers.")]
    assert layers == [f"layers.{i}" for i in range(plan.job.arch.num_layers)]
    assert v["config.training.num_tokens_per_microbatch_per_dp_rank"] == lay.micro_batch_size * 8192
    assert v["config.training.num_tokens_per_train_step"] == 128 * 8192
    assert v["config.activation_checkpoint"] == "SelectiveAC.Config()"
    assert v["config.training.disable_cuda_graphs"] is True  # PP refuses CUDA graphs


def test_model_side_choices_go_through_model_registry(tmp_path: Path) -> None:
    _, fp8 = _emitted(tmp_path, "405b-pp-fp8")
    assert "recipe_name='rowwise', filter_fqns=['lm_head'], model_compile_enabled=True" in fp8
    assert "enable_async_tensor_parallel=True" in fp8
    _, moe = _emitted(tmp_path, "qwen3-ep-deepep")
    assert "moe_comm_backend='deepep'" in moe and "expert_parallel_degree=8" in moe
    _, oss = _emitted(tmp_path, "gpt-oss-cp")
    # gpt-oss's varlen attention does not run CP: FlexAttention; the plan's balancer off
    assert "attn_backend='flex'" in oss and "context_parallel_load_balancer=None" in oss
    _, big = _emitted(tmp_path, "qwen3-235b")
    assert "qwen3_30b_a3b()" in big and "model_registry('235B-A22B')" in big
    assert "config.debug.deterministic = True" in big


REFUSALS = {
    "expert TP": (
        "qwen3-30b-a3b",
        64,
        "[parallel]\ntp = 2\nep = 8\netp = 2\nzero_stage = 3\n",
        "",
        "",
        "parallel.etp",
    ),
    "every N layers": (
        "llama3.1-8b",
        8,
        "[parallel]\nzero_stage = 3\nrecompute = 'full'\n",
        "",
        "\n[torchtitan]\nselective_layer_every = 2\n",
        "torchtitan.selective_layer_every",
    ),
    "tensorwise": (
        "llama3.1-8b",
        8,
        "[parallel]\nzero_stage = 3\n",
        "precision = 'fp8'\nfp8_recipe = 'tensorwise'\n",
        "",
        "training.fp8_recipe",
    ),
    "rope table": (
        "deepseek-v3",
        1024,
        "[parallel]\nep = 64\nzero_stage = 3\nrecompute = 'full'\n",
        "seq_length = 32768\nglobal_batch_size = 1024\n",
        "",
        "training.seq_length",
    ),
}


@pytest.mark.parametrize("key", sorted(REFUSALS))
def test_what_this_torchtitan_cannot_run_is_refused_by_field(tmp_path: Path, key: str) -> None:
    model, gpus, parallel, training, extra, field = REFUSALS[key]
    PLANS["_refused"] = (model, gpus, parallel, training, extra)
    try:
        with pytest.raises(InputError, match=rf"{field}: torchtitan b5bcd76c"):
            _emitted(tmp_path, "_refused")
    finally:
        del PLANS["_refused"]


def test_the_scripts_run_the_module(tmp_path: Path) -> None:
    _emitted(tmp_path, "405b-pp-fp8")  # writes plan.toml
    out = tmp_path / "out"
    done = launch(tmp_path / "plan.toml", "torchtitan-module", out)
    assert done.path == out / torchtitan_module.MODULE_FILE
    check_module(done.text)
    for name in ("torchtitan-train.sh", "torchtitan-train.sbatch"):
        check_script(out / name)
        script = (out / name).read_text()
        assert "--module planner_job --config planner_job" in script
        assert 'export PYTHONPATH="$CONFIG_DIR' in script


@pytest.mark.parametrize("key", list(PLANS))
def test_the_module_reads_back_as_its_plan(tmp_path: Path, key: str) -> None:
    """`check --torchtitan-config planner_job.py` reads the module into the plan it was written
    from (planner.inputs.torchtitan_module): the same job and layout fields, and so the same
    predicted step time and peak memory. Oracle: the plan itself."""
    plan, module = _emitted(tmp_path, key)
    path = tmp_path / "planner_job.py"
    path.write_text(module)
    back = check_plan(torchtitan_config.load(path, None, None))
    lay, got = plan.require_layout(), back.require_layout()
    fields = ("tp", "pp", "dp", "cp", "ep", "expert_tp", "vpp", "micro_batch_size")
    fields += ("recompute", "zero_stage", "moe_token_dispatcher_type")
    assert {f: getattr(got, f) for f in fields} == {f: getattr(lay, f) for f in fields}
    assert got.stages(plan.job.arch.num_layers) == lay.stages(plan.job.arch.num_layers)
    job, again = plan.job, back.job
    assert (again.arch.name, again.seq_length, again.global_batch_size) == (
        job.arch.name,
        job.seq_length,
        job.global_batch_size,
    )
    assert (again.precision, again.deterministic, again.cluster) == (
        job.precision,
        job.deterministic,
        job.cluster,
    )
    if job.precision == "fp8":
        assert again.fp8_recipe == job.fp8_recipe
    keys = ("reshard_after_forward", "dp_replicate", "compile", "async_tp", "cp_load_balance")
    keys += ("loss_chunks",)
    assert {k: getattr(again.titan, k) for k in keys} == {k: getattr(job.titan, k) for k in keys}
    assert cost.estimate(again, got).step_time_s == cost.estimate(job, lay).step_time_s
    assert memory.estimate(again, got).peak == memory.estimate(job, lay).peak


@pytest.mark.parametrize(
    ("model", "gpus", "seq"), [("llama3.1-8b", 8, 8192), ("qwen3-30b-a3b", 16, 4096)]
)
def test_what_suggest_finds_for_todays_torchtitan_runs_there(
    tmp_path: Path, model: str, gpus: int, seq: int
) -> None:
    """A job with the chunked loss (today's torchtitan): every row and twin `suggest` returns
    passes the rules, `--target torchtitan-module` writes it, and the module reads back to the
    same predicted step time and peak memory. Oracle: the suggested plan itself."""
    text = plan_text(
        model=f'[model]\nname = "{model}"\n',
        cluster=f'[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = {gpus}\n',
        training=f"[training]\nframework = 'torchtitan'\nseq_length = {seq}\n"
        "global_batch_size = 64\n",
        parallel="",
    )
    job = load_job(write(tmp_path, text + "\n[torchtitan]\nloss_chunks = 8\n"), JobArgs())[0]
    _, rows = search_rows(job, Space(framework="torchtitan"), 3)
    assert rows
    for c in [c for r in rows for c in (r.candidate, *r.equivalents)]:
        plan = Plan(candidate_job(job, c), c.layout, tmp_path / "plan.toml")
        assert not violations(plan.job, c.layout)
        path = tmp_path / "planner_job.py"
        path.write_text(render(plan, "torchtitan-module", "job")[1])
        back = check_plan(torchtitan_config.load(path, None, None))
        want = (
            cost.estimate(plan.job, c.layout).step_time_s,
            memory.estimate(plan.job, c.layout).peak,
        )
        got = (
            cost.estimate(back.job, back.layout).step_time_s,
            memory.estimate(back.job, back.layout).peak,
        )
        assert got == want, c.layout.describe()
