"""planner.emit.megatron read back: the round trip through planner.inputs.megatron_args (what
`planner check --megatron-args` runs) must give back the same layout and the same memory, for
every zoo model, layout variants and the golden launch plans; and the launch features that only
show in what is read back (CUDA graphs, offloading, optimizers, the context exchange, determinism).

Oracle: Megatron-LM's own source (NVIDIA/Megatron-LM d98e8a64), as in test_emit_megatron.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from megatron_plans import (
    GOLDEN_PLANS,
    MEGATRON_FLAGS,
    assert_same,
    flags,
    make_plan,
    round_trip,
)

from planner.emit import megatron
from planner.emit.common import environment
from planner.inputs import catalog, megatron_args, plan_writer
from planner.inputs.errors import InputError
from planner.inputs.plan import load_plan, parse_plan
from planner.model import params
from planner.search.rules import check_plan

# --- round trip: planner check --megatron-args gives back the layout and the memory


CANNOT = {
    "bloom-176b": "ALiBi",  # Megatron-LM has no ALiBi position embedding
    "opt-175b": "relu",  # nor a plain ReLU MLP (gelu, --swiglu, --squared-relu only)
    "gemma2-2b": "gated geglu",  # nor a tanh-GELU GLU (--quick-geglu is another activation)
}


def default_layout(name: str) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """(num_gpus, [training], [parallel]) for a zoo model: the largest TP in 8, 4, 2, 1 that
    divides the heads and fits the query-group rule, PP 4 (an uneven split with the extra layers
    on the first rank when 4 does not divide the layers), EP the largest of 8, 4, 2, 1 dividing
    the experts, DP 8; learned-position models train at their table size."""
    arch = catalog.get_model(name)
    g = arch.query_groups
    tp = next(
        t
        for t in (8, 4, 2, 1)
        if arch.num_attention_heads % t == 0
        and (arch.multi_latent_attention or g % t == 0 or t % g == 0)
    )
    pp = 4
    parallel: dict[str, Any] = {"tp": tp, "pp": pp, "zero_stage": 1, "recompute": "selective"}
    base, extra = divmod(arch.num_layers, pp)
    if extra:
        parallel["pipeline_layers"] = [base + extra] + [base] * (pp - 1)
    if arch.num_moe_experts:
        parallel["ep"] = next(e for e in (8, 4, 2, 1) if arch.num_moe_experts % e == 0)
    dp = 8
    seq = 4096
    if arch.position_embedding_type == "learned_absolute":
        seq = min(seq, arch.max_position_embeddings or arch.seq_length or seq)
    training = {"seq_length": seq, "global_batch_size": dp * 4}
    return tp * pp * dp, training, parallel


@pytest.mark.parametrize("name", sorted(catalog.models()))
def test_round_trip_every_zoo_model(name: str) -> None:
    num_gpus, training, parallel = default_layout(name)
    plan = make_plan(name, num_gpus, parallel, **training)
    if name in CANNOT:
        with pytest.raises(InputError, match=CANNOT[name]):
            megatron.render(plan, "job")
        return
    assert_same(plan, round_trip(plan))


VARIANTS: list[tuple[str, int, dict[str, Any], dict[str, Any]]] = [
    ("llama3.1-8b", 16, {"tp": 2, "cp": 2, "zero_stage": 0}, {}),
    ("llama3.1-8b", 16, {"tp": 2, "pp": 2, "zero_stage": 2}, {"main_grad_dtype": "bf16"}),
    ("llama3.1-8b", 16, {"tp": 1, "zero_stage": 3, "recompute": "full"}, {}),
    ("llama3.1-8b", 16, {"tp": 4, "tp_comm_overlap": True}, {"precision": "fp8"}),
    ("llama3.1-8b", 16, {"tp": 4}, {"precision": "fp8", "fp8_param_gather": False}),
    ("llama3.1-8b", 16, {"tp": 2, "pp": 4, "vpp": 2}, {"global_batch_size": 64}),
    ("llama3.1-8b", 16, {"tp": 2, "pp": 4, "vpp": 2, "pipeline_layers": [6, 10, 10, 6]}, {}),
    ("llama3.1-8b", 16, {"tp": 4, "pp": 4, "pipeline_layers": [7, 9, 7, 9]}, {}),
    ("llama3.1-8b", 16, {"tp": 4, "pp": 4, "vpp": 2, "pipeline_layers": [7, 9, 7, 9]}, {}),
    ("llama3.1-8b", 16, {"tp": 4, "pp": 2, "pipeline_layers": [15, 17]}, {}),
    ("mixtral-8x7b", 32, {"tp": 2, "ep": 4, "etp": 1, "recompute": "full"}, {}),
    ("qwen3-30b-a3b", 64, {"tp": 2, "pp": 2, "ep": 8, "zero_stage": 3}, {}),
    ("gpt3-175b", 64, {"tp": 8, "pp": 8, "recompute": "full"}, {"seq_length": 2048}),
    ("nemotron4-340b", 64, {"tp": 8, "pp": 8}, {}),
    ("qwen2.5-7b", 8, {"tp": 4, "pp": 2}, {}),
    ("llama3.1-8b", 16, {"tp": 2, "overlap_param_gather": False}, {}),
    ("mixtral-8x7b", 64, {"tp": 1, "pp": 2, "vpp": 4, "ep": 8, "ep_comm_overlap": True}, {}),
    ("qwen3-30b-a3b", 16, {"tp": 1, "ep": 8, "ep_comm_overlap": True}, {}),
    ("llama3.1-8b", 16, {"tp": 2, "overlap_grad_reduce": False, "overlap_param_gather": False}, {}),
]


@pytest.mark.parametrize(("model", "n", "parallel", "training"), VARIANTS)
def test_round_trip_layout_variants(
    model: str, n: int, parallel: dict[str, Any], training: dict[str, Any]
) -> None:
    train = {"global_batch_size": 128, **training}
    plan = make_plan(model, n, parallel, **train)
    assert_same(plan, round_trip(plan))


@pytest.mark.parametrize("path", GOLDEN_PLANS, ids=lambda p: p.stem)
def test_round_trip_golden_plans(path: Path) -> None:
    plan = load_plan(path)
    assert_same(plan, round_trip(plan))


def test_cuda_graphs_emit_mcore_graphs_and_read_back() -> None:
    """cuda_graphs = true emits --cuda-graph-impl local (Megatron-Core's per-layer graphs; the
    transformer_engine impl asserts NCCL_GRAPH_REGISTER=0 beside expandable segments,
    arguments.py d98e8a64), which the reader takes back as cuda_graphs."""
    plan = make_plan("llama3.1-8b", 16, {"tp": 2}, cuda_graphs=True)
    assert flags(plan)["--cuda-graph-impl"] == ["local"]
    assert round_trip(plan).job.cuda_graphs
    assert "--cuda-graph-impl" not in flags(make_plan("llama3.1-8b", 16, {"tp": 2}))
    # the regions of each layer captured (--cuda-graph-modules), and back
    part = make_plan("llama3.1-8b", 16, {"tp": 2}, cuda_graphs=True, cuda_graph_modules=["attn"])
    assert flags(part)["--cuda-graph-modules"] == ["attn"]
    assert round_trip(part).job.cuda_graph_modules == ("attn",)
    assert "--cuda-graph-modules" not in flags(plan)
    # the whole-step graph: its implementation, the NaN check off (validate_args), and back,
    # with full recompute, which per-layer graphs refuse (rules.graphs)
    whole = make_plan(
        "llama3.1-8b", 16, {"tp": 2, "recompute": "full"}, cuda_graphs=True,
        cuda_graph_impl="full_iteration",
    )  # fmt: skip
    f = flags(whole)
    assert f["--cuda-graph-impl"] == ["full_iteration"]
    assert "--no-check-for-nan-in-loss-and-grad" in f
    back = round_trip(whole)
    assert (
        back.job.cuda_graph_impl == "full_iteration" and back.require_layout().recompute == "full"
    )


def test_graph_modules_need_graphs_and_the_router_first() -> None:
    """training.cuda_graph_modules is refused without cuda_graphs, and moe_preprocess without
    moe_router under Transformer Engine's graphs (TransformerConfig asserts it there,
    transformer_config.py:2821-2824 d98e8a64), naming the field."""
    with pytest.raises(InputError, match=r"training\.cuda_graph_modules.*cuda_graphs"):
        make_plan("llama3.1-8b", 16, {"tp": 2}, cuda_graph_modules=["attn"])
    with pytest.raises(InputError, match=r"training\.cuda_graph_modules.*moe_router"):
        make_plan(
            "mixtral-8x7b",
            16,
            {"ep": 8},
            cuda_graphs=True,
            cuda_graph_impl="transformer_engine",
            cuda_graph_modules=["moe_preprocess"],
        )


def test_cuda_graphs_with_cpu_offloading_is_bad_input() -> None:
    """TransformerConfig raises ValueError("CUDA graphs not supported with CPU offloading.")."""
    par = {"tp": 2, "cpu_offloading_num_layers": 2}
    plan = make_plan("llama3.1-8b", 16, par, cuda_graphs=True)
    with pytest.raises(InputError, match=r"training\.cuda_graphs.*cpu_offloading_num_layers = 2"):
        megatron.arguments(plan)


def test_fine_grained_offloading_sets_te_offload_v1() -> None:
    # validate_args (Megatron-LM d98e8a64): with fine-grained activation offloading and
    # Transformer Engine >= 2.10, NVTE_CPU_OFFLOAD_V1 must be "1"; without it, not set
    plan = make_plan("mixtral-8x7b", 16, {"tp": 2, "ep": 8, "offload_modules": ["moe_act"]})
    assert {e.name: e.value for e in environment(plan)}.get("NVTE_CPU_OFFLOAD_V1") == "1"
    plain = make_plan("mixtral-8x7b", 16, {"tp": 2, "ep": 8})
    assert "NVTE_CPU_OFFLOAD_V1" not in {e.name for e in environment(plain)}


def test_optimizer_instances_are_emitted() -> None:
    # training.optimizer_instances N -> --num-distributed-optimizer-instances N (the memory
    # model shards the optimizer over dp x cp / N); Megatron asserts N divides dp x cp
    plan = make_plan("llama3.1-8b", 16, {"tp": 2}, optimizer_instances=2)
    assert flags(plan)["--num-distributed-optimizer-instances"] == ["2"]
    assert "--num-distributed-optimizer-instances" not in flags(make_plan("llama3.1-8b", 16, {}))
    with pytest.raises(InputError, match="optimizer_instances = 3 must divide"):
        check_plan(make_plan("llama3.1-8b", 16, {"tp": 2}, optimizer_instances=3))


def test_weight_hash_check_is_launched_and_reads_back() -> None:
    # training.weight_hash_interval N -> --check-weight-hash-across-dp-replicas-interval N (the
    # check the plan's step time counts, planner/model/weight_hash.py); unset, no flag
    plan = make_plan("llama3.1-8b", 16, {"tp": 2}, weight_hash_interval=100)
    assert flags(plan)["--check-weight-hash-across-dp-replicas-interval"] == ["100"]
    assert round_trip(plan).job.weight_hash_interval == 100
    assert "--check-weight-hash-across-dp-replicas-interval" not in flags(
        make_plan("llama3.1-8b", 16, {"tp": 2})
    )


def test_muon_is_launched_as_muon() -> None:
    # training.optimizer = "muon" -> --optimizer muon (Megatron's validate_args turns the
    # distributed optimizer into the layer-wise one); whole-parameter dealing as the plan says;
    # Megatron-FSDP refused (validate_args asserts)
    plan = make_plan("llama3.1-8b", 16, {"tp": 2}, optimizer="muon", muon_whole_params=True)
    f = flags(plan)
    assert f["--optimizer"] == ["muon"] and "--no-use-layer-wise-param-layout" in f
    assert "--optimizer" not in flags(make_plan("llama3.1-8b", 16, {"tp": 2}))
    # Muon's knobs where they leave Megatron's defaults, and only there
    assert not any(k.startswith("--muon") for k in f)
    knobs = make_plan(
        "llama3.1-8b",
        16,
        {"tp": 2},
        optimizer="muon",
        muon_ns_steps=7,
        muon_tp_mode="distributed",
        muon_split_qkv=False,
        muon_matmul_precision="high",
    )
    k = flags(knobs)
    assert (k["--muon-num-ns-steps"], k["--muon-tp-mode"]) == (["7"], ["distributed"])
    assert k["--muon-fp32-matmul-prec"] == ["high"] and "--muon-no-split-qkv" in k
    # fp32 ("highest") is Megatron-Bridge's value; Megatron-LM's flag takes low, medium, high
    with pytest.raises(InputError, match=r"training\.muon_matmul_precision"):
        flags(make_plan("llama3.1-8b", 16, {}, optimizer="muon", muon_matmul_precision="highest"))
    with pytest.raises(InputError, match="optimizer = muon does not run with Megatron-FSDP"):
        check_plan(make_plan("llama3.1-8b", 16, {"tp": 1, "zero_stage": 3}, optimizer="muon"))


def test_latent_moe_flag_reads_back() -> None:
    # Megatron-LM d98e8a64: --moe-latent-size (TransformerConfig.moe_latent_size); the line read
    # back has the same latent width, parameters and memory, and no "not modelled" note
    zoo = catalog.get_model("qwen3-30b-a3b").model_dump(exclude_defaults=True)
    model = {**zoo, "name": "qwen3-30b-a3b-latent", "moe_latent_size": 512}
    plan = make_plan(model, 8, {"tp": 1, "ep": 8, "zero_stage": 1})
    assert flags(plan)["--moe-latent-size"] == ["512"]
    text = megatron.render(plan, "job")
    reading = megatron_args.read(text, "h100-sxm-80gb", 8, "job")
    assert not reading.not_modelled
    back = round_trip(plan)
    assert back.job.arch.moe_latent_size == 512
    assert params.params_total(back.job.arch) == params.params_total(plan.job.arch)
    assert_same(plan, back)
    assert "--moe-latent-size" not in flags(make_plan("qwen3-30b-a3b", 8, {"tp": 1, "ep": 8}))


@pytest.mark.parametrize(("model", "kind"), [("gpt-oss-20b", "a2a"), ("llama3.1-8b", "all_gather")])
def test_the_context_exchange_is_launched_as_megatrons_flag(model: str, kind: str) -> None:
    """gpt-oss-20b's sliding window and sinks need a2a under CP (Transformer Engine's p2p ring
    refuses the window, everything but a2a the sinks); Llama runs any exchange: the flag carries
    the plan's type as TE spells it, reads back the same, and the ring (Megatron's default)
    needs no flag."""
    layout: dict[str, object] = {"cp": 2, "cp_comm_type": kind}
    if model == "gpt-oss-20b":
        layout["ep"] = 4
    plan = check_plan(make_plan(model, 8, layout))
    assert flags(plan)["--cp-comm-type"] == [kind]
    assert set(flags(plan)) <= MEGATRON_FLAGS
    back = round_trip(plan)
    assert back.require_layout().cp_comm_type == kind
    ring = make_plan("llama3.1-8b", 8, {"cp": 2})
    assert "--cp-comm-type" not in flags(ring)


def test_flashattention2_is_launched_as_the_flash_backend_pinned_to_version_2() -> None:
    """attention_kernel flash2: --attention-backend flash --flash-attention-version 2, which set
    Transformer Engine's switches themselves (language_module.py _set_attention_backend,
    d98e8a64). Before, the environment set NVTE_FUSED_ATTN=0 under the default backend "auto",
    whose check asserts that variable unset or 1: the launch failed at start-up. The line reads
    back as flash2; the default (fused) writes none of it."""
    plan = make_plan("llama3.1-8b", 8, {"tp": 1}, attention_kernel="flash2")
    f = flags(plan)
    assert f["--attention-backend"] == ["flash"] and f["--flash-attention-version"] == ["2"]
    env = {e.name for e in environment(plan)}
    assert not env & {"NVTE_FUSED_ATTN", "NVTE_FLASH_ATTN", "NVTE_UNFUSED_ATTN"}
    assert round_trip(plan).job.attention_kernel == "flash2"
    fused = flags(make_plan("llama3.1-8b", 8, {"tp": 1}))
    assert "--attention-backend" not in fused and "--flash-attention-version" not in fused
    text = plan_writer.render(plan.job, plan.require_layout(), {"name": "llama3.1-8b"}, ["t"])
    assert 'attention_kernel = "flash2"' in text


def test_deterministic_mode_is_launched_reads_back_and_refuses_what_megatron_asserts() -> None:
    # training.deterministic -> --deterministic-mode (the mode the step time charges,
    # planner/model/determinism.py); Megatron's determinism.py asserts the fused cross entropy
    # and TP communication overlap off, and planner refuses them so, naming the field
    plan = make_plan("llama3.1-8b", 16, {"tp": 2}, deterministic=True, loss_fusion=False)
    assert "--deterministic-mode" in flags(check_plan(plan))
    assert round_trip(plan).job.deterministic
    assert "--deterministic-mode" not in flags(make_plan("llama3.1-8b", 16, {"tp": 2}))
    with pytest.raises(InputError, match=r"training\.loss_fusion"):
        check_plan(make_plan("llama3.1-8b", 16, {"tp": 2}, deterministic=True))
    overlap = {"tp": 2, "sequence_parallel": True, "tp_comm_overlap": True}
    with pytest.raises(InputError, match=r"parallel\.tp_comm_overlap"):
        check_plan(make_plan("llama3.1-8b", 16, overlap, deterministic=True, loss_fusion=False))


# --- the k8s target read back: a PyTorchJob's containers, as Kubernetes runs them


@pytest.mark.parametrize("path", GOLDEN_PLANS, ids=lambda p: p.stem)
def test_k8s_pytorchjob_reads_back_to_its_header(path: Path) -> None:
    """`launch --target k8s` writes a Kubeflow PyTorchJob; `check --megatron-args` read it as a
    shell script and stopped at its YAML list marks ("--num-layers: expected an integer (got
    '-')"). Now its container's command and args (each list item a word, `$(NAME)` from the
    container's env, the kubelet's expansion) are read, with nprocPerNode x the pods as the GPU
    count. Oracle: the file's own header, which predicts the run it launches."""
    from planner.emit.launch import render
    from planner.model import cost, memory

    plan = load_plan(path)
    if plan.job.pools or plan.job.framework != "megatron":
        pytest.skip("k8s launches one GPU kind's Megatron-LM")
    try:
        text = render(plan, "k8s")[1]
    except InputError as e:
        pytest.skip(f"the k8s target refuses it: {e}")
    reading = megatron_args.read(text, plan.job.cluster.gpu.name, None, "<k8s>")
    assert any("nprocPerNode" in n for n in reading.notes)
    back = parse_plan(reading.doc)
    step = cost.estimate(back.job, back.require_layout()).step_time_s
    # the header counts fragmentation as the plan says (`expandable_segments`), though the pod
    # sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (emit.common.environment: it errs
    # high); read back, the pod's own setting holds
    counted = replace(back.job, expandable_segments=plan.job.expandable_segments)
    peak = memory.estimate(counted, back.require_layout()).peak / 2**30
    assert back.job.cluster.num_gpus == plan.job.cluster.num_gpus
    assert f"step {step:.3f} s" in text.splitlines()[3]
    assert f"peak memory {peak:.1f} GiB" in text.splitlines()[3]


