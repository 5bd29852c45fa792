"""planner.inputs.plan: the plan file (DESIGN.md section 2) -> Job + Layout. Every way a plan can
be bad: tests/inputs/test_plan_bad_input.py.

Oracles: the fixture files' own values, the catalog entries a plan names, and hand arithmetic in
comments (dp = GPUs / (tp x pp x cp), tokens per step)."""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_text import EXAMPLE, HF, PLANS, REPO, plan_text, write

from planner.inputs import catalog
from planner.inputs.errors import InputError
from planner.inputs.hf_import import load_hf_config
from planner.inputs.layout import Layout
from planner.inputs.plan import Plan, load_plan, parse_plan

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
