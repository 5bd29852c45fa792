"""`planner suggest` with bounds that leave the search no layout at all, whatever the memory
(QA s30_c, finding F4): each exited 1 ("nothing fits: no layout passes the rules", rejection
counts that name no flag) and now exits 2 naming the flags and the rule
(`planner.search.pins.check_reachable`). Each case names its oracle: the rule in
planner/search/rules, Megatron-LM's source or the search's space that no layout within the
bounds passes; and the search itself (`suggest.search_rows`, run here without the check) finds
no layout within them and scores none, so the refusal takes nothing away. Bounds that leave
layouts, even only ones that do not fit memory, still search (exit 0 or 1)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from cli_run import run
from jobs import job

from planner.inputs.plan import Job, reframe
from planner.search.space import Bound, Space
from planner.search.suggest import search_rows

JOB = ["--model", "llama3.1-8b", "--num-gpus", "16", "--seq-length", "4096"]
JOB += ["--global-batch-size", "64", "--top", "1", "--json"]
"""Llama 3.1 8B (32 layers, 32 heads) on 16 H100 (NVLink domain 8), the QA report's job."""

REFUSED: list[tuple[list[str], Space, str]] = [
    # rules.parallel.vpp (Megatron-LM d98e8a64 arguments.py:1000-1009: a virtual pipeline size
    # needs pp > 1); splits.vpp_candidates gives pp 1 vpp 1 only
    (["--pp", "1", "--vpp", "2"], Space(pp=Bound(1, 1), vpp=Bound(2, 2)), "--vpp 2: needs pp > 1"),
    # splits.vpp_candidates: every virtual stage holds a decoder layer, pp x vpp <= 32
    (
        ["--pp", "2", "--vpp", "17"],
        Space(pp=Bound(2, 2), vpp=Bound(17, 17)),
        "--vpp 17 with --pp 2: pp x vpp virtual stages exceed llama3.1-8b's 32 layers",
    ),
    (
        ["--pp", "16", "--vpp", "3"],
        Space(pp=Bound(16, 16), vpp=Bound(3, 3)),
        "vpp at most 2 at pp 16",
    ),
    # space.structures: tp beyond the scale-up domain (8 GPUs) only with --tp-across-nodes
    (["--tp", "16"], Space(tp=Bound(16, 16)), "--tp 16: beyond the scale-up domain (8 GPUs"),
    # space.zero_stages: Megatron-FSDP (ZeRO 2, 3) searched at pp 1 and cp 1 only
    (
        ["--zero", "2", "--pp", "2"],
        Space(pp=Bound(2, 2), zero_stages=(2,)),
        "--zero 2 with --pp 2: the search runs Megatron-FSDP (ZeRO 2, 3) at pp 1 and cp 1 only",
    ),
    (
        ["--zero", "3", "--cp", "2"],
        Space(cp=Bound(2, 2), zero_stages=(3,)),
        "--zero 3 with --cp 2: the search runs Megatron-FSDP",
    ),
    # rules.context.context (Megatron-LM d98e8a64 arguments.py:1335-1336: seq % (2 x cp))
    (
        ["--cp", "16", "--seq-length", "100"],
        Space(cp=Bound(16, 16)),
        "--cp 16: every parallel structure within them breaks a rule: seq_length (100) must be "
        "a multiple of 2 x context_parallel_size (2 x 16 = 32)",
    ),
]


def _job(argv: list[str], framework: str = "megatron") -> Job:
    seq = int(argv[argv.index("--seq-length") + 1]) if "--seq-length" in argv else 4096
    j = job("llama3.1-8b", "h100-sxm-80gb", 16, seq, 64)
    return reframe(j, framework) if framework != "megatron" else j  # type: ignore[arg-type]


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code, out, err = run(["suggest", *JOB, *argv], capsys)
    assert code == 2 and out == "", (code, out, err)
    assert "Traceback" not in err
    return " ".join(err.split())