def test_k8s_pytorchjob_with_bad_replicas_is_bad_input() -> None:
    text = (
        "kind: PyTorchJob\nspec:\n  pytorchReplicaSpecs:\n    Worker:\n      replicas: many\n"
        "      template:\n        spec:\n          containers:\n            - name: p\n"
        '              command: ["torchrun"]\n              args: ["train.py", "--num-layers", '
        '"2"]\n'
    )
    with pytest.raises(InputError, match=r"<k8s>: spec.pytorchReplicaSpecs.Worker.replicas"):
        megatron_args.read(text, "h100-sxm-80gb", None, "<k8s>")


def test_test_mode_is_launched_and_reads_back() -> None:
    """training.test_mode -> --test-mode (TrainingConfig.test_mode, training_config.py:144 at
    d98e8a64, copied to TransformerConfig.test_mode: attention.py:1938 runs its real-time checks
    every forward, which the plan's step time counts); it was left off the line, so the run
    skipped what the plan timed and the round trip lost it."""
    plan = make_plan("llama3.1-8b", 16, {"tp": 2}, test_mode=True)
    assert "--test-mode" in flags(plan)
    assert round_trip(plan).job.test_mode
    assert "--test-mode" not in flags(make_plan("llama3.1-8b", 16, {"tp": 2}))


