"""planner.search.rules.context: the exchange Transformer Engine runs context parallelism with.

Oracle: TransformerEngine's context_parallel.py asserts, quoted in the rule's docstring, on the
model zoo's head counts (gpt-oss-20b: 64 query heads, 8 query groups, a 128-token sliding window
on every other layer; llama3.1-8b: 32 heads, 8 groups, no window), with the integer arithmetic in
the comments.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

from plan_text import load_error, plan_text, write

from planner.inputs.layout import Layout
from planner.inputs.plan import Job, load_plan
from planner.search import space as space_mod
from planner.search.rules import check_plan, violations
from planner.search.rules.context import attention_sinks, context_exchange, exchange_for
from tests.search.test_rules import broken, make_job


def vanilla(job: Job) -> Job:
    """The job's model with the plain softmax: gpt-oss's sliding window without its sinks."""
    return replace(job, arch=job.arch.model_copy(update={"softmax_type": "vanilla"}))


def test_the_ring_refuses_a_sliding_window() -> None:
    """TE: "Context parallelism does not support sliding window attention with cp_comm_type='p2p'";
    a2a and all_gather run it, and cp 1 exchanges nothing (gpt-oss's window without its sinks,
    whose own rule is test_sinks_run_only_under_a2a)."""
    job = vanilla(make_job("gpt-oss-20b", num_gpus=8))
    v = broken(job, Layout(cp=2, dp=4))["cp_comm_window"]
    assert v.field == "parallel.cp_comm_type"
    assert "window_size 127" in v.message and "a2a or all_gather" in v.message
    assert context_exchange(job, Layout(cp=2, dp=4, cp_comm_type="a2a")) is None
    assert context_exchange(job, Layout(cp=2, dp=4, cp_comm_type="all_gather")) is None
    assert context_exchange(job, Layout(dp=8)) is None


def test_a2a_splits_every_ranks_heads() -> None:
    """TE: "cp_comm_type='a2a' requires num_heads % cp_size == 0 for Q, K, V". gpt-oss-20b at
    tp 8: 64 / 8 = 8 query heads and max(8 / 8, 1) = 1 K/V head per rank; cp 2 does not divide 1.
    At tp 4: 16 and 2 heads, both even."""
    job = make_job("gpt-oss-20b", num_gpus=16)
    v = broken(job, Layout(tp=8, cp=2, dp=1, sequence_parallel=True, cp_comm_type="a2a"))
    assert "query heads 8 and K/V heads 1" in v["cp_comm_a2a_heads"].message
    ok = Layout(tp=4, cp=2, dp=2, sequence_parallel=True, cp_comm_type="a2a")
    assert context_exchange(job, ok) is None


def test_torchtitan_runs_only_its_ring() -> None:
    job = replace(make_job(num_gpus=8), framework="torchtitan")
    v = context_exchange(job, Layout(cp=2, dp=4, cp_comm_type="a2a"))
    assert v is not None and v.rule == "cp_comm_titan"
    assert context_exchange(job, Layout(cp=2, dp=4)) is None


def test_the_search_takes_the_first_exchange_te_runs() -> None:
    """p2p where nothing refuses it (Llama, no window); a2a for a windowed model where its heads
    divide (gpt-oss's shape without sinks, tp 1: 64 and 8 heads over cp 2); all_gather where they
    do not (tp 8: 1 K/V head). gpt-oss itself (sinks: a2a only) has none at tp 8: the search
    gets p2p back for the rule to refuse."""
    llama, oss = make_job(num_gpus=8), make_job("gpt-oss-20b", num_gpus=16)
    window = vanilla(oss)
    assert exchange_for(llama, 1, 2) == "p2p"
    assert exchange_for(window, 1, 2) == "a2a"
    assert exchange_for(window, 8, 2) == "all_gather"
    lay = Layout(tp=8, cp=2, dp=1, sequence_parallel=True, cp_comm_type=exchange_for(window, 8, 2))
    assert not [v for v in violations(window, lay) if v.rule.startswith("cp_comm")]
    assert exchange_for(oss, 1, 2) == "a2a"
    assert exchange_for(oss, 8, 2) == "p2p"
    assert "cp_comm_sinks" in broken(oss, lay.with_(cp_comm_type="p2p"))


def test_sinks_run_only_under_a2a() -> None:
    """TE's get_attention_backend: with context parallelism and a softmax_type other than vanilla
    it disables FusedAttention unless cp_comm_type is a2a, and FlashAttention and the unfused
    backend never run sinks with CP: gpt-oss-20b (learnable) at cp 2 runs a2a only; the same
    model with the plain softmax also runs all_gather."""
    job = make_job("gpt-oss-20b", num_gpus=8)
    gather = Layout(cp=2, dp=4, cp_comm_type="all_gather")
    v = broken(job, gather)["cp_comm_sinks"]
    assert v.field == "parallel.cp_comm_type"
    assert "'learnable'" in v.message and "not 'all_gather'" in v.message
    assert context_exchange(job, gather.with_(cp_comm_type="a2a")) is None
    assert context_exchange(vanilla(job), gather) is None


def test_sinks_have_no_flashattention_and_fp8_only_on_blackwell() -> None:
    """TE's get_attention_backend for softmax_type != vanilla: FlashAttention disabled (no
    attention_kernel "flash2"); in FP8 attention the unfused backend is disabled and the fused
    one needs compute capability 10.0 (so an H100 FP8-attention gpt-oss has no backend, a B200
    one has). Megatron's own unfused attention (flash_attention false) adds the offset itself."""
    lay = Layout(dp=8)
    h100 = make_job("gpt-oss-20b", num_gpus=8)
    v = attention_sinks(replace(h100, attention_kernel="flash2"), lay)
    assert v is not None and v.rule == "sinks_flash2" and v.field == "training.attention_kernel"
    fp8 = replace(h100, precision="fp8", fp8_attention=True)
    v = attention_sinks(fp8, lay)
    assert v is not None and v.rule == "sinks_fp8" and "h100-sxm-80gb" in v.message
    b200 = make_job("gpt-oss-20b", gpu="b200-sxm-180gb", num_gpus=8)
    assert attention_sinks(replace(b200, precision="fp8", fp8_attention=True), lay) is None
    assert attention_sinks(replace(fp8, flash_attention=False), lay) is None
    assert attention_sinks(vanilla(fp8), lay) is None
    assert attention_sinks(h100, lay) is None


