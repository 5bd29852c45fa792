"""planner.model.titan_cp: torchtitan's context parallelism all-gathers K/V (PyTorch's default
rotate method; torchtitan e347b1e5 train never calls set_rotate_method, distributed/utils.py
:200-216 and validate.py:207-213), with fp32 accumulators (convert_to_f32; pytorch 09b101c5
torch/distributed/tensor/experimental/_context_parallel/_attention.py).

Oracle: hand arithmetic on Llama 3.1 8B (32 query heads, 8 K/V groups, head_dim 128): a rank of
t = 4096 local tokens at tp 1 holds K + V = 4096 x 8 x 256 x 2 B = 16 MiB (KV) and a query or
output of 4096 x 32 x 128 x 2 B = 32 MiB (Q, O).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from jobs import job

from planner.inputs import torchtitan_config
from planner.inputs.layout import Layout
from planner.inputs.plan import parse_plan
from planner.model import comms, layer_time, memory, titan_cp

MIB = 1 << 20
J = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 8, framework="torchtitan")


def test_exchange_holds_the_gathered_kv_and_fp32_accumulators() -> None:
    """Forward: cp KV + max(KV + 3 O, 5 O); backward: max((cp + 5) KV + 3 Q, (cp + 4) KV +
    4.5 Q) (titan_cp's docstring, from _templated_ring_attention and its backward).
    cp 2: forward 32 + max(16 + 96, 160) = 192 MiB; backward max(112 + 96, 96 + 144) = 240 MiB.
    cp 8: forward 128 + 160 = 288 MiB; backward max(208 + 96, 192 + 144) = 336 MiB.
    (The 2-chunk ring planner took before: 2 x 16 = 32 MiB at any cp.)"""
    assert titan_cp.exchange_bytes(J.arch, Layout(cp=2), 4096) == 240 * MIB
    assert titan_cp.exchange_bytes(J.arch, Layout(cp=8), 4096) == 336 * MIB


def test_the_exchange_enters_the_peak_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A torchtitan plan's activations hold the exchange of one attention block: cp 2, seq
    8192 (t = 4096) gives 240 MiB more than with no exchange at all (before the allocator's
    fragmentation, `memory.fragmentation`)."""
    lay = Layout(cp=2, dp=4)

    with_exchange = memory.estimate(J, lay).worst.activations / memory.fragmentation(J)
    monkeypatch.setattr(titan_cp, "exchange_bytes", lambda *a: 0.0)
    other = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 8, framework="torchtitan")  # unmemoised
    without = memory.estimate(other, lay).worst.activations / memory.fragmentation(other)
    assert with_exchange - without == pytest.approx(240 * MIB)


def test_time_is_one_gather_under_step_zero_and_fp32_dkv_hops() -> None:
    """cp 4, 16 MiB of K/V, attention 100 us forward, 200 us backward. The gather (64 MiB
    gathered) is waited for at step 1, under step 0's 100/4 = 25 us (forward) or 200/4 = 50 us
    (backward); the backward's fp32 dK/dV (32 MiB) hops: sent at step i, waited after step
    i + 1's kernel (50 us each), the last after the loop, exposed whole. Seconds of one gather
    and one hop are comms' all_gather and p2p (tests/model/test_comms*)."""
    grp = comms.place(J.cluster, 1, 4)
    gather = comms.all_gather(64 * MIB, grp)
    hop = comms.p2p(32 * MIB, comms.p2p_link(J.cluster, 1, 4))
    fwd = max(gather - 25e-6, 0.0)
    bwd = max(gather - 50e-6, 0.0) + 3 * max(hop - 50e-6, 0.0) + hop
    for n_fwd in (1, 2):  # full recompute gathers again
        exposed, hidden = titan_cp.context_parallel(
            J.cluster, Layout(cp=4), J.arch, 4096, (100e-6, 200e-6), n_fwd
        )
        assert exposed == pytest.approx(n_fwd * fwd + bwd, rel=1e-9)
        assert exposed + hidden == pytest.approx((n_fwd + 1) * gather + 4 * hop, rel=1e-9)


def test_a_torchtitan_layer_is_timed_as_the_gather() -> None:
    """The layer's CP seconds, exposed and hidden, are the gather's twice (forward, backward,
    no recompute) and cp fp32 dK/dV hops, not the ring's K/V hops: cp 2 at seq 8192, t = 4096,
    32 MiB gathered, 32 MiB a hop."""
    lay = Layout(cp=2, dp=4)
    got = layer_time.layer_time(J, lay, layer_time.gpu_of(J), False)
    gather = comms.all_gather(32 * MIB, comms.place(J.cluster, 1, 2))
    hop = comms.p2p(32 * MIB, comms.p2p_link(J.cluster, 1, 2))
    assert got.cp + got.cp_hidden == pytest.approx(2 * gather + 2 * hop, rel=1e-9)


QA_TOML = """
[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 1
seq_len = 393216
[parallelism]
data_parallel_shard_degree = 1
context_parallel_degree = 8
[activation_checkpoint]
mode = "full"
[compile]
enable = true
"""


def test_llama_8b_at_393216_tokens_on_8_h100_does_not_fit(tmp_path: Path) -> None:
    """A QA repro: t = 393216 / 8 = 49152 = 12 x 4096 local tokens, so the exchange holds
    12 x 336 MiB = 4032 MiB (test above), where the 2 x 192 MiB ring left the plan 0.6 GiB
    inside the 77.25 GiB it may use; the gathered 8 x 192 MiB alone take 1.125 GiB more."""
    assert titan_cp.exchange_bytes(J.arch, Layout(cp=8), 49152) == 4032 * MIB
    path = tmp_path / "cp.toml"
    path.write_text(textwrap.dedent(QA_TOML))
    plan = parse_plan(torchtitan_config.read(path, "h100-sxm-80gb", None))
    assert plan.layout is not None and not memory.estimate(plan.job, plan.layout).fits
