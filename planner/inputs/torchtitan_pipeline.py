"""A torchtitan configuration's step and pipeline read into a plan's (for
`planner.inputs.torchtitan_config`): the per-rank and global batch as torchtitan takes them and,
with pipelining, the pipeline schedules a step runs, one per gradient-accumulation step
(`batches`: `[torchtitan] gradient_accumulation_steps`), and the schedule and its stages from
module_fqns_per_model_part (`pipeline`: planner's stage strings,
`planner.inputs.pipeline_layout`). `get` is a table's typed field, as every torchtitan table is
read. `v_stages` says where torchtitan places the stages in a V (`Layout.v_stages`).

module_fqns_per_model_part lists the stages in stage order whatever the schedule: torchtitan
places them on the ranks itself (e347b1e5 distributed/pipeline_parallel.py:447-469, b5bcd76c
:551-567: stages r and 2 pp - 1 - r on rank r under ZBVZeroBubble and DualPipeV, r + c x pp
under the others), so they are read as the plan's stages as they are, and the layout built from
them (`plan_layout.layout_from_section`) takes the placement from the schedule."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from planner.inputs import pipeline_layout
from planner.inputs.errors import InputError, spelled
from planner.inputs.plan_counts import MAX_GLOBAL_BATCH
from planner.inputs.torchtitan import SINGLE_STAGE, TORCHTITAN_COMMIT, V_SHAPED, default_schedule

if TYPE_CHECKING:
    from planner.inputs.job import Job


def v_stages(job: Job, vpp: int) -> bool:
    """Whether a layout of the job at `vpp` stages per rank places them in a V
    (`Layout.v_stages`): torchtitan running ZBVZeroBubble or DualPipeV, whose ranks hold
    stages r and 2 pp - 1 - r (at any pp: with one rank its two stages are rank 0's either
    way). Megatron-LM and torchtitan's other schedules place stage k on rank k % pp."""
    return job.framework == "torchtitan" and job.titan.schedule(vpp) in V_SHAPED


def get(doc: dict[str, Any], where: str, table: str, key: str, kind: type, default: Any) -> Any:
    section = doc.get(table, {})
    if not isinstance(section, dict):
        raise InputError(f"{where}: {table}: expected a table (got {spelled(section)})")
    value = section.get(key, default)
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        raise InputError(f"{where}: {table}.{key}: expected {kind.__name__} (got {spelled(value)})")
    return value


def batches(
    doc: dict[str, Any], where: str, dp: int, pp: int, mbs: int, toml: bool
) -> tuple[int, int, int]:
    """(local batch, global batch, pipeline schedules a step) as torchtitan takes them:
    e347b1e5 train.py:195-215 (the global a multiple of local x dp, gradient accumulation over
    global / (local x dp) steps) and pipeline_parallel.py:186-193 (local_batch_size a multiple
    of the micro-batch); b5bcd76c trainer.py:409-428 (`num_tokens_per_train_step` over the
    tokens of one step of num_pp_microbatches micro-batches). Under pipelining each
    accumulation step is one call of the schedule (e347b1e5 train.py:561 and :502-511; b5bcd76c
    trainer.py:856-899 and :827): their count is the plan's `[torchtitan]
    gradient_accumulation_steps` (`planner.model.titan_accumulation`); without pipelining they
    are planner's micro-batches, and the schedules 1."""
    local = get(doc, where, "training", "local_batch_size", int, 8)
    given = get(doc, where, "training", "global_batch_size", int, -1)
    seq = get(doc, where, "training", "seq_len", int, 2048)
    step_field = (
        "training.global_batch_size" if toml else "config.training.num_tokens_per_train_step"
    )
    if toml and not 1 <= local <= MAX_GLOBAL_BATCH:
        raise InputError(
            f"{where}: training.local_batch_size: must be 1 to {MAX_GLOBAL_BATCH:,} (got "
            f"{spelled(local)})"
        )
    if toml and given == 0:  # train.py:201 asserts global_batch_size > 0
        raise InputError(f"{where}: {step_field}: must be positive, or -1 (got 0)")
    if pp > 1 and toml and (mbs < 1 or local % mbs):
        raise InputError(
            f"{where}: parallelism.pipeline_parallel_microbatch_size: {spelled(mbs)}: torchtitan "
            f"{TORCHTITAN_COMMIT[:8]} raises unless it divides training.local_batch_size "
            f"({local}) (distributed/pipeline_parallel.py:186-193)"
        )
    gbs = given if given > 0 else local * dp
    npp = local // mbs if pp > 1 else 1
    if gbs % (local * dp):
        if toml:
            raise InputError(
                f"{where}: {step_field}: {spelled(gbs)} is not a multiple of "
                "training.local_batch_size x "
                f"dp ({local} x {dp}): torchtitan {TORCHTITAN_COMMIT[:8]} asserts it "
                "(train.py:201-209)"
            )
        raise InputError(
            f"{where}: {step_field}: {gbs * seq} is not a multiple of the tokens of one "
            "accumulation step, num_tokens_per_microbatch_per_dp_rank x num_pp_microbatches x "
            f"dp ({local // npp * seq} x {npp} x {dp}): torchtitan raises (trainer.py:419-425)"
        )
    return local, gbs, gbs // (local * dp) if pp > 1 else 1


def pipeline(
    doc: dict[str, Any], where: str, pp: int, parallel: dict[str, Any], titan: dict[str, Any]
) -> None:
    """The schedule and the stages (module_fqns_per_model_part) with pipelining."""
    schedule = get(doc, where, "parallelism", "pipeline_parallel_schedule", str, "1F1B")
    parts = doc.get("parallelism", {}).get("module_fqns_per_model_part")
    vpp = 1 if schedule in SINGLE_STAGE else 2  # torchtitan's stages per rank by default
    if parts is not None:
        stages = _stages(parts, where)
        if len(stages) % pp:
            raise InputError(
                f"{where}: parallelism.module_fqns_per_model_part: {len(stages)} stages, "
                f"not a multiple of pipeline_parallel_degree ({pp})"
            )
        parallel["pipeline_model_parallel_layout"] = pipeline_layout.compact(stages)
        vpp = max(len(stages) // pp, 1)
    parallel["vpp"] = vpp
    if schedule != default_schedule(vpp):
        titan["pipeline_schedule"] = schedule


def _stages(parts: Any, where: str) -> tuple[str, ...]:
    """module_fqns_per_model_part -> planner's stage strings (E, t, L)."""
    field = f"{where}: parallelism.module_fqns_per_model_part"
    if not isinstance(parts, list) or not parts or not all(isinstance(p, list) for p in parts):
        raise InputError(
            f"{field}: expected a list of lists of module names, one per stage "
            f"(got {spelled(parts)})"
        )
    out = []
    for part in parts:
        stage = ""
        for name in part:
            if name == "tok_embeddings":
                stage += "E"
            elif isinstance(name, str) and re.fullmatch(r"layers\.\d+", name):
                stage += "t"
            elif name == "output":
                stage += "L"
            elif name != "norm":
                raise InputError(f"{field}: unknown module {spelled(name)}")
        out.append(stage)
    return tuple(out)
