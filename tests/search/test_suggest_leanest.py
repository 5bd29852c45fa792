"""When nothing fits, suggest's leanest layout (`lean_peak.min_peak`) is the least peak the
search can reach: every ZeRO stage the space allows (at dp 1 ZeRO 3's Megatron-FSDP buffers
sit over ZeRO 1's) and CPU offloading of whole layers (no recompute, `cpu_offloading_num_layers`)
as well as full recompute, offloading held to the host's budget as the search holds it.

Oracles: the search itself (`suggest.search_rows`) on the changed job at the value proposed and
the one below it (brute force), and the binding figure against the usable memory of both
(`memory.usable_bytes`: capacity less the 3% headroom, by hand below)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from cli_run import run
from jobs import job

from planner.inputs.plan import Job
from planner.inputs.units import GIB
from planner.model import memory
from planner.search.lean_peak import min_peak
from planner.search.space import Space
from planner.search.suggest import search_rows


def _found(j: Job) -> bool:
    return bool(search_rows(j, Space(), 1)[0].candidates)


def _memory(j: Job, gib: float) -> Job:
    return replace(j, cluster=j.cluster.model_copy(update={"memory_gib": gib}))


def _infeasible(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, list[str]]:
    code, out, err = run(["suggest", *argv, "--json"], capsys)
    assert code == 1, err
    d = json.loads(out)
    return d["binding"], d["changes"]


def _needs(binding: str) -> float:
    m = re.search(r"needs ([0-9.]+) GiB per GPU", binding)
    assert m is not None, binding
    return float(m.group(1))


@pytest.mark.parametrize(
    ("model", "seq", "gbs"), [("llama3.1-405b", 8192, 128), ("llama3.1-8b", 524288, 8)]
)
def test_the_binding_layout_and_the_memory_advised_are_the_least_the_search_fits(
    model: str, seq: int, gbs: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """405B on 8 H100 said 862.0 GiB (full recompute, tp 4 pp 2) and GPUs of 889 GiB where 880
    fit 125 of its layers offloaded; 8B at 524,288 tokens said 89.8 GiB (ZeRO 3 at dp 1) and 93
    GiB where 92 fit ZeRO 1."""
    argv = ["--model", model, "--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
    binding, changes = _infeasible(
        [*argv, "--seq-length", str(seq), "--global-batch-size", str(gbs)], capsys
    )
    (size,) = [c for c in changes if c.startswith("GPUs with at least")]
    gib = int(size.split()[4])
    j = job(model, "h100-sxm-80gb", 8, seq, gbs)
    assert _found(_memory(j, gib)) and not _found(_memory(j, gib - 1))
    # the figure named fits the advised GPUs' usable memory (gib x 0.97) and not the one below
    needs = _needs(binding) * GIB
    usable = memory.usable_bytes(_memory(j, gib).cluster.capacity_bytes, 3.0)
    below = memory.usable_bytes(_memory(j, gib - 1).cluster.capacity_bytes, 3.0)
    assert below < needs - 0.05 * GIB and needs - 0.05 * GIB <= usable
    if model == "llama3.1-8b":  # dp 1: ZeRO 1 (ZeRO 3 at dp 1 holds no less: its one-rank
        # groups are views of the whole parameters and gradients, megatron_fsdp_bytes)
        assert "dp1" in binding and "zero1" in binding
        peak, lay = min_peak(j, Space())
        assert lay is not None and lay.dp == 1
        fsdp = memory.estimate(j, lay.with_(zero_stage=3)).peak
        assert fsdp >= peak


def test_a_halved_sequence_is_the_longest_that_fits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """8B at 1,048,576 tokens on 8 H100 of 92 GiB: suggest offered 262,144 where 524,288 fits
    (the halving was skipped on the leanest layout's overestimate)."""
    path = tmp_path / "job.toml"
    path.write_text(
        '[model]\nname = "llama3.1-8b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
        "memory_gib = 92\n[training]\nseq_length = 1048576\nglobal_batch_size = 8\n"
    )
    _, changes = _infeasible([str(path)], capsys)
    assert "seq_length 524288 instead of 1048576" in changes
    j = _memory(job("llama3.1-8b", "h100-sxm-80gb", 8, 1048576, 8), 92.0)
    assert _found(replace(j, seq_length=524288)) and not _found(j)