def test_sinks_have_no_fused_attention_in_deterministic_mode() -> None:
    """TE's get_attention_backend under NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 (Megatron's
    --deterministic-mode sets it) disables FusedAttention for softmax_type != vanilla ("Sink
    attention ... requires NVTE_ALLOW_NONDETERMINISTIC_ALGO=1", TransformerEngine utils.py), and
    FlashAttention runs no sinks: only the unfused attention is left, which a plan with
    flash_attention false times. torchtitan's mode and a plain softmax are not concerned."""
    lay = Layout(dp=8)
    det = replace(make_job("gpt-oss-20b", num_gpus=8), deterministic=True)
    v = attention_sinks(det, lay)
    assert v is not None and v.rule == "sinks_deterministic"
    assert v.field == "training.deterministic" and "'learnable'" in v.message
    assert attention_sinks(replace(det, flash_attention=False), lay) is None
    assert attention_sinks(vanilla(det), lay) is None
    assert attention_sinks(replace(det, framework="torchtitan"), lay) is None


def test_check_names_the_plan_field(tmp_path: Path) -> None:
    """A gpt-oss plan at cp 2 without the field (p2p, Megatron's default) is refused naming the
    file and parallel.cp_comm_type; with cp_comm_type = "a2a" it passes."""
    parallel = "[parallel]\ncp = 2\nep = 4\n"
    text = plan_text('[model]\nname = "gpt-oss-20b"\n', parallel=parallel)
    assert "plan.toml: parallel.cp_comm_type: " in load_error(write(tmp_path, text))
    ok = plan_text('[model]\nname = "gpt-oss-20b"\n', parallel=parallel + 'cp_comm_type = "a2a"\n')
    check_plan(load_plan(write(tmp_path, ok, "ok.toml")))


def test_torchtitan_runs_sliding_windows_on_its_ring() -> None:
    """torchtitan's gpt-oss attends through FlexAttention under PyTorch's ring, not Transformer
    Engine: the window rule is TE's, so cp 2 on the ring stays allowed there."""
    job = replace(make_job("gpt-oss-20b", num_gpus=8), framework="torchtitan")
    assert context_exchange(job, Layout(cp=2, dp=4)) is None
    assert exchange_for(job, 1, 2) == "p2p"


def test_every_context_parallel_structure_of_gpt_oss_runs_in_te() -> None:
    """The search's structures take exchange_for's type: on 16 H100, every gpt-oss-20b structure
    with cp > 1 uses an exchange Transformer Engine runs (a2a where each TP rank's 64 / tp query
    and max(8 / tp, 1) K/V heads divide over cp, else all_gather), and none breaks the rule."""
    job = make_job("gpt-oss-20b", num_gpus=16, seq_length=8192)
    structs = [s for s in space_mod.structures(job, space_mod.Space(), Counter()) if s.cp > 1]
    assert structs
    for s in structs:
        kv = max(8 // s.tp, 1)
        a2a = (64 // s.tp) % s.cp == 0 and kv % s.cp == 0
        assert s.cp_comm_type == ("a2a" if a2a else "all_gather")
        assert context_exchange(job, s.layout()) is None