def _empty_search(j: Job, space: Space) -> None:
    """The oracle that the refusal loses nothing: the search within the bounds finds no layout
    and scores none (no structure passes, or none has a layout to size: not memory)."""
    res, _ = search_rows(j, space, 1)
    assert not res.candidates
    assert res.structures == 0 or res.space_size == 0, (res.structures, res.space_size)
    assert res.scored == 0


@pytest.mark.parametrize(("argv", "space", "message"), REFUSED)
def test_bounds_no_layout_satisfies_exit_2_naming_them(
    argv: list[str], space: Space, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert message in _refused(argv, capsys)
    _empty_search(_job(argv), space)


TITAN_REFUSED: list[tuple[list[str], Space, str]] = [
    # the same vpp, domain, batch and sequence rules hold under torchtitan (rules.parallel.vpp,
    # space.structures, rules.parallel.batch, rules.context.context: torchtitan's
    # seq_len_divisor is tp x 2cp)
    (["--pp", "1", "--vpp", "2"], Space(pp=Bound(1, 1), vpp=Bound(2, 2)), "--vpp 2: needs pp > 1"),
    (["--pp", "2", "--vpp", "17"], Space(pp=Bound(2, 2), vpp=Bound(17, 17)), "vpp at most 16"),
    (["--tp", "16"], Space(tp=Bound(16, 16)), "--tp 16: beyond the scale-up domain"),
    (["--cp", "16", "--seq-length", "100"], Space(cp=Bound(16, 16)), "(2 x 16 = 32)"),
    # rules.torchtitan.sharding: FSDP2 (ZeRO 3) where the shard group dp / dp_replicate x cp
    # > 1, replication (ZeRO 0) at 1; dp 1 leaves dp_replicate 1 alone (dp = r x the shard)
    (
        ["--zero", "3", "--dp", "1", "--cp", "1"],
        Space(dp=Bound(1, 1), cp=Bound(1, 1), zero_stages=(3,)),
        "--zero 3 with --cp 1 --dp 1: torchtitan shards with FSDP2 (ZeRO 3) where its shard "
        "group dp / dp_replicate x cp > 1",
    ),
    # dp 2 at cp 2: shard groups 2 / 1 x 2 = 4 and 2 / 2 x 2 = 2, never 1
    (
        ["--zero", "0", "--dp", "2", "--cp", "2"],
        Space(dp=Bound(2, 2), cp=Bound(2, 2), zero_stages=(0,)),
        "the bounds leave shard groups 2, 4 (dp_replicate 1, 2)",
    ),
]


@pytest.mark.parametrize(("argv", "space", "message"), TITAN_REFUSED)
def test_torchtitan_bounds_no_layout_satisfies_exit_2(
    argv: list[str], space: Space, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert message in _refused(["--framework", "torchtitan", *argv], capsys)
    _empty_search(_job(argv, "torchtitan"), replace(space, framework="torchtitan"))


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        # a range with one admissible value is not refused: pp 2 takes vpp 2
        (["--pp", "1-2", "--vpp", "2"], "pp", 2),
        # ZeRO 2 at pp 1
        (["--zero", "2", "--pp", "1-2"], "pp", 1),
        (["--tp", "8-16"], "tp", 8),
        (["--tp", "16", "--tp-across-nodes"], "tp", 16),
        (["--mbs", "3-4"], "micro_batch_size", 4),
        # torchtitan runs FSDP2 beside pipelines (rules.torchtitan.sharding reads dp x cp only)
        (["--framework", "torchtitan", "--zero", "3", "--pp", "2"], "pp", 2),
        (["--framework", "torchtitan", "--zero", "3", "--cp", "2"], "cp", 2),
        # and replicates over a shard group of one beside them: dp 2 at dp_replicate 2
        (["--framework", "torchtitan", "--zero", "0", "--dp", "2"], "dp", 2),
    ],
)
def test_bounds_some_layout_satisfies_still_search(
    argv: list[str], field: str, value: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["suggest", *JOB, *argv], capsys)
    assert code == 0, err
    assert json.loads(out)["candidates"][0]["parallel"][field] == value


