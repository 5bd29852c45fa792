"""What Megatron-LM's memory settings cost: selective recompute modules, FP8 weights per recipe,
MoE routing load and dispatcher buffers, MTP, CPU offloading, TP-overlap buffers, and what the
allocator counts.

Oracles: hand arithmetic from the shapes in the comments (published model configs: Llama 3.1 8B,
DeepSeek-V3 671B, Llama 3 70B) and from the sources each module docstring cites (Megatron-LM
d98e8a64 transformer_layer.py / multi_latent_attention.py / moe/*.py, Transformer Engine
module/base.py and cpp_extensions/gemm.py, DeepEP csrc/legacy/config.hpp and the hybrid-ep
branch's intranode.cu)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs import catalog
from planner.inputs.layout import Layout
from planner.inputs.units import GIB
from planner.model import activations as act
from planner.model import buffers, memory, params, rank_states
from planner.model.routing_load import memory_load
from planner.model.shard import Shard
from planner.model.stage_activations import per_layer, shard, stage_activations
from planner.model.stage_params import stage_params

LLAMA8 = catalog.get_model("llama3.1-8b")  # h 4096, F 14336, 32 heads / 8 groups of 128
DSV3 = catalog.get_model("deepseek-v3")  # MLA r_q 1536, r_kv 512, 128 heads (128+64 qk, 128 v)
T = 4096


def selective(*modules: str) -> Shard:
    """Megatron's selective recompute of `modules`, t = 1, T tokens."""
    return Shard(tokens=T, seq_per_cp_rank=T, recompute="core_attn", modules=frozenset(modules))


def test_mlp_module_keeps_only_the_dense_mlps_input() -> None:
    # Llama 3.1 8B, t = 1, per token: the MLP keeps its norm's input 2h, the norm output 2h, the
    # dropout mask h, fc1's SwiGLU output 2 x 2F and fc2's input 2F = 5h + 6F = 106,496; with
    # mlp recomputed (checkpointed on its input, transformer_layer.py) the input 2h and the
    # mask h outside the checkpoint: 12,288. 94,208 bytes per token fewer.
    full = act.layer_bytes(LLAMA8, False, selective())
    mlp = act.layer_bytes(LLAMA8, False, selective("mlp"))
    assert full - mlp == pytest.approx(94_208 * T)
    # MoE layers are not touched by "mlp" (transformer_layer.py: `if not self.is_moe_layer`)
    assert act.layer_bytes(DSV3, True, selective("mlp")) == act.layer_bytes(DSV3, True, selective())


def test_mla_up_proj_drops_query_key_value_and_the_latent_norm_outputs() -> None:
    # DeepSeek-V3, t = 1, per token: query and key a (qk + rope) = 128 x 192 each, value
    # 128 x 128, in bf16: 2 x 128 x (192 + 192 + 128) = 131,072; the latent norms' outputs the
    # up-projections save: 2 x (1536 + 512) = 4,096. 135,168 bytes per token.
    full = act.attention_bytes(DSV3, selective())
    up = act.attention_bytes(DSV3, selective("mla_up_proj"))
    assert full - up == pytest.approx(135_168 * T)


def test_layernorm_module_drops_the_separate_norms_outputs() -> None:
    # MLA's input norm and the MoE layer's pre-MLP norm are separate TENorms: their bf16 output
    # (2h = 14,336 per token) is discarded and recomputed; the fused norms of dense layers have
    # no output of their own to drop (transformer_layer.py: IdentityOp)
    assert act.attention_bytes(DSV3, selective()) - act.attention_bytes(
        DSV3, selective("layernorm")
    ) == pytest.approx(14_336 * T)
    assert act.moe_bytes(DSV3, selective()) - act.moe_bytes(
        DSV3, selective("layernorm")
    ) == pytest.approx(14_336 * T)
    assert act.layer_bytes(LLAMA8, False, selective("layernorm")) == act.layer_bytes(
        LLAMA8, False, selective()
    )


