"""planner.inputs.plan: every way a plan file's tables, fields and names can be bad. Each raises
`InputError` (exit 2) with a message naming the file, the field and the value (DESIGN.md
section 2).

Oracles: the contract itself (exit codes and the message's file, field and value) and TOML's own
types (tomllib decides what type a literal is).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_text import CLUSTER, MODEL, PARALLEL, PLANS, TRAINING, load_error, plan_text, write

from planner.inputs.plan import load_plan

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
        (
            "cluster",
            plan_text(cluster=CLUSTER + 'colour = "red"\n'),
            "cluster.colour",
            '"red"',
        ),
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
        ("top level", plan_text() + "\nsuggest = true\n", "suggest", "true"),
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
        ('[parallel]\nrecompute = "some"\n', "parallel.recompute", '"some"'),
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


@pytest.mark.parametrize(
    ("model", "cluster", "field"),
    [
        (f'[model]\nname = "{"x" * 300}"\n', CLUSTER, "model.name: unknown model"),
        (None, f'[cluster]\ngpu = "{"x" * 300}"\nnum_gpus = 8\n', "cluster.gpu: unknown GPU"),
        (f'[model]\nhf_config = "{"x" * 300}.json"\n', CLUSTER, "model.hf_config: no such"),
        (f'[model]\nname = "{"x" * 300}.toml"\n', CLUSTER, "model.name: "),
        ('[model]\nname = "nonexist.toml"\n', CLUSTER, "model.name: "),
    ],
)
def test_names_the_system_refuses_are_bad_input(
    tmp_path: Path, model: str | None, cluster: str, field: str
) -> None:
    """A fuzzer's internal errors: a 300-character name reached the catalog's and the HF
    config's file lookups, which raised 'File name too long' (an OSError). Now each is an
    unknown name or a missing file, under the plan's field; so is a model file that is not
    there (its message named neither the plan nor the field)."""
    text = plan_text(cluster=cluster) if model is None else plan_text(model=model, cluster=cluster)
    path = write(tmp_path, text)
    msg = load_error(path)
    assert msg.startswith(f"{path}: {field}"), msg[:200]


TIER = '[[cluster.tiers]]\nname = "ib"\nbandwidth_gb_per_s_per_gpu = {bw}\nlatency_us = {lat}\n'


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ("hbm_bandwidth_tb_per_s = 1e-300\n", "cluster.hbm_bandwidth_tb_per_s: Input should be"),
        ("power_limit_w = 1e-300\n", "below a tenth of h100-sxm-80gb's TDP (70 of 700 W)"),
        (TIER.format(bw="50.0", lat="1e300"), "cluster.tiers.0.latency_us: Input should"),
        (TIER.format(bw="1e-300", lat="5.0"), "cluster.tiers.0.bandwidth_gb_per_s_per_gpu"),
        # a figure in the wrong unit: HBM in GB/s, memory in bytes, a link in bits per second
        ("hbm_bandwidth_tb_per_s = 3350\n", "cluster.hbm_bandwidth_tb_per_s: Input should be"),
        ("memory_gib = 85899345920\n", "cluster.memory_gib: Input should be less than"),
        (TIER.format(bw="4e11", lat="5.0"), "cluster.tiers.0.bandwidth_gb_per_s_per_gpu"),
    ],
)
def test_cluster_figures_out_of_any_gpus_range(tmp_path: Path, extra: str, field: str) -> None:
    """A fuzzer's NaN (a timeline's, the JSON's) and overflows: positive but absurd overrides
    (HBM at 1e-300 TB/s, a power cap of 1e-300 W, a link of 1e-300 GB/s or 1e300 us latency)
    made steps of 1e300 s. Each now has a floor or a ceiling no real GPU or link is near
    (hardware.MIN_HBM_TB_PER_S, MIN_POWER_SHARE, MIN_LINK_GB_PER_S, MAX_LATENCY_US; and
    MAX_HBM_TB_PER_S, MAX_GPU_MEMORY_GIB, MAX_LINK_GB_PER_S for a figure in the wrong unit)."""
    path = write(tmp_path, plan_text(cluster=CLUSTER + extra))
    assert field in load_error(path)


def test_more_virtual_stages_than_layers(tmp_path: Path) -> None:
    """vpp 2^31 on Llama 3.1 8B's 32 layers built 2^32 chunks before any rule was asked (a
    fuzzer's hang); pp x vpp is at most the layers and the embedding and loss (34). vpp is
    refused above arch_fields.MAX_LAYERS (10,000) where the plan is read (plan_counts.Layers)."""
    parallel = "[parallel]\npp = 2\nvpp = 2147483648\npipeline_layers = [16, 16]\n"
    msg = load_error(write(tmp_path, plan_text(parallel=parallel)))
    assert f"{tmp_path / 'plan.toml'}: parallel.vpp: Input should be less than or equal to " in msg
    parallel = "[parallel]\npp = 2\nvpp = 9999\npipeline_layers = [16, 16]\n"
    msg = load_error(write(tmp_path, plan_text(parallel=parallel)))
    assert f"{tmp_path / 'plan.toml'}: parallel.vpp: 9999: pp x vpp = 19998" in msg  # 2 x 9999
    ok = "[parallel]\npp = 2\nvpp = 16\n"  # one layer a chunk
    load_plan(write(tmp_path, plan_text(parallel=ok), "ok.toml"))


def test_a_name_with_a_control_character_is_escaped(tmp_path: Path) -> None:
    """A NUL in a model name was echoed raw to the terminal: an unprintable name is spelled as
    TOML writes it (a \\u escape)."""
    path = write(tmp_path, plan_text(model='[model]\nname = "a\\u0000b"\n'))
    msg = load_error(path)
    assert "\x00" not in msg and 'unknown model "a\\u0000b"' in msg


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
    assert '(got "nothere.json")' in msg


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
    assert '"fp8"' in msg and "a100-sxm-80gb" in msg


def test_unknown_precision(tmp_path: Path) -> None:
    training = '[training]\nseq_length = 8192\nglobal_batch_size = 128\nprecision = "int8"\n'
    path = write(tmp_path, plan_text(training=training))
    msg = load_error(path)
    assert f"{path}: training.precision:" in msg and '(got "int8")' in msg


@pytest.mark.parametrize(
    ("training", "want"),
    [
        ('cuda_graphs = "yes"\n', "training.cuda_graphs:"),
        ('cuda_graphs = true\nframework = "torchtitan"\n', "training.cuda_graphs: true"),
    ],
)
def test_bad_cuda_graphs(tmp_path: Path, training: str, want: str) -> None:
    """A non-boolean value, and CUDA graphs under torchtitan (whose training loop is not
    captured), name the file, the field and the value."""
    path = write(tmp_path, plan_text(training=TRAINING + training))
    msg = load_error(path)
    assert f"{path}: {want}" in msg
