"""The hybrid Mamba half of a Megatron-LM command line: --hybrid-layer-pattern and the --mamba-*
flags as model fields, and the pattern's pipeline segments as the layout's split.

Megatron-LM d98e8a64 megatron/training/arguments.py (`validate_args`, "Hybrid layer pattern:
deprecation handling and validation"): --hybrid-override-pattern is the deprecated spelling of
--hybrid-layer-pattern (both given is an assertion); --mtp-hybrid-override-pattern is the legacy
MTP pattern, joined to the main one as "/pattern" per --mtp-num-layers; the layer count comes
from the pattern (a different --num-layers is ignored with a warning; planner notes it), and
so do the MTP depths; the pattern's "|" segments are the pipeline split (segments / pp virtual
stages) and exclude --num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank,
--pipeline-model-parallel-layout and the account-for flags; without "|", pp > 1 splits the layers
evenly or by --decoder-first/last-pipeline-num-layers (megatron/core/models/hybrid/
hybrid_layer_allocation.py `select_pipeline_segment`, which raises where they do not divide and
refuses virtual stages). The Mamba mixer's sizes: TransformerConfig mamba_state_dim (128),
mamba_head_dim (64), mamba_num_groups (8), mamba_num_heads (None: 2h / head dim).
"""

from __future__ import annotations

from typing import Any

from planner.inputs import hybrid, pipeline_layout
from planner.inputs.errors import InputError
from planner.inputs.hybrid import Pattern
from planner.inputs.megatron_line import Line

PATTERN_FLAGS = ("--hybrid-layer-pattern", "--hybrid-override-pattern")
MAMBA_INT = {
    "--mamba-state-dim": "mamba_state_dim",
    "--mamba-head-dim": "mamba_head_dim",
    "--mamba-num-groups": "mamba_num_groups",
    "--mamba-num-heads": "mamba_num_heads",
}
_EXCLUDED = (
    "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank",
    "--pipeline-model-parallel-layout",
    "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split",
)


def pattern(line: Line) -> tuple[str, Pattern] | None:
    """(the flag that gave it, the pattern read) of a hybrid line; None for a transformer. The
    legacy MTP pattern is joined to the main one as Megatron does."""
    given = [f for f in PATTERN_FLAGS if line.has(f)]
    if not given:
        if line.has("--is-hybrid-model"):
            raise InputError(
                f"{line.where}: --is-hybrid-model: a hybrid stack without --hybrid-layer-pattern "
                "(the deprecated attention and MLP ratios are not read); give the pattern"
            )
        return None
    if len(given) > 1:
        raise InputError(
            f"{line.where}: --hybrid-override-pattern: cannot be combined with "
            "--hybrid-layer-pattern (Megatron-LM asserts it; the first is the second's old name)"
        )
    flag = given[0]
    text = line.text(flag) or ""
    legacy = line.text("--mtp-hybrid-override-pattern")
    depths = line.integer("--mtp-num-layers") or 0
    if legacy is not None and depths > 0 and hybrid.MTP_SEPARATOR not in text:
        text += hybrid.MTP_SEPARATOR + hybrid.MTP_SEPARATOR.join([legacy] * depths)
    try:
        return flag, hybrid.parse(text)
    except ValueError as e:
        raise InputError(f"{line.where}: {flag}: {e} (got {text!r})") from None


def model_fields(line: Line, model: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """The model fields of a hybrid line (the pattern, its layer count and MTP depths, the Mamba
    sizes), given the fields read so far; {} for a transformer."""
    found = pattern(line)
    if found is None:
        return {}
    flag, pat = found
    n = len(pat.main)
    if "num_layers" in model and model["num_layers"] != n:
        notes.append(
            f"--num-layers {model['num_layers']}: read as the {n} layers of {flag}, as "
            "Megatron-LM does (it warns and ignores --num-layers)"
        )
    mtp = model.get("mtp_num_layers")
    if mtp is not None and mtp != pat.depths:
        notes.append(
            f"--mtp-num-layers {mtp}: read as the {pat.depths} MTP depths {flag} has, as "
            "Megatron-LM does"
        )
    out: dict[str, Any] = {
        "hybrid_layer_pattern": pat.text,
        "num_layers": n,
        "mtp_num_layers": pat.depths,
    }
    for mamba_flag, field in MAMBA_INT.items():
        value = line.integer(mamba_flag)
        if value is not None:
            out[field] = value
    if pat.depths and line.has("--mtp-use-repeated-layer"):
        out["mtp_use_repeated_layer"] = True
    return out


def split(line: Line, pp: int, uneven: bool) -> dict[str, Any] | None:
    """The `[parallel]` fields the pattern's pipeline segments set (a pipeline layout, whose
    stages say the virtual pipeline size), or {} when the plain split applies; None for a
    transformer. `uneven`: --decoder-first/last-pipeline-num-layers were given."""
    found = pattern(line)
    if found is None:
        return None
    flag, pat = found
    where = line.where
    for excluded in _EXCLUDED:
        if line.has(excluded):
            raise InputError(
                f"{where}: {excluded}: cannot be combined with {flag} (Megatron-LM asserts it: "
                "the pattern's '|' segments are the pipeline split)"
            )
    segments = len(pat.segments)
    if segments == 1:
        n = len(pat.main)
        if pp > 1 and not uneven and n % pp:
            raise InputError(
                f"{where}: {flag}: {n} layers do not split evenly over "
                f"--pipeline-model-parallel-size {pp}; add '|' between the pipeline segments "
                "(Megatron-LM raises ValueError)"
            )
        return {}
    if uneven:
        raise InputError(
            f"{where}: --decoder-first-pipeline-num-layers: cannot be combined with '|' in "
            f"{flag} (Megatron-LM asserts it)"
        )
    if segments % pp:
        raise InputError(
            f"{where}: {flag}: {segments} pipeline segments ('|'), not a multiple of "
            f"--pipeline-model-parallel-size {pp} (Megatron-LM asserts it)"
        )
    stages = pipeline_layout.stages_of(
        [[len(pat.segments[c * pp + r]) for c in range(segments // pp)] for r in range(pp)],
        pat.depths,
    )
    return {"pipeline_model_parallel_layout": pipeline_layout.compact(stages)}
