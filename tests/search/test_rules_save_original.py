"""planner.search.rules.save_original: fine-grained offloading of the experts' fc1 under the
delayed FP8 recipe is refused, in a plan, in a Megatron command line and in the search's rungs.

Oracle: Megatron-LM d98e8a64 transformer MoE experts.py:279-284 sets save_original_input on the
experts' fc1 when expert_fc1 is offloaded under any recipe but MXFP8 and NVFP4, and Transformer
Engine d0067d0d module/grouped_linear.py:677-679 raises "DelayedScaling recipe is not supported
with save_original_input" where the weight needs a gradient; TransformerConfig checks neither
(transformer_config.py:2127-2230 has no FP8 condition on the offloaded modules).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from cli_run import run

from planner.inputs import catalog
from planner.inputs.cluster_sections import ClusterSection
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.plan_resolve import resolve_cluster
from planner.search import rules, rungs


def _job(**fields: object) -> Job:
    cluster = resolve_cluster(ClusterSection(gpu="h100-sxm-80gb", num_gpus=16), None)
    job = Job(
        arch=catalog.get_model("mixtral-8x7b"),
        cluster=cluster,
        seq_length=4096,
        global_batch_size=64,
        precision="fp8",
        fp8_recipe="delayed",
    )
    return replace(job, **fields)  # type: ignore[arg-type]


FC1 = Layout(tp=2, dp=8, ep=8, sequence_parallel=True, offload_modules=("expert_fc1",))


def _rules(job: Job, lay: Layout) -> set[str]:
    return {v.rule for v in rules.violations(job, lay)}


def test_expert_fc1_offload_under_delayed_scaling_is_refused() -> None:
    v = {v.rule: v for v in rules.violations(_job(), FC1)}["offload_fc1_delayed"]
    assert v.field == "parallel.offload_modules" and "save_original_input" in v.message


@pytest.mark.parametrize(
    "fields",
    [
        {"fp8_recipe": "tensorwise"},  # Float8CurrentScaling: requantisation safe
        {"fp8_recipe": "blockwise"},
        {"fp8_recipe": "mxfp8"},  # experts.py:281: not set under MXFP8
        {"precision": "bf16"},  # no FP8 recipe: TE's check needs one
        {"frozen_model": True},  # no weight gradient: TE checks only backward_needs_input
    ],
)
def test_expert_fc1_offload_runs_elsewhere(fields: dict[str, object]) -> None:
    assert "offload_fc1_delayed" not in _rules(_job(**fields), FC1)


def test_other_offloaded_modules_run_under_delayed_scaling() -> None:
    lay = FC1.with_(offload_modules=("core_attn", "attn_proj", "moe_act"))
    assert "offload_fc1_delayed" not in _rules(_job(), lay)


def test_the_search_does_not_offer_expert_fc1_under_delayed_scaling() -> None:
    def offered(job: Job) -> bool:
        return any("expert_fc1" in r.offload_modules for r in rungs.offloading(job))

    assert not offered(_job())
    assert offered(_job(fp8_recipe="tensorwise"))


LINE = (
    "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 "
    "--num-attention-heads 16 --seq-length 4096 --max-position-embeddings 4096 "
    "--micro-batch-size 1 --global-batch-size 64 --bf16 --vocab-size 32000 "
    "--tokenizer-type NullTokenizer --num-experts 8 --moe-router-topk 2 --moe-grouped-gemm "
    "--expert-model-parallel-size 8 --moe-token-dispatcher-type alltoall --fp8-format hybrid "
    "--fp8-recipe {recipe} --fine-grained-activation-offloading --offload-modules expert_fc1\n"
)


@pytest.mark.parametrize(("recipe", "code"), [("delayed", 2), ("tensorwise", 0)])
def test_a_megatron_line_with_it_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], recipe: str, code: int
) -> None:
    script = tmp_path / "train.sh"
    script.write_text(LINE.format(recipe=recipe))
    got, _, err = run(["check", "--megatron-args", str(script), "--gpu", "h100-sxm-80gb"], capsys)
    assert got == code, err
    assert ("save_original_input" in err) == (code == 2)
