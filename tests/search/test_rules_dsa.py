"""Megatron-LM's rules on DeepSeek sparse attention (planner.search.rules.dsa), and the
context-parallel exchange the search picks for it.

Oracle: the assertions of Megatron-LM d98e8a64 megatron/core/transformer/
experimental_attention_variant/absorbed_mla.py (`AbsorbedMLASelfAttention.__init__`:
"AbsorbedMLA requires sequence_parallel when tensor_model_parallel_size > 1"; with the mla_up_proj
recompute "FP8/FP4 is not supported for AbsorbedMLA"), transformer_config.py `__post_init__` for
experimental_attention_variant "dsa" ("RoPE fusion is not supported for DSAttention";
"DSAttention context parallelism currently supports cp_comm_type=allgather only"),
experimental_attention_variant/dsa_kernels.py `use_fused_dsa_kernels` (False under
attention_backend unfused); the DSA model below is a small MLA model with an indexer of
Megatron's functional test's sizes (gpt3_mcore_te_tp2_pp2_dsa: 64 heads of 128, top-k 2048)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from jobs import TINY_DSA

from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan
from planner.search import rules
from planner.search.rules.context import exchange_for
from planner.search.space import Space, structures

MODEL: dict[str, Any] = dict(TINY_DSA)
DENSE_MLA = {k: v for k, v in MODEL.items() if not k.startswith("dsa_")} | {"name": "tiny-mla"}


def plan(parallel: dict[str, Any], num_gpus: int, model: dict[str, Any] = MODEL, **kw: Any) -> Any:
    doc = {
        "model": model,
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": num_gpus},
        "training": {"seq_length": 4096, "global_batch_size": 64, **kw},
        "parallel": parallel,
    }
    return parse_plan(doc)


def broken(p: Any) -> set[str]:
    return {v.rule for v in rules.violations(p.job, p.require_layout())}


def test_a_sensible_dsa_layout_passes() -> None:
    p = plan({"tp": 2, "sequence_parallel": True, "cp": 2, "cp_comm_type": "all_gather"}, 8)
    assert broken(p) == set()
    # Megatron's RoPE fusion is off by default for a DSA plan (TransformerConfig asserts it)
    assert not p.job.fused_rope
    assert plan({"tp": 1}, 8, model=DENSE_MLA).job.fused_rope


def test_tp_needs_sequence_parallel() -> None:
    off = {"tp": 2, "sequence_parallel": False}
    assert "dsa_sp" in broken(plan(off, 8))
    assert "dsa_sp" not in broken(plan({"tp": 2}, 8))  # a plan's default: on with tp > 1
    assert "dsa_sp" not in broken(plan({"tp": 1}, 8))
    assert "dsa_sp" not in broken(plan(off, 8, model=DENSE_MLA))  # plain MLA: no assert


@pytest.mark.parametrize(("kind", "ok"), [("p2p", False), ("a2a", False), ("all_gather", True)])
def test_context_parallel_all_gather_only(kind: str, ok: bool) -> None:
    p = plan({"tp": 1, "cp": 2, "cp_comm_type": kind}, 8)
    assert ("dsa_cp_comm" not in broken(p)) == ok
    # the exchange is read only with cp > 1
    assert "dsa_cp_comm" not in broken(plan({"tp": 1, "cp": 1, "cp_comm_type": kind}, 8))


def test_search_picks_all_gather_for_dsa() -> None:
    dsa, mla = plan({"tp": 1}, 8).job, plan({"tp": 1}, 8, model=DENSE_MLA).job
    assert exchange_for(dsa, 1, 2) == "all_gather"
    assert exchange_for(mla, 1, 2) == "p2p"  # Megatron's default ring otherwise
    rejected: Counter[str] = Counter()
    found = structures(dsa, Space(), rejected)
    assert found and all(s.cp == 1 or s.cp_comm_type == "all_gather" for s in found)
    assert "dsa_cp_comm" not in rejected


def test_rope_fusion_is_refused() -> None:
    p = plan({"tp": 1}, 8, fused_rope=True)
    assert "dsa_rope_fusion" in broken(p)
    assert rules.job_violations(p.job)  # no layout of it runs
    with pytest.raises(InputError, match=r"training\.fused_rope: DeepSeek sparse attention"):
        rules.check_plan(p)


def test_fused_kernels_do_not_run_under_unfused_attention() -> None:
    p = plan({"tp": 1}, 8, dsa_kernel_backend="tilelang", flash_attention=False)
    assert "dsa_unfused_backend" in broken(p)
    assert "dsa_unfused_backend" not in broken(
        plan({"tp": 1}, 8, dsa_kernel_backend="none", flash_attention=False)
    )
    assert "dsa_unfused_backend" not in broken(plan({"tp": 1}, 8, dsa_kernel_backend="cudnn"))


def test_up_proj_recompute_is_bf16_only() -> None:
    par = {"tp": 1, "recompute": "selective", "recompute_modules": ["mla_up_proj"]}
    assert "dsa_up_proj_recompute" in broken(plan(par, 8, precision="fp8"))
    assert "dsa_up_proj_recompute" not in broken(plan(par, 8))
    assert "dsa_up_proj_recompute" not in broken(plan(par, 8, model=DENSE_MLA, precision="fp8"))


def test_only_megatron_runs_dsa() -> None:
    p = plan({"tp": 1}, 8, framework="torchtitan")
    assert "dsa_framework" in broken(p)
    assert "dsa_framework" not in broken(plan({"tp": 1}, 8))
