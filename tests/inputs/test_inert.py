"""Settings a plan gives that change nothing (planner.inputs.inert): `check` keeps the plan valid
(exit 0) and warns, naming the file, the field and the value; the same setting where it applies,
or left at its default, is not named. The oracle for each case is what reads the setting, stated
beside it (Megatron-LM d98e8a64 arguments.py / TransformerConfig, and planner's own Job)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run
from plan_text import MODEL, TRAINING, load_error, plan_text, write

from planner.inputs.plan import load_plan

MOE_MODEL = '[model]\nname = "qwen3-30b-a3b"\n'
PARALLEL = "[parallel]\ntp = 2\npp = 1\nzero_stage = 1\n"

INERT = [
    # (table, line, why it is read nowhere)
    ("training", 'fp8_recipe = "mxfp8"', "a bf16 job quantises nothing"),
    ("training", "fp8_param_gather = true", "no FP8 weights in a bf16 job"),
    ("training", "fp4_param_gather = true", "no NVFP4 weights in a bf16 job"),
    ("training", "moe_expert_capacity_factor = 1.0", "a dense model routes no token"),
    ("training", "moe_pad_expert_input_to_capacity = true", "a dense model routes no token"),
    ("training", "moe_router_force_load_balancing = true", "a dense model has no router"),
    ("training", 'moe_router_dtype = "fp32"', "a dense model has no router"),
    ("training", "moe_router_padding = true", "a dense model has no router"),
    ("training", "muon_ns_steps = 3", "Adam runs no Newton-Schulz steps"),
    ("training", "muon_split_qkv = false", "Adam orthogonalises nothing (default true)"),
    ("training", 'muon_matmul_precision = "high"', "Adam runs no Newton-Schulz GEMMs"),
    ("training", "moe_paged_stash_buffer_size_factor = 1.5", "a dense model stashes nothing"),
    ("training", "optimizer_offload_overlap = false", "no optimizer offloaded (either value)"),
    ("training", 'selective_recompute = "per_op"', 'recompute "none": no selective recompute'),
    ("parallel", 'recompute_modules = ["core_attn"]', 'recompute "none": no module recomputed'),
    ("training", "optimizer_offload_overlap = true", "no optimizer offloaded (fraction 0)"),
    ("training", "dsa_indexer_loss_coeff = 0.1", "no sparse-attention indexer in Llama"),
    ("parallel", "etp = 1", "a dense model has no expert tensors (etp = tp is the default)"),
    ("parallel", 'moe_token_dispatcher_type = "flex"', "a dense model dispatches nothing"),
    ("parallel", 'cp_comm_type = "a2a"', "cp 1 exchanges nothing"),
    ("parallel", "microbatch_group_size_per_vp_stage = 4", "vpp 1: no interleaved schedule"),
    ("parallel", "wgrad_deferral_limit = 3", "defer_embedding_wgrad_compute off: nothing deferred"),
    ("parallel", "activation_offload_fraction = 0.5", "no offload_modules: nothing offloaded"),
    ("parallel", "account_for_loss_in_pipeline_split = true", "pp 1: no pipeline split"),
]


def _plan(
    tmp_path: Path, table: str, line: str, model: str = MODEL, training: str = TRAINING
) -> Path:
    parallel = PARALLEL
    if table == "training":
        training = training + line + "\n"
    else:
        parallel = parallel + line + "\n"
    return write(tmp_path, plan_text(model=model, training=training, parallel=parallel))


@pytest.mark.parametrize(("table", "line", "why"), INERT, ids=[c[1] for c in INERT])
def test_an_inert_setting_is_named_and_the_plan_stays_valid(
    table: str, line: str, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _plan(tmp_path, table, line)
    name = line.split(" = ")[0]
    code, out, err = run(["check", str(path), "--json"], capsys)
    assert code == 0, (why, err)
    warned = json.loads(out)["warnings"]
    assert [w for w in warned if "has no effect" in w] == [
        w for w in warned if w.startswith(f"{path}: {table}.{name}: {line} has no effect")
    ]
    assert len([w for w in warned if "has no effect" in w]) == 1, (why, warned)
    assert f"{path}: {table}.{name}: {line} has no effect" in err


def test_the_bundled_plan_names_no_setting(tmp_path: Path) -> None:
    assert load_plan(write(tmp_path, plan_text(parallel=PARALLEL))).inert == ()


@pytest.mark.parametrize(
    ("model", "training", "table", "line"),
    [
        # the same settings where they are read: FP8 recipe and weights in an FP8 job, expert
        # settings in an MoE model, a setting given its default value
        (MODEL, TRAINING + 'precision = "fp8"\n', "training", 'fp8_recipe = "blockwise"'),
        (MODEL, TRAINING + 'precision = "fp8"\n', "training", "fp8_param_gather = true"),
        (MOE_MODEL, TRAINING, "training", "moe_router_force_load_balancing = true"),
        (MOE_MODEL, TRAINING, "parallel", "etp = 1"),
        # router padding in an FP8 MoE job with the alltoall dispatcher (the layout's default)
        (MOE_MODEL, TRAINING + 'precision = "fp8"\n', "training", "moe_router_padding = true"),
        (MODEL, TRAINING, "parallel", 'moe_token_dispatcher_type = "alltoall"'),
        (MODEL, TRAINING, "parallel", "overlap_param_gather = true"),  # ZeRO 1 gathers
        (
            MODEL,
            TRAINING + "optimizer_offload_fraction = 0.5\n",
            "training",
            "optimizer_offload_overlap = false",
        ),
    ],
)
def test_a_setting_that_is_read_is_not_named(
    model: str, training: str, table: str, line: str, tmp_path: Path
) -> None:
    assert load_plan(_plan(tmp_path, table, line, model, training)).inert == ()


@pytest.mark.parametrize(
    ("training", "parallel", "why"),
    [
        (TRAINING, "", 'precision is "bf16"'),
        (
            TRAINING + 'precision = "fp8"\n',
            'moe_token_dispatcher_type = "allgather"\n',
            "allgather",
        ),
    ],
)
def test_router_padding_where_megatron_refuses_it(
    training: str, parallel: str, why: str, tmp_path: Path
) -> None:
    # transformer_config.py:2649-2659 d98e8a64: Megatron raises without FP8 / FP4 and with the
    # allgather dispatcher; the launch leaves the flag out there (planner.model.moe_padding)
    text = plan_text(
        model=MOE_MODEL,
        training=training + "moe_router_padding = true\n",
        parallel=PARALLEL + parallel,
    )
    plan = load_plan(write(tmp_path, text))
    assert [f for f, _ in plan.inert] == ["training.moe_router_padding"]
    assert why in plan.inert[0][1]


def test_overlap_param_gather_at_zero_stage_0(tmp_path: Path) -> None:
    # Megatron asserts --overlap-param-gather with a sharded optimizer only (validate_args):
    # launch leaves it out at ZeRO 0, so the plan's true is named
    parallel = "[parallel]\ntp = 2\npp = 1\nzero_stage = 0\noverlap_param_gather = true\n"
    plan = load_plan(write(tmp_path, plan_text(parallel=parallel)))
    assert [field for field, _ in plan.inert] == ["parallel.overlap_param_gather"]


def test_a_recompute_method_needs_full_recompute(tmp_path: Path) -> None:
    # Megatron asserts "recompute method is not yet supported for selective recomputing
    # granularity"; the layout's defaults cannot tell a given "uniform" or 1 from none
    for recompute in ("selective", "none"):
        for line, value in (
            ('recompute_method = "uniform"', '"uniform"'),
            ("recompute_num_layers = 1", "1"),
        ):
            parallel = f'{PARALLEL}recompute = "{recompute}"\n{line}\n'
            path = write(tmp_path, plan_text(parallel=parallel))
            name = line.split(" = ")[0]
            assert load_error(path) == (
                f'{path}: parallel.{name}: {value} needs recompute = "full" (got "{recompute}")'
            )
    ok = f'{PARALLEL}recompute = "full"\nrecompute_method = "uniform"\n'
    load_plan(write(tmp_path, plan_text(parallel=ok)))


def test_a_megatron_line_names_only_what_it_gives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A line without the distributed optimizer runs ZeRO 0 and no parameter all-gather: the
    reader leaves overlap_param_gather unset (it used to set the default, which then read as
    given: 53 of Megatron-LM's usable functional-test lines were told it has no effect). An
    expert-TP size on a dense model is given and ignored by Megatron: named (one functional
    test, gpt3_mcore_te_tp2_pp2_cp2_etp4_nondeterministic_dp_last, passes it)."""
    line = (
        "pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
        "--seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 "
        "--global-batch-size 8 --bf16 --tensor-model-parallel-size 2"
    )
    argv = ["check", "--megatron-args", "", "--gpu", "h100-sxm-80gb", "--num-gpus", "8", "--json"]
    for extra, named in (("", []), (" --expert-tensor-parallel-size 4", ["parallel.etp"])):
        path = tmp_path / "train.sh"
        path.write_text(line + extra + "\n")
        argv[2] = str(path)
        code, out, _ = run(argv, capsys)
        assert code == 0
        warned = [w for w in json.loads(out)["warnings"] if "has no effect" in w]
        assert [w.split(": ")[1] for w in warned] == named


