"""Pipeline messages a Megatron rank holds at its activation peak in the interleaved schedule
without the p2p overlap (`Layout.overlap_p2p_comm` false, --no-overlap-p2p-communication) and
under the EP all-to-all overlap's merged forward and backward (early_receives.held_counts'
`overlap` and `merged`, in_flight.schedule_peak, stage_activations).

Oracle: a replay of Megatron-LM d98e8a64 megatron/core/pipeline_parallel/schedules.py written
from the source by hand, as tests/model/test_p2p_held.py replays the overlapped schedule (every
tensor allocation and release of one rank in order; the peak over every moment of the kept
activations plus one message per live pipeline tensor):
- without the overlap: the warm-up's exchanges block (`send_forward_recv_forward`, :1655), the
  last one batched with the first gradient's receive while the output is alive (:1633-1651),
  the output freed after it (:1660); each steady iteration runs its forward and its backward
  (:1900-1906), the loop then drops the previous input gradient (rebinding `input_tensor_grad`),
  the batched exchange allocates the next input and gradient while the output and the input
  gradient are alive (:1933-1942), the output freed after it (:1943); cool-down as with the
  overlap (:2053-2058).
- the EP overlap (combined_1f1b.py:138-512, common model_chunk_schedule_plan.py:500-610): one
  warm-up forward more (:966-970); each steady iteration pops the gradient it takes
  (`backward_step_helper_preprocess`, held by combined_forward_backward_step until it
  returns), builds its forward's chunk while releasing its backward's (the state at its end:
  both done), and, with the p2p overlap, posts the forward's send and next receive and the
  backward's inside it (`post_forward`, `post_backward`, :596-607); the output is freed at the
  next `pp_pre_forward` (:1768); without the p2p overlap the batched exchange follows as above.
The chunks keep at least three messages each, as there (Korthikanti et al. 2022: a layer keeps
34 s b h bytes, a message is 2 s b h).
"""

from __future__ import annotations

import random

from p2p_replay import replay

from planner.inputs.layout import Layout
from planner.model.early_receives import held_counts, transient
from planner.model.in_flight import schedule_peak


def _draws(seed: int, count: int, merged: bool, overlap: bool):  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    drawn = 0
    while drawn < count:
        pp = rng.randint(2 if overlap else 3, 5)  # without the overlap pp > 2 (arguments.py)
        vpp = rng.randint(2, 4)
        m = rng.randint(pp, 5 * pp)
        g = rng.randint(pp, m) if rng.random() < 0.5 else pp
        if m % g and m % g < pp:  # the rule (schedules.py:1160-1168)
            continue
        rank = rng.randrange(pp)
        msg = float(rng.randint(1, 4))
        kept = tuple(msg * rng.randint(3, 9) for _ in range(vpp))
        lay = Layout(
            pp=pp,
            vpp=vpp,
            microbatch_group_size_per_vp_stage=g,
            overlap_p2p_comm=overlap,
            ep=2 if merged else 1,
            ep_comm_overlap=merged,
        )
        drawn += 1
        yield lay, kept, rank, m, g, msg


def _model(lay: Layout, kept: tuple[float, ...], rank: int, m: int, g: int, msg: float) -> float:
    got = schedule_peak(kept, lay, rank, m, message=msg, held_messages=True)
    return got + msg * transient(lay.pp, lay.vpp, rank, m, g)


def test_without_the_overlap_the_peak_is_the_replayed_peak() -> None:
    for lay, kept, rank, m, g, msg in _draws(11, 600, merged=False, overlap=False):
        want = replay(kept, lay.pp, lay.vpp, rank, m, g, msg, overlap=False, merged=False)
        assert _model(lay, kept, rank, m, g, msg) == want, (lay.pp, lay.vpp, m, g, rank)


def test_the_merged_schedule_peak_is_the_replayed_peak() -> None:
    for lay, kept, rank, m, g, msg in _draws(13, 600, merged=True, overlap=True):
        want = replay(kept, lay.pp, lay.vpp, rank, m, g, msg, overlap=True, merged=True)
        assert _model(lay, kept, rank, m, g, msg) == want, (lay.pp, lay.vpp, m, g, rank)


def test_merged_without_the_overlap_is_the_replay_or_one_message_above() -> None:
    # exact but on rank 0 at g > pp, where the count takes every receive posted by the
    # exchange for the merged op's end too (`held_counts`): at most one message above
    for lay, kept, rank, m, g, msg in _draws(17, 600, merged=True, overlap=False):
        want = replay(kept, lay.pp, lay.vpp, rank, m, g, msg, overlap=False, merged=True)
        got = _model(lay, kept, rank, m, g, msg)
        exact = rank not in (0, lay.pp - 1) or g == lay.pp
        assert want <= got <= want + (0 if exact else msg), (lay.pp, lay.vpp, m, g, rank)


def test_the_replay_agrees_with_the_overlapped_oracle() -> None:
    # this replay's overlapped, unmerged path is tests/model/test_p2p_held.py's schedule: the
    # model (checked there against that replay) and it agree
    for lay, kept, rank, m, g, msg in _draws(19, 300, merged=False, overlap=True):
        want = replay(kept, lay.pp, lay.vpp, rank, m, g, msg, overlap=True, merged=False)
        assert _model(lay, kept, rank, m, g, msg) == want, (lay.pp, lay.vpp, m, g, rank)


def test_counts_by_hand() -> None:
    # pp 4 vpp 2 m 8 g 4, rank 1: with the overlap 4 a steady peak (next input, output,
    # gradient, last input gradient); without it the next input is not in yet: 3
    on, off = held_counts(4, 2, 1, 8, 4), held_counts(4, 2, 1, 8, 4, overlap=False)
    assert max(on) == 4 and max(off) == 3
    assert [a - b for a, b in zip(on, off, strict=True)] == [1] * (len(on) - 1) + [0]
    # merged (EP overlap): the gradient the merged backward took and the input gradient before
    # it are still held where post_backward posts the next: 6 from the third iteration on
    merged = held_counts(4, 2, 1, 8, 4, merged=True)
    assert merged[2:] == (6,) * (len(merged) - 3) + (5,)
