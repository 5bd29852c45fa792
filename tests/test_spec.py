"""planner.spec: the plan file (DESIGN.md section 2) -> Job + Layout, and every way it can be bad.

Every bad plan must raise `InputError` (exit 2) with a message naming the file, the field and the
value. Plans are written into tmp_path so the file name in the message is known.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from planner import catalog
from planner.errors import InputError
from planner.hf_import import load_hf_config
from planner.layout import Layout
from planner.spec import Plan, load_plan, parse_plan

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "llama3.1-8b-h100.toml"
PLANS = REPO / "tests" / "data" / "plans"
HF = REPO / "tests" / "data" / "hf"

MODEL = '[model]\nname = "llama3.1-8b"\n'
CLUSTER = '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
TRAINING = "[training]\nseq_length = 8192\nglobal_batch_size = 128\n"
PARALLEL = "[parallel]\ntp = 1\npp = 1\n"


def write(tmp_path: Path, text: str, name: str = "plan.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def plan_text(
    model: str = MODEL, cluster: str = CLUSTER, training: str = TRAINING, parallel: str = PARALLEL
) -> str:
    return "\n".join([model, cluster, training, parallel])


def load_error(path: Path) -> str:
    with pytest.raises(InputError) as info:
        load_plan(path)
    return str(info.value)


# --- good plans


def test_example_plan_resolves_to_job_and_layout() -> None:
    plan = load_plan(EXAMPLE)
    job, layout = plan.job, plan.layout
    assert plan.path == EXAMPLE
    assert job.arch == catalog.get_model("llama3.1-8b")
    assert job.cluster.gpu.name == "h100-sxm-80gb"
    assert job.cluster.num_gpus == 8
    # no overrides: node size, memory and tiers are the catalog's
    gpu = catalog.get_gpu("h100-sxm-80gb")
    assert job.cluster.gpus_per_node == gpu.gpus_per_node == 8
    assert job.cluster.memory_gib == gpu.memory_gib
    assert job.cluster.tiers == gpu.tiers
    assert (job.seq_length, job.global_batch_size, job.precision) == (8192, 128, "bf16")
    assert job.main_grad_dtype == "fp32"
    # tokens per step: 8192 x 128 = 1,048,576 (hand arithmetic)
    assert job.tokens_per_step == 1_048_576
    # dp derived: 8 GPUs / (tp 2 x pp 1 x cp 1) = 4; sequence_parallel defaults on at tp 2
    assert layout == Layout(
        tp=2, pp=1, dp=4, cp=1, ep=1, vpp=1, sequence_parallel=True, micro_batch_size=1
    )
    assert layout.num_gpus == 8


def test_plan_without_parallel_has_no_layout(tmp_path: Path) -> None:
    plan = load_plan(write(tmp_path, plan_text(parallel="")))
    assert isinstance(plan, Plan)
    assert plan.layout is None
    assert plan.job.arch.name == "llama3.1-8b"


def test_sequence_parallel_defaults_on_when_tp_above_one(tmp_path: Path) -> None:
    plan = load_plan(write(tmp_path, plan_text(parallel="[parallel]\ntp = 2\n")))
    assert plan.layout is not None
    assert plan.layout.sequence_parallel is True
    assert plan.layout.dp == 4  # 8 / (tp 2 x pp 1 x cp 1)
    off = "[parallel]\ntp = 2\nsequence_parallel = false\n"
    plan = load_plan(write(tmp_path, plan_text(parallel=off), "off.toml"))
    assert plan.layout is not None and plan.layout.sequence_parallel is False


def test_dp_derivation_over_tp_pp_cp(tmp_path: Path) -> None:
    # 64 GPUs / (tp 2 x pp 4 x cp 2) = 4; seq 8192 is a multiple of 2 x cp = 4
    cluster = '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 64\n'
    parallel = "[parallel]\ntp = 2\npp = 4\ncp = 2\n"
    plan = load_plan(write(tmp_path, plan_text(cluster=cluster, parallel=parallel)))
    assert plan.layout is not None
    assert (plan.layout.tp, plan.layout.pp, plan.layout.cp, plan.layout.dp) == (2, 4, 2, 4)


def test_model_from_hf_config_relative_to_plan_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the fixture plan says hf_config = "../hf/llama2-7b.json"; run from elsewhere so the path
    # only resolves if it is taken relative to the plan file, not to the working directory
    monkeypatch.chdir(tmp_path)
    plan = load_plan(PLANS / "hf-llama2-7b.toml")
    arch = plan.job.arch
    # the same architecture as importing the JSON directly (`source` records the path as given)
    direct = load_hf_config(HF / "llama2-7b.json")
    assert arch.model_dump(exclude={"source"}) == direct.model_dump(exclude={"source"})
    assert arch.source.endswith("llama2-7b.json")
    # Llama 2 7B (HF config): 32 layers, hidden 4096, FFN 11008, 32 heads, vocab 32000
    assert (arch.num_layers, arch.hidden_size, arch.ffn_hidden_size) == (32, 4096, 11008)
    assert (arch.num_attention_heads, arch.vocab_size) == (32, 32000)
    assert plan.model_ref == {"hf_config": "../hf/llama2-7b.json"}
    assert plan.job.cluster.gpu.name == "a100-sxm-80gb"
    assert plan.layout is not None
    assert plan.layout.dp == 4  # 16 / (tp 2 x pp 2)


def test_model_from_hf_config_written_to_tmp(tmp_path: Path) -> None:
    hf = tmp_path / "configs" / "tiny.json"
    hf.parent.mkdir()
    hf.write_text((HF / "llama2-7b.json").read_text())
    model = '[model]\nhf_config = "configs/tiny.json"\n'
    plan = load_plan(write(tmp_path, plan_text(model=model)))
    assert plan.job.arch.num_layers == 32


def test_model_from_zoo_toml_path_relative_to_plan_file(tmp_path: Path) -> None:
    (tmp_path / "my-model.toml").write_text((REPO / "model_zoo" / "llama3.1-8b.toml").read_text())
    model = '[model]\nname = "my-model.toml"\n'
    plan = load_plan(write(tmp_path, plan_text(model=model)))
    assert plan.job.arch == catalog.get_model("llama3.1-8b")


def test_inline_model_and_cluster_overrides() -> None:
    plan = load_plan(PLANS / "inline-overrides.toml")
    arch = plan.job.arch
    assert arch.name == "inline"
    assert (arch.num_layers, arch.hidden_size, arch.ffn_hidden_size) == (8, 1024, 4096)
    assert arch.num_attention_heads == 16
    assert arch.query_groups == 16  # Megatron default: num_query_groups = heads
    assert arch.position_embedding_type == "learned_absolute"
    cluster = plan.job.cluster
    # overrides take effect over the h100-sxm-80gb catalog entry (8 per node, 79.64 GiB, 2 tiers)
    assert cluster.gpu.name == "h100-sxm-80gb"
    assert cluster.gpus_per_node == 4
    assert cluster.memory_gib == 40.0
    assert [t.name for t in cluster.tiers] == ["nvlink", "leaf", "spine"]
    assert [t.span_gpus for t in cluster.tiers] == [4, 32, None]
    assert cluster.tiers[0].bandwidth_gb_per_s_per_gpu == 300
    assert cluster.tiers[2].latency_us == 10.0
    assert cluster.tiers[1].latency_us == 5.0  # LinkTier default
    # a TP group of 4 stays on the 4-GPU tier; a DP group of 8 needs the leaf tier
    assert cluster.tier_for_span(4).name == "nvlink"
    assert cluster.tier_for_span(8).name == "leaf"
    assert cluster.tier_for_span(64).name == "spine"
    assert plan.layout is not None
    assert plan.layout.dp == 8  # 64 / (tp 4 x pp 2)


def test_parse_plan_without_a_file_names_plan() -> None:
    data = {
        "model": {"name": "llama3.1-8b"},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
        "training": {"seq_length": 0, "global_batch_size": 8},
    }
    with pytest.raises(InputError, match=r"training\.seq_length.*got 0"):
        parse_plan(data)


def test_fp8_accepted_on_h100(tmp_path: Path) -> None:
    training = '[training]\nseq_length = 8192\nglobal_batch_size = 128\nprecision = "fp8"\n'
    plan = load_plan(write(tmp_path, plan_text(training=training)))
    assert plan.job.precision == "fp8"


# --- bad plans: InputError naming file, field and value


def test_malformed_toml_names_file_and_line() -> None:
    path = PLANS / "bad-malformed.toml"
    msg = load_error(path)
    assert str(path) in msg
    assert "malformed TOML" in msg
    assert "line 6" in msg  # the unclosed `[cluster` header is on line 6 of the fixture


@pytest.mark.parametrize(
    ("table", "text", "field", "value"),
    [
        ("model", plan_text(model=MODEL + "colour = 1\n"), "model.colour", "1"),
        (
            "model-inline",
            plan_text(
                model="[model]\nnum_layers = 2\nhidden_size = 64\nffn_hidden_size = 256\n"
                "num_attention_heads = 4\nvocab_size = 1000\nflavour = 3\n"
            ),
            "model.flavour",
            "3",
        ),
        ("cluster", plan_text(cluster=CLUSTER + 'colour = "red"\n'), "cluster.colour", "'red'"),
        (
            "cluster.tiers",
            plan_text(
                cluster=CLUSTER + '[[cluster.tiers]]\nname = "nvlink"\n'
                "bandwidth_gb_per_s_per_gpu = 450\nspeed = 9\n"
            ),
            "cluster.tiers.0.speed",
            "9",
        ),
        ("training", plan_text(training=TRAINING + "seqlen = 4096\n"), "training.seqlen", "4096"),
        (
            "parallel",
            plan_text(parallel=PARALLEL + "tensor_parallel = 2\n"),
            "parallel.tensor_parallel",
            "2",
        ),
        ("top level", plan_text() + "\nsuggest = true\n", "suggest", "True"),
    ],
)
def test_unknown_key_in_each_table(
    tmp_path: Path, table: str, text: str, field: str, value: str
) -> None:
    path = write(tmp_path, text)
    msg = load_error(path)
    assert str(path) in msg
    assert f"{field}: unknown key (got {value})" in msg


def test_unknown_table(tmp_path: Path) -> None:
    path = write(tmp_path, plan_text() + "\n[search]\nk = 3\n")
    msg = load_error(path)
    assert f"{path}: search: unknown key" in msg


def test_zero_and_negative_sizes() -> None:
    path = PLANS / "bad-negative.toml"
    msg = load_error(path)
    # both errors reported, one per line, each with file, field and value
    assert f"{path}: cluster.num_gpus: Input should be greater than 0 (got 0)" in msg
    assert f"{path}: training.seq_length: Input should be greater than 0 (got -1)" in msg


@pytest.mark.parametrize(
    ("parallel", "field", "value"),
    [
        ("[parallel]\ntp = 0\n", "parallel.tp", "0"),
        ("[parallel]\nmicro_batch_size = -2\n", "parallel.micro_batch_size", "-2"),
        ("[parallel]\nzero_stage = 4\n", "parallel.zero_stage", "4"),
        ('[parallel]\nrecompute = "some"\n', "parallel.recompute", "'some'"),
        ("[parallel]\npipeline_layers = [16, 0]\npp = 2\n", "parallel.pipeline_layers.1", "0"),
    ],
)
def test_bad_parallel_values(tmp_path: Path, parallel: str, field: str, value: str) -> None:
    path = write(tmp_path, plan_text(parallel=parallel))
    msg = load_error(path)
    assert f"{path}: {field}:" in msg
    assert f"(got {value})" in msg


def test_bad_memory_override(tmp_path: Path) -> None:
    path = write(tmp_path, plan_text(cluster=CLUSTER + "memory_gib = -80\n"))
    msg = load_error(path)
    assert f"{path}: cluster.memory_gib:" in msg and "(got -80)" in msg


def test_power_limit_above_tdp_is_bad_input(tmp_path: Path) -> None:
    path = write(tmp_path, plan_text(cluster=CLUSTER + "power_limit_w = 800\n"))
    msg = load_error(path)
    assert f"{path}: cluster" in msg and "power_limit_w (800)" in msg and "700" in msg


def test_cluster_variant_overrides(tmp_path: Path) -> None:
    extra = "power_limit_w = 500\nhbm_bandwidth_tb_per_s = 2.4\nmemory_gib = 95\n"
    training = TRAINING + 'cross_entropy = "pytorch"\nselective_recompute = "per_op"\n'
    plan = load_plan(write(tmp_path, plan_text(cluster=CLUSTER + extra, training=training)))
    c = plan.job.cluster
    assert (c.power_w, c.hbm_tb_per_s, c.memory_gib) == (500, 2.4, 95)
    assert plan.job.cross_entropy == "pytorch" and plan.job.selective_recompute == "per_op"
    # without overrides the catalog figures stand
    base = load_plan(write(tmp_path, plan_text(), "base.toml")).job.cluster
    assert (base.power_w, base.hbm_tb_per_s) == (700, 3.35)


def test_missing_required_field(tmp_path: Path) -> None:
    path = write(tmp_path, plan_text(training="[training]\nseq_length = 8192\n"))
    msg = load_error(path)
    assert f"{path}: training.global_batch_size: Field required" in msg


def test_nonexistent_plan_path(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    msg = load_error(path)
    assert msg == f"{path}: no such file"


def test_directory_as_plan_path(tmp_path: Path) -> None:
    msg = load_error(tmp_path)
    assert msg == f"{tmp_path}: is a directory, expected a file"


def test_unknown_gpu_suggests_close_names(tmp_path: Path) -> None:
    path = write(tmp_path, plan_text(cluster='[cluster]\ngpu = "h100"\nnum_gpus = 8\n'))
    msg = load_error(path)
    assert f"{path}: cluster.gpu:" in msg
    assert "'h100'" in msg
    assert "did you mean h100-sxm-80gb" in msg


def test_unknown_zoo_model_suggests_close_names(tmp_path: Path) -> None:
    path = write(tmp_path, plan_text(model='[model]\nname = "llama3-405b"\n'))
    msg = load_error(path)
    assert f"{path}: model.name:" in msg
    assert "'llama3-405b'" in msg
    assert "llama3.1-405b" in msg.split("did you mean", 1)[1]


def test_hf_config_and_name_together(tmp_path: Path) -> None:
    model = '[model]\nname = "llama3.1-8b"\nhf_config = "../hf/llama2-7b.json"\n'
    path = write(tmp_path, plan_text(model=model))
    msg = load_error(path)
    assert f"{path}: model:" in msg
    assert "hf_config" in msg and "'name'" in msg


def test_hf_config_missing_file_names_plan_and_field(tmp_path: Path) -> None:
    path = write(tmp_path, plan_text(model='[model]\nhf_config = "nothere.json"\n'))
    msg = load_error(path)
    assert f"{path}: model.hf_config:" in msg
    assert "'nothere.json'" in msg


def test_empty_model_table(tmp_path: Path) -> None:
    path = write(tmp_path, plan_text(model="[model]\n"))
    msg = load_error(path)
    assert f"{path}: model:" in msg


def test_fp8_on_a100_is_rejected(tmp_path: Path) -> None:
    cluster = '[cluster]\ngpu = "a100-sxm-80gb"\nnum_gpus = 8\n'
    training = '[training]\nseq_length = 8192\nglobal_batch_size = 128\nprecision = "fp8"\n'
    path = write(tmp_path, plan_text(cluster=cluster, training=training))
    msg = load_error(path)
    assert f"{path}: training.precision:" in msg
    assert "'fp8'" in msg and "a100-sxm-80gb" in msg


def test_unknown_precision(tmp_path: Path) -> None:
    training = '[training]\nseq_length = 8192\nglobal_batch_size = 128\nprecision = "fp16"\n'
    path = write(tmp_path, plan_text(training=training))
    msg = load_error(path)
    assert f"{path}: training.precision:" in msg and "(got 'fp16')" in msg


def tiers(*spans: int | None) -> str:
    out = []
    for i, span in enumerate(spans):
        out.append(f'[[cluster.tiers]]\nname = "t{i}"\nbandwidth_gb_per_s_per_gpu = 50\n')
        if span is not None:
            out[-1] += f"span_gpus = {span}\n"
    return "".join(out)


def test_tiers_leaving_gpus_unreachable(tmp_path: Path) -> None:
    # outermost tier spans 8 GPUs but the job has 16: two islands that cannot talk
    cluster = '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 16\n' + tiers(4, 8)
    path = write(tmp_path, plan_text(cluster=cluster))
    msg = load_error(path)
    assert f"{path}: cluster.tiers:" in msg
    assert "8" in msg and "16" in msg
    # just inside: an outer span of exactly 16 reaches every GPU
    cluster = '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 16\n' + tiers(4, 16)
    plan = load_plan(write(tmp_path, plan_text(cluster=cluster), "ok.toml"))
    assert [t.span_gpus for t in plan.job.cluster.tiers] == [4, 16]


@pytest.mark.parametrize(
    ("spans", "shown"),
    [
        ((8, 12, None), ("12", "8")),  # 12 is not a multiple of 8
        ((8, 4, None), ("4", "8")),  # shrinking
        ((8, 8, None), ("8",)),  # not larger
        ((None, 8), ("t0",)),  # an "everything" tier that is not the outermost
    ],
)
def test_tiers_not_nested(tmp_path: Path, spans: tuple[int | None, ...], shown: tuple[str]) -> None:
    cluster = '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 16\n' + tiers(*spans)
    path = write(tmp_path, plan_text(cluster=cluster))
    msg = load_error(path)
    assert f"{path}: cluster.tiers:" in msg
    for s in shown:
        assert s in msg


def test_layout_rule_violation_names_file_and_field(tmp_path: Path) -> None:
    # 40 GPUs / tp 5 = dp 8, but 32 heads do not split 5 ways
    cluster = '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 40\n'
    training = "[training]\nseq_length = 8192\nglobal_batch_size = 128\n"
    path = write(
        tmp_path, plan_text(cluster=cluster, training=training, parallel="[parallel]\ntp = 5\n")
    )
    msg = load_error(path)
    assert (
        f"{path}: parallel.tp: num_attention_heads (32) must be a multiple of "
        "tensor_model_parallel_size (5)"
    ) in msg


def test_dp_not_whole(tmp_path: Path) -> None:
    # 8 GPUs / (tp 1 x pp 3 x cp 1) is not whole
    path = write(tmp_path, plan_text(parallel="[parallel]\npp = 3\n"))
    msg = load_error(path)
    assert f"{path}: parallel: num_gpus (8) must be a multiple of tp x pp x cp" in msg
    assert "(1 x 3 x 1 = 3)" in msg


def test_explicit_dp_that_disagrees_with_num_gpus(tmp_path: Path) -> None:
    path = write(tmp_path, plan_text(parallel="[parallel]\ntp = 2\ndp = 2\n"))
    msg = load_error(path)
    # 2 x 1 x 1 x 2 = 4 GPUs in the layout, 8 in the cluster
    assert "(2 x 1 x 1 x 2 = 4) must equal num_gpus (8)" in msg
    assert f"{path}: parallel:" in msg
