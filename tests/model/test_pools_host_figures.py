"""Host memory figures on heterogeneous pools that `explain` and `check`'s advice print: each
pool's own node size, and the host bytes a change frees on the pool whose host binds.

Oracle: hand arithmetic on tests/model/test_pools_host_memory.py's plan (Llama 3.1 70B, tp 8 pp
2 dp 128 ZeRO 1, rank 0 on the a100 pool with embedding + 21 layers, rank 1 on the h100 pool
with 59 layers + output, the optimizer wholly offloaded): the h100 stage's optimizer takes
H100_STAGE = 0.750 GiB a GPU at 16 B a parameter, the a100 stage's A100_STAGE = 0.277 GiB; its
pinned fp32 blocks round up (planner.model.host_pinned), to between 16 and 24 B a parameter
(`_pinned`). Each GPU also pins its share of every checkpoint save (planner.model.host_checkpoint,
ZeRO 1): the 16-bit weights, and the optimizer state the host does not already hold, 12 B x
(1 - f) a parameter at an offloaded fraction f. So a stage's host bytes are linear in f: its
figure at f 0 and at f 1 (the model's, `_ends`) give every other."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from test_pools_host_memory import A100_STAGE, EXAMPLE, H100_STAGE

from planner.cli import explain_notes
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, load_plan
from planner.inputs.units import GIB
from planner.model import cost, host_memory
from planner.search import host_advice

HOST_RESERVED = 32  # GiB a GPU (host_memory.HOST_RESERVED_GIB_PER_GPU)


def _pinned(got: float, exact: float) -> bool:
    """Whether `got` is between 16 and 24 B a parameter of a stage whose 16 B come to `exact`."""
    return exact < got < exact * 24 / 16


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
    # a100 nodes of 16, h100 nodes of 8. At 16 B a parameter 16 x 0.277 = 4.43 GiB a node
    # against 8 x 0.750 = 6.0; with the pinned blocks' round-up (each stage between 16 and 24 B
    # a parameter: bounds that alone leave 16 x 0.415 = 6.6 against 6.0 open) the walk of the
    # pieces (host_pinned, by hand in tests/model/test_host_pinned.py) gives each stage's
    # figure, and the h100's node still holds the most. Before, the h100 GPU's figure was
    # multiplied by the first pool's 16 GPUs a node
    plan = load_plan(_plan(tmp_path, "gpus_per_node = 16\n"))
    lay = plan.require_layout()
    a100, h100 = host_memory.by_pool(plan.job, lay)
    assert (a100.pool, a100.per_node, h100.pool, h100.per_node) == ("a100", 16, "h100", 8)
    assert _pinned(a100.optimizer, A100_STAGE) and _pinned(h100.optimizer, H100_STAGE)
    assert 16 * a100.optimizer < 8 * h100.optimizer
    text = explain_notes.optimizer_offload_text(plan.job, lay, cost.estimate(plan.job, lay))
    assert text is not None
    assert f"{h100.optimizer / GIB:.1f} GiB of pinned host memory a GPU on pool 'h100'" in text
    assert f"({8 * h100.optimizer / GIB:.0f} GiB a node of 8)" in text


def _ends(tmp_path: Path) -> dict[str, tuple[float, float]]:
    """Each pool's host bytes a GPU with none of the optimizer offloaded and with all of it (the
    module docstring: every fraction's is on the line between)."""
    plan = load_plan(_plan(tmp_path, ""))
    job, lay = plan.job, plan.require_layout()
    at = [host_memory.by_pool(replace(job, optimizer_offload_fraction=f), lay) for f in (0, 1)]
    return {h0.pool: (h0.total, h1.total) for h0, h1 in zip(*at, strict=True)}


def test_host_advice_saves_on_the_pool_that_binds(tmp_path: Path) -> None:
    # Each pool's host a GPU, a stage pinning e0 + (e1 - e0) f at a fraction f (`_ends`): the
    # a100 pool's usable a0 + 0.361 (a1 - a0), the h100's h0 + 0.6 (h1 - h0), so at f 1 both are
    # over, the h100 by 0.4 (h1 - h0), the a100 by 0.639 (a1 - a0): the h100 binds where 0.4
    # (h1 - h0) > 0.639 (a1 - a0). A fraction f fits both where f <= 0.361 (the a100's, the
    # lesser), and leaves the a100 pool binding wherever (f - 0.361) (a1 - a0) > (f - 0.6) (h1 -
    # h0): at f 0.361 and f 0 alike where 0.6 (h1 - h0) > 0.361 (a1 - a0), so at every fitting
    # f. The change frees (h1 - h0) (1 - f) a GPU on the h100 pool; before, the h100's figure at
    # f 1 less the a100's at f was printed
    ends = _ends(tmp_path)
    (a0, a1), (h0, h1) = ends["a100"], ends["h100"]
    assert a0 < a1 and h0 < h1  # the offloaded optimizer pins more than the staging it saves
    assert 0.4 * (h1 - h0) > 0.639 * (a1 - a0) and 0.6 * (h1 - h0) > 0.361 * (a1 - a0)
    a100 = (HOST_RESERVED * GIB + a0 + 0.361 * (a1 - a0)) * 8 / GIB
    h100 = (HOST_RESERVED * GIB + h0 + 0.6 * (h1 - h0)) * 8 / GIB
    plan = load_plan(
        _plan(
            tmp_path,
            f"host_memory_gib_per_node = {a100!r}\n",
            f"host_memory_gib_per_node = {h100!r}\n",
        )
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
    assert opt.saves == pytest.approx((h1 - h0) * (1 - f), rel=1e-6)
