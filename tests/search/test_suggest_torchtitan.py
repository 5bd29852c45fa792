"""suggest --framework torchtitan searches only what torchtitan runs, and its plan is one that
check and launch --target torchtitan accept. Oracle: planner's own rules on torchtitan
(planner/search/rules/torchtitan.py, from torchtitan e347b1e5) applied to every candidate, and the
written plan read back."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from cli_run import run

from planner.inputs.plan import load_plan
from planner.search.rules import check_plan

JOB = ["--model", "llama3.1-70b", "--gpu", "h100-sxm-80gb", "--num-gpus", "64", "--top", "5"]


def test_candidates_are_torchtitan_layouts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "best.toml"
    code, out, err = run(
        ["suggest", *JOB, "--framework", "torchtitan", "--json", "--write-plan", str(plan)], capsys
    )
    assert code == 0, err
    rows = json.loads(out)["candidates"]
    assert rows
    for row in rows:
        par = row["parallel"]
        assert par["zero_stage"] == (3 if par["dp"] * par["cp"] > 1 else 0)
        assert not par["tp_comm_overlap"] and not par["ep_comm_overlap"]
        assert par.get("cpu_offloading_num_layers", 0) == 0
    written = check_plan(load_plan(plan))
    assert written.job.framework == "torchtitan"
    code, out, err = run(["launch", str(plan), "--target", "torchtitan"], capsys)
    assert code == 0, err
    assert "[parallelism]" in out


def test_megatron_search_is_unchanged_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["suggest", *JOB, "--json"], capsys)
    assert code == 0
    assert any(r["parallel"]["zero_stage"] == 1 for r in json.loads(out)["candidates"])


def test_unknown_framework_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["suggest", *JOB, "--framework", "deepspeed"], capsys)
    assert code == 2 and "--framework" in err and "torchtitan" in err


def test_written_variant_checks_to_the_same_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The top candidate's [torchtitan] settings travel: in --json (`torchtitan`), in the table
    and in the written plan, which `check` predicts at the same step time and peak (oracle: the
    suggest JSON of the same run). On Llama 3.1 70B / 64 H100 at tp 4, pp 1 the top layout runs
    dp_replicate 2 (HSDP: each block's all-gathers ring over 8 ranks, not 16; "never" no longer
    wins at pp 1, where it still gathers once per micro-batch, FSDP2 resharding after each
    backward)."""
    plan = tmp_path / "best.toml"
    cmd = ["suggest", *JOB, "--framework", "torchtitan", "--tp", "4", "--pp", "1"]
    code, out, err = run([*cmd, "--json", "--write-plan", str(plan)], capsys)
    assert code == 0, err
    best = json.loads(out)["candidates"][0]
    assert best["torchtitan"]["dp_replicate"] == 2
    assert best["parallel"]["pp"] == 1
    assert "dp_replicate = 2" in plan.read_text()
    code, out, err = run(["check", str(plan), "--json"], capsys)
    assert code == 0, err
    checked = json.loads(out)
    assert checked["performance"]["step_time_s"] == best["performance"]["step_time_s"]
    assert checked["memory"]["peak_gib"] == best["memory"]["peak_gib"]
    code, out, err = run(cmd, capsys)
    assert code == 0, err
    assert "hsdp 2" in out and "settings searched" in out