def test_moe_modules() -> None:
    # DeepSeek-V3 MoE layer, t = 1, k = 8 at the dropless load 1.2: 9.6 pairs per token.
    # moe_act discards the weighted activation, fc2's input, 2F = 4,096 bytes per pair
    pairs = 8 * 1.2
    base = act.moe_bytes(DSV3, selective())
    assert base - act.moe_bytes(DSV3, selective("moe_act")) == pytest.approx(pairs * 4096 * T)
    # shared_experts: the shared expert's fc1 output 2 x 2 x 2048 and activation 2 x 2048
    assert base - act.moe_bytes(DSV3, selective("shared_experts")) == pytest.approx(12_288 * T)
    # moe checkpoints the whole layer on its input: the norm's input 2h, the mask h and the
    # checkpoint's input (the norm output) 2h = 5h = 35,840 per token
    assert act.moe_bytes(DSV3, selective("moe")) == pytest.approx(35_840 * T)


@pytest.mark.parametrize(
    ("cf", "pad", "load"),
    # dropping only lowers the dropless load (1.2); padding to capacity makes it exact
    [(None, False, 1.2), (1.0, False, 1.0), (1.5, False, 1.2), (1.5, True, 1.5)],
)
def test_routing_load_with_a_capacity_factor(cf: float | None, pad: bool, load: float) -> None:
    j = job(
        "deepseek-v3",
        "h100-sxm-80gb",
        8,
        4096,
        64,
        moe_expert_capacity_factor=cf,
        moe_pad_expert_input_to_capacity=pad,
    )
    assert memory_load(j, Layout(tp=1, pp=1, dp=8)) == load


@pytest.mark.parametrize(
    ("gpu", "recipe", "gather", "expected"),
    [
        # Hopper: delayed / tensorwise keep the 8-bit data and its transpose (TN-only GEMMs)
        ("h100-sxm-80gb", "tensorwise", True, (2.0, 0.0)),
        ("h100-sxm-80gb", "delayed", False, (2.0, 2.0)),
        # Blackwell reads either layout: one 8-bit copy
        ("b200-sxm-180gb", "tensorwise", True, (1.0, 0.0)),
        ("b200-sxm-180gb", "tensorwise", False, (2.0, 1.0)),
        # MXFP8: row- and column-wise data, a 1-byte scale per 32 each
        ("b200-sxm-180gb", "mxfp8", True, (2.0 + 2 / 32, 0.0)),
        # blockwise 128 x 128: both directions, a 4-byte scale per block each
        ("h100-sxm-80gb", "blockwise", False, (2.0, 2.0 + 8 / 16384)),
    ],
)
def test_fp8_weight_bytes_per_recipe(
    gpu: str, recipe: str, gather: bool, expected: tuple[float, float]
) -> None:
    j = job("llama3.1-8b", gpu, 8, 4096, 64, precision="fp8", fp8_recipe=recipe)
    j = replace(j, fp8_param_gather=gather)
    assert buffers.quantised_weight_bytes(j, Layout(dp=8, zero_stage=1)) == pytest.approx(expected)


def test_deepep_buffers_from_its_size_hints() -> None:
    # DeepEP normal mode (deepseek-ai/DeepEP dd758caf csrc/legacy/config.hpp:53-99), 20 SMs =
    # 10 channels, h = 7168 bf16 (14,336 bytes per token), per received token 14,336 + 8
    # (SourceMeta, two ints: csrc/kernels/legacy/internode.cu:22-45) + 128 x 8 + 128 x 4 +
    # 128 x 4 = 16,392 bytes; each hint rounded up to 128 bytes.
    # ep 8: NVLink only, 256 tokens per channel and rank: 10 x 8 x (256 x 16,392 + 5 x 4)
    # = 335,709,760 -> 335,709,824
    assert buffers._deepep_bytes(14_336, 8, 20) == 335_709_824
    # ep 32: NVLink 10 x 8 x (288 x 16,392 + 11 x 4) = 377,675,200 -> 377,675,264; RDMA over
    # 4 nodes 10 x 4 x (128 x 2 x (16,392 + 16) + 18 x 2 x 4) = 168,023,680 (a multiple of 128)
    assert buffers._deepep_bytes(14_336, 32, 20) == 377_675_264 + 168_023_680
    # ep 16: the dispatch config's RDMA receive chunk 128 rounds up to a multiple of its send
    # chunk 20: 140 (config.hpp:47; legacy.py:250 Config(.., 36, 288, 20, 128)), the combine's
    # to 132 (send 12). NVLink 10 x 8 x (288 x 16,392 + 7 x 4) = 377,673,920 -> 377,673,984;
    # RDMA 10 x 2 x (140 x 2 x 16,408 + 144) = 91,887,680 -> 91,887,744
    assert buffers._deepep_bytes(14_336, 16, 20) == 377_673_984 + 91_887_744


