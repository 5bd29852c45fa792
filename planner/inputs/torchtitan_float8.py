"""torchtitan e347b1e5's float8 converters in a job config TOML (for
`planner.inputs.torchtitan_config`; the Python configuration reader,
`planner.inputs.torchtitan_tables`, shares the names and messages): `model.converters` names
the converters of e347b1e5's registry (`FLOAT8`: its float8 linear converter, its name before
8a2686c4 refused, `OLD_FLOAT8`; `GROUPED_FLOAT8`, its grouped-GEMM float8
converter of the MoE's routed experts, beside it, `float8_experts` reading its fqns, which
e347b1e5 asserts without pipelining and context parallelism: `grouped_float8_problem`);
`float8_filter` reads the linear converter's filter_fqns (an MoE router's gate left to float8 is
said: planner times it in bf16)."""

from __future__ import annotations

from typing import Any

from planner.inputs.errors import InputError, spelled
from planner.inputs.torchtitan import ROUTER_GATE
from planner.inputs.torchtitan_toml import ERA

FLOAT8 = "quantize.linear.float8"
"""The float8 linear converter: e347b1e5's registered name
(torchtitan/components/quantization/float8.py:238 `register_model_converter`). Its MX converters
are not modelled."""

OLD_FLOAT8 = "float8"
"""The float8 linear converter's name before pytorch/torchtitan 8a2686c4 (2025-09-30): no key of
e347b1e5's registry (float8.py:238-239 and mx.py:171-172 register quantize.linear.float8,
quantize.grouped_mm.float8, quantize.linear.mx and quantize.grouped_mm.mx), so its
ModelConvertersContainer raises KeyError (protocols/model_converter.py:61-63): refused."""

GROUPED_FLOAT8 = "quantize.grouped_mm.float8"
"""e347b1e5's grouped-GEMM float8 converter (float8.py:176-239, registered at :239): the MoE's
routed experts in float8 (`[torchtitan] float8_experts`), read beside the linear converter only
(components/quantization/__init__.py:36-56 lets the two share the type float8)."""

EXPERT_FQNS = ("experts",)
"""[quantize.grouped_mm.float8] fqns as launch writes it and torchtitan's own MoE TOMLs set it
(deepseek_v3/train_configs/deepseek_v3_671b.toml:76-77): an entry converts a module whose name
contains it (float8.py:221-225)."""


def precision(converters: list[Any], where: str) -> str:
    """fp8 where `model.converters` holds the float8 linear converter, else bf16; the grouped
    float8 converter is read beside it only (`float8_experts`), another converter is refused,
    the old name (`OLD_FLOAT8`) with the registered one."""
    if OLD_FLOAT8 in converters:
        raise InputError(
            f"{where}: model.converters: {spelled(OLD_FLOAT8)}: {ERA} registers no "
            f"converter by that name (its name before 8a2686c4) and raises KeyError building the "
            f"converters (protocols/model_converter.py:61-63): write {FLOAT8!r} "
            "(components/quantization/float8.py:238)"
        )
    other = [c for c in converters if c not in (FLOAT8, GROUPED_FLOAT8)]
    if other:
        raise InputError(
            f"{where}: model.converters: {spelled(other[0])}: planner models torchtitan's float8 "
            f"linear converter ({FLOAT8}) and, beside it, its grouped one ({GROUPED_FLOAT8})"
        )
    linear = FLOAT8 in converters
    if GROUPED_FLOAT8 in converters and not linear:
        raise InputError(
            f"{where}: model.converters: {spelled(converters)}: the routed experts in float8 "
            f"({GROUPED_FLOAT8}) and every other linear layer in bf16 is not modelled: add "
            f"{FLOAT8!r} (in a Python configuration, Float8LinearConverter)"
        )
    return "fp8" if linear else "bf16"


def grouped_float8_problem(pp: int, cp: int, pp_name: str, cp_name: str) -> str | None:
    """Why e347b1e5's grouped-GEMM float8 converter asserts at these degrees
    (components/quantization/float8.py:193-198), named as the caller names them; None where it
    runs."""
    for degree, name, what, line in (
        (pp, pp_name, "pipeline", "193-195"),
        (cp, cp_name, "context", "196-198"),
    ):
        if degree > 1:
            return (
                f"with {name} {degree} {ERA} asserts 'Float8 MoE training prototype does not yet "
                f"support {what} parallelism' (components/quantization/float8.py:{line})"
            )
    return None


DEEPEP_GROUPED = (
    "the routed experts in float8 with DeepEP: torchtitan b5bcd76c raises 'MoE quantization "
    "requires a token dispatcher that supports padding (TorchAOTokenDispatcher or "
    "HybridEPTokenDispatcher), got DeepEPTokenDispatcher' "
    "(components/quantization/utils.py:33-64), and e347b1e5's DeepEP path does not pad the "
    "experts' token groups (distributed/deepep/deepep.py:320-353) to the multiple of 16 its "
    "float8 grouped GEMMs need "
    "(components/quantization/float8.py:200-202): use the all-to-all dispatcher, or the experts "
    "in bf16"
)
"""Why no torchtitan runs `[torchtitan] float8_experts` with DeepEP (`rules.torchtitan.deepep`,
and both configuration readers)."""


