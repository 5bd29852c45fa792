"""Step time of the memory savers and FP8 recipes: selective recompute modules, CPU offloading,
FP8 quantisation per recipe.

Oracles: hand arithmetic in comments (bytes over HBM at 0.8 of its rate, FLOPs of the recomputed
GEMMs from the published DeepSeek-V3 and Llama 3.1 8B shapes), the transfer-vs-window rule of
Transformer Engine's double-buffered offload evaluated by hand from the layer's own times, and
Megatron's model-FLOP convention for the recompute FLOPs (hardware minus model FLOPs).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from paths import EXAMPLES

from planner.inputs import catalog
from planner.inputs.hardware import ClusterSpec
from planner.inputs.layout import Layout, RecomputeModule
from planner.inputs.plan import Job, load_plan
from planner.model import cost, flops, gemm, gemm_shapes, host_link, layer_time
from planner.model.layer_time import gpu_of

EXAMPLE = EXAMPLES / "deepseek-v3-h800.toml"


def dsv3() -> tuple[Job, Layout]:
    plan = load_plan(EXAMPLE)
    return plan.job, plan.require_layout()


def recompute_of(job: Job, lay: Layout, moe: bool, *mods: RecomputeModule) -> float:
    selective = lay.with_(recompute="selective", recompute_modules=mods)
    return layer_time.layer_time(job, selective, gpu_of(job), moe).recompute


def test_elementwise_modules_by_hand() -> None:
    # DeepSeek-V3, 4096 tokens per micro-batch, tp 1, H800 HBM at 0.8 x 3.35 TB/s:
    #   layernorm: 2 norms x 4096 x 7168 x (read 2 + write 2 bytes) = 234.9 MB -> 87.6 us;
    #   moe_act: 4096 x 8 x 1.320 routed rows x 2048 x (read 2 x 2 + write 2) = 531.6 MB -> 198
    #   us (1.320: the busiest of 64 ranks of 4 experts, 1 + z(64) 0.274 / 2 = 1 + 2.3367 x 0.137).
    job, lay = dsv3()
    hbm = 0.8 * 3.35e12
    assert recompute_of(job, lay, True, "layernorm") == pytest.approx(2 * 4096 * 7168 * 4 / hbm)
    routed = 4096 * 8 * 1.3201
    moe_act = recompute_of(job, lay, True, "moe_act")
    assert moe_act == pytest.approx(routed * 2048 * 6 / hbm, rel=1e-4)
    # a dense layer has no experts to re-activate; an MoE layer no dense MLP
    assert recompute_of(job, lay, False, "moe_act") == 0.0
    assert recompute_of(job, lay, True, "mlp") == 0.0
    assert recompute_of(job, lay, False, "mlp") > 0.0


def test_modules_add_up_and_rerun_their_gemms() -> None:
    job, lay = dsv3()
    mods: tuple[RecomputeModule, ...] = ("layernorm", "mla_up_proj", "moe_act")
    each = sum(recompute_of(job, lay, True, m) for m in mods)
    assert recompute_of(job, lay, True, *mods) == pytest.approx(each)
    # mla_up_proj re-runs MLA's q and kv up-projections: (4096 x 1536 x 24576) and
    # (4096 x 512 x 32768), at least their GEMM time at the part's FP8 roofline
    g = gpu_of(job)
    up = gemm.gemm_time(4096, 1536, 24576, g.peak_linear, g.ridge, g.e_linear)
    up += gemm.gemm_time(4096, 512, 32768, g.peak_linear, g.ridge, g.e_linear)
    assert recompute_of(job, lay, True, "mla_up_proj") > up
    # the whole MoE block costs more than its activation alone
    assert recompute_of(job, lay, True, "moe") > recompute_of(job, lay, True, "moe_act")


def test_moe_module_repeats_the_dispatch() -> None:
    # recomputing the MoE block re-runs its dispatch and combine: 3 passes instead of 2
    job, lay = dsv3()
    g = gpu_of(job)
    plain = layer_time.layer_time(job, lay.with_(recompute="none"), g, True).ep
    moe = layer_time.layer_time(
        job, lay.with_(recompute="selective", recompute_modules=("moe",)), g, True
    ).ep
    assert moe == pytest.approx(1.5 * plain)


def test_recompute_module_flops_by_hand() -> None:
    # hardware - model FLOPs per step with mla_up_proj: tokens x 61 layers x 2 x
    # (1536 x 128 x 192 + 512 x 128 x 256) = tokens x 61 x 109,051,904
    arch = catalog.get_model("deepseek-v3")
    s, b = 4096, 8
    model = flops.model_flops(arch, s, b)
    hw = flops.hardware_flops(arch, s, b, "core_attn", ("mla_up_proj",))
    assert hw - model == pytest.approx(s * b * 61 * 109_051_904)
    # layernorm and moe_act re-run no matmul; core_attn alone is the old selective count
    assert flops.hardware_flops(arch, s, b, "core_attn", ("layernorm", "moe_act")) == model
    core = flops.hardware_flops(arch, s, b, "core_attn", ("core_attn",))
    assert core == flops.hardware_flops(arch, s, b, "core_attn")


def h100_job(precision: str = "bf16", recipe: str = "delayed", gbs: int = 8) -> Job:
    spec = catalog.get_gpu("h100-sxm-80gb")
    cluster = ClusterSpec(
        gpu=spec, num_gpus=8, gpus_per_node=8, memory_gib=spec.memory_gib, tiers=spec.tiers
    )
    return Job(
        arch=catalog.get_model("llama3.1-8b"),
        cluster=cluster,
        seq_length=8192,
        global_batch_size=gbs,
        precision=precision,  # type: ignore[arg-type]
        fp8_recipe=recipe,  # type: ignore[arg-type]
    )


def test_fp8_weights_are_quantised_once_per_step() -> None:
    # Llama 3.1 8B, one layer's weights: 4096 x (4096 + 2 x 1024) + 4096 x 4096 + 4096 x 2 x
    # 14336 + 14336 x 4096 = 218,103,808 elements x 4 bytes (delayed) / (0.8 x 3.35 TB/s)
    j = h100_job("fp8")
    lay = Layout(dp=8)
    one = layer_time.layer_time(j, lay, gpu_of(j), False)
    assert one.weight_cast == pytest.approx(218_103_808 * 4 / (0.8 * 3.35e12))
    # per step, not per micro-batch: one more micro-batch adds the per-micro-batch compute only
    m1 = cost.estimate(j, lay).breakdown.compute  # gbs 8 / dp 8: one micro-batch
    m2 = cost.estimate(replace(j, global_batch_size=16), lay).breakdown.compute
    per_mb = m2 - m1
    assert m1 - per_mb == pytest.approx(32 * one.weight_cast)


def test_fp8_recipes_quantisation_cost_by_hand() -> None:
    # per micro-batch each GEMM quantises its input (M x K) and output gradient (M x N):
    # tensorwise reads the tensor once more for its amax, 6 bytes per element against 4
    lay = Layout(dp=8)
    g = gpu_of(h100_job("fp8"))
    times = {
        r: layer_time.layer_time(h100_job("fp8", r), lay, g, False)
        for r in ("delayed", "tensorwise", "blockwise")
    }
    shapes = gemm_shapes.linear_gemms(h100_job().arch, 8192, 1, 1, 1, False)
    elems = sum(c * (m * k + m * n) for m, k, n, c in shapes)
    delayed = times["delayed"].fwd + times["delayed"].bwd
    tensorwise = times["tensorwise"].fwd + times["tensorwise"].bwd
    assert tensorwise - delayed == pytest.approx(2 * elems / g.hbm)
    # blockwise: one pass and one fp32 scale per 128 elements in each orientation
    blockwise = times["blockwise"].fwd + times["blockwise"].bwd
    assert blockwise - delayed == pytest.approx(8 / 128 * elems / g.hbm)


def test_offload_hides_copies_under_the_layers_before_their_deadline() -> None:
    # Llama 3.1 8B (32 layers), 8k tokens on one stage, a layer's saved activations over half a
    # PCIe 5 link (two H100 share a switch's x16 uplink) at 0.8 x 64 / 2 GB/s: x seconds a copy,
    # more than a layer's forward f or backward b. Transformer Engine's schedule (d0067d0d
    # cpu_offload.py, DefaultOffloadSynchronizer) starts layer i's copy as layer i + 1 starts
    # and makes layer 32 - k + i wait for it; the reloads mirror it in the backward.
    j = h100_job()
    lay = Layout(dp=8)
    one = layer_time.layer_time(j, lay, gpu_of(j), False)
    f, b, x = one.fwd, one.bwd, one.offload
    assert host_link.host_link_bandwidth(j) == pytest.approx(0.8 * 64e9 / 2)
    assert x > max(f, b)

    def exposed(k: int) -> float:
        return cost.estimate(j, lay.with_(cpu_offloading_num_layers=k)).breakdown.offload_exposed

    # k = 4: the copies run back to back from layer 1, the fourth done at f + 4x, its deadline
    # the start of layer 31, 31f (and 31b for the reloads): nothing shows while 4x < 30f, 30b
    assert 4 * x < 30 * min(f, b)
    assert exposed(4) == 0.0
    # k = 31: layer j waits for layer j - 1's copy, and each reload starts as its backward is due:
    # every copy shows, 31 each way
    assert exposed(31) == pytest.approx(62 * x)
    # more offloaded layers never hide more
    series = [exposed(k) for k in (4, 16, 24, 28, 31)]
    assert series == sorted(series)
    base = cost.estimate(j, lay).step_time_s
    last = cost.estimate(j, lay.with_(cpu_offloading_num_layers=31)).step_time_s
    assert last == pytest.approx(base + 62 * x)


def test_nvlink_c2c_offloads_faster_than_pcie() -> None:
    # GB200's Grace link (450 GB/s per direction, two GPUs on it: 225 each) against the half of
    # a PCIe 5 link (64 / 2) each of two H100 behind one switch gets
    spec = catalog.get_gpu("gb200-nvl72")
    cluster = ClusterSpec(
        gpu=spec, num_gpus=8, gpus_per_node=4, memory_gib=spec.memory_gib, tiers=spec.tiers
    )
    gb200 = replace(h100_job(), cluster=cluster)
    assert host_link.host_link_bandwidth(gb200) == pytest.approx(0.8 * 225e9)
    assert host_link.host_link_bandwidth(gb200) > host_link.host_link_bandwidth(h100_job())


@pytest.mark.parametrize(
    ("gpu", "gb_per_s"),
    [
        # hand arithmetic: the link's GB/s per direction over the GPUs that share it
        ("a100-sxm-80gb", 32 / 2),  # PCIe 4 x16, two GPUs per switch uplink
        ("h100-sxm-80gb", 64 / 2),  # PCIe 5 x16, two GPUs per switch uplink
        ("h800-sxm-80gb", 64 / 2),
        ("b200-sxm-180gb", 64 / 2),
        ("b300-sxm-270gb", 64),  # no board topology read: a link of its own
        ("gb200-nvl72", 450 / 2),  # NVLink-C2C, one Grace for two GPUs
        ("gb300-nvl72", 450 / 2),
        ("l40s-48gb", 32),
    ],
)
def test_gpus_behind_one_host_link_split_it(gpu: str, gb_per_s: float) -> None:
    spec = catalog.get_gpu(gpu)
    cluster = ClusterSpec(
        gpu=spec, num_gpus=8, gpus_per_node=8, memory_gib=spec.memory_gib, tiers=spec.tiers
    )
    j = replace(h100_job(), cluster=cluster)
    assert host_link.host_link_bandwidth(j) == pytest.approx(0.8 * gb_per_s * 1e9)
