"""NeMo 2.0 lines read as NeMo runs them, not as Megatron-LM's validate_args would: the p2p
overlap off by default, CPU offloading only with its switch, no TP userbuffers without NeMo's
callback, the RNG tracker beside CUDA graphs, Mixtral's experts ungrouped, the keys NeMo runs but
planner does not price noted, NeMo-Run's 1 / 0 switches, and model.config keys the strategy
overwrites.

Oracles: NVIDIA/NeMo 8cfedd72 (nemo/...), Megatron-LM d98e8a64 (megatron/core/...), and NeMo-Run's
cli_parser.py TypeParser.parse_bool, each cited at its test.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from nemo_lines import HEAD, doc, read

from planner.emit import launch
from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan

L70 = "nemo llm pretrain -y --factory llama3_70b trainer.num_nodes=4 "  # tp 4 pp 4 vpp 5 cp 2
PP2 = (
    "nemo llm pretrain -y --factory llama3_70b trainer.num_nodes=2 "
    "trainer.strategy.pipeline_model_parallel_size=2 "
)  # tp 4 x pp 2 x cp 2 = 16 GPUs, vpp 5 (80 layers / 10 chunks)


def test_the_p2p_overlap_is_off_unless_the_line_turns_it_on() -> None:
    # Megatron-Core model_parallel_config.py:385 defaults overlap_p2p_comm off; NeMo turns it on
    # only in MegatronCommOverlapCallback (megatron_comm_overlap.py:153-157), which
    # llama3_70b.py adds only under performance_mode (:198, :230-243). Before: left out of the
    # document, so planner's Layout default (on) priced the overlap NeMo does not run
    default = doc(L70, 32)["parallel"]
    assert default["vpp"] == 5 and default["overlap_p2p_comm"] is False
    assert default == doc(L70 + "model.config.overlap_p2p_comm=False", 32)["parallel"]
    # batch_p2p_comm=False alone: the overlap stays off, the exchange unbatched and blocking
    # (p2p_communication.py:416 waits on every request)
    assert doc(L70 + "model.config.batch_p2p_comm=False", 32)["parallel"] == default
    # a Megatron-LM launch of it writes the overlap off (arguments.py:3118-3120)
    plan = parse_plan(doc(L70, 32), Path("run.sh"))
    _, args = launch.render(plan, "megatron-args")
    assert "--no-overlap-p2p-communication" in args


def test_pp_2_interleaved_without_the_overlap_is_refused_with_the_reason() -> None:
    # p2p_communication.py:22-57: a batched exchange posts send_prev, recv_prev, send_next,
    # recv_next; at pp 2 prev and next are the one other rank, and NCCL runs a group's calls to
    # one peer in order, so rank 0's [gradient, activation] meet rank 1's receives for
    # [activation, gradient]: swapped (what Megatron-LM's arguments.py:1000-1009 guards).
    # Before: accepted and priced with the overlap on
    with pytest.raises(InputError, match=r"overlap_p2p_comm not given: .*swapped"):
        read(PP2, 16)
    # unbatched (p2p_communication.py:65-75) NeMo runs it soundly; planner's plans have no
    # unbatched blocking exchange, so it says so
    with pytest.raises(InputError, match=r"batch_p2p_comm=False: NeMo runs it unbatched"):
        read(PP2 + "model.config.batch_p2p_comm=False", 16)
    # the overlap on, batching off: what NeMo's callback would set, accepted
    on = "model.config.overlap_p2p_comm=True model.config.batch_p2p_comm=False"
    assert doc(PP2 + on, 16)["parallel"]["overlap_p2p_comm"] is True


def test_cpu_offloading_needs_its_switch() -> None:
    # model_parallel_config.py:458 (cpu_offloading False) and transformer_block.py:305-318 (the
    # switch is the offload context's `enabled`): the count alone offloads nothing in NeMo; only
    # Megatron-LM's arguments.py:1950-1951 derives the switch from it. Before: the count was
    # read as 8 offloaded layers (72.7 GiB, fits) where NeMo runs none (78.5 GiB, does not)
    line = HEAD + "data.seq_length=10240 "
    count = "model.config.cpu_offloading_num_layers=8"
    alone = read(line + count)
    assert alone.doc == read(line).doc  # the very plan without offloading
    assert any(n.startswith(f"{count}: NeMo offloads nothing") for n in alone.notes)
    on = doc(line + count + " model.config.cpu_offloading=True")["parallel"]
    assert on["cpu_offloading_num_layers"] == 8


def test_tp_comm_overlap_needs_nemo_s_callback() -> None:
    # NeMo makes TE's userbuffers only in MegatronCommOverlapCallback._init_te_userbuffers
    # (megatron_comm_overlap.py:290-327, called at on_fit_start :331-334), which a line cannot
    # add. Before: accepted and priced with the overlap
    line = "nemo llm pretrain -y --factory llama3_70b trainer.num_nodes=4 "
    with pytest.raises(InputError, match=r"tp_comm_overlap=True: .*MegatronCommOverlapCallback"):
        read(line + "model.config.tp_comm_overlap=True", 32)
    assert "tp_comm_overlap" not in doc(line + "model.config.tp_comm_overlap=False", 32)["parallel"]


def test_cuda_graphs_need_the_te_rng_tracker() -> None:
    # gpt/model/base.py:332-337 asserts use_te_rng_tracker with enable_cuda_graph unless the
    # scope is full_iteration; the strategy's value is copied onto the model config
    # (_strategy_lib.py:166-171), so model.config.use_te_rng_tracker is overwritten. Before:
    # enable_cuda_graph alone accepted, the strategy's key refused as unknown
    graph = "model.config.enable_cuda_graph=True"
    with pytest.raises(InputError, match=r"enable_cuda_graph=True: NeMo asserts .*RNG tracker"):
        read(HEAD + graph)
    with pytest.raises(InputError, match=r"add trainer.strategy.use_te_rng_tracker=True"):
        read(HEAD + graph + " model.config.use_te_rng_tracker=True")
    r = read(HEAD + graph + " trainer.strategy.use_te_rng_tracker=True")
    assert r.doc["training"]["cuda_graph_impl"] == "local"
    full = read(HEAD + graph + " model.config.cuda_graph_scope=full_iteration")
    assert full.doc["training"]["cuda_graph_impl"] == "full_iteration"


def test_mixtral_experts_are_not_grouped_unless_asked() -> None:
    # MixtralConfig (gpt/model/mixtral.py:36-78) leaves moe_grouped_gemm at TransformerConfig's
    # False (transformer_config.py:850), and Megatron builds the fused grouped MLP only for
    # grouped-GEMM experts. Before: read as grouped, so the op fuser fused them
    line = (
        "nemo llm pretrain --factory mixtral_8x7b trainer.devices=8 "
        "model.config.use_transformer_engine_op_fuser=True "
        "model.config.moe_mlp_glu_interleave_size=32"
    )
    plain = read(line, 64)
    assert "moe_fused_grouped_mlp" not in plain.doc["training"]
    assert any("no grouped-GEMM experts" in n for n in plain.notes)
    assert read(line + " model.config.moe_grouped_gemm=1", 64).doc["training"][
        "moe_fused_grouped_mlp"
    ]


@pytest.mark.parametrize(
    "override",
    [
        "trainer.strategy.pipeline_dtype=torch.float32",
        "trainer.strategy.ddp.align_param_gather=True",
        "trainer.strategy.ddp.delay_wgrad_compute=True",
        "optim.config.overlap_param_gather_with_optimizer_step=True",
        "model.config.distribute_saved_activations=True",
        "model.config.fp16_lm_cross_entropy=True",
        "model.config.moe_permute_fusion=True",
        "model.config.bias_dropout_fusion=False",
        "model.config.attention_softmax_in_fp32=True",
    ],
)
def test_keys_nemo_runs_but_planner_does_not_price_are_noted(override: str) -> None:
    # each changes what the run keeps or how long it takes (nemo_unread.NOTED cites where);
    # the Megatron-LM reader ignores their flags too. Before: listed only as ignored
    key = override.partition("=")[0]
    r = read(HEAD + override)
    assert any(n.startswith(f"{key}=") for n in r.not_modelled)
    assert key not in r.ignored


def test_a_default_value_of_a_noted_key_is_ignored() -> None:
    # bias_dropout_fusion True is the recipe's own (LlamaConfig), pipeline_dtype bf16 the
    # recipe's (llama3_70b.py trainer's pipeline_dtype)
    r = read(HEAD + "model.config.bias_dropout_fusion=True trainer.strategy.pipeline_dtype=bf16")
    assert not r.not_modelled
    assert r.ignored == ("model.config.bias_dropout_fusion", "trainer.strategy.pipeline_dtype")


def test_fp32_residual_connection_is_refused_as_the_megatron_reader_refuses_it() -> None:
    # megatron_flags.REFUSED["--fp32-residual-connection"]: fp32 residuals and pipeline sends,
    # which planner counts in bf16. Before: silently ignored
    with pytest.raises(InputError, match=r"fp32_residual_connection=True: .*--fp32-residual"):
        read(HEAD + "model.config.fp32_residual_connection=True")
    assert not read(HEAD + "model.config.fp32_residual_connection=False").not_modelled


def test_nemo_run_reads_1_and_0_as_switches() -> None:
    # NeMo-Run cli_parser.py TypeParser.parse_bool: "1" / "on" True, "0" / "off" False for a
    # bool field. Before: trainer.strategy.sequence_parallel=0 refused as not True or False
    tp2 = HEAD + "trainer.strategy.tensor_model_parallel_size=2 "
    assert doc(tp2 + "trainer.strategy.sequence_parallel=1")["parallel"]["sequence_parallel"]
    assert not doc(tp2 + "trainer.strategy.sequence_parallel=0")["parallel"]["sequence_parallel"]
    off = doc(HEAD + "trainer.strategy.ddp.overlap_grad_reduce=0")["parallel"]
    assert off["overlap_grad_reduce"] is False
    with pytest.raises(InputError, match=r"sequence_parallel=2: expected True or False"):
        read(tp2 + "trainer.strategy.sequence_parallel=2")


def test_model_config_keys_the_strategy_overwrites_are_noted() -> None:
    # MegatronStrategy.connect copies its ParallelismConfig onto the model config
    # (_strategy_lib.py:166-171), and the DDP config takes the optimizer's
    # use_distributed_optimizer (megatron_strategy.py:472-474). Before: refused
    r = read(
        HEAD + "model.config.tensor_model_parallel_size=8 "
        "trainer.strategy.ddp.use_distributed_optimizer=False"
    )
    assert r.doc["parallel"]["tp"] == 1 and r.doc["parallel"]["zero_stage"] == 1  # the recipe's
    assert any(
        n.startswith("model.config.tensor_model_parallel_size=8: NeMo writes ")
        and "trainer.strategy.tensor_model_parallel_size" in n
        for n in r.notes
    )
    assert any("optim.config.use_distributed_optimizer" in n for n in r.notes)


def test_gemma2_s_soft_capped_logits_are_in_the_not_modelled_note() -> None:
    # gemma2.py:617-623, :643-648: scale * tanh(logits / scale); tanh keeps its output for the
    # backward: 4096 x 2 x (256,000 / tp 2) x 2 bytes = 2,097,152,000 B = 1.95 GiB
    r = read("nemo llm pretrain -y --factory gemma2_2b", 8)
    assert any("final-logit soft-capping" in n and "1.95 GiB" in n for n in r.not_modelled)


def test_full_recompute_needs_its_method_and_layer_count() -> None:
    """Megatron-Core's TransformerConfig.__post_init__ raises for recompute_granularity full
    without recompute_method ("must be block or uniform") or recompute_num_layers
    (transformer_config.py:1908-1925 @d98e8a64); the recipes planner reads set neither."""
    with pytest.raises(InputError, match="recompute_method"):
        read(HEAD + "model.config.recompute_granularity=full")
    with pytest.raises(InputError, match="recompute_num_layers"):
        read(HEAD + "model.config.recompute_granularity=full model.config.recompute_method=block")
    whole = "model.config.recompute_method=uniform model.config.recompute_num_layers=1"
    parallel = read(HEAD + "model.config.recompute_granularity=full " + whole).doc["parallel"]
    assert (parallel["recompute"], parallel["recompute_method"]) == ("full", "uniform")
    assert read(HEAD + "model.config.recompute_granularity=selective").doc["parallel"]


GRANULARITY = "model.config.recompute_granularity"


@pytest.mark.parametrize("word", ["none", "None", "null", "NULL", "'\"none\"'"])
def test_a_bare_none_is_no_recompute(word: str) -> None:
    """NeMo-Run (NVIDIA/NeMo-Run 0c491271 cli_parser.py) parses the override against
    TransformerConfig's `Optional[Literal['full', 'selective']]` (transformer_config.py:532
    @d98e8a64): TypeParser.parse strips double quotes first (:739), then parse_union returns None
    for none / null in any case (:929-930). None is TransformerConfig's default, no recompute,
    and llama3_8b's recipe sets no recompute: the plan keeps its own default, "none"."""
    parallel = doc(f"{HEAD}{GRANULARITY}={word}")["parallel"]
    assert "recompute" not in parallel


