"""Whether a Megatron-Bridge ConfigContainer override is one Bridge accepts, shared by the
Megatron-Bridge launch tests.

Oracle: tests/data/megatron_bridge_config_schema.json, the fields (with annotations) of the
dataclasses each ConfigContainer section holds in Megatron-Bridge and the Megatron-LM commit it
pins, and the mixed-precision presets Bridge registers, all derived from those files with
Python's ast; every emitted field must be one, with a value its annotation takes.
"""

from __future__ import annotations

import json
import re
from typing import Any

from paths import TESTS

SCHEMA = json.loads((TESTS / "data" / "megatron_bridge_config_schema.json").read_text())


ENUM_NAMES = {"AttnBackend": {"flash", "fused", "unfused", "local", "auto"}}
"""Megatron-Core 2a75ac12 megatron/core/transformer/enums.py AttnBackend's members: the names a
recipe writes into the field (Bridge 067f987d recipes set "auto", "flash", "fused" strings)."""

TORCH_DTYPES = {"torch.float32", "torch.bfloat16", "torch.float16"}
"""Strings Bridge 067f987d reads back as a torch.dtype onto a field holding one
(training/utils/omegaconf_utils.py `_apply_overrides`: utils/activation_map.py str_to_dtype)."""


def _fits(annotation: str, value: Any) -> bool:
    """Whether a YAML value fits an annotation as written (Optional / Union / Literal / List)."""
    a = annotation.replace(" ", "")
    if value is None:
        return "Optional[" in a or "None" in a
    if isinstance(value, bool):
        return "bool" in a
    if isinstance(value, int):
        literals = ",".join(re.findall(r"Literal\[([^\]]*)\]", a)).split(",")
        return bool(re.search(r"\bint\b|\bfloat\b", a)) or str(value) in literals
    if isinstance(value, float):
        return "float" in a
    if isinstance(value, str) and a in ENUM_NAMES:
        return value in ENUM_NAMES[a]
    if isinstance(value, str) and a == "torch.dtype":
        return value in TORCH_DTYPES
    if isinstance(value, str):
        literals = re.findall(r"Literal\[([^\]]*)\]", a)
        if literals and not re.search(r"\bstr\b", a):
            return any(repr(value) in lit.replace('"', "'") for lit in literals)
        return bool(re.search(r"\bstr\b", a)) or any(repr(value) in x for x in literals)
    if isinstance(value, list) and value and all(type(x) is int for x in value):
        # an int list: a List[int] field, or a Tuple[int,int] one of two (OmegaConf's list)
        return "List[int]" in a or ("Tuple[int,int]" in a and len(value) == 2)
    if isinstance(value, list):
        return "List[str]" in a or "list[str]" in a
    return False


def _env_vars_fit(env: Any) -> bool:
    """ConfigContainer.env_vars (Bridge 067f987d training/config.py:965), `dict[str, str | int |
    float | bool]`, each applied with os.environ.setdefault(name, str(value)) (config.py
    apply_environment_variables, which raises on an empty name or a non-scalar value)."""
    return isinstance(env, dict) and all(
        isinstance(k, str) and k and isinstance(v, (str, int, float, bool)) for k, v in env.items()
    )


def accepted(doc: dict[str, Any]) -> None:
    """Every field of the override is one of Bridge's, with a value its annotation takes."""
    assert doc["mixed_precision"] in SCHEMA["mixed_precision_presets"]
    for section, fields in doc.items():
        if section == "mixed_precision":
            continue
        if section == "env_vars":  # a dict field, not a dataclass of the schema
            assert _env_vars_fit(fields), fields
            continue
        known = SCHEMA["sections"][section]
        target = fields.pop("_target_", None)
        if target is not None:  # the class the table builds (a recipe may leave it unset)
            assert section == "comm_overlap" and any(
                f"{target.replace('.', '/')}".rsplit("/", 1)[0] + ".py CommOverlapConfig" in s
                for s in SCHEMA["sources"]
            ), target
        for name, value in fields.items():
            assert name in known, f"{section}.{name}"
            assert _fits(known[name], value), f"{section}.{name} = {value!r} ({known[name]})"


_accepted = accepted  # (the name tests/emit/test_emit_dsa.py imports)
