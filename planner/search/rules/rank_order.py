"""Megatron's rank order under --use-tp-pp-dp-mapping (`Layout.use_tp_pp_dp_mapping`, order
tp-cp-ep-pp-dp): where Megatron-LM d98e8a64 refuses it. A rule rather than an input check, so
`check`'s advice never proposes a change (ep, etp, tp, cp) that breaks it."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.search.rules.base import Violation


def tp_pp_dp_order(job: Job, lay: Layout) -> Violation | None:
    """With pp > 1 the expert grid (etp x ep) must equal the dense grid's tp x cp: under an
    order that does not end in pp, Megatron asserts equal data-parallel sizes of the attention
    and MoE layers and identical pipeline groups (parallel_state.py:898-906). It builds the
    expert grid for a dense model too (parallel_state.py:870-895: etp defaults to tp, ep is 1),
    so a dense model with cp > 1 breaks it as well: its expert data-parallel size counts the cp
    ranks the dense one does not."""
    if not lay.use_tp_pp_dp_mapping or lay.pp <= 1:
        return None
    inner, expert = lay.tp * lay.cp, lay.expert_tp * lay.ep
    if inner == expert:
        return None
    return Violation(
        "tp_pp_dp_order",
        "parallel.use_tp_pp_dp_mapping",
        f"with pp > 1 Megatron needs expert tp x ep ({expert}) equal to tp x cp ({inner}) "
        "under this order (the data-parallel sizes of its dense and expert grids must match; "
        "it builds the expert grid for a dense model too: parallel_state.py:870-906)",
    )
