"""The fields of a torchtitan job config TOML as torchtitan e347b1e5 takes them
(torchtitan/config/job_config.py at planner.inputs.torchtitan.TORCHTITAN_COMMIT; every section
and field in torchtitan_job_config_schema.json beside this module, read from that file with
Python's ast), for `planner.inputs.torchtitan_config`:

- a name JobConfig lacks is refused (`check_fields`), as torchtitan refuses the file
  (config/manager.py `_dict_to_dataclass`: "Invalid field names"); read as the defaults it
  described another job: an older TOML's `training.tensor_parallel_degree = 8` was tp 1. In the
  sections that decide no memory or time (`LENIENT`: logging, checkpointing, the data loader,
  ...) an older torchtitan's field (`job.print_args`, `checkpoint.enable_checkpoint`) is let
  be;
- a field that moves memory, time or the stages in a way planner does not model is taken at
  its default only (`UNMODELLED`: FSDP's CPU offload, bf16 or fp32 parameters, the stages by
  layer count, a schedule from a CSV; activation checkpointing's debug
  capture, early stop and per-op forced recompute, `AC_UNMODELLED`), as the Python
  configuration reader takes them (`planner.inputs.torchtitan_baselines.UNMODELLED`);
- `model.converters` and the float8 converters' fields are read by
  `planner.inputs.torchtitan_float8`;
- what e347b1e5 raises on and the plan would take (`era_refusal`: the models without context
  parallelism or pipelining, DDP beside tp or pp, a seq_len tp x 2 x cp does not divide; and
  DeepEP's conditions, `deepep`) exits 2 naming the field, as does tp or pp without FSDP, which
  it trains in fp32 (`fp32_problem`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.inputs.errors import InputError, spelled
from planner.inputs.torchtitan import DEEPEP_MODELS, TORCHTITAN_COMMIT

if TYPE_CHECKING:
    from planner.inputs.job import Job
    from planner.inputs.layout import Layout

SCHEMA = Path(__file__).with_name("torchtitan_job_config_schema.json")

UNMODELLED: dict[tuple[str, str], Any] = {
    ("training", "enable_cpu_offload"): False,
    ("training", "dtype"): "float32",
    ("training", "mixed_precision_param"): "bfloat16",
    ("parallelism", "pipeline_parallel_layers_per_stage"): None,
    ("parallelism", "pipeline_parallel_first_stage_less_layers"): 1,
    ("parallelism", "pipeline_parallel_last_stage_less_layers"): 1,
    ("parallelism", "pipeline_parallel_schedule_csv"): "",
}
"""The fields planner takes at e347b1e5's defaults only (job_config.py), with those defaults."""

FORCE_BALANCE_MODELS = ("deepseek_v3", "llama4", "qwen3")
"""e347b1e5's models whose router reads debug.moe_force_load_balance (job_config.py:995), the
plan's `training.moe_router_force_load_balancing`: each model args' update_from_config copies it
into its MoE arguments (models/deepseek_v3/model/args.py:111-113, models/llama4/model/args.py
:89-91, models/qwen3/model/args.py:58-60), and the router then deals the tokens round-robin
(models moe moe.py:234-249, :335-340). gpt_oss's (models/gpt_oss/model/args.py:75-93) does not:
its router routes as learned whatever the TOML says. b5bcd76c's Decoder copies it into every
MoE layer (models common decoder.py:233-236), gpt_oss's too."""


LENIENT = frozenset(
    {
        "job",
        "profiling",
        "metrics",
        "lr_scheduler",
        "checkpoint",
        "comm",
        "memory_estimation",
        "fault_tolerance",
        "validation.dataloader",
        "training.dataloader",
    }
)
"""The sections whose fields change no memory or step time the plan holds: a name JobConfig
lacks there is not refused (torchtitan e347b1e5 would; an older torchtitan, whose TOML it is,
may not). Not `validation`, whose loop adds a peak (`planner.model.titan_validation`)."""


@cache
def sections() -> dict[str, frozenset[str]]:
    """Each section's dotted name (`training.dataloader`, `quantize.linear.float8`) -> its
    fields."""
    data = json.loads(SCHEMA.read_text())
    return {name: frozenset(fields) for name, fields in data["sections"].items()}


