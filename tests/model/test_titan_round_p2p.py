"""torchtitan's Interleaved1F1B and InterleavedZeroBubble at m >= pp: the exposed pipeline p2p at
torch's micro-batch group (planner.model.pipeline_p2p, `schedule.interleaved_p2p_exposed` with
`torch_schedules.microbatch_group`), not Megatron's.

Oracle: torch's own order replayed (`looped_order.looped_step`: each rank's actions as
pytorch/pytorch 00722e64 torch/distributed/pipelining/schedules.py builds them, checked against
torch's construction in tests/model/test_looped_order.py), the step with each cross-rank input
`hop` late less the step without: the seconds the sends add. torch runs rounds = m // pp rounds
of m // rounds micro-batches each (at pp 4, m 6 one round of 6, m 10 two of 5), where Megatron's
groups of pp would leave a last group of m mod pp whose wraps the closed form counts as exposed.
As for Megatron (tests/model/test_p2p_group.py): exact on equal stages while a hop is at most a
chunk's forward (Interleaved1F1B is Megatron's order with the group set to the round; the zero
bubble one warms up with half the forwards and the closed form bounds it from above)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from plan_text import titan_job, write

from planner.inputs.plan import load_plan
from planner.model import cost
from planner.model.looped_order import looped_step
from planner.model.schedule import WGRAD_SHARE, interleaved_p2p_exposed
from planner.model.torch_schedules import microbatch_group, refusal
from planner.search.rules import check_plan

ROUNDS = ("Interleaved1F1B", "InterleavedZeroBubble")


def _replayed(name: str, v: int, m: int, f: list[float], b: list[float], hop: float) -> float:
    """The seconds `hop` per message adds to torch's order (module docstring), W = half of B."""
    w = [WGRAD_SHARE * x for x in b]
    return looped_step(name, v, m, f, b, w, hop) - looped_step(name, v, m, f, b, w)


def test_equal_stages_at_torchs_round() -> None:
    """Interleaved1F1B, every m in [pp, 3 pp] torch runs, a chunk's forward 1 and backward 2, a
    hop a quarter of a chunk's forward or all of it: the closed form at torch's round is the
    replay's growth exactly."""
    name = "Interleaved1F1B"
    for pp in (2, 3, 4):
        for v in (2, 3):
            for m in range(pp, 3 * pp + 1):
                if refusal(name, pp, m):
                    continue
                g = m // max(1, m // pp)  # torch's microbatches_per_round
                f, b = [float(v)] * pp, [2.0 * v] * pp
                for hop in (0.25, 1.0):
                    want = _replayed(name, v, m, f, b, hop)
                    got = interleaved_p2p_exposed(v, m, hop, f, b, g)
                    assert got == pytest.approx(want, abs=1e-9), (pp, v, m, hop)


def test_closed_form_is_not_the_other_orders() -> None:
    """Why InterleavedZeroBubble and LoopedBFS are replayed at every m: on equal stages
    (forward 1, backward 2 a chunk, hop a quarter of a chunk's forward) the closed form lies
    below the zero-bubble order's growth somewhere (its warm-up runs fewer forwards to hide
    the fill's wraps) and above LoopedBFS's (every micro-batch of a chunk hides each wrap)."""
    diff: dict[str, list[float]] = {"InterleavedZeroBubble": [], "LoopedBFS": []}
    for name, seen in diff.items():
        for pp in (2, 3, 4, 6):
            for v in (2, 3):
                for m in range(pp, 3 * pp + 1):
                    if refusal(name, pp, m):
                        continue
                    g = m // max(1, m // pp) if name != "LoopedBFS" else None
                    f, b = [float(v)] * pp, [2.0 * v] * pp
                    want = _replayed(name, v, m, f, b, 0.25)
                    seen.append(interleaved_p2p_exposed(v, m, 0.25, f, b, g) - want)
    assert min(diff["InterleavedZeroBubble"]) < -0.25  # more than a hop under
    assert max(diff["LoopedBFS"]) > 0.25


def _plan(name: str, m: int) -> tuple[object, object]:
    # Llama 3.1 8B on 8 H100, pp 4 x dp 2, vpp 2: global batch 2 m gives m micro-batches
    text = titan_job(gbs=2 * m) + "[parallel]\npp = 4\nvpp = 2\nzero_stage = 3\n"
    text += f'[torchtitan]\npipeline_schedule = "{name}"\n'
    plan = check_plan(load_plan(write(Path(tempfile.mkdtemp()), text)))
    return plan.job, plan.require_layout()


@pytest.mark.parametrize("name", [*ROUNDS, "LoopedBFS"])
@pytest.mark.parametrize("m", [4, 5, 6, 7, 8, 10, 15])
def test_estimate_prices_the_replay(name: str, m: int) -> None:
    """The estimate's exposed PP traffic against torch's order replayed on the estimate's own
    stages and hop (uneven: the embedding and the output layer): Interleaved1F1B at least the
    replay's growth and at most 2 (pp v - 1) hops more (the closed form counts each of the
    fill's and drain's wraps at most once), the other two the replay's. Before, at m 5, 6, 7,
    10 and 15 Megatron's groups of 4 left a last group of 1 to 3 micro-batches, and compute
    waiting was booked as p2p: 62 to 224 ms where the replay adds about 1 ms (hop 0.19 ms)."""
    job, lay = _plan(name, m)
    perf = cost.estimate(job, lay)
    if name != "LoopedBFS":
        assert microbatch_group(job, lay) == m // max(1, m // 4)  # type: ignore[arg-type]
    f = [x for x, _ in perf.stages]
    b = [x for _, x in perf.stages]
    hop = perf.p2p_hop
    want = _replayed(name, 2, m, f, b, hop)
    got = perf.breakdown.pp_comm_exposed
    assert want > 0
    if name == "Interleaved1F1B":
        assert want * (1 - 1e-9) <= got <= want + 2 * (4 * 2 - 1) * hop, (got, want)
    else:
        assert got == pytest.approx(want, rel=1e-9)
