"""The edits of a checked input that take its plan to a changed one (`planner.cli.advice_input`
verifies them by reading the edited input back).

- Megatron-LM (line, YAML): the flags of `planner.emit.megatron.arguments` that differ between
  the two plans (set, added, removed), the virtual-stage flag in the line's own form
  (`_vpp_form`); the companions come with the diff (--recompute-method with full recompute,
  Megatron-FSDP's checkpoint format and gradient dtype, the precision-aware optimizer).
- NeMo: the [parallel] fields that differ, through their keys (`planner.inputs.nemo_keys`),
  with model.config.cpu_offloading=True beside a count (`planner.inputs.nemo_parallel`) and
  the method and count beside full recompute; fields without a key are left unsaid (the
  re-read then differs).
- torchtitan TOML: the keys of `planner.emit.torchtitan.sections` that differ, in three sets
  (`_toml_edits`).
"""

from __future__ import annotations

from typing import Any

from planner.emit import megatron, torchtitan
from planner.inputs.line_edits import Edit
from planner.inputs.nemo_keys import PARALLEL, PARALLEL_SWITCHES
from planner.inputs.plan import Plan


def flat(doc: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A TOML document's values by dotted `section.key`."""
    out: dict[str, Any] = {}
    for k, v in doc.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flat(v, f"{name}."))
        else:
            out[name] = v
    return out


def edit_sets(kind: str, old: Plan, new: Plan, held: dict[str, Any]) -> list[list[Edit]]:
    """The edit sets of an input of `kind` ("line", "yaml", "nemo", "toml") holding `held`
    (`flat`) that take its plan `old` to `new`, the plainest first."""
    if kind in ("line", "yaml"):
        return [_megatron_edits(old, new, held)]
    if kind == "nemo":
        return [_nemo_edits(old, new, held)]
    return _toml_edits(old, new, held)


def _drop_noops(edits: list[Edit], held: dict[str, Any]) -> list[Edit]:
    """Without the edits that change nothing: a removal of what the input lacks, a setting to
    what it holds."""
    out = []
    for e in edits:
        if e.removes and e.key not in held:
            continue
        now = held.get(e.key)
        if not e.removes and e.values is not None and e.value is None and now == list(e.values):
            continue
        if e.value is not None and now == e.value:
            continue
        out.append(e)
    return out


def _flag_map(plan: Plan) -> dict[str, tuple[str, ...]]:
    return {a[0]: tuple(a[1:]) for a in megatron.arguments(plan).flat_args()}


VPP_FLAGS = ("--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank")
"""Megatron-LM's two ways of saying vpp (arguments.py:3114-3116 @d98e8a64): the first derives
it from the layers a virtual stage holds, so it changes with pp; the second is the count."""


def _megatron_edits(old: Plan, new: Plan, held: dict[str, Any]) -> list[Edit]:
    old_args, new_args = _flag_map(old), _flag_map(new)
    edits = [Edit(f, v) for f, v in new_args.items() if old_args.get(f) != v]
    edits += [Edit(f, None) for f in old_args if f not in new_args]
    edits = _vpp_form(old, new, new_args, edits, held)
    return _drop_noops(edits, held)


def _vpp_form(
    plan: Plan,
    new: Plan,
    new_args: dict[str, tuple[str, ...]],
    edits: list[Edit],
    held: dict[str, Any],
) -> list[Edit]:
    """The virtual-stage flag in the line's own form wherever pp or vpp changes: the line's
    flag set to the new vpp in its terms, the other forms it holds removed."""
    old, lay = plan.require_layout(), new.require_layout()
    if old.pp == lay.pp and old.vpp == lay.vpp:
        return edits
    edits = [e for e in edits if e.key not in VPP_FLAGS]
    forms = [f for f in VPP_FLAGS if f in held]
    ours = next((f for f in VPP_FLAGS if f in new_args), None)
    form = forms[0] if forms else ours
    if lay.vpp > 1 and form is not None:
        layers = new.job.arch.num_layers
        if form == VPP_FLAGS[0]:
            even = layers % (lay.pp * lay.vpp) == 0
            value = str(layers // (lay.pp * lay.vpp)) if even else None
        else:
            value = str(lay.vpp)
        if value is None and ours is not None:
            form, value = ours, new_args[ours][0]
        if value is not None:
            edits.append(Edit(form, (value,)))
    return edits + [Edit(f, None) for f in forms if f != form or lay.vpp == 1]


NEMO_KEY = {
    **{field: key for key, field in PARALLEL.items()},
    **{field: key for key, field in PARALLEL_SWITCHES.items()},
    "cpu_offloading_num_layers": "model.config.cpu_offloading_num_layers",
}
"""The NeMo key of each [parallel] field (the last key where several read one)."""


def _nemo_edits(plan: Plan, new: Plan, held: dict[str, Any]) -> list[Edit]:
    old, lay = plan.require_layout(), new.require_layout()
    edits = []
    for field in lay.__dataclass_fields__:
        before, after = getattr(old, field), getattr(lay, field)
        if before == after or field == "dp":
            continue
        if field == "cpu_offloading_num_layers":  # read only with the switch on
            edits.append(Edit("model.config.cpu_offloading", (str(bool(after)),)))
        if field == "recompute" and after == "full":  # Megatron-Core asks for both
            edits.append(Edit(NEMO_KEY["recompute_method"], (str(lay.recompute_method),)))
            edits.append(Edit(NEMO_KEY["recompute_num_layers"], (str(lay.recompute_num_layers),)))
        key = NEMO_KEY.get(field)
        if key is None:
            continue  # unsaid: the re-read tells
        if field == "vpp" and after == 1:
            value = "None"
        elif isinstance(after, tuple | list):
            value = "[" + ",".join(map(str, after)) + "]"
        else:
            value = str(after)
        edits.append(Edit(key, (value,)))
    once = {e.key: e for e in edits}  # a key said twice (recompute's method), once
    return _drop_noops(list(once.values()), held)


TOML_DERIVED = ("parallelism.module_fqns_per_model_part",)
"""Keys torchtitan derives where the file leaves them (the stages' modules from the pipeline
degree and schedule): left out of the plainest edit set."""
GLOBAL_BATCH = "training.global_batch_size"


def _toml_edits(plan: Plan, new: Plan, held: dict[str, Any]) -> list[list[Edit]]:
    """The plainest edit set (the differing keys, the derived ones the file leaves out left
    out, a -1 shard degree kept), then with the global batch said where the file leaves it to
    torchtitan, then all differing keys."""
    old_t, new_t = flat(torchtitan.sections(plan, 1)), flat(torchtitan.sections(new, 1))
    diff = [Edit(k, value=v) for k, v in new_t.items() if old_t.get(k) != v]
    diff += [Edit(k, None) for k in old_t if k not in new_t]
    shard = "parallelism.data_parallel_shard_degree"
    if held.get(shard, -1) == -1:  # the rest of the GPUs, re-derived
        diff = [e for e in diff if e.key != shard]
    batch = []
    if held.get(GLOBAL_BATCH, -1) == -1:  # unset: local x dp, which may change
        batch = [e for e in diff if e.key == GLOBAL_BATCH] or [
            Edit(GLOBAL_BATCH, value=new.job.global_batch_size)
        ]
    plain = [
        e for e in diff if e.key != GLOBAL_BATCH and (e.key in held or e.key not in TOML_DERIVED)
    ]
    full = [e for e in diff if e.key != GLOBAL_BATCH] + batch
    return [_drop_noops(edits, held) for edits in (plain, plain + batch, full)]
