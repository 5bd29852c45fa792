"""planner.search.solver.balanced_split: Megatron's uneven pipeline split by CP-SAT.

Oracles: a brute-force enumeration of every split of Megatron's (first, middle..., last) form,
the Llama 3 paper's 405B split (7, 8 x 14, 7), and hand-checked small cases in comments."""

from __future__ import annotations

import itertools

import pytest

from planner.inputs import catalog
from planner.inputs.plan import Job, parse_plan
from planner.search import space, splits
from planner.search.solver import balanced_split


def slowest(split: tuple[int, ...], first_extra: float, last_extra: float) -> float:
    work = list(map(float, split))
    work[0] += first_extra
    work[-1] += last_extra
    return max(work)


def best_by_enumeration(
    num_layers: int, pp: int, vpp: int, first_extra: float, last_extra: float
) -> float | None:
    """The smallest slowest-rank work over every (first, middle, last) in Megatron's form."""
    best = None
    for f, k in itertools.product(range(vpp, num_layers + 1, vpp), repeat=2):
        if pp == 2:
            k = 0
        rest = num_layers - f - (pp - 2) * k
        if rest < vpp or rest % vpp:
            continue
        split = (f,) + (k,) * (pp - 2) + (rest,)
        w = slowest(split, first_extra, last_extra)
        best = w if best is None else min(best, w)
    return best


def test_llama3_405b_published_split() -> None:
    """Llama 3 405B: 126 layers on 16 pipeline ranks, one fewer layer on the first and last rank
    (Llama 3 paper, section 3.3.2), with the extra work the output layer gives the last rank."""
    arch = catalog.get_model("llama3.1-405b")
    extra = splits.last_stage_extra(arch)
    assert 0.3 < extra < 1.0  # a 128k x 16k output layer vs a 16k-wide decoder layer
    split = balanced_split(126, 16, 1, 0.0, extra)
    assert split == (7,) + (8,) * 14 + (7,)
    # and the search offers it for pp 16 (126 is not a multiple of 16: no even split)
    job = search_job("llama3.1-405b", 16384)
    assert space.splits(job, space.Space(), 16, 1) == [split]


def search_job(model: str, num_gpus: int) -> Job:
    doc = {
        "model": {"name": model},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": num_gpus},
        "training": {"seq_length": 8192, "global_batch_size": 2048},
    }
    return parse_plan(doc).job


@pytest.mark.parametrize(
    "args, expected",
    [
        ((10, 2, 1, 0.0, 0.0), (5, 5)),
        ((10, 2, 1, 0.0, 2.0), (6, 4)),  # the last rank's 2 extra layers: 6 vs 4 + 2
        ((10, 2, 1, 2.0, 0.0), (4, 6)),
        ((9, 3, 1, 0.0, 0.0), (3, 3, 3)),
        ((11, 3, 1, 0.0, 1.0), (4, 4, 3)),
        ((12, 3, 2, 0.0, 1.5), (4, 4, 4)),  # 2-layer chunks: (4, 4, 2) + 1.5 would be no better
        ((16, 3, 2, 0.0, 3.0), (6, 6, 4)),
        ((32, 4, 1, 0.0, 2.4), (8, 9, 9, 6)),  # 9 on the middle ranks; (9, 9, 9, 5) ties
        ((61, 16, 1, 0.0, 4.3), (4,) * 15 + (1,)),  # DeepSeek-V3-like: MTP + output on the last
    ],
)
def test_hand_checked_splits(
    args: tuple[int, int, int, float, float], expected: tuple[int, ...]
) -> None:
    split = balanced_split(*args)
    assert split is not None
    L, pp, _, fe, le = args
    assert sum(split) == L and len(split) == pp
    assert slowest(split, fe, le) == slowest(expected, fe, le)
    assert slowest(split, fe, le) == best_by_enumeration(*args)
    if (L, pp) != (32, 4):  # (32, 4) has ties; the others are unique optima
        assert split == expected


@pytest.mark.parametrize(
    "args",
    [
        (3, 4, 1, 0.0, 0.0),  # more ranks than layers
        (10, 2, 3, 0.0, 0.0),  # layers not a multiple of vpp
        (8, 3, 4, 0.0, 0.0),  # 2 chunks of 4 for 3 ranks
        (10, 1, 1, 0.0, 0.0),  # no pipeline: no split
    ],
)
def test_infeasible_returns_none(args: tuple[int, int, int, float, float]) -> None:
    assert balanced_split(*args) is None


@pytest.mark.parametrize("num_layers", [12, 24, 26, 30, 61])
@pytest.mark.parametrize("pp", [2, 3, 4, 6])
@pytest.mark.parametrize("vpp", [1, 2])
def test_split_is_optimal_and_well_formed(num_layers: int, pp: int, vpp: int) -> None:
    extra = 1.37
    split = balanced_split(num_layers, pp, vpp, 0.0, extra)
    best = best_by_enumeration(num_layers, pp, vpp, 0.0, extra)
    if best is None:
        assert split is None
        return
    assert split is not None
    assert sum(split) == num_layers and len(split) == pp
    assert all(n >= vpp and n % vpp == 0 for n in split)
    assert len(set(split[1:-1])) <= 1  # Megatron's form: the middle ranks are equal
    assert slowest(split, 0.0, extra) == pytest.approx(best)