def test_given_settings_are_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A job file's [torchtitan] reshard_after_forward / dp_replicate are not searched over:
    every candidate carries them (oracle: the job file's values)."""
    job = tmp_path / "job.toml"
    job.write_text(
        "[model]\nname = 'llama3.1-70b'\n[cluster]\ngpu = 'h100-sxm-80gb'\nnum_gpus = 64\n"
        "[training]\nseq_length = 8192\nglobal_batch_size = 128\nframework = 'torchtitan'\n"
        "[torchtitan]\nreshard_after_forward = 'default'\ndp_replicate = 2\n"
    )
    code, out, err = run(["suggest", str(job), "--json"], capsys)
    assert code == 0, err
    rows = json.loads(out)["candidates"]
    assert rows
    for row in rows:
        assert row["torchtitan"]["reshard_after_forward"] == "default"
        assert row["torchtitan"]["dp_replicate"] == 2
        assert row["parallel"]["dp"] % 2 == 0


@pytest.mark.parametrize("pins", [["--pp", "4", "--vpp", "1"], ["--pp", "2", "--vpp", "2"]])
def test_written_pipeline_checks_to_the_same_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pins: list[str]
) -> None:
    """A pipelined top layout on the even split is written with its split spelled out (a
    torchtitan plan without one reads as torchtitan's own split, which counts the embedding and
    the output as layers); `check` then predicts the suggest JSON's step time and peak. The
    JSON's `parallel` spells it too, agreeing with the written `[parallel]` on every field (a
    script that builds its plan from the JSON got torchtitan's own split before: Llama 3.1 8B
    on 16 H100 at pp 2 x vpp 4, a peak of 74.5 GiB against the 71.9 listed)."""
    plan = tmp_path / "best.toml"
    cmd = ["suggest", *JOB, "--framework", "torchtitan", *pins, "--no-uneven", "--json"]
    code, out, err = run([*cmd, "--write-plan", str(plan)], capsys)
    assert code == 0, err
    best = json.loads(out)["candidates"][0]
    written = tomllib.loads(plan.read_text())["parallel"]
    pp = written["pp"]
    assert written["pipeline_layers"] == [80 // pp] * pp  # Llama 3.1 70B's 80 layers, even
    assert {k: best["parallel"].get(k) for k in written} == written
    code, out, err = run(["check", str(plan), "--json"], capsys)
    assert code == 0, err
    checked = json.loads(out)
    assert checked["performance"]["step_time_s"] == best["performance"]["step_time_s"]
    assert checked["memory"]["peak_gib"] == best["memory"]["peak_gib"]


def test_every_nth_layer_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On 70B / 64 H100 with tp 4, cp 4, pp 4, vpp 2 and micro-batch 1, at 9% headroom (at the
    default 3% these pins fit without recompute, 76.8 GiB), the top layout recomputes every N-th
    layer
    (torchtitan selective_layer_every: block recompute carrying N, `every_n`: each rank wraps
    its N-th, 2N-th ... layers, counted across its chunks);
    the written plan names N and `check` reads it back to the same layout, step time and peak
    (oracle: the suggest JSON of the same run)."""
    plan = tmp_path / "best.toml"
    pins = ["--tp", "4", "--cp", "4", "--pp", "4", "--vpp", "2", "--mbs", "1", "--no-uneven"]
    pins += ["--headroom", "9"]
    cmd = ["suggest", *JOB, "--framework", "torchtitan", *pins, "--json"]
    code, out, err = run([*cmd, "--write-plan", str(plan)], capsys)
    assert code == 0, err
    best = json.loads(out)["candidates"][0]
    every = best["torchtitan"]["selective_layer_every"]
    assert every is not None and every >= 2
    par = best["parallel"]
    assert (par["recompute"], par["recompute_method"]) == ("full", "block")
    assert (par["recompute_num_layers"], par["recompute_every"]) == (1, every)
    assert f"selective_layer_every = {every}" in plan.read_text()
    code, out, err = run(["check", str(plan), "--json"], capsys)
    assert code == 0, err
    checked = json.loads(out)
    assert checked["parallel"]["recompute_num_layers"] == par["recompute_num_layers"]
    assert checked["performance"]["step_time_s"] == best["performance"]["step_time_s"]
    assert checked["memory"]["peak_gib"] == best["memory"]["peak_gib"]
    # every stage's memory, as `check` lists it (the row listed only the stages that may hold
    # the peak, stage 2 of 4 missing)
    assert checked["memory"]["stages"] == best["memory"]["stages"]