def test_hybridep_buffer_holds_every_token_of_the_ep_group() -> None:
    # DeepSeek-V3 on 256 B200, ep 8 (recipe D7): 4096 tokens per rank x 8 ranks, each with
    # h bf16 values (14,336 bytes), a fp32 probability per local expert (32) of each of the 8
    # ranks of the NVLink domain (1,024) and a fp32 scale per 128 values (224): 510,656,512;
    # and the all-gathered routing map always (DeepEP hybrid-ep 94a9f8f6 hybrid_ep.cu:99,
    # extension/allgather.cu:142-147): 256 experts x 32,768 tokens, 1 byte each = 8,388,608
    j = job("deepseek-v3", "b200-sxm-180gb", 256, 4096, 4096)
    lay = Layout(pp=16, dp=16, ep=8, etp=1, moe_token_dispatcher_type="flex")
    flex = lay.with_(moe_flex_dispatcher_backend="hybridep")
    assert buffers.dispatcher_bytes(j, flex) == 510_656_512 + 8_388_608
    assert buffers.dispatcher_bytes(j, lay.with_(moe_token_dispatcher_type="alltoall")) == 0


def test_tp_overlap_userbuffers() -> None:
    # 12 overlapped GEMMs of [seq x mbs, h]: Llama 3 70B, seq 8192, h 8192: 16 bytes per element
    # under FP8 (8 all-gather buffers in 8 bits, 4 reduce-scatter in 16) = 1 GiB; 24 in bf16
    j = job("llama3.1-70b", "h100-sxm-80gb", 64, 8192, 256, precision="fp8")
    lay = Layout(tp=4, pp=8, dp=2, sequence_parallel=True, tp_comm_overlap=True)
    assert buffers.tp_overlap_bytes(j, lay) == GIB
    assert buffers.tp_overlap_bytes(replace(j, precision="bf16"), lay) == 1.5 * GIB
    assert buffers.tp_overlap_bytes(j, lay.with_(tp_comm_overlap=False)) == 0


def test_tp_overlap_userbuffers_bf16_ends() -> None:
    # FP8 with --first-last-layers-bf16: Megatron-LM d98e8a64 megatron/training/initialize.py
    # :230-238 asks initialize_ub for the FP8 and the unquantised mode, and TransformerEngine
    # d0067d0d pytorch/module/base.py:516 builds all 12 buffers per mode (bf16 ones at :472):
    # 1 GiB FP8 set + 1.5 GiB bf16 set = 2.5 GiB at Llama 3 70B, seq 8192, h 8192
    j = job("llama3.1-70b", "h100-sxm-80gb", 64, 8192, 256, precision="fp8")
    lay = Layout(tp=4, pp=8, dp=2, sequence_parallel=True, tp_comm_overlap=True)
    assert buffers.tp_overlap_bytes(replace(j, bf16_layers_at_start=1), lay) == 2.5 * GIB
    assert buffers.tp_overlap_bytes(replace(j, bf16_layers_at_end=2), lay) == 2.5 * GIB
    # NVFP4 (no --fp8): one unquantised set, bf16 ends or not
    fp4 = replace(j, precision="fp4", bf16_layers_at_end=1)
    assert buffers.tp_overlap_bytes(fp4, lay) == 1.5 * GIB


