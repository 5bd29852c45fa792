"""NeMo 2.0 `nemo llm pretrain` lines for the test_nemo_args*.py files: the line's head and
reading one through `check --megatron-args`.
"""

from __future__ import annotations

from typing import Any

from planner.inputs import megatron_args

HEAD = "nemo llm pretrain -y --factory llama3_8b "


def read(text: str, gpus: int = 8, **kw: Any) -> megatron_args.Reading:
    return megatron_args.read(text, "h100-sxm-80gb", gpus, "run.sh", **kw)


def doc(text: str, gpus: int = 8, **kw: Any) -> dict[str, Any]:
    return read(text, gpus, **kw).doc
