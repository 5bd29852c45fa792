"""`planner suggest` as a user runs it: the bundled default, --json (DESIGN.md section 2), twins
folded, nodes, pins and bounds, progress on stderr.

Most checks run `planner.cli.main(argv)` in-process; the default-job check runs `python -m planner`
in a subprocess to see exactly what a user's shell sees. Oracles: the contract of DESIGN.md
section 2 and the library's own search (planner.search.top_k) for the ranking.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from cli_run import STAGE_KEYS, run
from paths import REPO
from suggest_runs import LAYOUT_KEYS, suggest_json

from planner.search import top_k as search
from planner.search.space import Space
from planner.search.twins import fold

PERF_KEYS = {"step_time_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu"}


# ----------------------------------------------------------------------------- the default job


def test_no_arguments_plans_the_bundled_default() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "planner", "suggest"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    err = " ".join(p.stderr.split())  # rich wraps stderr lines at 80 columns when piped
    assert "bundled default" in err
    assert "llama3.1-8b" in err and "h100-sxm-80gb" in err
    assert "Top 5 layouts" in p.stdout
    assert "certified" in p.stdout
    assert "Traceback" not in p.stderr + p.stdout


def test_json_is_one_document_with_the_contract_keys(capsys: pytest.CaptureFixture[str]) -> None:
    data = suggest_json([], capsys)
    cands = data["candidates"]
    assert len(cands) == 5
    for c in cands:
        assert c["fits"] is True
        par = c["parallel"]
        assert par["tp"] * par["pp"] * par["cp"] * par["dp"] == 8
        for key in (*LAYOUT_KEYS, "sequence_parallel", "pipeline_layers"):
            assert key in par
        mem = c["memory"]
        assert 0 < mem["peak_gib"] <= mem["capacity_gib"]
        assert mem["stages"] and all(set(st) >= STAGE_KEYS for st in mem["stages"])
        assert len(mem["stages"]) == par["pp"]
        assert set(c["performance"]) >= PERF_KEYS
        assert "params_total" in c["model"] and "params_active" in c["model"]
    times = [c["performance"]["step_time_s"] for c in cands]
    assert times == sorted(times)
    assert data["search"]["certified"] is True
    assert data["search"]["space_size"] >= data["search"]["scored"] > 0
    assert data["job"]["num_gpus"] == 8 and data["job"]["global_batch_size"] == 128


def test_json_top_pick_is_the_library_search(capsys: pytest.CaptureFixture[str]) -> None:
    """The candidates are the first rows of the library's whole ranking, folded (twins: same
    step time, cp traded for micro-batch size; tests/search/test_twins.py)."""
    from planner.inputs.job_request import DEFAULT_JOB
    from planner.inputs.plan import parse_plan

    data = suggest_json(["--top", "3"], capsys)
    rows = fold(search.search(parse_plan(DEFAULT_JOB).job, Space(), top_k=10**6).candidates)
    assert len(data["candidates"]) == 3
    for c, row in zip(data["candidates"], rows, strict=False):
        assert all(c["parallel"][k] == getattr(row.candidate.layout, k) for k in LAYOUT_KEYS)
        assert len(c["equivalents"]) == len(row.equivalents)
        for e, twin in zip(c["equivalents"], row.equivalents, strict=True):
            assert all(e["parallel"][k] == getattr(twin.layout, k) for k in LAYOUT_KEYS)


# ----------------------------------------------------------------------------- twins folded

LONG = ["--model", "llama3.1-8b", "--gpu", "h100-sxm-80gb", "--num-gpus", "16"]
LONG += ["--seq-length", "32768", "--global-batch-size", "64"]
"""A job (8k-token sequences 4 x longer than the default's, 16 GPUs) whose top 5 without folding
holds twins: layouts that trade cp for micro-batch size at one step time."""


def test_twins_fold_into_one_row(capsys: pytest.CaptureFixture[str]) -> None:
    data = suggest_json(LONG, capsys)
    cands = data["candidates"]
    assert len(cands) == 5  # still --top rows, now distinct

    def key(par: dict[str, Any]) -> tuple[Any, ...]:
        # what trading cp for micro-batch size keeps (planner.search.suggest.twin_key)
        rest = {k: v for k, v in par.items() if k not in ("cp", "dp", "micro_batch_size")}
        return (sorted(rest.items()), par["dp"] * par["cp"], par["micro_batch_size"] / par["cp"])

    shown = [(key(c["parallel"]), c["performance"]["step_time_s"]) for c in cands]
    assert len(set(map(str, shown))) == 5  # no two rows are twins
    for c in cands:
        for e in c["equivalents"]:
            assert key(e["parallel"]) == key(c["parallel"])
            # the same micro-batches: 64 sequences / (dp x micro-batch size), either layout's
            par = c["parallel"]
            count = 64 // (par["dp"] * par["micro_batch_size"])
            assert e["parallel"]["num_microbatches"] == par["num_microbatches"] == count
            assert 0 < e["memory"]["peak_gib"] <= c["memory"]["capacity_gib"]
    twinned = [(i, c) for i, c in enumerate(cands, 1) if c["equivalents"]]
    assert twinned
    code, out, err = run(["suggest", *LONG], capsys)
    assert code == 0, err
    for i, c in twinned:  # the table's footnote names each row's twins on the row's line
        line = next(x for x in out.splitlines() if x.strip().startswith(f"#{i} also: "))
        for e in c["equivalents"]:
            p = e["parallel"]
            assert f"cp {p['cp']} x mbs {p['micro_batch_size']} (dp {p['dp']}," in line
    assert "#1 and #2 predict the same step time" not in out


def test_nodes_counts_gpus_per_node(capsys: pytest.CaptureFixture[str]) -> None:
    data = suggest_json(["--nodes", "2", "--top", "1"], capsys)
    assert data["job"]["num_gpus"] == 16
    par = data["candidates"][0]["parallel"]
    assert par["tp"] * par["pp"] * par["cp"] * par["dp"] == 16


def test_pins_and_bounds_are_respected(capsys: pytest.CaptureFixture[str]) -> None:
    data = suggest_json(
        ["--nodes", "2", "--tp", "2", "--max-pp", "2", "--zero", "1", "--recompute", "none,full"],
        capsys,
    )
    for c in data["candidates"]:
        par = c["parallel"]
        assert par["tp"] == 2 and par["pp"] <= 2 and par["zero_stage"] == 1
        assert par["recompute"] in ("none", "full")


def test_long_search_reports_progress_on_stderr(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Progress lines go to stderr (every 0.5 s of search); stdout stays one JSON document."""

    class SlowClock:
        t = 0.0

        def perf_counter(self) -> float:
            self.t += 1.0
            return self.t

    monkeypatch.setattr(search, "time", SlowClock())
    code, out, err = run(["suggest", "--json", "--nodes", "2"], capsys)
    assert code == 0, err
    assert "searched" in err and "structures" in err
    assert json.loads(out)["candidates"]
