"""`explain --timeline` draws torchtitan's V schedules (ZBVZeroBubble, DualPipeV) in the order
torch runs them (planner.model.v_schedule, planner.cli.timeline_v); it refused them before.

Oracles: each rank's action order worked by hand from the phase rules of pytorch/pytorch
torch/distributed/pipelining/schedules.py at 00722e64 (ScheduleZBVZeroBubble and
ScheduleDualPipeV `_calculate_single_rank_operations`, as v_schedule's docstring lists them; rank
r runs stages r and 2 pp - 1 - r, _utils.py `generate_rank_to_stage_mapping(style="v")`), for
pp 2 and pp 4 at small m; a brute reproduction of those rules in torch's own terms (stage indices,
one counter per (stage, action type), a FIFO of pending weight actions) for more pp and m; and
the drawn SVG's blocks, read back per rank in x order and against their dependencies.
F forward, I input-gradient backward, W weight-gradient backward, B whole backward; "i.c" is
micro-batch i of the rank's chunk c (chunk 0 its stage r, chunk 1 its stage 2 pp - 1 - r);
[x y] one overlapped OVERLAP_F_B action (DualPipeV).
"""

from __future__ import annotations

import re
import tomllib
import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest
from plan_text import titan_job

from planner.cli import timeline
from planner.inputs.plan import parse_plan
from planner.model import cost
from planner.model.v_schedule import rank_order, simulate_v
from planner.search.rules import check_plan

SVG = "{http://www.w3.org/2000/svg}"


def text(steps: list) -> str:
    return " ".join(
        f"[{' '.join(f'{a.kind}{a.micro}.{a.chunk}' for a in s)}]"
        if len(s) > 1
        else f"{s[0].kind}{s[0].micro}.{s[0].chunk}"
        for s in steps
    )


# ZB-V, pp 2, m 4 (n = max(2 pp - 1, m) = 4). Rank 0: warm-up 2 (2 - 0) - 1 = 3 forwards of
# chunk 0; no (F1, F0) pairs; 2 - 0 = 2 times F, I, W of chunk 1. Steady while chunk 1 has run
# fewer forwards (2) than chunk 0 (3): F3.0 (3 < n), I0.0 W0.0, F2.1 I2.1 W2.1; then (3 < 4) no
# F of chunk 0 (4 = n), I1.0 W1.0, F3.1 I3.1 W3.1. Cool-down: no (I, I) pairs; 2 times (I of
# chunk 0, the W of its oldest backward without one): I2.0 W2.0 I3.0 W3.0.
ZBV_PP2 = [
    "F0.0 F1.0 F2.0 F0.1 I0.1 W0.1 F1.1 I1.1 W1.1 F3.0 I0.0 W0.0 F2.1 I2.1 W2.1 I1.0 W1.0 "
    "F3.1 I3.1 W3.1 I2.0 W2.0 I3.0 W3.0",
    # rank 1: warm-up 1 forward of chunk 0, one (F0.1, F1.0), one (F1.1 I0.1 W0.1); steady twice
    # (F, I, W of chunk 0, then of chunk 1); cool-down one (I2.0, I3.1), one (I3.0, W2.0), then
    # chunk 1's W left (W3.1), then chunk 0's (W3.0)
    "F0.0 F0.1 F1.0 F1.1 I0.1 W0.1 F2.0 I0.0 W0.0 F2.1 I1.1 W1.1 F3.0 I1.0 W1.0 F3.1 I2.1 W2.1 "
    "I2.0 I3.1 I3.0 W2.0 W3.1 W3.0",
]
# DualPipeV, pp 2, m 4. Rank 0: step 1, 2 (2 - 0 - 1) = 2 forwards of chunk 0; step 2, once
# (F chunk 0, F chunk 1); step 3, once (I chunk 1, its W, F chunk 1); step 4, 4 - 4 + 0 + 1 = 1
# time ([F chunk 0, B chunk 1], [F chunk 1, B chunk 0]); step 5 once (B chunk 1, [F chunk 1,
# B chunk 0]); step 6 once: i = 0 = (0 + 1) // 2 on an even rank: chunk 1 whole (B3.1), then
# chunk 0 split (I2.0); step 7 once (W2.0 pending, I3.0); step 8 once (W3.0).
DPV_PP2 = [
    "F0.0 F1.0 F2.0 F0.1 I0.1 W0.1 F1.1 [F3.0 B1.1] [F2.1 B0.0] B2.1 [F3.1 B1.0] B3.1 I2.0 "
    "W2.0 I3.0 W3.0",
    # rank 1 (the last): step 1 none; step 2 twice; step 3 none; step 4 twice, the first apart
    # (F2.0, then B0.1); step 5 none; step 6 twice: i = 0 whole (B2.1, B2.0), i = 1 = 2 // 2 on an
    # odd rank split from chunk 1 (I3.1, I3.0); step 7 none; step 8 the two pending W
    "F0.0 F0.1 F1.0 F1.1 F2.0 B0.1 [F2.1 B0.0] [F3.0 B1.1] [F3.1 B1.0] B2.1 B2.0 I3.1 I3.0 "
    "W3.1 W3.0",
]


