"""planner launch --target megatron-bridge: overlaps where Bridge's setup reads them,
Megatron-FSDP's checkpoints, buckets and meta-device init, the presets' differences and the
overrides that clear what a recipe sets.

Oracle: tests/data/megatron_bridge_config_schema.json (see bridge_schema.py) for every emitted
field and value; Megatron-Bridge 067f987d's sources named in each test.
"""

from __future__ import annotations

import re
import shlex

import pytest
import yaml
from bridge_schema import accepted
from megatron_plans import make_plan

from planner.emit.launch import render
from planner.inputs.errors import InputError

# --- what Megatron-Bridge's own setup does with the override (NVIDIA-NeMo/Megatron-Bridge
# 067f987d, read from its source: comm_overlap.py `setup`, ConfigContainer.validate, the
# mixed-precision presets of mixed_precision.py)


def test_overlaps_go_where_bridges_setup_reads_them() -> None:
    """Bridge's comm-overlap setup writes its table's EP overlap and wgrad delay over the model's
    (off unless the table sets them: the model's own were dropped, and the step the plan times
    with the overlap ran without it), and with the distributed optimizer its DP overlap over
    DDP's. The fields go onto the recipe's own CommOverlapConfig one by one (dotted Hydra keys,
    a table without `_target_`): Bridge 067f987d applies overrides to a struct OmegaConf config
    that has no `_target_` key (utils/omegaconf_utils.py parse_hydra_overrides), so the whole
    dict with one used to fail on every recipe that sets comm_overlap; the dict form, for a
    recipe that leaves it unset, is a note."""
    par = {"tp": 1, "pp": 4, "vpp": 2, "ep": 8, "ep_comm_overlap": True}
    plan = make_plan("qwen3-30b-a3b", 64, par, global_batch_size=512)
    text = render(plan, "megatron-bridge")[1]
    doc = yaml.safe_load(text)
    accepted(yaml.safe_load(text))
    over = doc["comm_overlap"]
    assert "_target_" not in over
    assert over["overlap_moe_expert_parallel_comm"] is True and over["delay_wgrad_compute"]
    assert "overlap_moe_expert_parallel_comm" not in doc["model"]
    assert over["overlap_grad_reduce"] is plan.require_layout().overlap_grad_reduce
    words = [shlex.split(ln[2:]) for ln in text.splitlines() if ln.startswith("# ")]
    hydra = [w[0] for w in words if len(w) == 1 and w[0].startswith("comm_overlap")]
    assert "comm_overlap.overlap_moe_expert_parallel_comm=true" in hydra
    assert all(h.startswith("comm_overlap.") for h in hydra) and len(hydra) == len(over)
    note = next(ln for ln in text.splitlines() if "leaves comm_overlap unset" in ln)
    target = '"megatron.bridge.training.comm_overlap.CommOverlapConfig"'
    assert f"comm_overlap={{_target_:{target}," in note


def test_fsdp_checkpoints_and_bucket_counts() -> None:
    """Megatron-FSDP saves and loads only fsdp_dtensor (ConfigContainer.validate); Bridge gives
    DDP 128 MB buckets wherever dp > 1 with the distributed optimizer, which Megatron-Core
    refuses beside a bucket count: such a plan exits 2 naming the field, a bucket size goes into
    the comm_overlap table, where setup reads it."""
    fsdp = make_plan("llama3.1-8b", 16, {"zero_stage": 3})
    assert yaml.safe_load(render(fsdp, "megatron-bridge")[1])["checkpoint"] == {
        "ckpt_format": "fsdp_dtensor"
    }
    with pytest.raises(InputError, match=r"parallel\.ddp_num_buckets: Megatron-Bridge"):
        render(make_plan("llama3.1-8b", 16, {"tp": 2, "ddp_num_buckets": 4}), "megatron-bridge")
    sized = make_plan("llama3.1-8b", 16, {"tp": 2, "ddp_bucket_size": 50_000_000})
    over = yaml.safe_load(render(sized, "megatron-bridge")[1])["comm_overlap"]
    assert over["bucket_size"] == 50_000_000


def test_fsdp_builds_on_the_meta_device_and_names_its_gradient_dtype() -> None:
    """As the megatron-args target writes --init-model-with-meta-device and
    --megatron-fsdp-main-grads-dtype fp32 for Megatron-FSDP: Bridge's GPTModelProvider leaves
    init_model_with_meta_device False (gpt_provider.py @067f987d), so the override sets it; and
    Megatron-FSDP takes its gradients' dtype from ddp.megatron_fsdp_main_grads_dtype (None: the
    parameters' dtype; Megatron-Core mcore_fsdp_adapter.py @d98e8a64), never
    grad_reduce_in_fp32, so an fp32 plan says so in a note (a torch dtype on a field unset by
    default is not a YAML value Bridge converts)."""
    text = render(make_plan("llama3.1-8b", 16, {"zero_stage": 3}), "megatron-bridge")[1]
    doc = yaml.safe_load(text)
    accepted(doc)
    assert doc["model"]["init_model_with_meta_device"] is True
    assert "megatron_fsdp_main_grads_dtype" in text and "torch.float32" in text
    plain = yaml.safe_load(render(make_plan("llama3.1-8b", 16, {"tp": 2}), "megatron-bridge")[1])
    assert "init_model_with_meta_device" not in plain["model"]


