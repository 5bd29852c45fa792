"""`[training] framework = "torchtitan"` and `[torchtitan]`: the defaults it sets, what torchtitan
cannot run (exit 2 naming the field, the value and what torchtitan supports), and the plan writer's
round trip. Oracle: torchtitan e347b1e5's config/job_config.py, distributed/parallel_dims.py and
pipeline_parallel.py, as cited in planner/inputs/torchtitan.py and
planner/search/rules/torchtitan.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_text import CLUSTER, load_error, plan_text, write

from planner.inputs import plan_writer
from planner.inputs.plan import load_plan
from planner.inputs.titan_every_layers import block_ranges
from planner.search.rules import check_plan

TITAN = "[training]\nframework = 'torchtitan'\nseq_length = 8192\nglobal_batch_size = 128\n"
BIG = '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 64\n'


def titan_plan(tmp_path: Path, parallel: str, extra: str = "", **kw: str) -> Path:
    text = plan_text(
        training=kw.get("training", TITAN),
        cluster=kw.get("cluster", CLUSTER),
        parallel=parallel,
        model=kw.get("model", '[model]\nname = "llama3.1-8b"\n'),
    )
    return write(tmp_path, text + extra)


def test_framework_sets_torchtitan_defaults(tmp_path: Path) -> None:
    # oracle: torchtitan's training code as described in planner/inputs/torchtitan.py
    plan = check_plan(load_plan(titan_plan(tmp_path, "[parallel]\ntp = 2\nzero_stage = 3\n")))
    job = plan.job
    assert job.framework == "torchtitan"
    assert job.cross_entropy == "pytorch"
    assert job.sp_keeps_gathered_input and not job.tp_backward_overlap
    assert job.selective_recompute == "per_op"
    assert not job.fused_norm and not job.fused_swiglu  # eager without compile
    assert job.expandable_segments


def test_megatron_defaults_unchanged(tmp_path: Path) -> None:
    plan = load_plan(write(tmp_path, plan_text()))
    job = plan.job
    assert job.framework == "megatron" and job.torchtitan is None
    assert job.cross_entropy == "fused" and job.tp_backward_overlap and job.fused_norm


def test_compile_and_async_tp_change_the_defaults(tmp_path: Path) -> None:
    extra = "\n[torchtitan]\ncompile = true\nasync_tp = true\n"
    plan = check_plan(
        load_plan(titan_plan(tmp_path, "[parallel]\ntp = 2\nzero_stage = 3\n", extra))
    )
    assert plan.job.fused_norm and plan.job.fused_swiglu and plan.job.tp_backward_overlap


def test_torchtitan_table_needs_the_framework(tmp_path: Path) -> None:
    path = write(tmp_path, plan_text() + "\n[torchtitan]\ncompile = true\n")
    msg = load_error(path)
    assert "torchtitan" in msg and 'framework = "torchtitan"' in msg and str(path) in msg


@pytest.mark.parametrize(
    ("parallel", "extra", "field", "words"),
    [
        # parallel_dims / apply_fsdp: FSDP2 is zero 3 over dp_shard x cp
        ("tp = 1\nzero_stage = 1\n", "", "parallel.zero_stage", "FSDP2"),
        # pipeline_parallel.py: single-stage schedules take one stage per rank
        (
            "pp = 4\nvpp = 2\nzero_stage = 3\n",
            "pipeline_schedule = '1F1B'\n",
            "parallel.vpp",
            "'1F1B'",
        ),
        # V schedules take exactly two
        (
            "pp = 4\nvpp = 4\nzero_stage = 3\n",
            "pipeline_schedule = 'ZBVZeroBubble'\n",
            "parallel.vpp",
            "exactly two stages per rank",
        ),
        # multi-stage schedules need at least two (vpp left out, torchtitan's default is 2)
        (
            "pp = 4\nvpp = 1\nzero_stage = 3\n",
            "pipeline_schedule = 'Interleaved1F1B'\n",
            "parallel.vpp",
            "at least two",
        ),
        (
            "tp = 2\nzero_stage = 3\ntp_comm_overlap = true\n",
            "",
            "parallel.tp_comm_overlap",
            "async_tp",
        ),
        ("tp = 2\nzero_stage = 3\n", "async_tp = true\n", "torchtitan.async_tp", "compile"),
        # FSDP2 reduce-scatters per module: Megatron's DDP bucket means nothing there
        (
            "tp = 1\nzero_stage = 3\nddp_bucket_size = 100000000\n",
            "",
            "parallel.ddp_bucket_size",
            "FSDP2",
        ),
        ("tp = 1\nzero_stage = 3\nddp_num_buckets = 4\n", "", "parallel.ddp_num_buckets", "FSDP2"),
        (
            "tp = 1\nzero_stage = 3\ncpu_offloading_num_layers = 2\n",
            "",
            "parallel.cpu_offloading_num_layers",
            "Megatron-LM setting",
        ),
        # torchtitan's trainer (b5bcd76c) offloads no activations: check counted the memory
        # fine-grained offloading saves, and the launched run would not save it
        (
            'tp = 1\nzero_stage = 3\noffload_modules = ["attn_norm"]\n',
            "",
            "parallel.offload_modules",
            "offloads no activations",
        ),
    ],
)
def test_what_torchtitan_cannot_run(
    tmp_path: Path, parallel: str, extra: str, field: str, words: str
) -> None:
    path = titan_plan(tmp_path, "[parallel]\n" + parallel, "\n[torchtitan]\n" + extra, cluster=BIG)
    msg = load_error(path)
    assert f"{path}: {field}:" in msg, msg
    assert words in msg, msg


def test_expert_parallelism_needs_a_torchtitan_moe_model(tmp_path: Path) -> None:
    # oracle: torchtitan has no Mixtral model; its MoE models are deepseek_v3, qwen3, gpt_oss
    path = titan_plan(
        tmp_path,
        "[parallel]\nep = 8\nzero_stage = 3\n",
        cluster=BIG,
        model='[model]\nname = "mixtral-8x7b"\n',
    )
    msg = load_error(path)
    assert "parallel.ep" in msg and "deepseek_v3" in msg and "mixtral-8x7b" in msg


QWEN3 = '[model]\nname = "qwen3-30b-a3b"\n'


@pytest.mark.parametrize(
    ("parallel", "words"),
    [
        # e347b1e5 apply_moe_ep_tp: no ep mesh -> the experts TensorParallel() on the tp mesh,
        # so expert TP is tp; a plan saying etp 1 there describes a run torchtitan does not do
        # (a round-trip fuzzer: its configuration read back as etp 8, 397 GiB, not 233)
        ("tp = 4\nsequence_parallel = true\nep = 1\netp = 1\n", "(1) with expert_parallel"),
        # parallelize.py:114-125: DeepEP raises at ep 1 and with expert TP enabled
        (
            "tp = 2\nsequence_parallel = true\nmoe_token_dispatcher_type = 'flex'\n",
            "needs expert parallelism",
        ),
        (
            "tp = 2\nsequence_parallel = true\nep = 4\netp = 2\n"
            "moe_token_dispatcher_type = 'flex'\n",
            "without expert TP (etp 2",
        ),
    ],
)
def test_torchtitans_expert_sharding(tmp_path: Path, parallel: str, words: str) -> None:
    path = titan_plan(tmp_path, "[parallel]\nzero_stage = 3\n" + parallel, cluster=BIG, model=QWEN3)
    msg = load_error(path)
    assert words in msg, msg
    # the same degrees with what torchtitan runs there check
    good = parallel.replace("etp = 1", "etp = 4").replace("'flex'", "'alltoall'")
    check_plan(
        load_plan(
            titan_plan(tmp_path, "[parallel]\nzero_stage = 3\n" + good, cluster=BIG, model=QWEN3)
        )
    )


@pytest.mark.parametrize(("tp", "refused"), [(4, False), (8, True), (16, True)])
def test_tp_divides_the_kv_heads(tmp_path: Path, tp: int, refused: bool) -> None:
    """torchtitan shards whole heads and never replicates KV heads (b5bcd76c
    models/common/decoder.py: "tensor_parallel_degree (..) must divide n_kv_heads"): Qwen3
    30B-A3B has 32 heads and 4 KV heads, so tp 4 runs and tp 8 exits 2 naming parallel.tp, where
    Megatron-LM replicates the KV heads (`rules.parallel.query_groups` takes it); `suggest` then
    never ranks it."""
    par = f"[parallel]\nzero_stage = 3\ntp = {tp}\nsequence_parallel = true\nep = 1\netp = {tp}\n"
    path = titan_plan(tmp_path, par, cluster=BIG, model=QWEN3)
    if refused:
        msg = load_error(path)
        assert "parallel.tp" in msg and "n_kv_heads (4)" in msg, msg
    else:
        check_plan(load_plan(path))


def test_megatron_only_recompute_fields_exit_2(tmp_path: Path) -> None:
    path = titan_plan(
        tmp_path,
        "[parallel]\nzero_stage = 3\nrecompute = 'full'\n"
        "recompute_method = 'block'\nrecompute_num_layers = 2\n",
    )
    msg = load_error(path)
    assert "parallel.recompute_method" in msg and "selective_layer_every" in msg


def test_fp8_recipes_belong_to_their_framework(tmp_path: Path) -> None:
    megatron = write(
        tmp_path,
        plan_text(
            training=TITAN.replace(
                "framework = 'torchtitan'", "precision = 'fp8'\nfp8_recipe = 'rowwise'"
            )
        ),
        "m.toml",
    )
    assert "training.fp8_recipe" in load_error(megatron)
    titan = titan_plan(
        tmp_path,
        "[parallel]\nzero_stage = 3\n",
        training=TITAN + "precision = 'fp8'\nfp8_recipe = 'delayed'\n",
    )
    msg = load_error(titan)
    assert "training.fp8_recipe" in msg and "rowwise" in msg


def test_selective_layer_every_recomputes_every_nth_layer_of_a_rank(tmp_path: Path) -> None:
    # torchtitan's split of 32 layers on pp 2: 32 + 2 effective layers, 17 a stage, the
    # embedding and the output taking one each: 16 and 16; every 2nd layer = 8 a rank
    path = titan_plan(
        tmp_path,
        "[parallel]\npp = 2\nzero_stage = 3\nrecompute = 'full'\n",
        "\n[torchtitan]\nselective_layer_every = 2\n",
    )
    lay = check_plan(load_plan(path)).require_layout()
    assert lay.stage_layers(32) == (16, 16)
    assert (lay.recompute, lay.recompute_method, lay.recompute_every) == ("full", "block", 2)
    # each rank's every second layer recomputed (torchtitan e347b1e5 activation_checkpoint.py
    # :37-40, one count per rank): 8 of its 16
    assert [len(block_ranges(lay, c)) for c in lay.chunk_layers(32)] == [8, 8]


PLANS = [
    (
        "[parallel]\ntp = 2\npp = 2\nzero_stage = 3\n",
        "\n[torchtitan]\ncompile = true\n"
        "async_tp = true\nreshard_after_forward = 'always'\ndp_replicate = 2\n",
    ),
    (
        "[parallel]\npp = 4\nvpp = 2\nzero_stage = 3\nrecompute = 'full'\n",
        "\n[torchtitan]\npipeline_schedule = 'Interleaved1F1B'\nselective_layer_every = 3\n",
    ),
    ("[parallel]\ncp = 2\nzero_stage = 3\nrecompute = 'selective'\n", ""),
]


@pytest.mark.parametrize(("parallel", "extra"), PLANS)
def test_plan_writer_round_trip(tmp_path: Path, parallel: str, extra: str) -> None:
    # oracle: the plan read back equals the plan written (Job and Layout compare by value)
    plan = check_plan(load_plan(titan_plan(tmp_path, parallel, extra, cluster=BIG)))
    lay = plan.require_layout()
    out = tmp_path / "again.toml"
    table = plan_writer.model_table(plan.job, plan.model_ref, out)
    out.write_text(plan_writer.render(plan.job, lay, table, ["round trip"]))
    again = check_plan(load_plan(out))
    assert again.job == plan.job
    assert again.require_layout() == lay


def test_torchtitan_trains_deepseek_v3_without_mtp(tmp_path: Path) -> None:
    """torchtitan e347b1e5's models/deepseek_v3 has no multi-token-prediction module (and
    b5bcd76c's baselines build none): the zoo model's MTP layer is not held there, so a pipelined
    plan's default split has no MTP stage to miss (it was refused, naming a layout the plan never
    set: 'the layout holds 0 MTP layers (m) but mtp_num_layers is 1')."""
    parallel = "[parallel]\npp = 8\nep = 32\nzero_stage = 3\nrecompute = 'full'\n"
    cluster = '[cluster]\ngpu = "b200-sxm-180gb"\nnum_gpus = 256\n'
    model = '[model]\nname = "deepseek-v3"\n'
    training = TITAN.replace("8192", "4096").replace("128\n", "1024\n")
    plan = check_plan(
        load_plan(titan_plan(tmp_path, parallel, cluster=cluster, model=model, training=training))
    )
    assert plan.job.arch.mtp_num_layers == 0
    # under Megatron-LM the same model keeps its MTP layer (DeepSeek-V3's one depth)
    megatron = load_plan(
        titan_plan(
            tmp_path,
            "[parallel]\nep = 32\n",
            cluster=cluster,
            model=model,
            training=training.replace("torchtitan", "megatron"),
        )
    )
    assert megatron.job.arch.mtp_num_layers == 1


def test_a_split_flag_given_false_keeps_torchtitans_split(tmp_path: Path) -> None:
    """account_for_*_in_pipeline_split = false is the field's default; given, it switched
    torchtitan's own split off (Llama 3.1 405B's 126 layers over pp 8 then needed 126 / 8)."""
    model = '[model]\nname = "llama3.1-405b"\n'
    splits = []
    for extra in ("", "account_for_loss_in_pipeline_split = false\n"):
        parallel = "[parallel]\npp = 8\nzero_stage = 3\n" + extra
        path = titan_plan(tmp_path, parallel, model=model, cluster=BIG)
        splits.append(load_plan(path).require_layout().pipeline_layout)
    assert splits[0] is not None and splits[0] == splits[1]
