"""AMD Instinct: which FP8 recipes ROCm Transformer Engine runs, and the environment MXFP8 needs.

Oracles (source lines at their commits):
- Megatron-LM d98e8a64 megatron/core/fp8_utils.py:781-782: --fp8-recipe blockwise builds TE's
  Float8BlockScaling;
- ROCm/TransformerEngine 030b7921 transformer_engine/pytorch/quantization.py:103-107
  (check_fp8_block_scaling_support returns False on ROCm: "FP8 block scaled gemm not yet supported
  for ROCm"), asserted by check_recipe_support :127-139;
- the same file :74-82 (check_mxfp8_support): on ROCm False unless NVTE_ROCM_ENABLE_MXFP8 is set,
  then True on gfx95x (MI350X, MI355X), False on gfx942 (MI300X, MI325X);
- pytorch/torchtitan b5bcd76c torchtitan/components/quantization/mx.py:70: torchtitan's MX
  converters need CUDA capability 10 (Blackwell).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from cli_run import run

from planner.emit import common
from planner.inputs import catalog
from planner.inputs.cluster_sections import ClusterSection
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, parse_plan
from planner.inputs.plan_resolve import resolve_cluster
from planner.search import rules


def make_job(gpu: str, **fields: object) -> Job:
    cluster = resolve_cluster(ClusterSection(gpu=gpu, num_gpus=8), None)
    job = Job(
        arch=catalog.get_model("llama3.1-8b"),
        cluster=cluster,
        seq_length=4096,
        global_batch_size=64,
    )
    return replace(job, precision="fp8", **fields)  # type: ignore[arg-type]


def broken(job: Job) -> dict[str, rules.Violation]:
    return {v.rule: v for v in rules.violations(job, Layout(dp=8))}


@pytest.mark.parametrize("gpu", ["mi300x-192gb", "mi325x-256gb", "mi350x-288gb", "mi355x-288gb"])
def test_blockwise_is_refused_on_every_amd_gpu(gpu: str) -> None:
    v = broken(make_job(gpu, fp8_recipe="blockwise"))["fp8_recipe"]
    assert v.field == "training.fp8_recipe" and "ROCm" in v.message and gpu in v.message
    # the same recipe on H100 runs (CUDA >= 12.9 there: not planner's to check)
    assert broken(make_job("h100-sxm-80gb", fp8_recipe="blockwise")) == {}


@pytest.mark.parametrize("gpu", ["mi350x-288gb", "mi355x-288gb"])
def test_mxfp8_runs_on_cdna4(gpu: str) -> None:
    assert broken(make_job(gpu, fp8_recipe="mxfp8")) == {}
    # torchtitan's MX converters stay Blackwell-only
    titan = broken(make_job(gpu, fp8_recipe="mxfp8", framework="torchtitan"))["fp8_recipe"]
    assert "CDNA4" not in titan.message


@pytest.mark.parametrize("gpu", ["mi300x-192gb", "mi325x-256gb"])
def test_mxfp8_is_refused_on_cdna3_without_recommending_blockwise(gpu: str) -> None:
    v = broken(make_job(gpu, fp8_recipe="mxfp8"))["fp8_recipe"]
    assert gpu in v.message and "blockwise" not in v.message  # blockwise is refused there too
    h100 = broken(make_job("h100-sxm-80gb", fp8_recipe="mxfp8"))["fp8_recipe"]
    assert "blockwise" in h100.message  # on Hopper it is the block-scaled alternative


def test_check_and_suggest_exit_with_the_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # QA's repro (/tmp/qa6s36/job_blockwise.toml): suggest offered a blockwise MI300X plan
    job = tmp_path / "job.toml"
    job.write_text(
        '[model]\nname = "llama3.1-8b"\n[cluster]\ngpu = "mi300x-192gb"\nnum_gpus = 8\n'
        "[training]\nseq_length = 4096\nglobal_batch_size = 64\n"
        'precision = "fp8"\nfp8_recipe = "blockwise"\n'
    )
    code, _out, err = run(["suggest", str(job), "--top", "1"], capsys)
    assert code != 0 and "training.fp8_recipe" in err and "ROCm" in err


def names(gpu: str, recipe: str) -> dict[str, str | None]:
    doc = {
        "model": {"name": "llama3.1-8b"},
        "cluster": {"gpu": gpu, "num_gpus": 8},
        "training": {"seq_length": 4096, "global_batch_size": 64, "precision": "fp8"}
        | {"fp8_recipe": recipe},
        "parallel": {"dp": 8},
    }
    plan = parse_plan(doc, Path("test-plan.toml"))
    return {e.name: e.value for e in common.environment(plan)}


def test_mxfp8_on_amd_sets_nvte_rocm_enable_mxfp8() -> None:
    assert names("mi355x-288gb", "mxfp8")["NVTE_ROCM_ENABLE_MXFP8"] == "1"
    assert "NVTE_ROCM_ENABLE_MXFP8" not in names("mi355x-288gb", "tensorwise")
    assert "NVTE_ROCM_ENABLE_MXFP8" not in names("b200-sxm-180gb", "mxfp8")  # CUDA TE: no gate


@pytest.mark.parametrize(
    ("gpu", "mxfp8"),
    [("mi300x-192gb", False), ("mi325x-256gb", False), ("mi350x-288gb", True)],
)
def test_the_catalog_states_mxfp8_by_gfx_target(gpu: str, mxfp8: bool) -> None:
    spec = catalog.get_gpu(gpu)
    assert spec.has_mxfp8 is mxfp8 and spec.amd_gfx == ("gfx950" if mxfp8 else "gfx942")
