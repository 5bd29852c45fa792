"""torchtitan's loss on the last stage: compiled (`[torchtitan] compile_loss`) it holds
COMPILED_PYTORCH_LOSS_BYTES_PER_LOGIT (6) per logit in place of the eager 12; chunked
(`loss_chunks` > 1) its peak and a recomputed layer's working set are not added.

Oracles:
- pytorch/torchtitan e347b1e5 torchtitan/components/loss.py:33-35 (and b5bcd76c loss.py:245-252,
  :557 for the chunked loss's inner one) wraps the loss in torch.compile where "loss" is among
  compile.components; the 6 bytes (2 + 4: the bf16 logits' gradient beside one fp32 [T, V]
  tensor the partitioner may save) are derived in loss_activations, by hand from what the graphs
  must hold; the difference to the eager figure is hand arithmetic, 12 - 6 = 6 bytes per logit.
- b5bcd76c components/loss.py:676-700: each chunk runs the output layer, the loss and
  chunk_loss.backward() inside the loss call, and the decoder's backward starts only after it
  returns (:713-720, _DecoderOutputGradientBackProp): no chunk's logits or gradients are alive
  when the first layer is recomputed, so the peak is what is stored plus the larger of the two.
"""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.torchtitan import TorchtitanSection, training_defaults
from planner.model import layer_kept, memory
from planner.model import stage_activations as sa

DS16B = Layout(tp=1, pp=1, dp=8, ep=8, zero_stage=3, micro_batch_size=4, recompute="selective")
"""e347b1e5 deepseek_v3/train_configs/deepseek_v3_16b.toml: local_batch_size 4 (:38), seq_len
4096 (:39), expert_parallel_degree 8 (:52) on 8 GPUs, selective op (:64)."""


def _titan(model: str, n: int, seq: int, gbs: int, **section: object) -> Job:
    defaults = training_defaults("torchtitan", compile_on=False)
    return job(
        model,
        "h100-sxm-80gb",
        n,
        seq,
        gbs,
        framework="torchtitan",
        torchtitan=TorchtitanSection(**section),
        **defaults,
    )


def test_the_compiled_loss_holds_six_bytes_a_logit_less() -> None:
    eager = _titan("deepseek-v2-lite", 8, 4096, 32)
    compiled = _titan("deepseek-v2-lite", 8, 4096, 32, compile_loss=True)
    T, V = 4 * 4096, 102400  # the flavor's vocab (b5bcd76c deepseek_v3/__init__.py:389-456)
    assert eager.arch.padded_vocab(1) == V
    drop = memory.estimate(eager, DS16B).peak - memory.estimate(compiled, DS16B).peak
    # unchunked: the loss is added to the rest (`both`), so the peak falls by (12 - 6) x T x V,
    # 6 x 16,384 x 102,400 = 10,066,329,600 bytes, times the allocator allowance
    assert drop == pytest.approx(6 * T * V * memory.fragmentation(eager), rel=1e-9)


def test_under_tp_the_compiled_loss_keeps_the_loss_parallel_figure() -> None:
    """At tp > 1 the compiled loss is not derived (loss_activations): the eager loss-parallel
    figure stands, so compiling it changes nothing."""
    lay = Layout(tp=2, pp=1, dp=4, zero_stage=3, micro_batch_size=1, sequence_parallel=True)
    eager = _titan("llama3.1-8b", 8, 8192, 8)
    compiled = _titan("llama3.1-8b", 8, 8192, 8, compile_loss=True)
    assert memory.estimate(eager, lay).peak == memory.estimate(compiled, lay).peak


FULL = Layout(tp=1, pp=1, dp=8, zero_stage=3, micro_batch_size=1, recompute="full")


@pytest.mark.parametrize("chunks", [1, 8])
def test_the_chunked_loss_and_the_recomputed_layer_peak_apart(chunks: int) -> None:
    j = _titan("llama3.1-8b", 8, 8192, 8, loss_chunks=chunks)
    sh = sa.shard(j, FULL)
    per = layer_kept.per_layer(j.arch, sh)
    layers = FULL.chunk_layers(j.arch.num_layers)[0]
    parts = sa.activation_parts(j, FULL, 0, layers, sh, per)
    working = max(parts.working, *parts.after)  # a dense layer's: no MoE, no CP, no offload
    assert parts.loss > 0 and working > 0 and parts.kept[0] > 0
    acts = sa.stage_activations(j, FULL, 0, layers, sh, per)
    if chunks == 1:  # the whole logits: planner's published-peak reading, both (unchanged)
        assert acts == pytest.approx(parts.kept[0] + parts.loss + working, rel=1e-12)
    else:  # one micro-batch stored (pp 1), then the loss, then the recomputed layer
        assert acts == pytest.approx(parts.kept[0] + max(parts.loss, working), rel=1e-12)
        assert acts < parts.kept[0] + parts.loss + working
