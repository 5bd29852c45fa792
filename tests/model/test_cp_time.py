"""planner.model.cp_time: context parallelism's traffic per attention block, by exchange.

Oracle: hand arithmetic on Llama 3.1 8B (32 query heads, 8 K/V groups, head_dim 128) on one H100
node, the NVLink tier as planner's comms sees it: 450 GB/s x SCALEUP_BUS_EFFICIENCY 0.80 = 360 GB/s
per GPU and 2 us per message (LATENCY_SCALE 1); NCCL's rings reach a measured share of it by group
size (nccl_shares.NCCL_NVLINK_SHARE, H100: 0.869 among 4 ranks) and cost 16.8 us a call
(NCCL_CALL_S); its all-to-all runs at the link's rate. A rank of t = 4096 local tokens at tp 1:
  K and V: 4096 x 2 x 8 x 128 x 2 bytes = 16 MiB (16,777,216 bytes)
  Q: 4096 x 32 x 128 x 2 = 32 MiB; the output the same.
"""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs.hybrid import layer_kind
from planner.inputs.layout import Layout
from planner.model import cp_time, host, layer_time

B = 450e9 * 0.80  # bytes/s over NVLink, as achieved
ALPHA = 2e-6
RING_4, RING_CALL = 0.869, 16.8e-6  # NCCL's ring of 4 H100 ranks: share of B, call
MIB = 1 << 20


J = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64)


def _exchange(lay: Layout, n_fwd: int = 1) -> tuple[float, float]:
    """The exchange's (exposed, hidden) seconds on a rank of 4096 tokens, the attention kernel
    taking 1 s forward and 2 s backward."""
    return cp_time.context_parallel(J.cluster, lay, J.arch, 4096, (1.0, 2.0), n_fwd)


def test_a2a_moves_q_k_v_and_the_output_both_ways_exposed() -> None:
    """cp 2: each all-to-all sends half of its S bytes off the rank, (2-1)/2 S / B + 1 alpha.
    Forward: Q, K, V (48 MiB) and the output (32 MiB); the backward the same shapes again."""
    lay = Layout(cp=2, dp=4, cp_comm_type="a2a")
    exposed, hidden = _exchange(lay)
    one_way = (0.5 * 48 * MIB / B + ALPHA) + (0.5 * 32 * MIB / B + ALPHA)
    assert exposed == pytest.approx(2 * one_way)  # about 0.24 ms
    assert hidden == 0.0
    # full recompute runs the forward's pair a second time
    again, _ = _exchange(lay, n_fwd=2)
    assert again == pytest.approx(3 * one_way)


def test_all_gather_gathers_k_v_twice_and_reduce_scatters_their_gradients() -> None:
    """cp 4 (4 ranks, one node): the gathered K/V is 4 x 16 MiB; each ring all-gather and
    reduce-scatter moves (4-1)/4 of it and pays 3 alpha. Gathered in the forward and again in
    the backward, reduced once."""
    lay = Layout(cp=4, dp=2, cp_comm_type="all_gather")
    exposed, hidden = _exchange(lay)
    one = 0.75 * 64 * MIB / (B * RING_4) + 3 * ALPHA + RING_CALL
    assert exposed == pytest.approx(3 * one)
    assert hidden == 0.0


def test_p2p_is_the_ring_hidden_under_its_attention() -> None:
    """The ring is cp_time.context_parallel_ring on the rank's K/V (16 MiB per hop)."""
    got = _exchange(Layout(cp=2, dp=4))
    assert got == cp_time.context_parallel_ring(J.cluster, 1, 2, 16 * MIB, 1.0, 2.0, 1)
    assert got[0] == 0.0  # one 16 MiB hop (47 us) hides under a second of attention