def check_fields(doc: dict[str, Any], where: str) -> None:
    """Refuse a name the TOML's tables hold that JobConfig lacks, and an UNMODELLED field off
    its default; `where` the file."""
    _walk(doc, "", where)
    for (table, key), default in {**UNMODELLED, **_checkpointing_unmodelled(doc)}.items():
        section = doc.get(table)
        if isinstance(section, dict) and key in section and section[key] != default:
            shown = "unset" if default is None else spelled(default)
            raise InputError(
                f"{where}: {table}.{key}: {spelled(section[key])}: planner models torchtitan at "
                f"its default here ({shown})"
            )


AC_UNMODELLED: dict[str, Any] = {"debug": False, "early_stop": False}
"""e347b1e5's activation-checkpointing fields (job_config.py:651-717) that every checkpoint
wrapper takes (distributed/activation_checkpoint.py:41-47, :130-137, :150-156) and that move
the step time in a way planner does not model, with their defaults: `debug` captures debug
information ("Will be slower", job_config.py:713-717), `early_stop` stops each recompute once
the saved tensors are rematerialized (:675-679), where planner recomputes the whole forward.
The Python configuration reader takes debug at its default too
(`torchtitan_tables.AC_UNMODELLED`; b5bcd76c has no early_stop)."""
FORCE_RECOMPUTE = "per_op_sac_force_recompute_mm_shapes_by_fqns"
"""Per-op selective checkpointing's matmuls recomputed by shape (job_config.py:661-673, default
["moe.router.gate"]), where planner's per-op policy keeps every second matmul
(`planner.model.gemm_shapes`): taken at its default only where that policy runs."""


def _checkpointing_unmodelled(doc: dict[str, Any]) -> dict[tuple[str, str], Any]:
    """The activation-checkpointing fields taken at their defaults only, where checkpointing
    runs (mode not "none"; the per-op list under selective_ac_option "op" only)."""
    ac = doc.get("activation_checkpoint")
    if not isinstance(ac, dict) or ac.get("mode", "selective") == "none":
        return {}
    out = {("activation_checkpoint", key): v for key, v in AC_UNMODELLED.items()}
    if ac.get("mode", "selective") == "selective" and ac.get("selective_ac_option") == "op":
        out["activation_checkpoint", FORCE_RECOMPUTE] = ["moe.router.gate"]
    return out


def _walk(table: dict[str, Any], prefix: str, where: str) -> None:
    known = sections()
    for key, value in table.items():
        path = f"{prefix}.{key}" if prefix else key
        if prefix in known and (key in known[prefix] or prefix in LENIENT):
            continue
        nested = path in known or any(name.startswith(path + ".") for name in known)
        if nested and isinstance(value, dict):
            _walk(value, path, where)
            continue
        what = "field" if prefix in known else "section"
        raise InputError(
            f"{where}: {path}: torchtitan {TORCHTITAN_COMMIT[:8]} has no such {what} "
            "(torchtitan/config/job_config.py), and refuses the file"
        )


ERA = f"torchtitan {TORCHTITAN_COMMIT[:8]}"

NO_CONTEXT_PARALLEL = {
    "gpt_oss": "models/gpt_oss/model/args.py:89-92 raises 'CP support for gpt-oss model is still "
    "in progress'",
    "deepseek_v3": "its 16B and 671B flavors run flex attention (models/deepseek_v3/"
    "__init__.py:100, :154), and models/deepseek_v3/model/args.py:101-109 raises 'Context "
    "Parallel only supports SDPA attention'",
}
"""e347b1e5's models whose flavor refuses context parallelism: what the reader refuses of a TOML
and the TOML launch target of a plan (`planner.emit.torchtitan.era_refusal`)."""

NO_PIPELINE = ("qwen3", "gpt_oss")
"""e347b1e5's models without a pipelining function (their __init__.py: pipelining_fn=None;
train.py:218-223 raises 'does not support pipelining')."""

MODULE = "(torchtitan's Python configurations run it: launch --target torchtitan-module)"


@dataclass(frozen=True)
class EraNames:
    """How one reader of torchtitan's settings names the fields an e347b1e5 refusal names: a
    TOML's (`TOML_NAMES`) or a plan's (`planner.emit.torchtitan`)."""

    cp: str
    pp: str
    rep: str
    seq: str
    tp_word: str
    pp_word: str
    cp_word: str
    shard: str


TOML_NAMES = EraNames(
    "parallelism.context_parallel_degree",
    "parallelism.pipeline_parallel_degree",
    "parallelism.data_parallel_replicate_degree",
    "training.seq_len",
    "tensor_parallel_degree",
    "pipeline_parallel_degree",
    "context_parallel_degree",
    "parallelism.data_parallel_shard_degree",
)

