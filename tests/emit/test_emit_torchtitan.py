"""planner launch --target torchtitan: the job TOML torchtitan's train.py reads, its torchrun and
sbatch scripts, and `check --torchtitan-config` reading the TOML back.

Oracles: planner/inputs/torchtitan_job_config_schema.json (every field of torchtitan's
config/job_config.py at the commit it names, with its annotation, derived from that file with
Python's ast) for the TOML; the plan itself for the round trip; bash -n and shellcheck for the
scripts.
"""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
from paths import REPO
from plan_text import plan_text, write
from shell_check import check_script
from titan_toml_plans import CLUSTER64, EXAMPLE, SCHEMA, TITAN

from planner.emit.launch import launch, render
from planner.inputs import torchtitan_config
from planner.inputs.errors import InputError
from planner.inputs.plan import load_plan
from planner.inputs.torchtitan import TORCHTITAN_COMMIT
from planner.search.rules import check_plan

PLANS = {
    "405b": None,  # the example
    "hsdp-cp": (
        "[parallel]\ntp = 2\ncp = 2\nzero_stage = 3\nrecompute = 'selective'\n",
        "\n[torchtitan]\ndp_replicate = 2\nreshard_after_forward = 'always'\n",
    ),
    "interleaved": (
        "[parallel]\npp = 4\nvpp = 2\nzero_stage = 3\nrecompute = 'full'\nmicro_batch_size = 2\n",
        "\n[torchtitan]\npipeline_schedule = 'Interleaved1F1B'\nselective_layer_every = 2\n",
    ),
    "deterministic": (  # debug.deterministic (torchtitan's set_determinism)
        "[parallel]\nzero_stage = 3\n",
        # e347b1e5, the TOML's torchtitan, leaves fill_uninitialized_memory on
        # (distributed/utils.py:114-124): the plan it reads back as
        "\n[torchtitan]\ndeterministic_fill = true\n",
    ),
    "zbv": (
        "[parallel]\npp = 2\nvpp = 2\ntp = 4\nzero_stage = 3\n",
        # no compile (nor so async TP): torch's split-backward schedules run uncompiled stages
        "\n[torchtitan]\npipeline_schedule = 'ZBVZeroBubble'\n",
    ),
}