def test_pp2_orders_by_hand() -> None:
    for r in (0, 1):
        assert text(rank_order("ZBVZeroBubble", 2, 4, r)) == ZBV_PP2[r]
        assert text(rank_order("DualPipeV", 2, 4, r)) == DPV_PP2[r]


def test_pp4_orders_by_hand() -> None:
    # ZB-V, pp 4, m 7 = n. Rank 3: warm-up 1 forward, 3 (F chunk 1, F chunk 0), 1 (F I W of
    # chunk 1); steady 3 times; cool-down 3 (I chunk 0, I chunk 1), 1 (I6.0, W3.0), then chunk
    # 1's W 4-6, chunk 0's 4-6.
    assert text(rank_order("ZBVZeroBubble", 4, 7, 3)) == (
        "F0.0 F0.1 F1.0 F1.1 F2.0 F2.1 F3.0 F3.1 I0.1 W0.1 F4.0 I0.0 W0.0 F4.1 I1.1 W1.1 F5.0 "
        "I1.0 W1.0 F5.1 I2.1 W2.1 F6.0 I2.0 W2.0 F6.1 I3.1 W3.1 I3.0 I4.1 I4.0 I5.1 I5.0 I6.1 "
        "I6.0 W3.0 W4.1 W5.1 W6.1 W4.0 W5.0 W6.0"
    )
    # rank 0: 7 forwards of chunk 0, 4 (F I W of chunk 1), steady 3 times without a forward of
    # chunk 0 (all 7 run), cool-down 4 (I, W of chunk 0)
    assert text(rank_order("ZBVZeroBubble", 4, 7, 0)) == (
        "F0.0 F1.0 F2.0 F3.0 F4.0 F5.0 F6.0 F0.1 I0.1 W0.1 F1.1 I1.1 W1.1 F2.1 I2.1 W2.1 F3.1 "
        "I3.1 W3.1 I0.0 W0.0 F4.1 I4.1 W4.1 I1.0 W1.0 F5.1 I5.1 W5.1 I2.0 W2.0 F6.1 I6.1 W6.1 "
        "I3.0 W3.0 I4.0 W4.0 I5.0 W5.0 I6.0 W6.0"
    )
    # DualPipeV, pp 4, m 8, rank 1: step 1 4 forwards; step 2 twice; step 3 twice (I, W, F of
    # chunk 1); step 4 8 - 8 + 2 = 2 times; step 5 twice; step 6 twice, split from i = 1 on (an
    # odd rank: chunk 1 first); step 7 twice (pending W, I of chunk 0); step 8 two W
    assert text(rank_order("DualPipeV", 4, 8, 1)) == (
        "F0.0 F1.0 F2.0 F3.0 F4.0 F0.1 F5.0 F1.1 I0.1 W0.1 F2.1 I1.1 W1.1 F3.1 [F6.0 B2.1] "
        "[F4.1 B0.0] [F7.0 B3.1] [F5.1 B1.0] B4.1 [F6.1 B2.0] B5.1 [F7.1 B3.0] B6.1 B4.0 I7.1 "
        "I5.0 W7.1 I6.0 W5.0 I7.0 W6.0 W7.0"
    )


