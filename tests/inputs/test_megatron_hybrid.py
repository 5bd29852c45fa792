"""Hybrid Mamba stacks on a Megatron-LM command line: --hybrid-layer-pattern (and its deprecated
spelling), the --mamba-* sizes, MTP depths after '/', and the pipeline segments after '|'.

Oracle: Megatron-LM d98e8a64 megatron/training/arguments.py (`validate_args`, the hybrid pattern
block) and the hybrid model package's hybrid_layer_allocation.py (`parse_hybrid_pattern`,
`select_pipeline_segment`): the layer count and MTP depths come from the pattern, "|" segments
are the pipeline stages (segment k on rank k % pp, virtual stage k // pp), their count must be a
multiple of pp, and without "|" the layers must split evenly. Expected values are the pattern's
own symbols, counted by hand in the comments."""

from __future__ import annotations

import re

import pytest

from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.hybrid import ATTENTION, MAMBA, MLP, MOE_MLP
from planner.inputs.plan import parse_plan
from planner.model import cost, memory
from planner.search.rules import check_plan

BASE = (
    "--hidden-size 1024 --num-attention-heads 16 --seq-length 2048 --micro-batch-size 1 --bf16 "
    "--position-embedding-type none --normalization RMSNorm --disable-bias-linear "
    "--vocab-size 32000 "
)


def read(text: str, gpus: int = 8) -> megatron_args.Reading:
    return megatron_args.read(text, "h100-sxm-80gb", gpus, "train.sh")


def test_a_hybrid_line_reads_and_is_estimated() -> None:
    r = read(BASE + "--hybrid-layer-pattern M-M*-M-M*- --mamba-num-heads 32 --mamba-state-dim 64")
    model = r.doc["model"]
    # ten symbols: num_layers comes from the pattern
    assert (model["num_layers"], model["hybrid_layer_pattern"]) == (10, "M-M*-M-M*-")
    assert (model["mamba_num_heads"], model["mamba_state_dim"]) == (32, 64)
    plan = check_plan(parse_plan(r.doc))
    arch = plan.job.arch
    # M - M * - M - M * -: four Mamba, four MLP, two attention layers
    kinds = arch.layer_kinds
    assert [kinds.count(k) for k in (MAMBA, MLP, ATTENTION)] == [4, 4, 2]
    layout = plan.require_layout()
    assert memory.estimate(plan.job, layout).fits
    assert cost.estimate(plan.job, layout).step_time_s > 0


def test_pipe_segments_are_the_pipeline_split() -> None:
    # four segments of 3, 2, 2, 3 layers on pp 2: virtual stages 2; rank 0 holds segments 0 and
    # 2 (3 + 2 layers), rank 1 segments 1 and 3 (2 + 3)
    text = BASE + "--hybrid-layer-pattern M-M|*-|M-|M*- --pipeline-model-parallel-size 2 "
    text += "--global-batch-size 16"
    plan = check_plan(parse_plan(read(text).doc))
    layout = plan.require_layout()
    assert layout.vpp == 2
    chunks = layout.chunk_layers(plan.job.arch.num_layers)
    assert [[len(c) for c in rank] for rank in chunks] == [[3, 2], [2, 3]]


def test_mtp_depths_come_from_the_pattern() -> None:
    text = BASE + "--num-experts 8 --hybrid-layer-pattern MEM*E/*E/*E --mtp-num-layers 2"
    arch = parse_plan(read(text).doc).job.arch
    # main "MEM*E" (5 layers), two MTP depths of "*E"
    assert (arch.num_layers, arch.mtp_num_layers) == (5, 2)
    assert arch.mtp_kinds == (ATTENTION, MOE_MLP)


def test_legacy_mtp_pattern_is_joined_to_the_main_one() -> None:
    text = BASE + "--hybrid-override-pattern M*M* --mtp-hybrid-override-pattern *- "
    arch = parse_plan(read(text + "--mtp-num-layers 3").doc).job.arch
    assert arch.hybrid_layer_pattern == "M*M*/*-/*-/*-"


def test_num_layers_the_pattern_overrides_is_noted() -> None:
    # Megatron-LM warns and takes the pattern's 6 layers
    r = read(BASE + "--num-layers 5 --hybrid-layer-pattern M*M*M*")
    assert r.doc["model"]["num_layers"] == 6
    assert any(n.startswith("--num-layers 5") for n in r.notes)


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        ("--hybrid-layer-pattern M-Q*", "--hybrid-layer-pattern: 'Q' in the main pattern"),
        ("--hybrid-layer-pattern M-D*", "'D' (DeepSeek sparse attention) layers are not modelled"),
        ("--hybrid-layer-pattern M*/M/*", "every MTP pattern after '/' must be the same"),
        ("--hybrid-layer-pattern M*|M* --hybrid-override-pattern M*", "cannot be combined"),
        ("--is-hybrid-model", "--is-hybrid-model: a hybrid stack without"),
        (
            "--hybrid-layer-pattern M*-|M*-|M*- --pipeline-model-parallel-size 2",
            "3 pipeline segments ('|'), not a multiple of --pipeline-model-parallel-size 2",
        ),
        (
            "--hybrid-layer-pattern M*-M* --pipeline-model-parallel-size 2",
            "5 layers do not split evenly",
        ),
        (
            "--hybrid-layer-pattern M*|M* --pipeline-model-parallel-size 2 "
            "--num-layers-per-virtual-pipeline-stage 1",
            "--num-layers-per-virtual-pipeline-stage: cannot be combined",
        ),
    ],
)
def test_bad_hybrid_lines_name_the_flag_and_value(flags: str, needle: str) -> None:
    with pytest.raises(InputError, match=re.escape(needle)):
        read(BASE + flags)


def test_plan_file_pattern_must_match_num_layers() -> None:
    doc = read(BASE + "--hybrid-layer-pattern M*M*").doc
    doc["model"]["num_layers"] = 5
    with pytest.raises(InputError, match=re.escape("hybrid_layer_pattern has 4 layers but")):
        parse_plan(doc)