def _plan_path(tmp_path: Path, key: str) -> Path:
    spec = PLANS[key]
    if spec is None:
        return EXAMPLE
    parallel, extra = spec
    training = TITAN + ("deterministic = true\n" if key == "deterministic" else "")
    text = plan_text(training=training, cluster=CLUSTER64, parallel=parallel)
    return write(tmp_path, text + extra)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _strings(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


KINDS = {
    "bool": lambda v: isinstance(v, bool),
    "int": _is_int,
    "float": lambda v: _is_int(v) or isinstance(v, float),
    "str": lambda v: isinstance(v, str),
    "list[str]": _strings,
    "list[list[str]]": lambda v: isinstance(v, list) and all(_strings(p) for p in v),
}


def _accepts(annotation: str, value: Any) -> bool:
    """Whether a TOML value fits a job_config.py annotation (the types the emitter uses)."""
    for a in (a.strip() for a in annotation.split("|")):
        if a.startswith("Literal[") and isinstance(value, str) and repr(value) in a:
            return True
        if a in KINDS and KINDS[a](value):
            return True
    return False


def _tables(doc: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    """Dotted table name -> its scalar / list fields."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            out.update(_tables(value, f"{prefix}{key}."))
        else:
            out.setdefault(prefix.rstrip("."), {})[key] = value
    return out


def test_schema_is_the_cited_commit() -> None:
    assert SCHEMA["commit"] == TORCHTITAN_COMMIT
    assert SCHEMA["file"] == "torchtitan/config/job_config.py"


@pytest.mark.parametrize("key", sorted(PLANS))
def test_torchtitan_accepts_the_toml(tmp_path: Path, key: str) -> None:
    # every table and field is one of job_config.py's, with a value its annotation takes
    _, text = render(check_plan(load_plan(_plan_path(tmp_path, key))), "torchtitan")
    doc = tomllib.loads(text)
    for table, fields in _tables(doc).items():
        assert table in SCHEMA["sections"], table
        for name, value in fields.items():
            annotation = SCHEMA["sections"][table].get(name)
            assert annotation is not None, f"{table}.{name}"
            assert _accepts(annotation, value), f"{table}.{name} = {value!r} ({annotation})"


def test_the_degrees_multiply_to_the_gpus_and_the_batch_adds_up() -> None:
    # parallel_dims._validate: replicate x shard x cp x tp x pp = world; train.py: global =
    # local x dp x accumulation (1 with PP; the pipeline splits local into micro-batches)
    plan = check_plan(load_plan(EXAMPLE))
    doc = tomllib.loads(render(plan, "torchtitan")[1])
    p = doc["parallelism"]
    world = 1
    for key in (
        "data_parallel_replicate_degree",
        "data_parallel_shard_degree",
        "context_parallel_degree",
        "tensor_parallel_degree",
        "pipeline_parallel_degree",
    ):
        world *= p[key]
    assert world == 512
    t = doc["training"]
    assert t["local_batch_size"] * p["data_parallel_shard_degree"] == t["global_batch_size"]
    parts = p["module_fqns_per_model_part"]
    assert (
        len(parts) == 8 and parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
    )
    assert sum(len([m for m in part if m.startswith("layers.")]) for part in parts) == 126


@pytest.mark.parametrize("key", sorted(PLANS))
def test_round_trip(tmp_path: Path, key: str) -> None:
    # oracle: the plan; the TOML read back (check --torchtitan-config) gives the same job and
    # the same layout, its pipeline split spelled as stages
    plan = check_plan(load_plan(_plan_path(tmp_path, key)))
    out = tmp_path / "torchtitan.toml"
    out.write_text(render(plan, "torchtitan")[1])
    again = check_plan(torchtitan_config.load(out, None, None))
    assert again.job == plan.job
    n = plan.job.arch.num_layers
    lay, back = plan.require_layout(), again.require_layout()
    assert back.split_as_stages(n) == lay.split_as_stages(n)


def test_scripts_are_written_beside_the_toml_and_pass_shellcheck(tmp_path: Path) -> None:
    name = "llama $(rm -rf) 'x'"
    done = launch(EXAMPLE, "torchtitan", tmp_path / "out", name)
    assert done.path == tmp_path / "out" / "torchtitan.toml"
    for file in ("torchtitan-train.sh", "torchtitan-train.sbatch"):
        script = tmp_path / "out" / file
        check_script(script)
        text = script.read_text()
        assert '-m torchtitan.train --job.config_file "$CONFIG_FILE"' in text
        assert f"JOB_NAME={shlex.quote(name)}\n" in text  # quoted, not run


def test_megatron_targets_refuse_a_torchtitan_plan_and_back() -> None:
    with pytest.raises(
        InputError, match=r"training\.framework: --target torchrun launches megatron"
    ):
        launch(EXAMPLE, "torchrun")
    megatron = REPO / "examples" / "llama3.1-8b-h100.toml"
    with pytest.raises(InputError, match="--target torchtitan launches torchtitan"):
        launch(megatron, "torchtitan")


def test_a_model_torchtitan_has_no_flavor_of_exits_2(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        plan_text(
            model='[model]\nname = "llama2-7b"\n',
            training=TITAN,
            parallel="[parallel]\nzero_stage = 3\n",
        ),
    )
    with pytest.raises(InputError, match="model: torchtitan has no flavor of 'llama2-7b'"):
        launch(path, "torchtitan")


def test_a_toml_without_gpu_needs_the_flag(tmp_path: Path) -> None:
    path = write(tmp_path, "[model]\nname = 'llama3'\nflavor = '8B'\n", "t.toml")
    with pytest.raises(InputError, match="give --gpu"):
        torchtitan_config.load(path, None, None)
    plan = torchtitan_config.load(path, "h100-sxm-80gb", 8)
    assert plan.job.arch.name == "llama3.1-8b" and plan.require_layout().dp == 8


@pytest.mark.parametrize(
    ("parallelism", "field"),
    [
        ("tensor_parallel_degree = 0", "parallelism.tensor_parallel_degree: must be at least 1"),
        ("pipeline_parallel_degree = -2", "parallelism.pipeline_parallel_degree: must be at"),
        ("context_parallel_degree = 0", "parallelism.context_parallel_degree: must be at least"),
        ("data_parallel_replicate_degree = 0", "parallelism.data_parallel_replicate_degree"),
        ("data_parallel_shard_degree = 0", "parallelism.data_parallel_shard_degree: must be at"),
        ("pipeline_parallel_degree = 2\nmodule_fqns_per_model_part = []", "one per stage"),
        (
            'pipeline_parallel_degree = 2\nmodule_fqns_per_model_part = [["tok_embeddings"], '
            '["layers.0"], ["norm", "output"]]',
            "3 stages, not a multiple of pipeline_parallel_degree",
        ),
    ],
)
def test_degrees_below_one_exit_2_naming_the_field(
    tmp_path: Path, parallelism: str, field: str
) -> None:
    """A fuzzer's internal errors: a degree of 0 beside the shard degree's -1 (the rest)
    divided by zero, and an empty list of stages indexed its last. Now exit 2 (InputError),
    naming the file and the field; torchtitan's ParallelDims takes the shard degree at least 1
    or -1, every other degree at least 1. Stages that pp does not divide are named under
    torchtitan's field too (it was the plan's parallel.pipeline_model_parallel_layout)."""
    text = f"[model]\nname = 'llama3'\nflavor = '8B'\n[parallelism]\n{parallelism}\n"
    path = write(tmp_path, text, "t.toml")
    with pytest.raises(InputError, match=field) as e:
        torchtitan_config.load(path, "h100-sxm-80gb", 8)
    assert str(path) in str(e.value)


def test_check_and_explain_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli_run import run

    out_dir = tmp_path / "out"
    launch(EXAMPLE, "torchtitan", out_dir)
    code, out, err = run(
        ["check", "--torchtitan-config", str(out_dir / "torchtitan.toml"), "--json"], capsys
    )
    assert code == 0, err
    from_toml = json.loads(out)["memory"]["peak_gib"]
    code, out, err = run(["check", str(EXAMPLE), "--json"], capsys)
    assert json.loads(out)["memory"]["peak_gib"] == from_toml  # the same plan, the same peak
    code, out, err = run(["explain", str(EXAMPLE), "--json"], capsys)
    assert code == 0, err
    # a Megatron plan with ZeRO 1 checked as torchtitan: exit 2 naming the field
    megatron = REPO / "examples" / "llama3.1-8b-h100.toml"
    code, _, err = run(["check", str(megatron), "--framework", "torchtitan"], capsys)
    assert code == 2 and "parallel.zero_stage" in err and "FSDP2" in err