def test_te_workspaces() -> None:
    # one 32 MiB + 1 KiB cuBLAS workspace on Hopper, 4 more for a MoE model's grouped GEMMs,
    # 3 more with TP overlap; 4 MiB before Hopper
    mib = 2**20
    dense = job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 64)
    assert buffers.te_workspace_bytes(dense, Layout(dp=8)) == 32 * mib + 1024
    moe = job("mixtral-8x7b", "h100-sxm-80gb", 8, 4096, 64)
    assert buffers.te_workspace_bytes(moe, Layout(dp=8)) == 5 * (32 * mib + 1024)
    ov = Layout(tp=2, dp=4, sequence_parallel=True, tp_comm_overlap=True)
    assert buffers.te_workspace_bytes(dense, ov) == 4 * (32 * mib + 1024)
    a100 = job("llama3.1-8b", "a100-sxm-80gb", 8, 4096, 64)
    assert buffers.te_workspace_bytes(a100, Layout(dp=8)) == 4 * mib


def test_mtp_rank_holds_the_word_embedding_its_input_needs() -> None:
    # Megatron builds the embedding wherever MTP runs (gpt_model.py `pre_process or
    # mtp_process`): DeepSeek-V3's last stage holds 129,280 x 7168 embedding parameters more
    j = job("deepseek-v3", "b200-sxm-180gb", 256, 4096, 4096)
    lay = Layout(pp=16, dp=16, ep=8, etp=1)
    chunks = lay.chunk_layers(DSV3.num_layers)
    with_mtp = stage_params(j, lay, 15, chunks[15])
    no_mtp_arch = DSV3.model_copy(update={"mtp_num_layers": 0})
    without = stage_params(replace(j, arch=no_mtp_arch), lay, 15, chunks[15])
    mtp_dense, mtp_expert = params.mtp_layer_params(DSV3)
    assert with_mtp[0] - without[0] == mtp_dense + 129_280 * 7168
    assert with_mtp[1] - without[1] == mtp_expert / 8


def test_cpu_offloading_keeps_layers_less_offloaded_on_the_gpu() -> None:
    # Llama 3.1 8B on one stage, 20 of 32 layers offloaded: Transformer Engine's default schedule
    # holds "(num_layers - num_offloaded_layers) * T" at its peak (TransformerEngine d0067d0d
    # pytorch/cpu_offload.py, DefaultOffloadSynchronizer): 12 layers' activations instead of 32
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64)
    lay = Layout(dp=8)
    sh = shard(j, lay)
    per = per_layer(j.arch, sh)
    chunks = lay.chunk_layers(32)[0]
    plain = stage_activations(j, lay, 0, chunks, sh, per)
    off = stage_activations(j, lay.with_(cpu_offloading_num_layers=20), 0, chunks, sh, per)
    assert plain - off == pytest.approx(20 * per.dense)


def test_allocated_leaves_out_what_pytorch_does_not_allocate() -> None:
    # allocated = total - (CUDA context + NCCL + TP-overlap userbuffers + fragmentation); the
    # persistent part (what stays between steps) is weights + grads + optimizer + workspaces
    j = job("llama3.1-70b", "h100-sxm-80gb", 64, 8192, 256, precision="fp8")
    lay = Layout(tp=4, pp=8, dp=2, vpp=5, sequence_parallel=True, tp_comm_overlap=True)
    st = memory.estimate(j, lay).stages[0]
    acts = st.activations / memory.FRAGMENTATION
    outside = buffers.context_bytes(lay) + buffers.tp_overlap_bytes(j, lay)
    assert st.unallocated == pytest.approx(outside + acts * (memory.FRAGMENTATION - 1))
    assert st.allocated == pytest.approx(
        st.weights + st.grads + st.optimizer + acts + buffers.workspace_bytes(j, lay)
    )
    persistent = rank_states.persistent_bytes(j, lay, 0)
    assert persistent == pytest.approx(
        st.weights + st.grads + st.optimizer + buffers.workspace_bytes(j, lay)
    )
