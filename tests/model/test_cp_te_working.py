"""Context parallelism as Transformer Engine runs it (TransformerEngine d0067d0d
transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py, "ctx.py"):
the ring's per-step overlap, the exchange re-run by a recomputed core attention, and the a2a
exchange's second copy of the attention output.

Oracle: hand arithmetic on Llama 3.1 8B (32 query heads, 8 K/V groups, head_dim 128, 32
layers) on one H100 node: NVLink 450 GB/s x 0.80 = 360 GB/s, 2 us a message (as
tests/model/test_cp_time.py). A rank of t = 4096 local tokens at tp 1: K and V 16 MiB, the
output 32 MiB.
"""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.model import cp_time, layer_time, memory

B, ALPHA = 450e9 * 0.80, 2e-6
MIB = 1 << 20
J = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64)


def test_each_ring_hop_hides_only_under_its_own_step() -> None:
    """cp 4, 16 MiB of K/V, attention 100 us forward, 200 us backward.
    hop = 16 MiB / B + alpha = 46.60 + 2 = 48.60 us; a (K/V, dK/dV) message 95.21 us.
    Forward: hop i+1 sent at step i, waited at step i+1 (ctx.py:1697-1716): 3 hops each
    against 100/4 = 25 us: 3 x 23.60 = 70.81 us. Backward (ctx.py:2459-2495, waited in the
    same step): step 0 K/V, steps 1-2 the pair, step 3 dK/dV, each against 200/4 = 50 us:
    0 + 2 x 45.21 + 0 = 90.41 us. The old credit, max(3 hop - 100, 0) + max(6 hop - 200, 0)
    = 45.81 + 91.62 us, let a hop hide under other steps' kernels."""
    hop = 16 * MIB / B + ALPHA
    pair = 32 * MIB / B + ALPHA
    fwd = 3 * (hop - 25e-6)
    bwd = 2 * (pair - 50e-6)
    exposed, hidden = cp_time.context_parallel_ring(J.cluster, 1, 4, 16 * MIB, 100e-6, 200e-6, 1)
    assert exposed == pytest.approx(fwd + bwd, rel=1e-6)
    assert exposed + hidden == pytest.approx(3 * hop + 2 * hop + 2 * pair, rel=1e-6)
    # a recomputed attention runs the forward's hops again, under the same per-step kernels
    twice = cp_time.context_parallel_ring(J.cluster, 1, 4, 16 * MIB, 100e-6, 200e-6, 2)[0]
    assert twice == pytest.approx(2 * fwd + bwd, rel=1e-6)


@pytest.mark.parametrize("exchange", ["a2a", "all_gather", "p2p"])
def test_a_recomputed_core_attention_reruns_the_exchange(exchange: str) -> None:
    """Megatron-LM d98e8a64 attention.py:392-395 (checkpoint_core_attention with core_attn in
    recompute_modules, the selective default) and :1555-1556 checkpoint Transformer Engine's
    DotProductAttention, whose forward holds the exchange: the backward runs it again, two
    forward passes as under full recompute."""
    gpu = layer_time.gpu_of(J)
    plain, sel, full = (
        layer_time.layer_time(J, Layout(cp=2, dp=4, cp_comm_type=exchange, recompute=r), gpu, False)
        for r in ("none", "selective", "full")
    )
    assert (sel.cp, sel.cp_hidden) == pytest.approx((full.cp, full.cp_hidden))
    assert sel.cp + sel.cp_hidden > plain.cp + plain.cp_hidden
    # an MLP-only selective recompute leaves the attention's exchange alone
    mlp = Layout(
        cp=2, dp=4, cp_comm_type=exchange, recompute="selective", recompute_modules=("mlp",)
    )
    only = layer_time.layer_time(J, mlp, gpu, False)
    assert (only.cp, only.cp_hidden) == pytest.approx((plain.cp, plain.cp_hidden))


def _acts(exchange: str, recompute: str) -> float:
    lay = Layout(cp=2, dp=4, cp_comm_type=exchange, recompute=recompute)
    return memory.estimate(J, lay).worst.activations / memory.fragmentation(J)


def test_a2a_keeps_the_attention_output_twice() -> None:
    """a2a: TE saves out_part, the head-sharded output before the return all-to-all (ctx.py
    :4545-4576), and the projection the tensor that all-to-all returns (:4486-4500): 32 MiB
    more per layer than the ring keeps, 32 layers of one micro-batch in flight (pp 1) =
    1024 MiB; the working sets differ by a2a's 48 MiB against the ring's 144 MiB
    (test_cp_time): a2a - p2p = 1024 + 48 - 144 = 928 MiB. With core_attn recomputed the
    checkpoint saves nothing of TE's function (attention.py:1555-1556): 48 - 144 = -96 MiB.
    (Before the allocator's fragmentation, `memory.fragmentation`.)"""
    assert _acts("a2a", "none") - _acts("p2p", "none") == pytest.approx(928 * MIB)
    assert _acts("a2a", "selective") - _acts("p2p", "selective") == pytest.approx(-96 * MIB)