def brute_zbv(pp: int, m: int, rank: int) -> list[str]:
    """ScheduleZBVZeroBubble's rules in torch's terms: actions "<stage><type><micro>"."""
    n = max(2 * pp - 1, m)
    s0, s1 = rank, 2 * pp - 1 - rank
    cnt = {"f0": 0, "f1": 0, "b0": 0, "b1": 0}
    ops: list[str] = []

    def act(st: int, t: str, key: str, bump: bool = True) -> None:
        ops.append(f"{st}{t}{cnt[key]}")
        cnt[key] += bump

    for _ in range(2 * (pp - rank) - 1):
        act(s0, "F", "f0")
    for _ in range(rank):
        act(s1, "F", "f1")
        act(s0, "F", "f0")
    for _ in range(pp - rank):
        act(s1, "F", "f1")
        act(s1, "I", "b1", False)
        act(s1, "W", "b1")
    while cnt["f1"] < cnt["f0"] or cnt["f0"] < n:
        if cnt["f0"] < n:
            act(s0, "F", "f0")
        act(s0, "I", "b0", False)
        act(s0, "W", "b0")
        act(s1, "F", "f1")
        act(s1, "I", "b1", False)
        act(s1, "W", "b1")
    cnt["w0"], cnt["w1"] = cnt["b0"], cnt["b1"]
    for _ in range(rank):
        act(s0, "I", "b0")
        act(s1, "I", "b1")
    for _ in range(pp - rank):
        act(s0, "I", "b0")
        act(s0, "W", "w0")
    while cnt["w1"] < cnt["b1"]:
        act(s1, "W", "w1")
    while cnt["w0"] < cnt["b0"]:
        act(s0, "W", "w0")
    return [o for o in ops if int(re.findall(r"\d+$", o)[0]) < m]


def brute_dualpipev(pp: int, m: int, rank: int) -> list[str]:
    """ScheduleDualPipeV's rules in torch's terms; an OVERLAP_F_B as "(<F>;<B>)"."""
    s0, s1 = rank, 2 * pp - 1 - rank
    counters: dict[tuple[int, str], int] = {}
    queue: list[tuple[int, int]] = []
    ops: list[str] = []

    def add(st: int, t: str) -> str:
        key = (st, "I" if t == "B" else t)
        mb = counters.get(key, 0)
        if t == "B":
            counters[(st, "I")] = counters.get((st, "I"), 0) + 1
            counters[(st, "W")] = counters.get((st, "W"), 0) + 1
        else:
            if t == "I":
                queue.append((st, mb))
            counters[key] = mb + 1
        return f"{st}{t}{mb}"

    def pending() -> None:
        if queue:
            st, mb = queue.pop(0)
            ops.append(f"{st}W{mb}")

    def overlap(fs: int, bs: int) -> None:
        f = add(fs, "F")
        ops.append(f"({f};{add(bs, 'B')})")

    for _ in range((pp - rank - 1) * 2):
        ops.append(add(s0, "F"))
    for _ in range(rank + 1):
        ops.append(add(s0, "F"))
        ops.append(add(s1, "F"))
    for _ in range(pp - rank - 1):
        ops.append(add(s1, "I"))
        pending()
        ops.append(add(s1, "F"))
    for i in range(m - 2 * pp + rank + 1):
        if i == 0 and rank == pp - 1:
            ops.append(add(s0, "F"))
            ops.append(add(s1, "B"))
        else:
            overlap(s0, s1)
        overlap(s1, s0)
    for _ in range(pp - rank - 1):
        ops.append(add(s1, "B"))
        overlap(s1, s0)
    zb = False
    for i in range(rank + 1):
        if i == (rank + 1) // 2 and rank % 2 == 1:
            zb = True
        ops.append(add(s1, "I" if zb else "B"))
        if i == (rank + 1) // 2 and rank % 2 == 0:
            zb = True
        ops.append(add(s0, "I" if zb else "B"))
    for _ in range(pp - rank - 1):
        pending()
        ops.append(add(s0, "I" if zb else "B"))
    for _ in range(rank + 1):
        pending()
    return ops