def test_moe_act_recompute_on_a_dense_model_breaks_a_rule() -> None:
    """TransformerConfig.__post_init__ (d98e8a64 transformer_config.py:1964-1967) raises 'moe_act
    in recompute_modules is only supported with moe_grouped_gemm', which a dense model never
    sets: the plan breaks a rule instead of launching a line Megatron refuses."""
    plan = make_plan("llama3.1-8b", 8, {"recompute": "selective", "recompute_modules": ["moe_act"]})
    with pytest.raises(InputError, match="recompute module moe_act needs a mixture of experts"):
        check_plan(plan)


@pytest.mark.parametrize("base", ["qwen3-30b-a3b", "nemotron3-super-120b-a12b"])
def test_repeated_mtp_layer_is_launched_and_reads_back(base: str) -> None:
    """One MTP layer's weights serve every depth (`mtp_use_repeated_layer`; Megatron-LM d98e8a64
    transformer_config.py:82, gpt_layer_specs.py:779-784 for a transformer, the hybrid stack's
    too): launch writes --mtp-use-repeated-layer (without it Megatron builds a layer per depth,
    QA: the Nemotron 3 Super recipes read back 0.3 GiB heavier), and the line reads back to the
    same parameters and memory, for a transformer (two depths) and a hybrid stack (its
    pattern's)."""
    zoo = catalog.get_model(base).model_dump(exclude_defaults=True)
    model = {**zoo, "name": f"{base}-mtp", "mtp_use_repeated_layer": True, "mtp_num_layers": 2}
    if zoo.get("hybrid_layer_pattern"):  # two depths of one '*E' layer, as the recipes set it
        model["hybrid_layer_pattern"] = zoo["hybrid_layer_pattern"] + "/*E/*E"
    plan = make_plan(model, 8, {"tp": 1, "ep": 8, "zero_stage": 1})
    assert plan.job.arch.mtp_num_layers >= 1
    assert flags(plan)["--mtp-use-repeated-layer"] == []
    back = round_trip(plan)
    assert back.job.arch.mtp_use_repeated_layer
    assert params.params_total(back.job.arch) == params.params_total(plan.job.arch)
    assert_same(plan, back)
