"""Fine-grained activation offloading (Megatron --offload-modules) beside full recompute
(planner.model.offload_chunks.offloading_layers, layer_kept.PerLayer.whole, host_memory).

Oracles: Megatron-LM d98e8a64 megatron/core/recompute.py:167-181 (block recompute checkpoints a
chunk's first recompute_num_layers layers and runs the others as they are, `cf(*args)`; uniform
checkpoints every layer), tensor_parallel/random.py:616 and :628 (a checkpointed layer's forward
runs under torch.no_grad, so autograd saves nothing for the offload hooks; the checkpoint saves
the layer input outside every module's offload context), transformer_layer.py:1544-1555 and the
experts' experts.py:254-267 (each module's offload flag set per layer, whatever the recompute),
experts.py:281-284 (expert_fc1 offloaded under an FP8 recipe other than MXFP8: fc1 saves its
bf16 input); and hand arithmetic on published shapes in the comments (Llama 3.1 8B: h 4096, 32
heads / 8 groups of 128; DeepSeek-V3: h 7168, top-8)."""

from __future__ import annotations

import tomllib

import pytest
from jobs import job

from planner.inputs import catalog
from planner.inputs.layout import Layout
from planner.inputs.plan import parse_plan
from planner.model import host_memory, memory, offload_chunks
from planner.model.layer_kept import chunk_kept
from planner.model.moe_activations import pairs
from planner.model.shard import Shard
from planner.model.stage_activations import per_layer, shard, stage_activations
from planner.search.rules import check_plan

LLAMA_CORE_ATTN = 8192 * 20480
"""Llama 3.1 8B's core_attn group per layer at 8192 tokens, t = 1, bf16: Q, K, V 2 (a + 2g) d =
2 x 48 x 128 = 12,288 bytes per token and the flash output 2 a d = 8,192: 20,480 per token
copied to the host and reloaded."""

LLAMA_CORE_ATTN_FREED = 8192 * 12288
"""What that group frees on the GPU: Q, K, V alone, the bf16 output projection keeping the
flash output (attention.py:1626-1629 @d98e8a64; tests/model/test_offload_attention_output.py)."""


def _llama_peak(recompute: str, method: str, k: int, offload: bool) -> float:
    """Activations of Llama 3.1 8B on one stage (32 layers, one micro-batch in flight)."""
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64)
    lay = Layout(
        dp=8,
        recompute=recompute,  # type: ignore[arg-type]
        recompute_method=method,  # type: ignore[arg-type]
        recompute_num_layers=k,
        offload_modules=("core_attn",) if offload else (),
    )
    sh = shard(j, lay)
    return stage_activations(j, lay, 0, lay.chunk_layers(32)[0], sh, per_layer(j.arch, sh))


def test_block_recompute_offloads_the_layers_it_leaves_whole() -> None:
    # block 8 of 32: layers 8..31 run without a checkpoint and offload their core_attn group as
    # a layer without recompute does; the GPU frees 23 groups' Q, K, V (one stage: layer 31's
    # stays, its backward next, fine_grained_activation_offload.py:1217-1225 @d98e8a64), less
    # the two reloaded groups of the window (as without recompute: tests/model/test_fine_offload.py)
    assert LLAMA_CORE_ATTN == 8192 * (2 * (32 + 2 * 8) * 128 + 2 * 32 * 128)
    assert LLAMA_CORE_ATTN_FREED == 8192 * 2 * (32 + 2 * 8) * 128
    saved = _llama_peak("full", "block", 8, False) - _llama_peak("full", "block", 8, True)
    assert saved == pytest.approx(23 * LLAMA_CORE_ATTN_FREED - 2 * LLAMA_CORE_ATTN)
    # the whole layers save what they save without recompute, 31 of 32 there
    plain = _llama_peak("none", "uniform", 1, False) - _llama_peak("none", "uniform", 1, True)
    assert plain == pytest.approx(31 * LLAMA_CORE_ATTN_FREED - 2 * LLAMA_CORE_ATTN)


@pytest.mark.parametrize(("method", "k"), [("uniform", 1), ("uniform", 4), ("block", 32)])
def test_recomputed_layers_keep_their_input_and_offload_nothing(method: str, k: int) -> None:
    # every layer checkpointed: each keeps its input on the GPU (saved outside the offload
    # contexts), its forward under no_grad saves nothing to offload: no saving, no window, and
    # nothing on the host
    assert _llama_peak("full", method, k, True) == _llama_peak("full", method, k, False)
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64)
    lay = Layout(
        dp=8,
        recompute="full",
        recompute_method=method,  # type: ignore[arg-type]
        recompute_num_layers=k,
        offload_modules=("core_attn",),
    )
    assert host_memory.activation_bytes(j, lay) == 0


def test_host_memory_holds_the_whole_layers_groups() -> None:
    # block 8 of 32 on one stage, one micro-batch: the 24 whole layers' core_attn groups, all on
    # the host at any fraction: the first step (the warm-up) copies every group
    # (should_bulk_offload, fine_grained_activation_offload.py:1211-1212 d98e8a64; the last
    # rank's rule, :1217-1225, and the fraction, :650-668, are set after it) and the pinned
    # copies stay (OffloadTensorPool :241-244, :347-359); the pinned round-up of the 8192 x
    # 4096 x 2 = 2^26-byte hidden-state tensor is 1. (Before: 23, and 12 at fraction 0.5, the
    # steady steps' copies.)
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64)
    lay = Layout(
        dp=8,
        recompute="full",
        recompute_method="block",
        recompute_num_layers=8,
        offload_modules=("core_attn",),
    )
    assert host_memory.activation_bytes(j, lay) == pytest.approx(24 * LLAMA_CORE_ATTN)
    half = lay.with_(activation_offload_fraction=0.5)
    assert host_memory.activation_bytes(j, half) == pytest.approx(24 * LLAMA_CORE_ATTN)


