"""The plan as the torchtitan targets launch it (`torchtitan_launched`, for
`planner.emit.launch_pricing.launched`): the training-code choices a plan may set that torchtitan
has no setting for are set as torchtitan runs them, and said in the file's notes
(`Plan.launch_notes`), so that the launch file's header predicts the job it starts, and the
file read back (`planner check --torchtitan-config`) predicts the same.

- RoPE, RMSNorm and SwiGLU (fused_rope, fused_norm, fused_swiglu): eager PyTorch ops, which
  inductor fuses where torchtitan compiles each transformer block ([torchtitan] compile: e347b1e5
  models/llama3/infra/parallelize.py:108-110 and :256-270, b5bcd76c distributed/compile.py:39-73),
  so fused exactly when the plan compiles (`planner.inputs.torchtitan.training_defaults`). Eager:
  e347b1e5 models/llama3/model/model.py:141-168 (RoPE as complex products), :343 (silu(w1 x) x
  w3 x), :382-383 (nn.RMSNorm); b5bcd76c models common rope.py:140, feed_forward.py:54,
  nn_modules.py:134 (an nn.RMSNorm).
- Dropout (hidden_dropout, attention_dropout): torchtitan's models have none (`plan.TITAN_DROPOUT`).
- Under TP, the sequence-parallel input (sp_keeps_gathered_input): DTensor's sequence
  parallelism has autograd save the all-gathered input of the column-parallel linears (e347b1e5
  models/llama3/infra/parallelize.py:181-233), never re-gathering it in backward.

The Megatron-LM settings no torchtitan target runs are refused by the rules instead
(`planner.search.rules.torchtitan_megatron`), or priced as nothing and warned of as inert
(`planner.inputs.inert.MEGATRON_TRAINING`).
"""

from __future__ import annotations

from dataclasses import replace

from planner.inputs.plan import TITAN_DROPOUT, Plan

TORCHTITAN_TARGETS = ("torchtitan", "torchtitan-module")
"""The targets that launch torchtitan (a TOML job config, a Python configuration)."""

COMPILED = (
    "torchtitan compiles each transformer block (torchtitan.compile: e347b1e5 "
    "llama3/infra/parallelize.py:256-270, b5bcd76c distributed/compile.py:39-73), where inductor "
    "fuses it"
)
EAGER = "torchtitan runs it as eager PyTorch ops without torchtitan.compile"

FUSIBLE = (
    ("fused_rope", "its RoPE", "e347b1e5 llama3 model.py:141-168, b5bcd76c rope.py:140"),
    ("fused_norm", "its RMSNorm", "e347b1e5 llama3 model.py:382-383, b5bcd76c nn_modules.py:134"),
    ("fused_swiglu", "its SwiGLU", "e347b1e5 llama3 model.py:343, b5bcd76c feed_forward.py:54"),
)
"""(the Job field, the op, its eager source): fused exactly under compile (module docstring)."""


def runs(plan: Plan) -> dict[str, tuple[bool, str]]:
    """Job field -> (the value torchtitan runs, what the launched job then does, in words), for
    the fields of the module docstring that the plan's layout reads."""
    compiled = plan.job.titan.compile
    out: dict[str, tuple[bool, str]] = {}
    for field, op, source in FUSIBLE:
        how = COMPILED if compiled else f"{EAGER} ({source})"
        out[field] = (compiled, f"runs {op} {'fused' if compiled else 'unfused'}: {how}")
    for field in TITAN_DROPOUT:
        out[field] = (False, "runs no dropout: torchtitan's models have none")
    if plan.require_layout().tp > 1:
        out["sp_keeps_gathered_input"] = (
            True,
            "keeps the all-gathered sequence-parallel input for backward: DTensor's sequence "
            "parallelism saves it (e347b1e5 llama3/infra/parallelize.py:181-233)",
        )
    return out


def torchtitan_launched(plan: Plan) -> Plan:
    """The plan as the torchtitan targets launch it (module docstring), with a note per field
    changed; the plan itself where nothing changes."""
    job = plan.job
    if job.framework != "torchtitan":
        return plan
    changed: dict[str, bool] = {}
    notes = []
    for field, (value, does) in runs(plan).items():
        if getattr(job, field) != value:
            changed[field] = value
            notes.append(
                f"training.{field} = {str(not value).lower()} has no torchtitan setting: this "
                f"job {does}, as planner launch predicts it"
            )
    if not changed:
        return plan
    run = replace(job, **changed)  # type: ignore[arg-type]
    return replace(plan, job=run, launch_notes=(*plan.launch_notes, *notes))
