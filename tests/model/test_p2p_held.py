"""Pipeline messages a Megatron rank holds at its activation peak besides the early receives
(planner.model.early_receives.held_counts / transient, in_flight.schedule_peak's message,
stage_activations).

Oracle: a replay of Megatron-LM d98e8a64 megatron/core/pipeline_parallel/schedules.py written
from the source by hand, every tensor allocation and release of one rank in order, the maximum
over every moment of the activations kept plus one message per live pipeline tensor:
- 1F1B (forward_backward_pipelining_without_interleaving, blocking exchanges, no overlap:
  arguments.py:1010-1012): warm-up min(pp - r - 1, m) (:2277-2278), each warm-up forward's
  input received before it (:2344), its output sent and freed (:2362-2368); steady
  `send_forward_recv_backward` (:2416) returns the new gradient while the output and the last
  gradient are alive, the output freed after (:2423), `input_tensor_grad` (:2436) replaced only
  by the next backward, the next input received after the backward (:2446) while the popped
  input is still referenced; cool-down `recv_backward` (:2466).
- Interleaved 1F1B with --overlap-p2p-communication: the table (:989-1003); receives by
  `recv_tensor_from_previous_stage` (:1285-1332), none at the last forward (:1594-1595,
  :1788-1789, :1993-1994); warm-up outputs freed right after their blocking exchange
  (:1655-1660), the warm-up's last iteration posting the first gradient (:1697-1728); steady
  `pp_pre_forward` frees the
  previous output (:1768), `pp_post_forward` posts the send and the next receive (:1771-1826),
  the backward frees its gradient, `pp_post_backward` posts the next gradient (:1847-1888) and
  the loop replaces `input_tensor_grad` after it (:1890); cool-down blocking exchanges
  (:2053-2058), all-in-warm-up `recv_backward` (:1962-1970).
The chunks keep at least three messages each (a chunk micro-batch's activations are many
messages: 34 s b h bytes a layer against 2 s b h a message, Korthikanti et al. 2022).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from p2p_replay import Rank, replay

from planner.inputs.layout import Layout
from planner.inputs.plan import load_plan
from planner.model.early_receives import held_counts, transient
from planner.model.in_flight import schedule_peak
from planner.model.stage_activations import per_layer, shard, stage_activations
from planner.search.rules import check_plan


def replay_1f1b(k: float, pp: int, r: int, m: int, msg: float) -> float:
    st = Rank(msg)
    first, last = r == 0, r == pp - 1
    warm = min(pp - r - 1, m)

    def forward(i: int) -> None:
        st.live.discard(("X", i))  # the input becomes the first layer's kept input
        st.acts += k
        st.snap()

    for i in range(warm):
        if not first:
            st.add(("X", i))
        forward(i)
        if not last:
            st.add(("O", i))
            st.drop(("O", i))
    if m > warm and not first:
        st.add(("X", warm))
    steady = m - warm
    for j in range(steady):
        f = warm + j
        forward(f)
        if not last:
            st.add(("O", f))
            st.add(("G", j))
            st.drop(("G", j - 1))
            st.drop(("O", f))
        st.acts -= k  # the oldest micro-batch's backward
        if not first:
            st.live.add(("Xold", j))  # popped input, referenced until the next receive
            st.add(("IG", j))
        st.drop(("IG", j - 1))
        if j < steady - 1 and not first:
            st.add(("X", f + 1))
        st.drop(("Xold", j))
    for i in range(warm):
        b = steady + i
        if not last:
            st.add(("G", b))
        st.drop(("G", b - 1))
        st.acts -= k
        if not first:
            st.add(("IG", b))
        st.drop(("IG", b - 1))
    return st.peak


def replay_interleaved(
    kept: tuple[float, ...], pp: int, vpp: int, r: int, m: int, g: int, msg: float
) -> float:
    """The interleaved schedule with the p2p overlap, as Megatron runs it by default
    (`p2p_replay.replay`)."""
    return replay(kept, pp, vpp, r, m, g, msg, overlap=True, merged=False)


def test_1f1b_peak_is_the_replayed_peak() -> None:
    rng = random.Random(3)
    for _ in range(400):
        pp = rng.randint(2, 8)
        m = rng.randint(1, 3 * pp)
        rank = rng.randrange(pp)
        msg = float(rng.randint(1, 4))
        k = msg * rng.randint(3, 9)
        lay = Layout(pp=pp)
        got = schedule_peak((k,), lay, rank, m, message=msg, held_messages=True)
        got += msg * transient(pp, 1, rank, m, pp)
        assert got == replay_1f1b(k, pp, rank, m, msg), (pp, m, rank)


def test_interleaved_peak_is_the_replayed_peak() -> None:
    rng = random.Random(7)
    checked = 0
    while checked < 600:
        pp = rng.randint(2, 5)
        vpp = rng.randint(2, 4)
        m = rng.randint(pp, 5 * pp)
        g = rng.randint(pp, m)
        if m % g and m % g < pp:  # the rule (schedules.py:1160-1168)
            continue
        rank = rng.randrange(pp)
        msg = float(rng.randint(1, 4))
        kept = tuple(msg * rng.randint(3, 9) for _ in range(vpp))
        lay = Layout(pp=pp, vpp=vpp, microbatch_group_size_per_vp_stage=g)
        got = schedule_peak(kept, lay, rank, m, message=msg, held_messages=True)
        got += msg * transient(pp, vpp, rank, m, g)
        assert got == replay_interleaved(kept, pp, vpp, rank, m, g, msg), (pp, vpp, m, g, rank)
        checked += 1


def test_counts_by_hand() -> None:
    # 1F1B pp 4 m 8: a middle rank holds the last output gradient and input gradient (2), its
    # exchange two more (the output being sent, the new gradient); rank 0 one and two; the last
    # rank its last input gradient only
    assert max(held_counts(4, 1, 1, 8, 4)) == 2 and transient(4, 1, 1, 8, 4) == 2
    assert max(held_counts(4, 1, 0, 8, 4)) == 1 and transient(4, 1, 0, 8, 4) == 2
    assert max(held_counts(4, 1, 3, 8, 4)) == 1 and transient(4, 1, 3, 8, 4) == 0
    # interleaved pp 4 vpp 2 m 8 g 4, rank 1: the next input, the output sent, the gradient
    # for the next backward, the last input gradient; the first steady iteration has no input
    # gradient yet, the last no next input
    counts = held_counts(4, 2, 1, 8, 4)
    assert len(counts) == 16 - (2 * 2 + 4) and counts[0] == 3 and counts[-1] == 3
    assert set(counts[1:-1]) == {4}


PLAN = """
[model]
name = "llama3.1-8b"
[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 32
[training]
seq_length = 4096
global_batch_size = 64
precision = "bf16"
[parallel]
tp = 2
pp = 4
dp = 4
micro_batch_size = 1
zero_stage = 1
sequence_parallel = true
"""


def test_an_8b_1f1b_plan_holds_its_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one message: s x b x h x 2 B / tp = 4096 x 1 x 4096 x 2 / 2 = 16 MiB (SP, cp 1, bf16);
    # m = 64 / 4 = 16: rank 1 holds 2 at its peak and its exchange 2 more, unless the backward's
    # working set is larger (then 2 only); the last rank 1 (its loss's working set is larger)
    path = tmp_path / "plan.toml"
    path.write_text(PLAN)
    plan = check_plan(load_plan(path))
    job, lay = plan.job, plan.require_layout()
    sh = shard(job, lay)
    per = per_layer(job.arch, sh)
    ranks = lay.chunk_layers(job.arch.num_layers)
    now = [stage_activations(job, lay, r, ranks[r], sh, per) for r in (1, 3)]
    monkeypatch.setattr("planner.model.in_flight.held_counts", lambda *_: ())
    monkeypatch.setattr("planner.model.stage_activations.transient", lambda *_: 0)
    monkeypatch.setattr("planner.model.stage_activations._PEAKS", {})
    before = [stage_activations(job, lay, r, ranks[r], sh, per) for r in (1, 3)]
    mib = 4096 * 4096 * 2 / 2
    assert now[0] - before[0] in (2 * mib, 4 * mib)
    assert now[1] - before[1] == 1 * mib
