"""The micro-batch group of an interleaved schedule (`microbatch_group_size_per_vp_stage`, which
`space.group_of` sets where Megatron's smallest group is not pp) is shown beside vpp: in
`Layout.describe` (explain's header, the nothing-fits lines), and in suggest's vpp column.

Oracle: Megatron-LM d98e8a64 schedules.py:1160-1180 (`rules.parallel.least_group`): with pp 4 and
m micro-batches it takes the smallest g >= pp with m % g == 0 or m % g >= pp. By hand, m = 6:
g = 4 leaves 6 % 4 = 2 < 4, g = 5 leaves 1, g = 6 leaves 0, so g = 6; m = 12: g = 4 leaves 0,
so g = pp = 4, Megatron's default, and nothing is shown."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_run import run

from planner.inputs.layout import Layout

ARGV = [
    "suggest",
    "--model",
    "llama3.1-70b",
    "--num-gpus",
    "32",
    "--seq-length",
    "4096",
    "--tp",
    "4",
    "--pp",
    "4",
    "--vpp",
    "2-",
    "--top",
    "3",
]


def test_describe_shows_the_group_where_the_layout_sets_it() -> None:
    lay = Layout(tp=4, pp=4, cp=2, vpp=20, sequence_parallel=True)
    assert " vpp20 " in lay.describe()
    assert re.search(r"\bg\d", lay.describe()) is None
    grouped = lay.with_(microbatch_group_size_per_vp_stage=6)
    assert " vpp20 g6 " in grouped.describe()
    # vpp 1 runs no groups (Megatron reads the group only when interleaving)
    assert re.search(r"\bg\d", grouped.with_(vpp=1).describe()) is None


def test_suggest_table_and_explain_show_the_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.toml"
    argv = [*ARGV, "--global-batch-size", "6", "--write-plan", str(plan)]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    # cp 2 x tp 4 x pp 4 on 32 GPUs leaves dp 1: m = 6 micro-batches of 1, so g = 6
    rows = [line for line in out.splitlines() if re.match(r"^│ \d ", line)]
    assert rows
    for row in rows:
        cells = [c.strip() for c in row.strip("│").split("│")]
        vpp, m = cells[6], cells[8]
        assert m == "6"
        assert re.fullmatch(r"\d+ g6", vpp), row
    assert "vpp v gN" in out.replace("\n", " ")
    code, out, err = run(["explain", str(plan)], capsys)
    assert code == 0, err
    assert re.search(r" vpp\d+ g6 ", out)


def test_suggest_table_leaves_the_default_group_out(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run([*ARGV, "--global-batch-size", "12"], capsys)
    assert code == 0, err
    rows = [line for line in out.splitlines() if re.match(r"^│ \d ", line)]
    assert rows
    for row in rows:
        cells = [c.strip() for c in row.strip("│").split("│")]
        assert cells[8] == "12"  # m = 12: g = pp = 4
        assert cells[6].isdigit(), row