@pytest.mark.parametrize(
    ("key", "word"),
    [
        (GRANULARITY, "\"'none'\""),  # the word 'none', single quotes kept
        (GRANULARITY, "foo"),
        (GRANULARITY, "Full"),  # Literal matching is exact
        ("model.config.recompute_method", "\"'null'\""),
    ],
)
def test_a_word_outside_the_literal_is_refused_naming_the_key(key: str, word: str) -> None:
    """The same parser: a word that is not none / null goes to parse_literal, which strips one
    pair of quotes and accepts only the Literal's values ('full', 'selective'; the method's
    'uniform', 'block', transformer_config.py:543), else raises LiteralParseError (:991-1002):
    'none' in single quotes is the text none there, refused, where planner read it as the
    plan's "none" (no recompute). Had a string outside the choices reached TransformerConfig,
    its __post_init__ raises (transformer_config.py:1901-1912). Exit 2 names the key and the
    value."""
    with pytest.raises(InputError, match=rf"{re.escape(key)}='.*': .*expected") as info:
        read(f"{HEAD}{key}={word}")
    assert "cli_parser.py" in str(info.value)


def test_a_megatron_line_s_none_is_an_invalid_choice() -> None:
    """Megatron-LM's --recompute-granularity has argparse choices ('full', 'selective'), made
    from TransformerConfig's Literal (argument_utils.py:151-155, transformer_config.py:532
    @d98e8a64): `none` is no choice and argparse exits; the line reader says so."""
    line = (
        "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 8 "
        "--max-position-embeddings 8 --micro-batch-size 1 --global-batch-size 8 "
        "--vocab-size 128 --recompute-granularity none"
    )
    with pytest.raises(InputError, match=r"--recompute-granularity: .*got 'none'.*invalid choice"):
        read(line)