def torch_terms(pp: int, rank: int, steps: list) -> list[str]:
    def one(a) -> str:
        st = rank if a.chunk == 0 else 2 * pp - 1 - rank
        return f"{st}{a.kind}{a.micro}"

    return [f"({one(s[0])};{one(s[1])})" if len(s) > 1 else one(s[0]) for s in steps]


@pytest.mark.parametrize(("pp", "m"), [(2, 3), (2, 4), (2, 7), (3, 6), (4, 7), (4, 8), (4, 13)])
def test_orders_against_a_brute_reproduction(pp: int, m: int) -> None:
    for r in range(pp):
        assert torch_terms(pp, r, rank_order("ZBVZeroBubble", pp, m, r)) == brute_zbv(pp, m, r)
        if m >= 2 * pp:
            got = torch_terms(pp, r, rank_order("DualPipeV", pp, m, r))
            assert got == brute_dualpipev(pp, m, r)


def plan(schedule: str, pp: int, gbs: int):
    """Llama 3.1 8B on 8 H100 under torchtitan, pp x 2 stages per rank, gbs sequences: m =
    gbs / (8 / pp) micro-batches."""
    text_ = (
        titan_job(gbs=gbs)
        + f'[parallel]\npp = {pp}\nvpp = 2\nzero_stage = 3\nrecompute = "full"\n'
        + f'[torchtitan]\npipeline_schedule = "{schedule}"\n'
    )
    return check_plan(parse_plan(tomllib.loads(text_)))


KIND = {
    "forward": "F",
    "backward (input gradients)": "I",
    "weight gradients": "W",
    "backward": "B",
}
TITLE = re.compile(
    r"^(.+?) of micro-batch (\d+), chunk (\d) \(stage (\d+)\)(.*): ([\d.]+)-([\d.]+) s$"
)


def drawn(schedule: str, pp: int, gbs: int) -> tuple[str, list[list[tuple]]]:
    """The SVG's texts and, per rank row (top to bottom), its blocks in x order: (kind, micro,
    chunk, stage, overlapped, start, end)."""
    p = plan(schedule, pp, gbs)
    job, lay = p.job, p.require_layout()
    svg = timeline.pipeline_svg(job, lay, cost.estimate(job, lay))
    rows: dict[float, list[tuple[float, tuple]]] = {}
    for r in ET.fromstring(svg).iter(f"{SVG}rect"):
        hit = TITLE.match(r.findtext(f"{SVG}title") or "")
        if hit:
            k, i, c, s, rest, t0, t1 = hit.groups()
            block = (KIND[k], int(i), int(c), int(s), bool(rest), float(t0), float(t1))
            rows.setdefault(float(r.get("y", 0)), []).append((float(r.get("x", 0)), block))
    texts = " | ".join(t.text or "" for t in ET.fromstring(svg).iter(f"{SVG}text"))
    return texts, [[b for _, b in sorted(v)] for _, v in sorted(rows.items())]


def flat(order: str) -> list[str]:
    return order.replace("[", "").replace("]", "").split()


