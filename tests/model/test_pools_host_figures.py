"""Host memory figures on heterogeneous pools that `explain` and `check`'s advice print: each
pool's own node size, and the host bytes a change frees on the pool whose host binds.

Oracle: hand arithmetic on tests/model/test_pools_host_memory.py's plan (Llama 3.1 70B, tp 8 pp
2 dp 128 ZeRO 1, rank 0 on the a100 pool with embedding + 21 layers, rank 1 on the h100 pool
with 59 layers + output, the optimizer wholly offloaded): the h100 stage pins H100_STAGE = 0.750
GiB a GPU, the a100 stage A100_STAGE = 0.277 GiB."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_pools_host_memory import A100_STAGE, EXAMPLE, H100_STAGE

from planner.cli import explain_notes
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, load_plan
from planner.inputs.units import GIB
from planner.model import cost, host_memory
from planner.search import host_advice


def _plan(tmp_path: Path, a100: str, h100: str = "") -> Path:
    """The example with the optimizer offloaded and `a100` / `h100` added to each pool."""
    text = EXAMPLE.read_text().replace(
        "[training]\n", "[training]\noptimizer_offload_fraction = 1.0\n", 1
    )
    for gpu, extra in (("a100", a100), ("h100", h100)):
        line = f'gpu = "{gpu}-sxm-80gb"\n'
        assert text.count(line) == 1
        text = text.replace(line, line + extra)
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return path


def test_explain_gives_the_node_of_the_pool_whose_nodes_hold_most(tmp_path: Path) -> None:
    # a100 nodes of 16: 16 x 0.277 = 4.43 GiB a node; h100 nodes of 8: 8 x 0.750 = 6.0 GiB, the
    # most. Before, the h100 GPU's 0.75 GiB was multiplied by the first pool's 16 GPUs a node
    assert 16 * A100_STAGE < 8 * H100_STAGE
    plan = load_plan(_plan(tmp_path, "gpus_per_node = 16\n"))
    lay = plan.require_layout()
    text = explain_notes.optimizer_offload_text(plan.job, lay, cost.estimate(plan.job, lay))
    assert text is not None
    assert f"{H100_STAGE / GIB:.1f} GiB of pinned host memory a GPU on pool 'h100'" in text
    assert f"({8 * H100_STAGE / GIB:.0f} GiB a node of 8)" in text


def test_host_advice_saves_on_the_pool_that_binds(tmp_path: Path) -> None:
    # h100 nodes of 260 GiB: 260 / 8 - 32 = 0.5 GiB usable, 0.750 pinned, 0.25 over (binds);
    # a100 nodes of 256.8 GiB: 32.1 - 32 = 0.1 usable, 0.277 pinned, 0.177 over. A fraction f
    # leaves the a100 pool binding wherever 0.277 f - 0.1 > 0.750 f - 0.5, i.e. f < 0.846, so
    # every fitting f (f <= 0.1 / 0.277 = 0.361). The change frees 0.750 (1 - f) a GPU on the
    # h100 pool; before, its 0.750 less the a100 pool's 0.277 f was printed
    plan = load_plan(
        _plan(tmp_path, "host_memory_gib_per_node = 256.8\n", "host_memory_gib_per_node = 260\n")
    )
    job, lay = plan.job, plan.require_layout()
    assert host_memory.estimate(job, lay).pool == "h100"

    def step(j: Job, new: Layout) -> float:
        return cost.estimate(j, new).step_time_s

    (opt,) = [
        c
        for c in host_advice.host_changes(job, lay, cost=step)
        if c.field == "training.optimizer_offload_fraction"
    ]
    f = float(str(opt.after))
    assert 0 < f <= 0.36
    assert opt.job is not None and host_memory.estimate(opt.job, lay).pool == "a100"
    assert opt.saves == pytest.approx(H100_STAGE * (1 - f), rel=1e-9)