def test_the_presets_differences_are_said_with_their_peaks() -> None:
    """The delayed-scaling preset gathers FP8 parameters already (fp8_param_gather True): the
    note that told to set it is gone; a plan without it is told the preset's peak. Every preset
    reduces gradients in fp32 over the DDP config: a bf16-gradient plan is told the run's peak,
    higher than its own."""
    fp8 = make_plan("llama3.1-8b", 16, {"tp": 2}, precision="fp8", fp8_recipe="delayed")
    text = render(fp8, "megatron-bridge")[1]
    assert "fp8_param_gather" not in text
    off = make_plan("llama3.1-8b", 16, {"tp": 2}, precision="fp8", fp8_recipe="delayed",
                    fp8_param_gather=False)  # fmt: skip
    assert "sets fp8_param_gather=True" in render(off, "megatron-bridge")[1]
    bf16 = make_plan("llama3.1-8b", 16, {"tp": 2}, main_grad_dtype="bf16")
    note = next(
        ln for ln in render(bf16, "megatron-bridge")[1].splitlines() if "reduces gradients" in ln
    )
    run, planned = (float(x) for x in re.findall(r"(\d+\.\d) GiB", note))
    assert run > planned


def test_overrides_clear_what_a_recipe_sets_and_the_plan_does_not() -> None:
    """Settings a Bridge recipe sets that the plan has none of are written cleared, since
    Megatron-Core refuses them beside what the plan sets (the QA's Bridge 067f987d / Megatron-Core
    2a75ac12 checks): selective recompute clears recompute_method and recompute_num_layers
    (TransformerConfig raises beside selective); ddp.num_buckets clears bucket_size (DDP's config
    asserts both); ZeRO 0 writes overlap_param_gather false (with it on, DDP takes the layer-wise
    optimizer's path and fails; nothing is gathered there); fine-grained offloading adds
    NVTE_CPU_OFFLOAD_V1=1 (config.py raises without it on Transformer Engine >= 2.10)."""
    par = {"tp": 2, "recompute": "selective", "zero_stage": 0, "ddp_num_buckets": 4}
    doc = yaml.safe_load(render(make_plan("llama3.1-8b", 16, par), "megatron-bridge")[1])
    accepted(doc)
    model, ddp = doc["model"], doc["ddp"]
    assert model["recompute_method"] is None and model["recompute_num_layers"] is None
    assert ddp["num_buckets"] == 4 and ddp["bucket_size"] is None
    assert (
        ddp["overlap_param_gather"] is False
        and doc["comm_overlap"]["overlap_param_gather"] is False
    )
    off = {"ep": 8, "offload_modules": ["expert_fc1"]}
    text = render(make_plan("qwen3-30b-a3b", 64, off, global_batch_size=512), "megatron-bridge")[1]
    words = [shlex.split(ln[2:]) for ln in text.splitlines() if ln.startswith("# ")]
    assert ["++env_vars.NVTE_CPU_OFFLOAD_V1=1"] in words


def test_checkpoint_and_dist_fields_are_in_the_schema() -> None:
    """The override's checkpoint.async_save and dist.use_tp_pp_dp_mapping are fields Bridge
    takes: ConfigContainer.checkpoint is a CheckpointConfig and .dist a DistributedInitConfig
    (Megatron-Bridge 067f987d training/config.py:1000-1001), subclasses of Megatron-LM 2a75ac12's
    (Bridge config.py:497, :146), where `async_save: bool` is training_config.py:516 and
    `use_tp_pp_dp_mapping: bool` common_config.py:105. The schema held neither section whole
    (checkpoint only ckpt_format, no dist), so such an override was never checked."""
    par = {"tp": 2, "pp": 4, "zero_stage": 1, "use_tp_pp_dp_mapping": True}
    plan = make_plan("llama3.1-8b", 64, par, async_save=True)
    doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
    assert doc["checkpoint"] == {"async_save": True}
    assert doc["dist"] == {"use_tp_pp_dp_mapping": True}
    accepted(doc)
    bad = {**doc, "dist": {"use_tp_pp_dp_mappings": True}}  # a misspelt field is still caught
    with pytest.raises(AssertionError, match=r"dist\.use_tp_pp_dp_mappings"):
        accepted(bad)