PLAN_NAMES = EraNames(
    "parallel.cp",
    "parallel.pp",
    "torchtitan.dp_replicate",
    "training.seq_length",
    "tp",
    "pp",
    "cp",
    "parallel.dp",
)
"""How a plan names what e347b1e5 refuses (the TOML launch target, `planner.emit.torchtitan`, and
the search's rule for what only the module target writes, `rules.torchtitan_era`): the plan's
fields (the shard degree `fp32_problem` names is dp, the replicate degree 1 there)."""

FSDP_WITH_EP = ("deepseek_v3", "gpt_oss", "llama4")
"""e347b1e5's models that apply FSDP (and its mixed precision) with expert parallelism alone too
(`fsdp_enabled or ep_enabled`: models/deepseek_v3/infra/parallelize.py:162,
models/gpt_oss/infra/parallelize.py:125, models/llama4/infra/parallelize.py:181); llama3's and
qwen3's apply it only where fsdp_enabled (llama3 :125, qwen3 :142)."""


def fp32_problem(
    name: str, degrees: dict[str, int], names: EraNames
) -> tuple[str, int, str] | None:
    """(field, value, why) where torchtitan e347b1e5 trains in fp32 what a plan models in bf16:
    tp or pp without FSDP. There fsdp_enabled (dp_shard > 1 or cp > 1, distributed/
    parallel_dims.py:334-335) is false, so no fully_shard installs its MixedPrecisionPolicy
    (bf16 parameters), and maybe_enable_amp (distributed/utils.py:251-256) returns no autocast
    beside tp or pp ("Mixed precision training is disabled"): the fp32 parameters
    (training.dtype float32) run fp32 GEMMs, activations and gradients, which planner does not
    model for torchtitan (its FSDP2 states are b5bcd76c's, whose parallelize installs the bf16
    policy whatever the degrees). DDP (replicate > 1) beside tp or pp raises first
    (`era_problem`); `FSDP_WITH_EP` apply FSDP with expert parallelism alone too."""
    tp, pp, cp, ep = degrees["tp"], degrees["pp"], degrees["cp"], degrees.get("ep", 1)
    if degrees["shard"] * cp > 1 or tp * pp == 1 or (ep > 1 and name in FSDP_WITH_EP):
        return None
    return (
        names.shard,
        degrees["shard"],
        f"with {names.cp_word} {cp} beside {names.tp_word} {tp} and {names.pp_word} {pp} {ERA} "
        f"applies no FSDP (models/{name}/infra/parallelize.py: fully_shard only where "
        "fsdp_enabled) and turns mixed precision off ('Mixed precision training with TP or PP is "
        "only supported when FSDP/HSDP/CP is enabled', distributed/utils.py:251-256): it trains "
        "in fp32 what planner models in bf16; shard over 2 or more GPUs",
    )


def era_problem(
    name: str, degrees: dict[str, int], seq: int, names: EraNames
) -> tuple[str, int, str] | None:
    """(field, value, why) of what torchtitan e347b1e5 raises on that a plan would take, named as
    `names` names them: context parallelism in `NO_CONTEXT_PARALLEL`, pipelining in
    `NO_PIPELINE`, replication without sharding (`degrees["shard"]` x cp 1) beside tp or pp (DDP:
    models/*/infra/parallelize.py 'DDP has not supported > 1D parallelism'; b5bcd76c's
    fully_shard replicates over dp_replicate with an fsdp mesh of 1), and a seq_len that is not a
    multiple of tp x 2 x cp even at cp 1 (parallel_dims.py:365-372 `seq_len_divisor`, asserted by
    each model's parallelize.py, e.g. llama3/infra/parallelize.py:69-74; b5bcd76c asks it only
    with cp > 1); and tp or pp without FSDP, which it trains in fp32 (`fp32_problem`;
    `degrees["ep"]`, where given, the expert-parallel degree); None where it runs."""
    tp, pp, cp, rep = degrees["tp"], degrees["pp"], degrees["cp"], degrees["rep"]
    if cp > 1 and name in NO_CONTEXT_PARALLEL:
        return names.cp, cp, f"at {ERA} {NO_CONTEXT_PARALLEL[name]}"
    if pp > 1 and name in NO_PIPELINE:
        why = "no pipelining function (train.py:218-223 raises 'does not support pipelining')"
        return names.pp, pp, f"{ERA}'s {name} has {why}"
    if rep > 1 and degrees["shard"] * cp == 1 and tp * pp > 1:
        return (
            names.rep,
            rep,
            (
                f"with data_parallel_shard_degree 1 {ERA} applies DDP, and raises 'DDP has not "
                f"supported > 1D parallelism' beside {names.tp_word} {tp} and {names.pp_word} {pp} "
                f"(models/{name}/infra/parallelize.py)"
            ),
        )
    if (fp32 := fp32_problem(name, degrees, names)) is not None:
        return fp32
    divisor = tp * 2 * cp
    if seq % divisor:
        tpw, cpw = names.tp_word, names.cp_word
        why = (
            f"{ERA} asserts it is a multiple of {tpw} x 2 x {cpw} ({tp} x 2 x {cp} = {divisor}), "
            f"even at {cpw} 1 (distributed/parallel_dims.py:365-372 seq_len_divisor, "
            f"models/{name}/infra/parallelize.py)"
        )
        return names.seq, seq, why
    return None


