"""planner launch --target torchtitan: what the TOML-era torchtitan (e347b1e5) refuses or runs
otherwise: a chunked loss, what it raises on, replication beside TP, tensorwise Float8, routing
groups, FlashAttention 2, the loss each target writes and DualPipeV's expert overlap.

Oracles: planner/inputs/torchtitan_job_config_schema.json (every field of torchtitan's
config/job_config.py at the commit it names, with its annotation, derived from that file with
Python's ast) for the TOML; torchtitan e347b1e5's sources named in each test.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from plan_text import plan_text, write
from titan_toml_plans import CLUSTER64, EXAMPLE, SCHEMA, TITAN

from planner.emit.launch import launch
from planner.inputs.errors import InputError
from planner.inputs.plan import load_plan
from planner.search.rules import check_plan


def test_the_toml_target_refuses_a_chunked_loss(tmp_path: Path) -> None:
    """e347b1e5's TOML torchtitan has no chunked loss: a plan with loss_chunks > 1 is for the
    module target."""
    path = write(
        tmp_path,
        plan_text(
            model='[model]\nname = "llama3.1-8b"\n',
            training=TITAN,
            parallel="[parallel]\nzero_stage = 3\n",
        )
        + "\n[torchtitan]\nloss_chunks = 8\n",
    )
    with pytest.raises(InputError, match=r"torchtitan\.loss_chunks: 8: torchtitan e347b1e5"):
        launch(path, "torchtitan")
    assert launch(path, "torchtitan-module").text.count("num_chunks=8") == 1


@pytest.mark.parametrize(
    ("model", "parallel", "seq", "field", "words"),
    [
        # gpt_oss/model/args.py: "CP support for gpt-oss model is still in progress"
        ("gpt-oss-20b", "ep = 8\ncp = 2\n", 8192, "parallel.cp", "in progress"),
        # deepseek_v3 671B: attn_type "flex"; model/args.py: CP "only supports SDPA"
        ("deepseek-v3", "ep = 64\ncp = 2\n", 8192, "parallel.cp", "only supports SDPA"),
        # qwen3/__init__.py, gpt_oss/__init__.py: pipelining_fn=None; train.py raises
        ("qwen3-30b-a3b", "ep = 8\npp = 2\n", 8192, "parallel.pp", "no pipelining"),
        ("gpt-oss-20b", "ep = 8\npp = 2\n", 8192, "parallel.pp", "no pipelining"),
        # parallel_dims.py seq_len_divisor = tp x (cp x 2) even at cp 1: 8 x 2 = 16 > 8200's 8
        ("llama3.1-8b", "tp = 8\n", 8200, "training.seq_length", "tp x 2 x cp (8 x 2 x 1"),
    ],
)
def test_the_toml_target_refuses_what_its_torchtitan_raises_on(
    tmp_path: Path, model: str, parallel: str, seq: str, field: str, words: str
) -> None:
    """What torchtitan e347b1e5 (the TOML era) raises on and b5bcd76c runs: the plan checks,
    the TOML target exits 2 naming the field and the module target, the module is written (the
    QA found each of these written as a TOML that fails at start-up)."""
    training = (
        f"[training]\nframework = 'torchtitan'\nseq_length = {seq}\nglobal_batch_size = 512\n"
    )
    cluster = '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 512\n'
    text = plan_text(
        model=f'[model]\nname = "{model}"\n',
        cluster=cluster,
        training=training,
        parallel=f"[parallel]\nzero_stage = 3\n{parallel}",
    )
    path = write(tmp_path, text)
    with pytest.raises(InputError, match=rf"{field}: .*{re.escape(words)}.*torchtitan-module"):
        launch(path, "torchtitan")
    if field != "training.seq_length":  # b5bcd76c asks tp x 2 x cp only with cp > 1
        launch(path, "torchtitan-module")


def test_replication_beside_tensor_parallelism_is_the_module_targets(tmp_path: Path) -> None:
    """dp_replicate = dp (no sharding) at tp 8: e347b1e5 applies DDP there and raises 'DDP has
    not supported > 1D parallelism' (models/llama3/infra/parallelize.py), b5bcd76c calls
    fully_shard over (dp_replicate, fsdp of 1) beside tp (models/llama3/parallelize.py): the plan
    checks, the TOML target exits 2 naming the field, the module is written. Alone (tp 1) both
    eras run it, and the TOML is written."""
    text = plan_text(
        cluster=CLUSTER64,
        training=TITAN,
        parallel="[parallel]\ntp = 8\nzero_stage = 0\n",
    )
    path = write(tmp_path, text + "\n[torchtitan]\ndp_replicate = 8\n")
    check_plan(load_plan(path))  # raises InputError on a broken rule (it did: tt_ddp)
    with pytest.raises(InputError, match=r"torchtitan\.dp_replicate: 8: .*1D parallelism"):
        launch(path, "torchtitan")
    assert "data_parallel_replicate_degree=8" in launch(path, "torchtitan-module").text
    alone = plan_text(cluster=CLUSTER64, training=TITAN, parallel="[parallel]\nzero_stage = 0\n")
    alone_path = write(tmp_path, alone + "\n[torchtitan]\ndp_replicate = 64\n")
    toml = tomllib.loads(launch(alone_path, "torchtitan").text)
    assert toml["parallelism"]["data_parallel_replicate_degree"] == 64


def test_tensorwise_float8_writes_no_recipe_name(tmp_path: Path) -> None:
    """e347b1e5 float8.py asserts recipe_name and enable_fsdp_float8_all_gather are never set
    together: tensorwise is its recipe-less path, so the example's TOML (tensorwise with the
    all-gather) names no recipe; rowwise names its recipe. Both read back as their plan."""
    doc = tomllib.loads(launch(EXAMPLE, "torchtitan").text)
    float8 = doc["quantize"]["linear"]["float8"]
    assert "recipe_name" not in float8 and float8["enable_fsdp_float8_all_gather"] is True
    text = EXAMPLE.read_text().replace(
        'precision = "fp8"', 'precision = "fp8"\nfp8_recipe = "rowwise"'
    )
    text = text.replace("float8_all_gather = true", "float8_all_gather = false")
    path = write(tmp_path, text)
    float8 = tomllib.loads(launch(path, "torchtitan").text)["quantize"]["linear"]["float8"]
    assert float8["recipe_name"] == "rowwise"


def test_routing_groups_other_than_the_models_are_not_launched(tmp_path: Path) -> None:
    """A plan's routing-group override changes its dispatch (planner.model.dispatch), but
    torchtitan's flavor builds its router with its own groups and neither target writes them:
    both refuse it, naming the field; the model's own groups launch."""
    model = '[model]\nname = "qwen3-30b-a3b"\n'
    parallel = "[parallel]\nep = 8\nzero_stage = 3\n"
    own = write(tmp_path, plan_text(model=model, training=TITAN, parallel=parallel), "own.toml")
    launch(own, "torchtitan")
    training = TITAN + "moe_router_num_groups = 8\nmoe_router_group_topk = 2\n"
    text = plan_text(model=model, training=training, parallel=parallel, cluster=CLUSTER64)
    path = write(tmp_path, text, "groups.toml")
    for target in ("torchtitan", "torchtitan-module"):
        with pytest.raises(InputError, match=r"groups\.toml: training\.moe_router_num_groups: "):
            launch(path, target)