def test_megatron_settings_under_torchtitan_and_offload_under_full_recompute(
    tmp_path: Path,
) -> None:
    """torchtitan's loss is [torchtitan] loss_chunks (planner.model.stage_activations applies
    compiled_loss_fusion under Megatron only); fine-grained offloading under full recompute
    offloads nothing (planner.model.fine_offload: a layer keeps only its input then)."""
    training = TRAINING + 'framework = "torchtitan"\ncompiled_loss_fusion = true\n'
    plan = load_plan(write(tmp_path, plan_text(training=training, parallel=PARALLEL)))
    assert [field for field, _ in plan.inert] == ["training.compiled_loss_fusion"]
    parallel = (
        '[parallel]\ntp = 2\npp = 1\nep = 8\nrecompute = "full"\noffload_modules = ["expert_fc1"]\n'
    )
    plan = load_plan(write(tmp_path, plan_text(model=MOE_MODEL, parallel=parallel), "moe.toml"))
    assert [field for field, _ in plan.inert] == ["parallel.offload_modules"]


@pytest.mark.parametrize(
    "argv",
    [
        # a dense model's etp (written as tp) and ZeRO 0's overlap_param_gather (the default)
        ["--model", "llama3.1-70b", "--num-gpus", "64"],
        ["--model", "llama3.1-8b", "--num-gpus", "8", "--zero", "0"],
        ["--model", "qwen3-30b-a3b", "--num-gpus", "16", "--framework", "torchtitan"],
    ],
)
def test_a_written_plan_names_no_setting(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What suggest writes is what check reads back: none of its settings is without effect."""
    path = tmp_path / "plan.toml"
    code, _, err = run(["suggest", *argv, "--write-plan", str(path)], capsys)
    assert code == 0, err
    assert load_plan(path).inert == ()


@pytest.mark.parametrize(
    ("recompute", "warned"),
    [
        ('recompute_method = "uniform"\nrecompute_num_layers = 1', True),
        # qwen3-30b-a3b has 48 layers, one chunk at pp 1: block 48 checkpoints all of them
        ('recompute_method = "block"\nrecompute_num_layers = 48', True),
        # block 3 calls the chunk's other 45 plainly, each offloading its modules' inputs
        # (Megatron-LM d98e8a64 megatron/core/recompute.py; transformer_layer.py sets the
        # offload flags per layer whatever the recompute)
        ('recompute_method = "block"\nrecompute_num_layers = 3', False),
    ],
)
def test_offload_under_full_recompute_is_inert_only_where_no_layer_is_left_whole(
    tmp_path: Path, recompute: str, warned: bool
) -> None:
    parallel = (
        '[parallel]\ntp = 2\npp = 1\nep = 8\nrecompute = "full"\n'
        f'{recompute}\noffload_modules = ["expert_fc1"]\n'
    )
    plan = load_plan(write(tmp_path, plan_text(model=MOE_MODEL, parallel=parallel), "moe.toml"))
    assert ("parallel.offload_modules" in [f for f, _ in plan.inert]) == warned


def test_sequence_parallel_at_tp_1_is_named_not_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Megatron turns sequence parallelism off at tp 1 with a warning, not an error
    (arguments.py:1433-1439 d98e8a64): check takes the plan and names the setting."""
    parallel = '[parallel]\ntp = 1\npp = 1\nzero_stage = 1\nrecompute = "full"\n'
    parallel += "sequence_parallel = true\n"
    path = write(tmp_path, plan_text(parallel=parallel))
    code, out, err = run(["check", str(path), "--json"], capsys)
    assert code == 0, err
    line = f"{path}: parallel.sequence_parallel: sequence_parallel = true has no effect"
    assert any(w.startswith(line) for w in json.loads(out)["warnings"])
