"""NVIDIA's Megatron-MoE-ModelZoo command lines through the reader (benchmarks/moe_model_zoo.py).

Oracles: the zoo's own lines (benchmarks/data/megatron_moe_model_zoo/command_lines.json, composed
from yanring/Megatron-MoE-ModelZoo at e8650517 as its sbatch_benchmarking.sh composes them); the
zoo of planner (model_zoo/*.toml, built from HuggingFace configs and Megatron-Bridge providers, a
separate source of the same shapes); Megatron-LM d98e8a64's validate_args for what it refuses;
and the fact that NVIDIA ran these layouts, so each fits on its GPU."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from paths import REPO

sys.path.insert(0, str(REPO))

from benchmarks import moe_model_zoo as zoo
from planner.inputs import catalog
from planner.model import params

ROWS = zoo.rows()
IDS = [r["id"] for r in ROWS]
DEV_BRANCH = "--offload-optimizer-states"
"""Optimizer-state offloading of the zoo's GB200 lines: a flag of Megatron-LM's dev branch (the
zoo's scripts say so), not of d98e8a64's parser: the reader lists it as unknown and counts the
states on the GPU."""


def test_the_data_is_every_invocation_of_the_best_practice_scripts() -> None:
    # 4 DeepSeek-V3 scripts (1 + 1 + 1 + 8 invocations), Kimi-K2 1, Mixtral 3, Qwen3 6 scripts
    # (8 + 3 + 3 + 1 + 1 + 1)
    assert len(ROWS) == 32
    assert len(set(IDS)) == 32
    assert {r["model"] for r in ROWS} == set(zoo.VOCAB_FROM_ZOO)


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_every_line_is_read_or_refused_for_megatrons_reason(row: dict[str, Any]) -> None:
    r = zoo.check(row)
    assert r["verdict"] in ("read", "exit 1"), r.get("message")
    # the refusals, read again as d98e8a64 runs the line: --tp-comm-overlap, which
    # sbatch_benchmarking.sh adds to every bf16 line, at tp 1, where validate_args disables
    # sequence parallelism and then asserts it; and TE's CUDA graphs (--external-cuda-graph)
    # beside expandable segments without NCCL_GRAPH_REGISTER=0, which validate_args asserts
    # since 2b343d739f (2025-12-30), after run_235b.sh's GB200 lines were written
    tp1_bf16 = "--tp-comm-overlap" in row["args"] and "--fp8-recipe" not in row["args"]
    tp = row["args"][row["args"].index("--tensor-model-parallel-size") + 1]
    graphs = "--external-cuda-graph" in row["args"] and "NCCL_GRAPH_REGISTER" not in row["env"]
    # and the Qwen3-Next line's --no-weight-decay-cond-type qwen3_next, a choice of a later
    # Megatron-LM (d98e8a64 arguments.py:2672 takes apply_wd_to_qk_layernorm only)
    wd = "--no-weight-decay-cond-type" in row["args"]
    expected = ["without --no-weight-decay-cond-type qwen3_next"] * wd
    expected += ["without --tp-comm-overlap"] * (tp1_bf16 and tp == "1")
    expected += ["with NCCL_GRAPH_REGISTER=0"] * graphs
    assert r.get("changed", []) == expected


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_the_layouts_nvidia_ran_fit_but_where_a_dev_branch_flag_offloads(
    row: dict[str, Any],
) -> None:
    # NVIDIA ran each layout, so each fits; where its line offloads the optimizer states with
    # the dev-branch flag, planner lists the flag as unknown and keeps the states on the GPU (a
    # peak the offload can only lower). Whether the layout needs the offload is not on record:
    # DeepSeek-V3 GB200's first line reads 170.4 of 179.5 GiB without it since Transformer
    # Engine's attention graphs keep no static buffers of their own (graph_buffers.py), 178.7
    # before; the zoo does not say why NVIDIA offloads there
    r = zoo.check(row)
    if DEV_BRANCH not in row["args"]:
        assert r["verdict"] == "read"
        return
    assert DEV_BRANCH in r["unknown"]
    assert r["verdict"] in ("read", "exit 1") and r["peak_gib"] > 0


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_each_line_is_its_zoo_model(row: dict[str, Any]) -> None:
    # DeepSeek-V3 671,026,404,352 with its MTP layer, Kimi-K2 1,026,408,209,408, Mixtral 8x22B
    # 140,620,634,112, Qwen3 235B-A22B 235,093,634,560, 30B-A3B 30,532,122,624 and Next-80B-A3B
    # 79,674,292,992 (its 36 gated delta nets read from --linear-attention-type): the line's
    # shape flags give exactly the parameters of the zoo file of the same model
    arch = zoo.read_plan(row).job.arch
    reference = catalog.get_model(zoo.VOCAB_FROM_ZOO[row["model"]])
    assert params.params_total(arch) == params.params_total(reference)
    assert arch.mtp_num_layers == reference.mtp_num_layers


def test_the_lines_ask_for_what_the_scripts_set() -> None:
    by_id = {r["id"]: r for r in ROWS}
    # OPTIMIZER_OFFLOAD=1 on the long-context DeepSeek-V3 lines: the whole optimizer on the host
    long = zoo.read_plan(by_id["deepseek-v3/run_deepseek_v3_h100#2"])
    assert long.job.optimizer_offload_fraction == 1.0 and long.job.optimizer_offload_overlap
    # PR=fp8: blockwise FP8 without parameter gathers (the offload refuses them)
    assert (long.job.precision, long.job.fp8_recipe, long.job.fp8_param_gather) == (
        "fp8",
        "blockwise",
        False,
    )
    # Qwen3 235B at pp 4 with 1 layer per virtual stage: (94 + embedding + loss) / 4 = 24
    lay = zoo.read_plan(by_id["qwen3/run_235b#1"]).require_layout()
    assert (lay.pp, lay.vpp) == (4, 24)
