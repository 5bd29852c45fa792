"""Megatron's --test-mode (`Job.test_mode`): with QK layernorm, every attention forward gathers its
QK-norm weights over the data- and tensor-parallel groups and compares each rank's copy on the host
(planner/model/host.py `realtime_test_s`, Megatron-Core d98e8a64 attention.py run_realtime_tests).

Oracle: hand count of that function's operations at the host's KERNEL_ISSUE_S (four tensors per
rank of each group, three operations each; a stack and two all-gathers per layer), added to the
forward, not floored."""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job, read_job

from planner.inputs.hybrid import DENSE, MAMBA, MOE, LayerKind
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import host, host_floor, stage_time
from planner.model.layer_time import Layer

TP4 = Layout(tp=4, pp=1, dp=2, sequence_parallel=True)


def checked(model: str = "gpt3-175b", qk: bool = True, test_mode: bool = True) -> Job:
    base = job(model, "h100-sxm-80gb", 8, 2048, 8)
    arch = base.arch.model_copy(update={"qk_layernorm": qk})
    return replace(base, arch=arch, test_mode=test_mode)


def test_the_checks_cost_twelve_operations_per_rank_of_each_group() -> None:
    # tp 4 x dp 2: 12 x (2 + 4) + 3 = 75 operations at 25 us on the reference host (DGX H100)
    assert host.realtime_test_s(checked(), TP4, DENSE) == pytest.approx(75 * 25e-6)
    assert host.KERNEL_ISSUE_S == 25e-6


@pytest.mark.parametrize(
    ("j", "kind"),
    [
        (checked(qk=False), DENSE),  # no QK layernorm: run_realtime_tests returns at once
        (checked(test_mode=False), DENSE),
        (checked(), MAMBA),  # no attention in the block
        (checked("deepseek-v3"), MOE),  # MLA builds its q and k without the check
    ],
)
def test_no_checks_without_test_mode_qk_layernorm_and_a_standard_attention(
    j: Job, kind: LayerKind
) -> None:
    assert host.realtime_test_s(j, TP4, kind) == 0.0


def test_the_checks_add_to_the_forward_and_its_rerun_only() -> None:
    # each assert waits for the GPU: the forward's time plus the checks, not the larger of them;
    # the backward does not check
    layer = Layer(fwd=1e-3, bwd=2e-3, recompute=1e-3)
    out = host_floor.issued(layer, 0.5e-3, recompute=True, synced=0.2e-3)
    assert (out.fwd, out.bwd, out.recompute) == pytest.approx((1.2e-3, 2e-3, 1.2e-3))


def test_every_data_parallel_rank_is_checked() -> None:
    # dp 2 -> 4 at tp 4: 12 x 2 more operations per layer forward, 600 us more
    j = checked()
    two = stage_time.layout_times(j, TP4).dense.fwd
    four = stage_time.layout_times(j, TP4.with_(dp=4)).dense.fwd
    assert four - two == pytest.approx(12 * 2 * 25e-6)
    # without the checks dp does not reach a layer's time
    plain = checked(test_mode=False)
    assert stage_time.layout_times(plain, TP4).dense.fwd == pytest.approx(
        stage_time.layout_times(plain, TP4.with_(dp=4)).dense.fwd
    )


def test_megatron_lines_with_test_mode_are_read_so() -> None:
    read = [read_job(" --qk-layernorm" + extra) for extra in ("", " --test-mode")]
    assert [j.test_mode for j in read] == [False, True]
