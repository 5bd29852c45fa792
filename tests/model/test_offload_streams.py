"""Fine-grained offloading's time as Megatron's streams run it (planner.model.stage_offload
`fine_offload_exposed`).

Oracles: Megatron-LM d98e8a64 megatron/core/pipeline_parallel/fine_grained_activation_offload.py
(the forward's copies queue on the side stream, :1098-1130 and :1262-1269, the compute stream
waits on them only under the in-flight cap, :1135-1138, None by default, transformer_config.py
:1382; a reload waits for its group's copy out, :1183-1185, and the backward for its reload,
:1288-1308; a chunk's last reload is issued in the backward before, :1278-1286; the last rank's
chunk whose backward follows its forward keeps its last groups, :1217-1225), Megatron's warm-up
count (schedules.py, planner.model.megatron_order `warmup`: pp - rank - 1 without
interleaving), copies out and reloads sharing the link's one rate (host_link, the measured
functional row in stage_offload) and hand arithmetic on one layer's forward and backward
seconds. The copies:
Llama 3.1 8B in bf16 at TP 1 (32 heads, 8 groups of 128): core_attn copies Q, K, V
(32 + 2 x 8) x 128 x 2 = 12,288 bytes a token and the flash output, 32 x 128 x 2 = 8,192;
attn_proj the same output again, 8,192: 28,672 bytes a token, 8,192 tokens, over one H100's or
B200's share of its PCIe 5 switch uplink at 80%: 64 / 2 x 0.8 = 25.6 GB/s (host_link)."""

from __future__ import annotations

from jobs import job

from planner.inputs.layout import Layout, OffloadModule
from planner.model import stage_offload, stage_time

MODS: tuple[OffloadModule, ...] = ("core_attn", "attn_proj")
COPY = 8192 * 28672 / 25.6e9  # seconds one layer's groups take one way: 9.175 ms


def _rank_waits(gpu: str) -> tuple[float, float, list[float]]:
    """Llama 3.1 8B on 8 of `gpu`, pp 2 (16 layers a rank), DP 4: one layer's forward and
    backward seconds (no TP, CP or EP waits, no recompute: its copy windows) and each rank's
    seconds per micro-batch offloading core_attn and attn_proj shows."""
    j = job("llama3.1-8b", gpu, 8, 8192, 64)
    lay = Layout(dp=4, pp=2, offload_modules=MODS)
    t = stage_time.layout_times(j, lay)
    assert stage_offload.copy_windows(j, lay, t.dense) == (t.dense.fwd, t.dense.bwd)
    shown = [
        stage_offload.fine_offload_exposed(j, lay, rank, chunks, t)
        for rank, chunks in enumerate(lay.chunk_layers(32))
    ]
    return t.dense.fwd, t.dense.bwd, shown


CORE = 8192 * 20480 / 25.6e9  # core_attn's share of COPY: 6.554 ms


def test_a_backward_after_another_forward_shows_each_core_attention_reload() -> None:
    # H100, rank 0 (pp 2, 16 layers): core_attn and attn_proj are back to back
    # (attention.py:1605-1629): core_attn's reload is issued as attn_proj's backward ends
    # (:1332-1342) and waited for as its own starts (:1288-1308), nothing between: each of the
    # 16 layers shows its 6.55 ms in every micro-batch, whatever else queues on the link (at
    # least: the copies out of the forward before may delay it further). Lumped per layer
    # (9.2 ms under a 10+ ms backward) only the queue showed: 15/16 x (17 COPY - 15 fwd - bwd).
    fwd, bwd, shown = _rank_waits("h100-sxm-80gb")
    assert fwd < COPY < bwd
    assert shown[0] >= 16 * CORE
    assert 15 / 16 * (17 * COPY - 15 * fwd - bwd) < 16 * CORE


def test_copies_out_and_back_share_the_link() -> None:
    # B200: the compute is faster, the link the same: a layer's copy one way (9.2 ms) fits under
    # its forward and backward, out and back it does not. Both directions go through one pipe:
    # per micro-batch the link carries 16 layers' groups out and back, 16 x 2 copy, against
    # 16 x (fwd + bwd) of compute; the excess shows, or the core_attn reloads' waits where they
    # show more (each whole, as above).
    fwd, bwd, shown = _rank_waits("b200-sxm-180gb")
    assert bwd < COPY < fwd + bwd < 2 * COPY
    assert shown[0] >= max(16 * (2 * COPY - fwd - bwd), 16 * CORE)
