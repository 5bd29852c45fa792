"""The one module that imports OR-Tools: CP-SAT for the uneven pipeline split.

Why here and not as the layout enumerator: on this machine class CP-SAT costs about 1 ms per
enumerated solution (DESIGN.md section 4), while planner's exact cost model scores a layout in
0.05-0.2 ms; `planner.search.top_k` therefore walks the structural space itself, bounded and
certified, and hands CP-SAT the sub-problem that is a genuine integer program: how many decoder
layers each pipeline rank gets.

The split problem (Megatron-LM's uneven pipeline: `--decoder-first-pipeline-num-layers`,
`--decoder-last-pipeline-num-layers`, the middle ranks equal; ecosystem.md section 1.2):

    variables   f, l   layers on the first and last rank;  k   layers on each middle rank
    constraints f + l + (pp - 2) k = L          (pp = 2: f + l = L)
                f, l, k >= vpp and multiples of vpp (each rank's layers split into vpp chunks)
    objective   minimise max(f + e_first, k, l + e_last)

where e_first and e_last are the extra work of the first and last rank (embedding; output layer,
loss and MTP) in units of one decoder layer, scaled to integers (x 1000). Llama 3 405B's published
split (one fewer layer on the first and last stage) is what this gives for its output layer.
"""

from __future__ import annotations

from functools import cache

SCALE = 1000
"""Fixed-point scale for the extra work (in thousandths of a decoder layer)."""


@cache
def balanced_split(
    num_layers: int, pp: int, vpp: int, first_extra: float, last_extra: float
) -> tuple[int, ...] | None:
    """Layers per pipeline rank minimising the slowest rank's work, in Megatron's uneven form
    (first and last rank free, middle ranks equal); None when no split satisfies the constraints.
    Extras are rounded to 3 decimals before solving (cache key)."""
    if pp < 2:
        return None
    # imported here: OR-Tools (and the pandas it loads) costs ~0.25 s at start-up, which only a
    # search that needs an uneven split should pay
    from ortools.sat.python import cp_model

    e_first = round(first_extra * SCALE)
    e_last = round(last_extra * SCALE)
    m = cp_model.CpModel()
    # layers per rank, counted in chunks of vpp (so every count is a multiple of vpp)
    upper = num_layers // vpp
    f = m.new_int_var(1, upper, "first_chunks")
    last = m.new_int_var(1, upper, "last_chunks")
    k = m.new_int_var(1 if pp > 2 else 0, upper, "middle_chunks")
    # every layer is placed exactly once
    if num_layers % vpp:
        return None
    m.add(f + last + (pp - 2) * k == num_layers // vpp)
    # the slowest rank's work, in thousandths of a layer
    span = m.new_int_var(0, (num_layers + 10) * SCALE * 2, "slowest_rank")
    m.add(span >= f * vpp * SCALE + e_first)
    m.add(span >= last * vpp * SCALE + e_last)
    if pp > 2:
        m.add(span >= k * vpp * SCALE)
    m.minimize(span)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = 2.0
    status = solver.solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    fv, lv, kv = (solver.value(x) * vpp for x in (f, last, k))
    return (fv,) + (kv,) * (pp - 2) + (lv,)
