"""The search's TP limit is the NVLink domain the job holds (`ClusterSpec.domain_used`), not the
rack: rank r lies on domain r // used (planner.model.placement), so a TP group of more than
`used` ranks leaves NVLink (space.each_structure, pins._why).

Oracle: hand arithmetic on GB200 NVL72 (72-GPU racks): at 128 GPUs the catalog's 64 of each
rack hold TP 32 and 64; at gpus_per_domain_used = 16, TP 16 at most."""

from __future__ import annotations

from collections import Counter

import pytest

from planner.inputs.errors import InputError
from planner.search.pins import check_reachable
from planner.search.space import Bound, Space, each_structure
from tests.search.brute_force import make_job


def _tps(used: int | None) -> tuple[list[int], int]:
    kw = {} if used is None else {"gpus_per_domain_used": used}
    job = make_job("llama3.1-70b", "gb200-nvl72", 128, 8192, 128, **kw)
    rejected: Counter[str] = Counter()
    tps = sorted({s.tp for s in each_structure(job, Space(), rejected)})
    return tps, rejected["tp beyond the scale-up domain"]


def test_tp_stays_within_the_used_domain() -> None:
    assert _tps(None) == ([1, 2, 4, 8, 16, 32, 64], 1)  # tp 128 > 64
    assert _tps(16) == ([1, 2, 4, 8, 16], 3)  # tp 32, 64, 128 > 16


def test_a_tp_pin_beyond_it_is_refused_naming_the_used_domain() -> None:
    job = make_job("llama3.1-70b", "gb200-nvl72", 128, 8192, 128, gpus_per_domain_used=16)
    with pytest.raises(InputError) as e:
        check_reachable(job, Space(tp=Bound(32, 32)))
    msg = str(e.value)
    assert "beyond the scale-up domain (72 GPUs of gb200-nvl72" in msg
    assert "the job holds 16 of each" in msg
    check_reachable(job, Space(tp=Bound(16, 16)))  # within it: searched
    check_reachable(job, Space(tp=Bound(32, 32), tp_across_nodes=True))
