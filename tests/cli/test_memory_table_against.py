"""A peak a few MiB over its capacity never reads as the capacity: check's and explain's memory
table (`render.memory_table`, its title's capacity and each stage's total), pooled suggest's
no-fit message, as the verdict lines (`units.against`, `units.over`).

Oracles: the rules `units.against` and `units.over` state (GiB to one place, or to the fewest
more places at which a peak and its capacity read apart; an excess under 0.05 GiB in MiB), and
hand arithmetic in the comments."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from cli_run import run
from rich.console import Console

from planner.cli.render import memory_table
from planner.inputs.layout import Layout
from planner.inputs.units import GIB, MIB
from planner.model.memory_report import MemoryReport, StageMemory, new_stage
from planner.search import pool_search
from planner.search.pool_search import Closest, PoolSearch

USABLE = 61.89 * GIB
"""The repro's usable memory: an H100's 79.6 GiB less 22.2878% headroom is about 61.89 GiB."""


def _stage(rank: int, total: float) -> StageMemory:
    """A stage whose total is `total` bytes, all of it activations."""
    return new_stage(rank, 16, 0.0, 0.0, 0.0, total, 0.0, 0.0, 0.0)


def _text(rep: MemoryReport) -> list[str]:
    console = Console(record=True, width=200, file=io.StringIO())
    console.print(memory_table(rep))
    return console.export_text().splitlines()


def test_a_stage_10_mib_over_reads_apart_from_the_capacity_in_the_table() -> None:
    # stage 0: 61.89 GiB + 10 MiB = 61.89 + 10 / 1024 = 61.8998 GiB; at one place both 61.9,
    # at two 61.90 over 61.89 (against's rule); stage 1: 57.8 GiB, 4 GiB under, at one place
    rep = MemoryReport(
        stages=(_stage(0, USABLE + 10 * MIB), _stage(1, 57.8 * GIB)),
        capacity=USABLE,
        physical=79.6 * GIB,
        headroom_pct=22.2878,
    )
    assert not rep.fits
    lines = _text(rep)
    title = " ".join(lines[0].split())
    assert "capacity 61.89 GiB (79.6 less 22.2878% headroom)" in title
    worst = next(line for line in lines if "<- worst" in line)
    assert worst.split()[-2] == "61.90"  # the total, before the closing border
    other = next(line for line in lines if line.split()[:2] == ["│", "1"])
    assert other.split()[-2] == "57.8"


def test_a_pooled_stage_over_its_gpu_reads_apart_in_its_row() -> None:
    # with pools each row carries its GPU's capacity: stage 1 holds 39 GiB + 1 MiB = 39 + 1 /
    # 1024 = 39.000977 GiB against its own 39 GiB: at one and two places both 39.0 / 39.00, at
    # three 39.001 over 39.000; stage 0, 11.89 GiB under its 61.89, at one place
    fast = StageMemory(0, 16, 0.0, 0.0, 0.0, 50 * GIB, 0.0, pool="fast", gpu="h", capacity=USABLE)
    slow = StageMemory(
        1, 16, 0.0, 0.0, 0.0, 39 * GIB + MIB, 0.0, pool="slow", gpu="a", capacity=39 * GIB
    )
    rep = MemoryReport(stages=(fast, slow), capacity=39 * GIB, physical=40 * GIB, headroom_pct=2.5)
    assert rep.worst is slow and not rep.fits
    lines = _text(rep)
    # the cells: stage, pool, gpu, capacity, layers, weights, grads, optimizer, activations,
    # other, total
    worst = [c for c in next(x for x in lines if "<- worst" in x).split() if c != "│"]
    assert worst[3:6] == ["slow", "a", "39.000"] and worst[-1] == "39.001"
    other = [c for c in next(x for x in lines if " fast " in x).split() if c != "│"]
    assert other[1:4] == ["fast", "h", "61.9"] and other[-1] == "50.0"


POOLS = """[model]
name = "llama3.1-8b"
[cluster]
[[cluster.pools]]
name = "fast"
gpu = "h100-sxm-80gb"
num_gpus = 16
[[cluster.pools]]
name = "slow"
gpu = "a100-sxm-80gb"
num_gpus = 16
[cluster.between_pools]
bandwidth_gb_per_s_per_gpu = 6.25
latency_us = 10000
[training]
seq_length = 4096
global_batch_size = 64
"""


def test_pooled_suggest_names_a_small_excess_in_mib(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a nearest miss 10 MiB over: 10 / 1024 = 0.0098 GiB, which one place writes "0.0 GiB";
    # under 0.05 GiB `units.over` writes MiB: "10 MiB"
    near = Closest(Layout(tp=2, pp=2, dp=8), stage=1, pool=1, over_mib=10, capacity_mib=63_375)
    found = PoolSearch(plans=(), solved=0, layouts=12, closest=near)
    monkeypatch.setattr(pool_search, "search", lambda *a, **k: found)
    path = tmp_path / "job.toml"
    path.write_text(POOLS)
    code, out, _ = run(["suggest", str(path)], capsys)
    assert code == 1
    flat = " ".join(out.split())
    assert "needs 10 MiB more on stage 1 (pool 'slow', a100-sxm-80gb)" in flat
    assert "0.0 GiB" not in flat


def test_a_change_saving_less_than_a_tenth_of_a_gib_reads_in_mib() -> None:
    # units.over: GiB to one place at 0.05 GiB and above, else MiB (10 MiB saved is not
    # "saves 0.0 GiB")
    from planner.cli import render

    class Saved:
        saves = 10 * 2**20
        memory = "device"

    assert render._saving(Saved()) == "10 MiB"  # type: ignore[arg-type]
    Saved.saves = int(1.25 * 2**30)
    assert render._saving(Saved()) == "1.2 GiB"  # type: ignore[arg-type]
