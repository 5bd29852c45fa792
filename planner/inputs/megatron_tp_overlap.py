"""Megatron-LM's TP communication overlap flags as the plan's one switch, `tp_comm_overlap`.

--tp-comm-overlap turns Transformer Engine's userbuffers on; four ModelParallelConfig fields
(NVIDIA/Megatron-LM d98e8a64 megatron/core/model_parallel_config.py:271-289, each turned off by
`--disable-...` or its `--no-...` alias) say which GEMMs use them: tp_comm_overlap_ag and
tp_comm_overlap_rs (the pipelined all-gather and reduce-scatter, ub_overlap_ag / ub_overlap_rs,
megatron/core/extensions/transformer_engine.py:1193-1199) and tp_comm_bulk_dgrad /
tp_comm_bulk_wgrad (the bulk overlaps of the backward, :1458-1464). The --tp-comm-split-ag/rs
fields are not read there (the hasattr branch takes tp_comm_overlap_ag/rs).

planner's overlap model is one switch, every slot overlapped or none. With all four off no GEMM
overlaps its collective: read off. With some off, also read off: the collectives left exposed
make the step slower than the overlap planner would time, so off is the conservative step time
(the overlaps still on are timed exposed). Either way Megatron still allocates the userbuffers at
start-up (megatron/training/initialize.py:164 `_initialize_tp_communicators`): the plan counts
them (`training.tp_userbuffers`, `userbuffers_only`). --tp-comm-overlap-rs-dgrad
(one more overlap) and --tp-comm-overlap-cfg (a YAML planner does not read) are timed as
Transformer Engine's default slots, with a note.
"""

from __future__ import annotations

from planner.inputs.megatron_line import Line

SUB_OVERLAPS = {
    "all-gather (ag)": ("--disable-tp-comm-overlap-ag", "--no-tp-comm-overlap-ag"),
    "reduce-scatter (rs)": ("--disable-tp-comm-overlap-rs", "--no-tp-comm-overlap-rs"),
    "bulk dgrad": ("--disable-tp-comm-bulk-dgrad", "--no-tp-comm-bulk-dgrad"),
    "bulk wgrad": ("--disable-tp-comm-bulk-wgrad", "--no-tp-comm-bulk-wgrad"),
}
"""Each overlap --tp-comm-overlap turns on, with the flags that turn it off (mpc:271-289)."""

OTHER_FLAGS = ("--tp-comm-overlap-rs-dgrad", "--tp-comm-overlap-cfg")


def tp_comm_overlap(line: Line, notes: list[str] | None) -> bool:
    """The plan's tp_comm_overlap from the line (the module docstring); what is timed otherwise
    than Megatron runs it goes to `notes` (the reader refuses the flag at tp 1 before)."""
    if not line.has("--tp-comm-overlap"):
        return False
    off = [name for name, flags in SUB_OVERLAPS.items() if any(line.has(f) for f in flags)]
    given = [f for f in OTHER_FLAGS if line.has(f)]
    if notes is None:
        return not off
    if off:
        which = "every overlap" if len(off) == len(SUB_OVERLAPS) else ", ".join(off)
        notes.append(
            f"--tp-comm-overlap: {which} turned off: timed without TP overlap (planner times "
            "every GEMM overlapped or none); the userbuffers Megatron-LM still allocates "
            "(initialize.py:164) are counted (training.tp_userbuffers)"
        )
        return False
    if given:
        notes.append(f"{', '.join(given)}: timed as Transformer Engine's default userbuffers slots")
    return True


def userbuffers_only(line: Line, parallel: dict[str, object]) -> bool:
    """The line allocates the userbuffers without overlapping (`Job.tp_userbuffers`):
    --tp-comm-overlap (refused at tp 1) read as the plan's overlap off (`tp_comm_overlap`)."""
    return line.has("--tp-comm-overlap") and not parallel.get("tp_comm_overlap")