@pytest.mark.parametrize(("schedule", "hand"), [("ZBVZeroBubble", ZBV_PP2), ("DualPipeV", DPV_PP2)])
def test_the_drawn_order_is_torchs_pp2(schedule: str, hand: list[str]) -> None:
    # 16 sequences on 8 GPUs at pp 2: dp 4, m = 4 micro-batches, all drawn
    svg, rows = drawn(schedule, 2, 16)
    assert f"one step's {schedule} schedule drawn with all 4 micro-batches" in svg
    assert len(rows) == 2
    for r, row in enumerate(rows):
        assert [f"{k}{i}.{c}" for k, i, c, *_ in row] == flat(hand[r])
        # the stage each chunk runs: r and 2 pp - 1 - r
        assert all(s == (r if c == 0 else 3 - r) for _, _, c, s, *_ in row)
    if schedule == "DualPipeV":  # the overlapped actions are marked as such
        assert sum(b[4] for b in rows[1]) == 2 * 3  # three pairs on rank 1, two blocks each


@pytest.mark.parametrize("schedule", ["ZBVZeroBubble", "DualPipeV"])
def test_the_drawn_order_is_torchs_pp4(schedule: str) -> None:
    # 16 sequences on 8 GPUs at pp 4: dp 2, m = 8 micro-batches, all drawn
    svg, rows = drawn(schedule, 4, 16)
    assert "all 8 micro-batches" in svg and "stages r and 2pp-1-r" in svg
    for r, row in enumerate(rows):
        want = torch_terms(4, r, rank_order(schedule, 4, 8, r))
        brute = (brute_zbv if schedule == "ZBVZeroBubble" else brute_dualpipev)(4, 8, r)
        assert want == brute
        got = [f"{s}{k}{i}" for k, i, _, s, *_ in row]
        assert got == [x for w in want for x in w.strip("()").split(";")]
    if schedule == "DualPipeV":
        assert [f"{k}{i}.{c}" for k, i, c, *_ in rows[1]] == flat(
            "F0.0 F1.0 F2.0 F3.0 F4.0 F0.1 F5.0 F1.1 I0.1 W0.1 F2.1 I1.1 W1.1 F3.1 F6.0 B2.1 "
            "F4.1 B0.0 F7.0 B3.1 F5.1 B1.0 B4.1 F6.1 B2.0 B5.1 F7.1 B3.0 B6.1 B4.0 I7.1 I5.0 "
            "W7.1 I6.0 W5.0 I7.0 W6.0 W7.0"
        )
    # every block starts after what it needs: a forward after the previous stage's, an input
    # backward after the next stage's (the last stage after its own forward), a W after its I
    end = {}
    for row in rows:
        for k, i, _, s, _, _, t1 in row:
            end[("F" if k == "F" else "W" if k == "W" else "B", s, i)] = t1
    for row in rows:
        for k, i, _, s, _, t0, _ in row:
            need = (
                ("F", s - 1, i)
                if k == "F"
                else ("B", s, i)
                if k == "W"
                else ("F", s, i)
                if s == 7
                else ("B", s + 1, i)
            )
            if k != "F" or s > 0:
                assert t0 >= end[need] - 1e-4
        starts = [b[5] for b in row]
        assert starts == sorted(starts)


def test_zbv_idles_at_equal_f_i_w() -> None:
    """With F = I = W a chunk (1 s each) ZB-V's order leaves the first rank idle only at the
    end: each rank runs its 8 x 2 x 3 = 48 s of work; the step ends at 48 + (pp - 1) = 51 s
    (rank 3 starts 3 forwards late and never waits after: the V's zero bubble but for that
    skew)."""
    ops = simulate_v("ZBVZeroBubble", 4, 8, [2.0] * 4, [4.0] * 4, [2.0] * 4)
    assert all(sum(o.end - o.start for o in r) == pytest.approx(48.0) for r in ops)
    assert max(o.end for r in ops for o in r) == pytest.approx(51.0)
    assert ops[3][0].start == pytest.approx(3.0)


def test_other_torchtitan_schedules_are_still_refused() -> None:
    p = plan("ZBVZeroBubble", 2, 16)
    titan = p.job.titan.model_copy(update={"pipeline_schedule": "LoopedBFS"})
    job = replace(p.job, torchtitan=titan)
    with pytest.raises(Exception, match="torchtitan's LoopedBFS"):
        timeline.drawable(job, p.require_layout())