def float8_experts(where: str, layers: list[int], fqns: Any) -> bool:
    """[quantize.grouped_mm.float8] fqns as e347b1e5 reads it (float8.py:221-225: a module is
    converted where an entry is a substring of its name): whether the routed experts of every
    MoE layer (`layers.<i>.moe.experts`) are float8; refused where some are and others not, and
    where fqns is not a list (a string is iterated character by character there)."""
    field = f"{GROUPED_FLOAT8}.fqns"
    if not isinstance(fqns, list) or not all(isinstance(f, str) for f in fqns):
        raise InputError(f"{where}: {field}: expected a list of module names (got {spelled(fqns)})")
    names = [f"layers.{i}.moe.experts" for i in layers]
    converted = [q for q in names if any(f in q for f in fqns)]
    if converted and len(converted) < len(names):
        left = next(q for q in names if q not in converted)
        raise InputError(
            f"{where}: {field}: {spelled(fqns)} converts {converted[0]} to float8 and leaves "
            f"{left} in bf16: planner models the routed experts in float8 all or none"
        )
    return bool(converted)


_ATTENTION = ("attention.wq", "attention.wk", "attention.wv", "attention.wo")
_FFN = ("feed_forward.w1", "feed_forward.w2", "feed_forward.w3")
_SHARED = ("moe.shared_experts.w1", "moe.shared_experts.w2", "moe.shared_experts.w3")
DECODER_LINEARS = {
    "llama3": (*_ATTENTION, *_FFN),
    "qwen3": _ATTENTION,
    "gpt_oss": _ATTENTION,
    "deepseek_v3": (
        *("attention.wq_a", "attention.wq_b", "attention.wkv_a", "attention.wkv_b", "attention.wo"),
        *_FFN,
        *_SHARED,
    ),
    "llama4": (*_ATTENTION, *_FFN, *_SHARED),
}
"""The nn.Linear modules of a decoder layer at e347b1e5 (models/<name>/model/model.py, the MoE's
shared experts models/moe/moe.py), each under layers.<i>: what float8 converts. The MoE's routed
experts are grouped GEMMs, not nn.Linear (`float8_experts`); its router's gate
(`moe.router.gate`, which torchtitan's own TOMLs filter) is read apart (`float8_filter`).
deepseek_v3's and llama4's dense (feed_forward) and MoE (shared_experts) modules are listed for
every layer (llama4: models/llama4/model/model.py:206-211 wq wk wv wo, :332-334 and
models/moe/moe.py:63-65 w1 w2 w3, :445-446 the shared experts; an MoE layer every
interleave_moe_layer_step, model.py:387, 1 in 17bx16e, 2 in 17bx128e)."""


def float8_filter(
    where: str, name: str, num_layers: int, fqns: Any, moe: list[int] | None = None
) -> tuple[bool, list[tuple[str, str]]]:
    """quantize.linear.float8.filter_fqns as e347b1e5 reads it (components/quantization/
    utils.py:10-27: a module is kept in bf16 where any entry is a substring of its name;
    float8.py:62-63): (the decoder in float8, notes). planner's torchtitan float8 is the
    decoder's linear layers with the output layer in bf16 (`filter_fqns = ["output"]`, what
    launch writes); a filter that keeps every decoder linear in bf16 is read as bf16, one that
    leaves the output layer in float8 is said (planner has no torchtitan float8 output layer:
    `Job.fp8_output_proj` is Megatron's MXFP8), as is one that leaves an MoE model's router gate
    in float8 (`ROUTER_GATE` of the MoE layers `moe`: its dims are multiples of 16 in every MoE
    flavor, utils.py:19-22, so it is converted; planner times it in bf16), and one that keeps
    some decoder linears in bf16 and others not is refused."""
    field = "quantize.linear.float8.filter_fqns"
    if not isinstance(fqns, list) or not all(isinstance(f, str) for f in fqns):
        raise InputError(f"{where}: {field}: expected a list of module names (got {spelled(fqns)})")
    if "auto_filter_small_kn" in fqns:
        raise InputError(
            f'{where}: {field}: "auto_filter_small_kn": torchao\'s size-based filter '
            "(float8.py:108-141) chooses the linears by their shapes, which planner does not model"
        )
    linears = DECODER_LINEARS.get(name)
    if linears is None:
        raise InputError(
            f"{where}: model.name: {spelled(name)}: planner does not know which nn.Linear "
            f"modules {field} filters in this model (it knows {', '.join(DECODER_LINEARS)})"
        )
    decoder = [f"layers.{i}.{m}" for i in range(num_layers) for m in linears]
    kept = [q for q in decoder if any(f in q for f in fqns)]
    notes: list[tuple[str, str]] = []
    if kept and len(kept) < len(decoder):
        converted = next(q for q in decoder if q not in kept)
        raise InputError(
            f"{where}: {field}: {spelled(fqns)} keeps {kept[0]} in bf16 and converts "
            f"{converted} to float8: planner models float8 on every decoder linear or none"
        )
    if kept:
        notes.append((field, f"{spelled(fqns)} keeps every decoder linear in bf16: read as bf16"))
    if not any(f in "output" for f in fqns):
        notes.append(
            (
                field,
                f"{spelled(fqns)} leaves the output layer to float8 (components/quantization/"
                "utils.py:10-27), which planner times in bf16",
            )
        )
    gates = [f"layers.{i}.moe.{ROUTER_GATE}" for i in moe or []]
    if not kept and any(not any(f in g for f in fqns) for g in gates):
        notes.append((field, gate_note(fqns)))
    return not kept, notes


def gate_note(fqns: list[str]) -> str:
    """The warning for a float8 filter that leaves an MoE router's gate to float8."""
    return (
        f"{spelled(fqns)} leaves the MoE router's gate (layers.<i>.moe.{ROUTER_GATE}) to float8, "
        f"which planner times in bf16 (moe_time.router_time); torchtitan's own MoE float8 "
        f'configurations filter "{ROUTER_GATE}" (deepseek_v3_671b.toml:74 at e347b1e5, '
        "deepseek_v3/config_registry.py:262 at b5bcd76c)"
    )
