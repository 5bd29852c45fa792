"""The pooled search's rows (QA): no recompute that saves no memory and only costs time, and
twins folded into one row, as the one-kind search lists them.

- Under flash attention selective recompute of core_attn (Megatron's default module) saves no
  memory: Megatron-LM d98e8a64 megatron/core/transformer/transformer_config.py:1983-1988 warns
  "For fused attention, you have no need to set 'core_attn' to recompute", and the one-kind
  search leaves it out (`rungs.selective`). QA: Llama 3.1 8B on 8 H100 + 8 A100 listed
  `tp1 pp2 dp4 cp2 mbs1 recompute=selective` fourth, its none twin's split and peak (24.9 GiB)
  at 2.597 s against 2.518 s.
- Without flash attention core_attn does save memory, but a selective plan whose own split fits
  with no recompute is the same plan made slower: QA listed `tp4 pp2 dp2 sp tpov mbs1
  recompute=selective` at 4.077 s, its split (9, 23) fitting without recompute at 3.878 s
  (first row).
- Twins (`planner.search.twins`, README "so the top K rows are K different layouts"): QA,
  Llama 3.1 8B on 8 L40S + 8 A100 at seq 8192, rows 3 and 4 `tp2 pp2 dp4 mbs1` and `tp2 pp2
  dp2 cp2 mbs2` at the same 11.585145624512188 s.

Oracles: the model's own memory and cost estimates of each plan's layout without recompute
(tests/search/pool_brute.py, `recompute_for_nothing`), `twins.twin_key` / `same_time`, and the
brute force of every layout split (`pool_brute.top_steps`)."""

from __future__ import annotations

import itertools

import pytest
from pool_brute import recompute_for_nothing, top_steps

from planner.inputs.plan import Job, parse_plan
from planner.search import pool_search
from planner.search.twins import same_time, twin_key

HEAD = 3.0


def _job(gpus: tuple[str, str], seq: int, flash: bool = True) -> Job:
    names = [g.split("-")[0] for g in gpus]
    doc = {
        "model": {"name": "llama3.1-8b"},
        "cluster": {
            "pools": [
                {"name": n, "gpu": g, "num_gpus": 8} for n, g in zip(names, gpus, strict=True)
            ],
            "between_pools": {"bandwidth_gb_per_s_per_gpu": 25.0, "latency_us": 10},
        },
        "training": {"seq_length": seq, "global_batch_size": 64, "flash_attention": flash},
    }
    return parse_plan(doc).job


H100_A100 = ("h100-sxm-80gb", "a100-sxm-40gb")
L40S_A100 = ("l40s-48gb", "a100-sxm-40gb")


def test_flash_attention_gets_no_core_attn_recompute() -> None:
    job = _job(H100_A100, 4096)
    assert {lay.recompute for lay in pool_search.layouts(job)} == {"none"}
    res = pool_search.search(job, HEAD, top=10)
    assert len(res.plans) == 10 and all(p.layout.recompute != "selective" for p in res.plans)


def test_without_flash_attention_no_plan_recomputes_for_nothing() -> None:
    job = _job(H100_A100, 4096, flash=False)
    lays = pool_search.layouts(job)
    assert {lay.recompute for lay in lays} == {"none", "selective"}
    res = pool_search.search(job, HEAD, top=10)
    assert len(res.plans) == 10
    assert any(p.layout.recompute == "selective" for p in res.plans)  # where it saves memory
    assert not any(recompute_for_nothing(p, HEAD) for p in res.plans)
    assert [p.performance.step_time_s for p in res.plans] == top_steps(job, HEAD, 10)


@pytest.mark.parametrize("top", [5, 8])
def test_twins_fold_into_one_row(top: int) -> None:
    job = _job(L40S_A100, 8192)
    res = pool_search.search(job, HEAD, top=top)
    assert len(res.plans) == top and len(res.twins) == top
    for a, b in itertools.combinations(res.plans, 2):
        twins = twin_key(a.layout) == twin_key(b.layout)
        assert not (twins and same_time(a.performance.step_time_s, b.performance.step_time_s))
    folded = [(p, t) for p, ts in zip(res.plans, res.twins, strict=True) for t in ts]
    assert folded  # the QA's pair: one row, the fewer cp ranks first
    for p, t in folded:
        assert twin_key(p.layout) == twin_key(t.layout)
        assert same_time(p.performance.step_time_s, t.performance.step_time_s)
        assert p.layout.cp < t.layout.cp
    assert [p.performance.step_time_s for p in res.plans] == top_steps(job, HEAD, top)
