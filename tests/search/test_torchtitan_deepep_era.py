"""DeepEP for a torchtitan model whose e347b1e5 parallelize ignores it (qwen3, gpt_oss: only
deepseek_v3 and llama4 read expert_parallel_comm_backend there) is torchtitan's Python
configurations' (b5bcd76c), which have no every-N-layers checkpointing: a plan asking for both is
refused, and what the torchtitan search suggests is one some torchtitan target launches.

Oracles: torchtitan e347b1e5 models/qwen3/infra/parallelize.py (the plain ExpertParallel) and
benchmarks/data/torchtitan_head_config.md 2g (b5bcd76c checkpoints per op or whole); the
launch targets themselves (`planner.emit.launch.refusals`: the TOML target refuses DeepEP for
qwen3, the module target every-N), a search row passing when one of them writes it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from cli_run import run
from jobs import job

from planner.emit import launch
from planner.inputs import plan_writer
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, load_plan
from planner.inputs.torchtitan import TorchtitanSection, training_defaults
from planner.search import rules
from planner.search.space import Space
from planner.search.suggest import search_rows


def _titan(model: str, every: int | None = None) -> Job:
    defaults = training_defaults("torchtitan", compile_on=True)  # what a torchtitan plan gets
    section = TorchtitanSection(selective_layer_every=every)
    return job(
        model, "h100-sxm-80gb", 16, 8192, 128, framework="torchtitan", torchtitan=section,
        **defaults,
    )  # fmt: skip


FLEX = Layout(
    tp=1,
    pp=1,
    dp=16,
    ep=8,
    etp=1,
    zero_stage=3,
    recompute="full",
    recompute_method="block",
    recompute_num_layers=24,
    moe_token_dispatcher_type="flex",
)


def _rules(j: Job, lay: Layout) -> list[str]:
    return [v.rule for v in rules.violations(j, lay)]


def test_deepep_for_qwen3_has_no_every_n_layers() -> None:
    qwen = _titan("qwen3-30b-a3b", every=2)
    assert "tt_head_every" in _rules(qwen, FLEX)
    assert "tt_head_every" not in _rules(qwen, FLEX.with_(moe_token_dispatcher_type="alltoall"))
    assert "tt_head_every" not in _rules(replace(qwen, torchtitan=TorchtitanSection()), FLEX)
    # nor float8 tensorwise (the Python configurations' float8 is rowwise only)
    fp8 = replace(_titan("qwen3-30b-a3b"), precision="fp8", fp8_recipe="tensorwise")
    assert "tt_head_float8" in _rules(fp8, FLEX)
    assert "tt_head_float8" not in _rules(replace(fp8, fp8_recipe="rowwise"), FLEX)
    # deepseek_v3's e347b1e5 parallelize reads the backend: its TOML runs DeepEP with every-N
    dsv3 = _titan("deepseek-v3", every=2)
    assert "tt_head_every" not in _rules(dsv3, FLEX.with_(dp=2, ep=16, pp=8))


def _launchable(path: Path) -> set[str]:
    """The torchtitan targets that write the plan file."""
    refused = {t for ts in launch.refusals(load_plan(path)).values() for t in ts}
    return {t for t, f in launch.FRAMEWORK.items() if f == "torchtitan"} - refused


def test_the_qwen3_search_suggests_what_a_torchtitan_target_launches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before the rule, the top pick on 16 H100 was DeepEP with every 25th layer recomputed:
    the TOML target refused its DeepEP and the module target its every-N. Now the pick and
    every row of the search is one at least one torchtitan target writes."""
    path = tmp_path / "pick.toml"
    argv = ["suggest", "--model", "qwen3-30b-a3b", "--num-gpus", "16", "--seq-length", "8192"]
    argv += ["--global-batch-size", "128", "--framework", "torchtitan"]
    code, _, _ = run([*argv, "--write-plan", str(path)], capsys)
    assert code == 0 and _launchable(path)
    fp8 = tmp_path / "fp8.toml"  # torchtitan's default float8 recipe, tensorwise, with it
    code, _, _ = run([*argv, "--precision", "fp8", "--write-plan", str(fp8)], capsys)
    assert code == 0 and _launchable(fp8)
    qwen = replace(load_plan(path).job, torchtitan=TorchtitanSection())  # the CLI's own job
    _, rows = search_rows(qwen, Space(framework="torchtitan"), 5)
    assert rows
    model = {"name": "qwen3-30b-a3b"}
    for i, row in enumerate(rows):
        c = row.candidate
        titan = getattr(c, "titan", qwen.titan)
        flex = c.layout.moe_token_dispatcher_type == "flex" and c.layout.ep > 1
        assert not (flex and titan.selective_layer_every is not None)
        text = plan_writer.render(replace(qwen, torchtitan=titan), c.layout, model, [])
        (tmp_path / f"row{i}.toml").write_text(text)
        assert _launchable(tmp_path / f"row{i}.toml"), f"row {i}: no torchtitan target writes it"


def test_deepep_for_qwen3_within_the_flavors_rope_table() -> None:
    """The Python configurations start qwen3 30B-A3B from its flavor, whose RoPE table holds
    40,960 positions (torchtitan refuses a longer max_context_length; the module target says
    so): DeepEP for it beyond that runs nowhere, alltoall runs in the TOML configuration."""
    qwen = _titan("qwen3-30b-a3b")
    assert "tt_head_context" not in _rules(replace(qwen, seq_length=40_960), FLEX)
    long = replace(qwen, seq_length=65_536)
    assert "tt_head_context" in _rules(long, FLEX)
    assert "tt_head_context" not in _rules(long, FLEX.with_(moe_token_dispatcher_type="alltoall"))
    # deepseek_v3's TOML runs DeepEP: not the Python configurations' alone, at any context
    dsv3 = replace(_titan("deepseek-v3"), seq_length=32_768)
    assert "tt_head_context" not in _rules(dsv3, FLEX.with_(dp=2, ep=16, pp=8))


def test_a_long_qwen3_search_suggests_what_a_torchtitan_target_launches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before the rule, qwen3 30B-A3B on 8 GB200 at 131,072 tokens picked DeepEP: the TOML
    target refused its DeepEP and the module target its context. Now some target writes it."""
    path = tmp_path / "long.toml"
    argv = ["suggest", "--model", "qwen3-30b-a3b", "--gpu", "gb200-nvl72", "--num-gpus", "8"]
    argv += ["--seq-length", "131072", "--global-batch-size", "8", "--framework", "torchtitan"]
    code, _, err = run([*argv, "--write-plan", str(path)], capsys)
    assert code == 0, err
    assert _launchable(path)


def test_a_model_torchtitan_has_no_flavor_of_is_said_so_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Mixtral under --framework torchtitan: torchtitan defines no mixtral flavor, so both of its
    targets refuse every plan (oracle: `launch.refusals` on the written plan); suggest says so
    before it searches, not only in the --write-plan notes."""
    path = tmp_path / "mixtral.toml"
    argv = ["suggest", "--model", "mixtral-8x7b", "--num-gpus", "16", "--seq-length", "4096"]
    argv += ["--global-batch-size", "64", "--framework", "torchtitan", "--top", "1"]
    code, _, err = run([*argv, "--write-plan", str(path)], capsys)
    assert code == 0, err
    assert not _launchable(path)
    flat = " ".join(err.split())
    assert "note: torchtitan defines no flavor of mixtral-8x7b" in flat
    assert flat.index("defines no flavor") < flat.index("refuses this plan")
    code, _, err = run(["suggest", "--model", "qwen3-30b-a3b", *argv[3:]], capsys)
    assert code == 0 and "defines no flavor" not in err