def test_bounds_that_leave_only_layouts_too_big_still_exit_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """tp 1, pp 1, cp 1 and ZeRO 0 leave Llama 3.1 8B's layouts on 8 H100 (dp 8), none of which
    holds its 16 bytes a parameter in 80 GiB: the answer is "no" (exit 1, memory binding), not
    bad input; without the bounds a layout fits."""
    argv = ["suggest", "--model", "llama3.1-8b", "--num-gpus", "8", "--seq-length", "4096"]
    argv += ["--global-batch-size", "64", "--top", "1", "--json"]
    code, out, err = run([*argv, "--tp", "1", "--pp", "1", "--cp", "1", "--zero", "0"], capsys)
    assert code == 1, err
    assert json.loads(out)["binding"].startswith("memory")
    code, out, err = run(argv, capsys)
    assert code == 0, err


@pytest.mark.parametrize(
    ("argv", "space"),
    [
        # rules.parallel.batch (Megatron-LM d98e8a64 num_microbatches_calculator.py:381-386): 64
        # over any dp of 16 GPUs is a power of two, never a multiple of 3
        (["--mbs", "3"], Space(mbs=Bound(3, 3))),
        (["--mbs", "3", "--framework", "torchtitan"], Space(mbs=Bound(3, 3))),
        # rules.parallel.interleaved_microbatches: pp 4 x vpp 2 with dp 4 and mbs 16 leaves one
        # micro-batch of a global batch of 64, fewer than pp
        (
            ["--pp", "4", "--vpp", "2", "--dp", "4", "--mbs", "16"],
            Space(pp=Bound(4, 4), vpp=Bound(2, 2), dp=Bound(4, 4), mbs=Bound(16, 16)),
        ),
    ],
)
def test_bounds_that_cannot_split_the_batch_answer_no(
    argv: list[str], space: Space, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where it is the global batch the bounds cannot split, the search answers "no" (exit 1,
    as for memory): a batch is the job's to change, and the answer offers one where a larger
    batch fits (`suggest._batch_changes`, JSON `changes`); the search within the bounds is
    empty (`_empty_search`)."""
    code, out, err = run(["suggest", *JOB, *argv], capsys)
    assert code == 1, err
    assert json.loads(out)["candidates"] == []
    framework = "torchtitan" if "torchtitan" in argv else "megatron"
    _empty_search(_job(argv, framework), replace(space, framework=framework))


def test_a_batch_the_bounds_cannot_split_offers_the_batch_that_fits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The change the "nothing fits" answer offers, confirmed by the search
    (`suggest._batch_changes`): 2 sequences cannot feed pp 4 x vpp 2, 4 can; 24 data-parallel
    ranks split 24, not 16. On 16 GPUs a dp-16 Llama 3.1 70B fits at no batch
    (tests/cli/test_advice_qa.py's brute force), so none is offered."""
    changes = _changes(["--global-batch-size", "2", "--pp", "4", "--vpp", "2"], capsys)
    assert "global_batch_size 4 instead of 2" in changes
    pins = ["--tp", "1", "--pp", "1", "--no-cp", "--gpu", "h100-sxm-80gb"]
    changes = _changes(["--num-gpus", "24", "--global-batch-size", "16", *pins], capsys)
    assert "global_batch_size 24 instead of 16" in changes
    argv = ["--model", "llama3.1-70b", "--num-gpus", "16", "--global-batch-size", "8", *pins]
    assert not any("global_batch_size" in c for c in _changes(argv, capsys))


def _changes(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    code, out, err = run(["suggest", *argv, "--json"], capsys)
    assert code == 1, (code, out, err)
    changes: list[str] = json.loads(out)["changes"]
    return changes
