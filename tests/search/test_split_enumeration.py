"""planner.search.solver.balanced_split, solved by enumeration: the least slowest-rank work of
every (first, middle..., last) split, and among the splits that reach it the lexicographically
smallest (a defined answer where several tie).

Oracle: every (f, k) enumerated outright, scored by the same integer work (thousandths of a
layer), over many layer counts, pipeline and interleaving degrees and extras (the extras of the
catalog's models among them)."""

from __future__ import annotations

import itertools

import pytest

from planner.inputs import catalog
from planner.search import splits
from planner.search.solver import SCALE, balanced_split


def every_split(
    num_layers: int, pp: int, vpp: int, first_extra: float, last_extra: float
) -> list[tuple[int, tuple[int, ...]]]:
    """(slowest rank's work, split) of every split of Megatron's form, the work as the solver's
    model counts it: thousandths of a layer, at least 0."""
    if pp < 2 or num_layers % vpp:
        return []
    chunks = num_layers // vpp
    e_first, e_last = round(first_extra * SCALE), round(last_extra * SCALE)
    out = []
    for f, k in itertools.product(range(1, chunks + 1), range(0 if pp == 2 else 1, chunks + 1)):
        if pp == 2 and k:
            continue
        last = chunks - f - (pp - 2) * k
        if last < 1:
            continue
        work = max(f * vpp * SCALE + e_first, last * vpp * SCALE + e_last, k * vpp * SCALE, 0)
        out.append((work, (f * vpp,) + (k * vpp,) * (pp - 2) + (last * vpp,)))
    return out


def expected(*args: float) -> tuple[int, ...] | None:
    splits = every_split(*args)  # type: ignore[arg-type]
    if not splits:
        return None
    least = min(w for w, _ in splits)
    if least > (args[0] + 10) * SCALE * 2:
        return None
    return min(s for w, s in splits if w == least)


EXTRAS = sorted(
    {0.0, 0.341, 0.659, 1.228, 1.37, 2.409, 4.342}
    | {splits.last_stage_extra(catalog.get_model(m)) for m in ("deepseek-v3", "mixtral-8x7b")}
)


@pytest.mark.parametrize("num_layers", [2, 3, 7, 12, 24, 26, 28, 30, 32, 40, 48, 61, 64])
@pytest.mark.parametrize("pp", [2, 3, 4, 5, 6, 7, 8, 12, 16])
def test_split_is_the_first_of_the_least_slowest(num_layers: int, pp: int) -> None:
    for vpp, last_extra in itertools.product((1, 2, 3, 4), EXTRAS):
        for first_extra in (0.0, 0.5):
            args = (num_layers, pp, vpp, first_extra, last_extra)
            assert balanced_split(*args) == expected(*args), args


@pytest.mark.parametrize("num_layers", [80, 96, 126])
def test_large_models_splits(num_layers: int) -> None:
    for pp, vpp in itertools.product((2, 3, 4, 6, 8, 16, 32), (1, 2, 3)):
        for last_extra in EXTRAS:
            args = (num_layers, pp, vpp, 0.0, last_extra)
            assert balanced_split(*args) == expected(*args), args


def test_no_or_tools_for_the_split() -> None:
    """The split loads no OR-Tools (a search without pools never pays its import)."""
    import subprocess
    import sys

    code = (
        "import sys; from planner.search.solver import balanced_split; "
        "balanced_split(126, 16, 2, 0.0, 0.659); print('ortools' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
