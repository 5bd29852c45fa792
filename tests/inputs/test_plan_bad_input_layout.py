"""planner.inputs.plan: bad link tiers, layouts that break a rule, values of the wrong TOML type,
sizes that are not finite and counts above their caps; each raises `InputError` (exit 2) naming
the file, the field and the value.

Oracles: the contract itself (exit codes and the message's file, field and value), TOML's own types
and hand arithmetic in comments for the layout rules.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_text import CLUSTER, load_error, plan_text, write

from planner.inputs import files
from planner.inputs.arch_fields import MAX_EXPERTS, MAX_LAYERS
from planner.inputs.files import MAX_INPUT_CHARS
from planner.inputs.hardware import MAX_GPUS
from planner.inputs.plan import load_plan
from planner.inputs.plan_sections import MAX_GLOBAL_BATCH


def tiers(*spans: int | None) -> str:
    out = []
    for i, span in enumerate(spans):
        out.append(f'[[cluster.tiers]]\nname = "t{i}"\nbandwidth_gb_per_s_per_gpu = 50\n')
        if span is not None:
            out[-1] += f"span_gpus = {span}\n"
    return "".join(out)


def test_tiers_leaving_gpus_unreachable(tmp_path: Path) -> None:
    # outermost tier spans 8 GPUs but the job has 16: two islands that cannot talk
    cluster = '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 16\n' + tiers(4, 8)
    path = write(tmp_path, plan_text(cluster=cluster))
    msg = load_error(path)
    assert f"{path}: cluster.tiers:" in msg
    assert "8" in msg and "16" in msg
    # just inside: an outer span of exactly 16 reaches every GPU
    cluster = '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 16\n' + tiers(4, 16)
    plan = load_plan(write(tmp_path, plan_text(cluster=cluster), "ok.toml"))
    assert [t.span_gpus for t in plan.job.cluster.tiers] == [4, 16]


@pytest.mark.parametrize(
    ("spans", "shown"),
    [
        ((8, 12, None), ("12", "8")),  # 12 is not a multiple of 8
        ((8, 4, None), ("4", "8")),  # shrinking
        ((8, 8, None), ("8",)),  # not larger
        ((None, 8), ("t0",)),  # an "everything" tier that is not the outermost
    ],
)
def test_tiers_not_nested(tmp_path: Path, spans: tuple[int | None, ...], shown: tuple[str]) -> None:
    cluster = '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 16\n' + tiers(*spans)
    path = write(tmp_path, plan_text(cluster=cluster))
    msg = load_error(path)
    assert f"{path}: cluster.tiers:" in msg
    for s in shown:
        assert s in msg


def test_a_mesh_tier_that_is_not_innermost(tmp_path: Path) -> None:
    # mesh = true on the outer tier: a full mesh can only be the GPUs' own fabric
    outer = tiers(8, None).replace('name = "t1"\n', 'name = "t1"\nmesh = true\n')
    cluster = '[cluster]\ngpu = "mi300x-192gb"\nnum_gpus = 16\n' + outer
    path = write(tmp_path, plan_text(cluster=cluster))
    msg = load_error(path)
    assert f"{path}: cluster.tiers:" in msg and "'t1' has mesh = true" in msg
    # and not a flag: the value is named
    inner = tiers(8, None).replace('name = "t0"\n', 'name = "t0"\nmesh = "yes"\n')
    path = write(
        tmp_path,
        plan_text(cluster='[cluster]\ngpu = "mi300x-192gb"\nnum_gpus = 16\n' + inner),
        "flag.toml",
    )
    msg = load_error(path)
    assert f"{path}: cluster.tiers.0.mesh:" in msg and '(got "yes")' in msg


def test_layout_rule_violation_names_file_and_field(tmp_path: Path) -> None:
    # 40 GPUs / tp 5 = dp 8, but 32 heads do not split 5 ways
    cluster = '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 40\n'
    training = "[training]\nseq_length = 8192\nglobal_batch_size = 128\n"
    path = write(
        tmp_path, plan_text(cluster=cluster, training=training, parallel="[parallel]\ntp = 5\n")
    )
    msg = load_error(path)
    assert (
        f"{path}: parallel.tp: num_attention_heads (32) must be a multiple of "
        "tensor_model_parallel_size (5)"
    ) in msg


def test_dp_not_whole(tmp_path: Path) -> None:
    # 8 GPUs / (tp 1 x pp 3 x cp 1) is not whole
    path = write(tmp_path, plan_text(parallel="[parallel]\npp = 3\n"))
    msg = load_error(path)
    assert f"{path}: parallel: num_gpus (8) must be a multiple of tp x pp x cp" in msg
    assert "(1 x 3 x 1 = 3)" in msg


def test_explicit_dp_that_disagrees_with_num_gpus(tmp_path: Path) -> None:
    path = write(tmp_path, plan_text(parallel="[parallel]\ntp = 2\ndp = 2\n"))
    msg = load_error(path)
    # 2 x 1 x 1 x 2 = 4 GPUs in the layout, 8 in the cluster
    assert "(2 x 1 x 1 x 2 = 4) must equal num_gpus (8)" in msg
    assert f"{path}: parallel:" in msg


@pytest.mark.parametrize(
    ("line", "field", "value"),
    [
        ("[parallel]\ntp = true\n", "parallel.tp", "true"),  # not 1
        ("[parallel]\ntp = 2.0\n", "parallel.tp", "2.0"),  # not 2
        ("[parallel]\nzero_stage = true\n", "parallel.zero_stage", "true"),  # not stage 1
        ("[parallel]\ntp = 2\nsequence_parallel = 1\n", "parallel.sequence_parallel", "1"),
        ('[parallel]\ntp_comm_overlap = "yes"\n', "parallel.tp_comm_overlap", '"yes"'),
    ],
)
def test_values_of_the_wrong_toml_type_are_not_coerced(
    tmp_path: Path, line: str, field: str, value: str
) -> None:
    path = write(tmp_path, plan_text(parallel=line))
    msg = load_error(path)
    assert f"{path}: {field}:" in msg and f"(got {value})" in msg


@pytest.mark.parametrize("value", ["inf", "nan"])
def test_sizes_must_be_finite(tmp_path: Path, value: str) -> None:
    # memory_gib = inf would make every layout fit
    path = write(tmp_path, plan_text(cluster=CLUSTER + f"memory_gib = {value}\n"))
    msg = load_error(path)
    assert f"{path}: cluster.memory_gib: Input should be a finite number (got {value})" in msg
    # an integer where a float is expected is a number all the same
    plan = load_plan(write(tmp_path, plan_text(cluster=CLUSTER + "memory_gib = 70\n"), "ok.toml"))
    assert plan.job.cluster.memory_gib == 70.0


def test_an_endless_or_huge_file_is_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # /dev/zero once filled memory (MemoryError, or the machine); reading stops after the limit
    if Path("/dev/zero").exists():
        msg = load_error(Path("/dev/zero"))
        assert msg.startswith(f"/dev/zero: more than {MAX_INPUT_CHARS:,} characters: not a plan")
    monkeypatch.setattr(files, "MAX_INPUT_CHARS", 64)
    path = write(tmp_path, plan_text())  # well over 64 characters
    assert f"{path}: more than 64 characters" in load_error(path)


@pytest.mark.parametrize(
    ("table", "cap", "field"),
    [("cluster", MAX_GPUS, "num_gpus"), ("training", MAX_GLOBAL_BATCH, "global_batch_size")],
)
def test_counts_above_their_cap_are_bad_input(
    tmp_path: Path, table: str, cap: int, field: str
) -> None:
    # 10^21 sequences once sent the search's divisor walk (up to the square root) into a hang
    big = 10**21
    path = write(tmp_path, plan_text().replace(f"{field} = ", f"{field} = {big} # "))
    msg = load_error(path)
    assert (
        f"{path}: {table}.{field}: Input should be less than or equal to {cap} (got {big})" in msg
    )


@pytest.mark.parametrize(
    ("field", "cap"), [("num_layers", MAX_LAYERS), ("num_moe_experts", MAX_EXPERTS)]
)
def test_model_count_above_its_cap_is_bad_input(tmp_path: Path, field: str, cap: int) -> None:
    model = "[model]\nnum_layers = 4\nhidden_size = 64\nffn_hidden_size = 256\n"
    model += "num_attention_heads = 4\nvocab_size = 1000\nnum_moe_experts = 8\n"
    model = model.replace(f"{field} = ", f"{field} = {{}} # ")
    path = write(tmp_path, plan_text(model=model.format(cap + 1), parallel=""))
    msg = load_error(path)
    assert f"{path}: model.{field}: Input should be less than or equal to {cap}" in msg
    plan = load_plan(write(tmp_path, plan_text(model=model.format(cap), parallel=""), "a"))
    assert getattr(plan.job.arch, field) == cap