def test_what_each_exchange_holds_while_the_attention_runs() -> None:
    """The larger of the forward's and the backward's working sets, TransformerEngine d0067d0d
    context_parallel.py (KV 16 MiB, K = V = 8 MiB, Q = O = 32 MiB):
    p2p cp 2: forward cp (KV + O) = 2 x 48 = 96 MiB (the ring's buffer list :1686-1707 and the
    per-step outputs :1672); backward two (2, KV) buffers + dq buffer (:2396-2401) + one step's
    dq_, dk_, dv_ = 5 x 16 + 2 x 32 = 144 MiB, the larger. p2p cp 8: 8 x 48 = 384 > 144.
    a2a: a second Q, K, V = 48 MiB. all_gather cp 4: forward 4 x 16 + max(4 x 8, 2 x 32) =
    128 MiB (:3215-3230, :3249-3263); backward zeroed dK, dV + gathered K, V + the index copy
    of one + dq (:3763-3808) = 4 x (32 + 8) + 32 = 192 MiB, the larger."""
    arch = J.arch
    assert cp_time.exchange_bytes(arch, Layout(cp=2), 4096) == 144 * MIB
    assert cp_time.exchange_bytes(arch, Layout(cp=8), 4096) == 384 * MIB
    assert cp_time.exchange_bytes(arch, Layout(cp=2, cp_comm_type="a2a"), 4096) == 48 * MIB
    gathered = cp_time.exchange_bytes(arch, Layout(cp=4, cp_comm_type="all_gather"), 4096)
    assert gathered == 192 * MIB


def test_the_layer_charges_the_exchange_and_its_host_issue() -> None:
    """A layer at cp 2 with a2a shows the exchange's seconds as exposed CP traffic; its host
    issue adds CP_EXCHANGE_KERNELS["a2a"] = 12 kernels where the ring adds CP_STEP_ISSUE per
    step (2 steps at cp 2)."""
    j = J
    ring = layer_time.layer_time(j, Layout(cp=2, dp=4), layer_time.gpu_of(j), False)
    a2a_lay = Layout(cp=2, dp=4, cp_comm_type="a2a")
    a2a = layer_time.layer_time(j, a2a_lay, layer_time.gpu_of(j), False)
    assert a2a.cp_hidden == 0.0 and a2a.cp > 0.0
    expected = cp_time.context_parallel(j.cluster, a2a_lay, j.arch, 4096.0, (0.0, 0.0), 1)[0]
    assert a2a.cp == pytest.approx(expected)
    assert ring.cp + ring.cp_hidden > 0.0
    units = dict(host.issue_blocks(j, a2a_lay, layer_kind(False)))["attn"]
    ring_units = dict(host.issue_blocks(j, Layout(cp=2, dp=4), layer_kind(False)))
    assert units == pytest.approx(host.HALF_LAYER + 12 / host.LAYER_KERNELS)
    assert ring_units["attn"] == pytest.approx(host.HALF_LAYER + 2 * host.CP_STEP_ISSUE)


def test_multi_latent_attention_moves_its_own_head_widths() -> None:
    """DeepSeek-V3's MLA hands the core attention 128 heads whose query and key are qk_head_dim
    + qk_pos_emb_head_dim = 128 + 64 = 192 wide and whose value is v_head_dim = 128 wide
    (Megatron-Core d98e8a64 multi_latent_attention.py:165-169, 214-215). A rank of t = 4096
    tokens at tp 8 (16 heads): K and V 4096 x 16 x (192 + 128) x 2 = 41,943,040 bytes (head_dim
    128 for both would say 33,554,432); Q 4096 x 16 x 192 x 2 = 25,165,824; the output
    4096 x 16 x 128 x 2 = 16,777,216."""
    arch = job("deepseek-v3", "h100-sxm-80gb", 8, 4096, 64).arch
    assert cp_time.head_widths(arch) == (192, 128)
    assert cp_time.kv_bytes(arch, 4096, 8) == 41_943_040
    assert cp_time.a2a_bytes(arch, 4096, 8) == (25_165_824 + 41_943_040, 16_777_216)
    # grouped-query attention keeps head_dim for both (the module docstring's Llama 3.1 8B)
    assert cp_time.head_widths(J.arch) == (128, 128)