def test_flashattention2_is_not_a_torchtitan_setting(tmp_path: Path) -> None:
    """torchtitan at TORCHTITAN_COMMIT tries cuDNN attention first with no setting
    (torchtitan/models/attention.py), so a plan timed with FlashAttention-2 (its 2024 code)
    cannot be launched as such: exit 2 naming the field."""
    path = write(
        tmp_path,
        plan_text(
            training=TITAN + "attention_kernel = 'flash2'\n",
            parallel="[parallel]\nzero_stage = 3\n",
        ),
    )
    with pytest.raises(InputError, match=r"training\.attention_kernel: flash2 is torchtitan"):
        launch(path, "torchtitan")


def test_the_loss_each_target_writes_is_the_plans(tmp_path: Path) -> None:
    """torchtitan has no fused cross entropy: a torchtitan plan saying "fused" breaks a rule
    (the TOML target wrote it as disable_loss_parallel = true, read back as "gathered": 11.5
    GiB more on Llama 3.1 70B at tp 4). "gathered" is e347b1e5's disable_loss_parallel; b5bcd76c
    has no such switch (components/loss.py:66-75 runs the loss vocab-parallel under TP), so
    the module target refuses it at tp > 1 rather than drop it."""

    def titan_plan(loss: str) -> Path:
        training = TITAN + f'cross_entropy = "{loss}"\n'
        text = plan_text(
            training=training, cluster=CLUSTER64, parallel="[parallel]\ntp = 4\nzero_stage = 3\n"
        )
        return write(tmp_path, text)

    with pytest.raises(InputError, match=r"training\.cross_entropy: .*no fused cross entropy"):
        check_plan(load_plan(titan_plan("fused")))
    gathered = titan_plan("gathered")
    toml = tomllib.loads(launch(gathered, "torchtitan").text)
    assert toml["parallelism"]["disable_loss_parallel"] is True
    with pytest.raises(InputError, match=r"training\.cross_entropy: torchtitan \S+ runs the loss"):
        launch(gathered, "torchtitan-module")
    toml = tomllib.loads(launch(titan_plan("pytorch"), "torchtitan").text)
    assert toml["parallelism"]["disable_loss_parallel"] is False


def test_dualpipev_expert_overlap_is_written_off(tmp_path: Path) -> None:
    """e347b1e5's pipeline_parallel_expert_parallel_overlap defaults to true
    (config/job_config.py:420): under DualPipeV with EP it overlaps EP and PP traffic, which
    planner does not model, and beside activation checkpointing it raises
    (distributed/dual_pipe_v.py:32-49). The TOML of a pipelined plan writes it false."""
    text = plan_text(
        training=TITAN, cluster=CLUSTER64, parallel="[parallel]\npp = 4\nzero_stage = 3\n"
    )
    toml = tomllib.loads(launch(write(tmp_path, text), "torchtitan").text)
    assert toml["parallelism"]["pipeline_parallel_expert_parallel_overlap"] is False
    assert "pipeline_parallel_expert_parallel_overlap" in SCHEMA["sections"]["parallelism"]