def plan_era_problem(job: Job, lay: Layout, name: str) -> tuple[str, int, str] | None:
    """`era_problem` of a plan's job and layout for e347b1e5's model `name`, in the plan's field
    names (`PLAN_NAMES`): the TOML launch target's refusal and the search's rule for what only
    the module target writes ask the same question."""
    rep = job.titan.dp_replicate
    degrees = {
        "tp": lay.tp,
        "pp": lay.pp,
        "cp": lay.cp,
        "rep": rep,
        "shard": lay.dp // rep,
        "ep": lay.ep,
    }
    return era_problem(name, degrees, job.seq_length, PLAN_NAMES)


def era_refusal(where: str, name: str, degrees: dict[str, int], seq: int) -> None:
    """Raises `era_problem` of a TOML, in its own field names."""
    problem = era_problem(name, degrees, seq, TOML_NAMES)
    if problem is not None:
        field, value, why = problem
        raise InputError(f"{where}: {field}: {value}: {why} {MODULE}")


def deepep(where: str, name: str, backend: Any, ep: int, etp: int) -> tuple[bool, str | None]:
    """expert_parallel_comm_backend as e347b1e5 runs it: (DeepEP, a note). Only deepseek_v3's
    parallelize reads it (models/deepseek_v3/infra/parallelize.py:99-121; llama4's too, which
    planner has no flavor of), and it raises there without EP (:100-106) and with expert TP
    (:107-111); qwen3's and gpt_oss's build the plain all-to-all ExpertParallel whatever it says."""
    field = f"{where}: parallelism.expert_parallel_comm_backend"
    if backend not in ("standard", "deepep"):
        raise InputError(
            f"{field}: {ERA} takes standard or deepep (job_config.py:474; got {spelled(backend)})"
        )
    if backend == "standard":
        return False, None
    if name not in DEEPEP_MODELS:
        return False, (
            f'"deepep": {ERA}\'s {name} ignores it (only {" and ".join(DEEPEP_MODELS)} read it, '
            "models/deepseek_v3/infra/parallelize.py:100): read as the all-to-all it runs"
        )
    if ep == 1:
        raise InputError(
            f'{field}: "deepep" with expert_parallel_degree 1: {ERA} raises \'DeepEP requires '
            "expert parallelism (ep_degree > 1)' (models/deepseek_v3/infra/parallelize.py:"
            "100-106)"
        )
    if etp > 1:
        raise InputError(
            f'{field}: "deepep" with expert_tensor_parallel_degree {etp}: {ERA} raises '
            "'DeepEP with Expert Tensor Parallelism (ETP) is not supported yet' "
            "(models/deepseek_v3/infra/parallelize.py:107-111)"
        )
    return True, None


ROTATE = "parallelism.context_parallel_rotate_method"


def rotate_note(rotate: str) -> str:
    """What e347b1e5 does with a context_parallel_rotate_method other than its default: its
    training never reads it, so its CP all-gathers K/V (`planner.model.titan_cp`)."""
    return (
        f"{rotate!r}: {ERA}'s training never sets it (set_rotate_method is called only in "
        "create_context_parallel_ctx, distributed/utils.py:200-216, which only the validation "
        "loop calls, validate.py:207-213): its steps all-gather K/V, PyTorch's default, as "
        "planner plans them (after a validation the setting holds for the steps that follow)"
    )