def test_offloading_layers_per_chunk() -> None:
    # Llama 3.1 8B, pp 2 x vpp 2: four chunks of 8 layers per rank's two; block 3 leaves 5 of
    # each chunk whole (Megatron counts N per virtual stage), block 9 none, uniform none
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64)
    base = Layout(pp=2, vpp=2, dp=4, offload_modules=("core_attn",))
    chunks = base.chunk_layers(32)[0]
    assert [len(c) for c in chunks] == [8, 8]

    def counts(lay: Layout) -> list[int]:
        return [
            sum(c) for c in offload_chunks.offloading_layers(j.arch, lay, shard(j, lay), chunks)
        ]

    assert counts(base) == [8, 8]
    block = base.with_(recompute="full", recompute_method="block", recompute_num_layers=3)
    assert counts(block) == [5, 5]
    assert counts(block.with_(recompute_num_layers=9)) == [0, 0]
    assert counts(block.with_(recompute_method="uniform", recompute_num_layers=1)) == [0, 0]
    assert counts(block.with_(offload_modules=())) == [0, 0]


DSV3 = catalog.get_model("deepseek-v3")
T = 4096


def test_fp8_fc1_original_is_offloaded_from_the_whole_layers() -> None:
    # DeepSeek-V3 MoE layers 3..10 (8 of them), block 3, FP8 (tensorwise: fc1 keeps its FP8
    # copy, 1 byte per element; with expert_fc1 offloaded, its bf16 input instead). One GPU with
    # every expert, t = 1: n = 8 T x 1.2 pairs. The 5 whole layers offload fc1's input, so each
    # keeps n x 7168 bytes (the FP8 copy it keeps without offloading) fewer than without it;
    # the 3 checkpointed ones keep their input either way
    lay = Layout(recompute="full", recompute_method="block", recompute_num_layers=3)
    chunk = range(3, 11)
    no = Shard(tokens=T, seq_per_cp_rank=T, linear_bytes=1.0, recompute="full")
    yes = Shard(
        tokens=T,
        seq_per_cp_rank=T,
        linear_bytes=1.0,
        recompute="full",
        fc1_keeps_original=True,
        offload=frozenset({"expert_fc1"}),
    )
    n = pairs(DSV3, no)
    assert n == pytest.approx(8 * T * 1.2)
    without = chunk_kept(DSV3, lay, per_layer(DSV3, no), chunk)
    offloaded = chunk_kept(DSV3, lay, per_layer(DSV3, yes), chunk)
    assert without - offloaded == pytest.approx(5 * n * 7168)


QWEN_PLAN = """
[model]
name = "qwen3-30b-a3b"
[cluster]
gpu = "b200-sxm-180gb"
num_gpus = 64
[training]
seq_length = 4096
global_batch_size = 256
precision = "fp8"
fp8_recipe = "tensorwise"
[parallel]
tp = 2
pp = 2
ep = 2
micro_batch_size = 2
zero_stage = 1
recompute = "full"
recompute_method = "block"
recompute_num_layers = 3
"""


def test_offloading_fc1_under_block_recompute_lowers_the_peak() -> None:
    # the QA report's plan: listing expert_fc1 raised the peak (48.5 -> 55.5 GiB), the whole
    # layers paying for fc1's bf16 input and offloading none of it. Now each of rank 0's two
    # micro-batches in flight (1F1B, pp 2) has 21 whole layers (24 a stage, block 3), each moving
    # fc1's bf16 input to the host: 8192 tokens / tp 2 (sequence parallel) x top-8 x the 1.2
    # dropless load pairs, x etp 2 (fc1's input gathered over expert TP), x 2h = 4096 bytes:
    # 0.3 GiB a layer, and the experts' FP8 padding rows beside them, at most 16 - 1 for each of
    # the 128 / ep 2 = 64 local experts (experts.py:890-903, fp8_utils.py:356-361 d98e8a64),
    # 960 rows after the gather; the pinned round-up of the 8192 x 2048 x 2 / 2 = 2^24-byte
    # hidden-state tensor is 1. Tensorwise: under the default delayed recipe expert_fc1 does not
    # run (tests/search/test_rules_save_original.py)
    def plan(extra: str) -> tuple[float, float]:
        p = check_plan(parse_plan(tomllib.loads(QWEN_PLAN + extra)))
        job_, lay = p.job, p.require_layout()
        return memory.estimate(job_, lay).peak, host_memory.activation_bytes(job_, lay)

    peak_no, host_no = plan("")
    peak_yes, host_yes = plan('offload_modules = ["expert_fc1"]\n')
    assert host_no == 0
    routed = 8192 / 2 * 8 * 1.2 * 2 * 4096
    assert routed == pytest.approx(0.3 * 2**30)
    fc1 = routed + 64 * 15 * 4096
    assert host_yes == pytest.approx(2 * 21 * fc1)
    assert peak_yes < peak_no
