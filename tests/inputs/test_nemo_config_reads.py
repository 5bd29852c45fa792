"""NeMo 2.0 `nemo llm pretrain` lines read as NeMo builds them (a QA pass): the learned position
table from the model config's seq_length, Gemma 2's unfused gradient accumulation, MXFP8's own
parameter buffers, overlap_grad_reduce off beside the recipe's overlapped gather, and
model.config keys that name no field of the config.

Oracles: NVIDIA/NeMo 8cfedd72 and Megatron-LM d98e8a64 source lines restated in each test, and
hand arithmetic.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from cli_run import run
from nemo_lines import HEAD, doc, read

from planner.inputs import megatron_args
from planner.inputs.arch import ModelArch
from planner.inputs.errors import InputError
from planner.inputs.nemo_keys import ARCH_KEYS
from planner.inputs.plan import parse_plan
from planner.model import cost, memory, wgrad_accumulation
from planner.model.layer_time import gpu_of
from planner.search.rules import check_plan

GIB = 2**30
LEARNED = "model.config.position_embedding_type=learned_absolute model.config.hidden_dropout=0.1 "


def _peak(d: dict[str, Any]) -> tuple[float, bool]:
    plan = parse_plan(d, Path("run.sh"))
    rep = memory.estimate(plan.job, plan.require_layout())
    return max(s.total for s in rep.stages), rep.fits


def test_the_learned_table_is_the_configs_seq_length() -> None:
    """GPTConfig.configure_model builds Megatron-Core's GPTModel with max_sequence_length =
    self.seq_length (NeMo GPT model base.py:399), the rows of the learned table
    (language_model_embedding.py:72 @d98e8a64); Llama3Config8B.seq_length = 8192 (llama.py:207),
    where the zoo's Llama 3.1 8B states 131,072 positions. By hand, on llama3_8b's layout (tp 1,
    pp 1, cp 2, dp 4, the distributed optimizer over dp x cp = 8 ranks): the 122,880 rows less
    x 4,096 hidden = 503,316,480 parameters, each 2 bytes of bf16 weight + 4 of fp32 main
    gradient + 12 / 8 of sharded fp32 master and Adam moments = 7.5 bytes: 3.516 GiB, the
    difference between not fitting a 77.3 GiB H100 and fitting it."""
    d = doc(HEAD + LEARNED)
    assert d["model"]["max_position_embeddings"] == 8192
    new, fits = _peak(d)
    old = {**d, "model": {**d["model"], "max_position_embeddings": 131_072}}
    before, fitted = _peak(old)
    assert before - new == pytest.approx((131_072 - 8192) * 4096 * (2 + 4 + 12 / 8), rel=1e-6)
    assert (before - new) / GIB == pytest.approx(3.516, abs=1e-3)
    assert fits and not fitted
    # the line's own model.config.seq_length sizes the table (it was ignored as harmless)
    short = doc(HEAD + LEARNED + "model.config.seq_length=4096")["model"]
    assert short["max_position_embeddings"] == 4096 and short["name"].endswith("+overrides")
    # then data.seq_length 8192 outgrows it: Megatron-Core indexes past the table's 4096 rows
    with pytest.raises(InputError, match=r"exceeds max_position_embeddings \(4096\)"):
        check_plan(parse_plan(doc(HEAD + LEARNED + "model.config.seq_length=4096"), Path("x")))


def test_the_model_configs_seq_length_is_checked_as_nemo_checks_it() -> None:
    # llm.api._validate_config asserts it positive and, under context parallelism, a multiple of
    # 2 x cp (api.py:1312, :1385-1389): llama3_8b runs cp 2, so 8190 % 4 = 2 is refused
    with pytest.raises(InputError, match=r"model.config.seq_length=8190: NeMo asserts .* \(4;"):
        read(HEAD + "model.config.seq_length=8190")
    with pytest.raises(InputError, match=r"model.config.seq_length=0: expected a positive"):
        read(HEAD + "model.config.seq_length=0")
    assert "model.config.seq_length" not in read(HEAD + "model.config.seq_length=8192").ignored


def test_max_position_embeddings_is_mixtrals_field_alone() -> None:
    # MixtralConfig declares it (mixtral.py:52) and only its HF conversion reads it (:226, :372);
    # LlamaConfig / GPTConfig / TransformerConfig have no such field: NeMo-Run refuses it
    with pytest.raises(InputError, match=r"max_position_embeddings=4096: not a field of Llama3"):
        read(HEAD + "model.config.max_position_embeddings=4096")
    mixtral = "nemo llm pretrain --factory mixtral_8x7b trainer.devices=8 "
    r = read(mixtral + "model.config.max_position_embeddings=65536", 64)
    assert r.doc["model"]["max_position_embeddings"] == 4096  # MixtralConfig8x7B.seq_length
    assert any("read only by its Hugging Face conversion" in n for n in r.notes)


GEMMA = "nemo llm pretrain -y --factory gemma2_2b "


def test_gemma2_accumulates_its_weight_gradients_unfused() -> None:
    """Gemma2Config sets gradient_accumulation_fusion False (NeMo gemma2.py:114; GPTConfig's
    default is on, base.py:304): DDP's hook adds each bf16 .grad into the fp32 main gradient
    (distributed_data_parallel.py:575-578), 2 + 4 + 4 = 10 bytes a parameter and micro-batch.
    By hand for gemma2_2b's recipe (tp 2, pp 1, dp 4, mbs 2, gbs 32: 32 / (2 x 4) = 4
    micro-batches): the rank's parameters but the tied word embedding, 26 layers x ((attention
    2,304 x 4,096 + 2,048 x 2,304 + MLP 3 x 2,304 x 9,216) / 2 + planner's two RMSNorms 2 x
    2,304) + the final norm 2,304 = 1,012,260,096, so the step grows by 4 x that x 10 bytes at
    the achieved HBM bandwidth (about 15 ms on an H100)."""
    unfused = read(GEMMA + "trainer.max_steps=1")
    assert unfused.doc["training"]["gradient_accumulation_fusion"] is False
    assert not any("accumulation fusion" in n for n in unfused.not_modelled)  # the stale note
    fused = doc(GEMMA + "model.config.gradient_accumulation_fusion=True")
    assert "gradient_accumulation_fusion" not in fused["training"]
    plan, base = parse_plan(unfused.doc, Path("x")), parse_plan(fused, Path("x"))
    job, lay = plan.job, plan.require_layout()
    n = 26 * ((2304 * 4096 + 2048 * 2304 + 3 * 2304 * 9216) / 2 + 2 * 2304) + 2304
    assert n == 1_012_260_096
    chunks = lay.chunk_layers(job.arch.num_layers)[0]
    assert wgrad_accumulation.unfused_params(job, lay, 0, chunks) == pytest.approx(n)
    m = lay.num_microbatches(job.global_batch_size)
    assert m == 4
    slower = cost.estimate(job, lay).step_time_s - cost.estimate(base.job, lay).step_time_s
    assert slower == pytest.approx(m * n * 10 / gpu_of(job).hbm, rel=0.02)
    # the key was refused as "changes memory or layout"; on Llama it turns the fusion off
    assert doc(HEAD + "model.config.gradient_accumulation_fusion=False")["training"][
        "gradient_accumulation_fusion"
    ] is False  # fmt: skip


MXFP8 = HEAD + "trainer.plugins.fp8=hybrid trainer.plugins.fp8_recipe=mxfp8 "
REUSE = "trainer.plugins.reuse_grad_buf_for_mxfp8_param_ag"


def _b200(text: str) -> megatron_args.Reading:
    return megatron_args.read(text, "b200-sxm-180gb", 8, "run.sh")


def test_mxfp8_gather_without_the_grad_buffer_reuse_is_noted() -> None:
    """NeMo's precision plugin leaves reuse_grad_buf_for_mxfp8_param_ag False
    (plugins/mixed_precision.py:132, DtypeConfig :92) and writes it onto the DDP config
    (megatron_strategy.py:469-470); Megatron-Core then backs every parameter with a buffer of its
    own (param_and_grad_buffer.py:1245-1263 @d98e8a64), which planner does not count. With it
    True the gather goes through the gradient buffer, the path planner prices: nothing to say."""
    gather = MXFP8 + "trainer.plugins.fp8_param_gather=True "
    for extra in ("", f"{REUSE}=False"):
        notes = _b200(gather + extra).not_modelled
        assert any("persistent parameter buffer of its own" in n for n in notes), extra
    on = _b200(gather + f"{REUSE}=True")
    assert not any(REUSE in n for n in (*on.not_modelled, *on.notes))
    assert REUSE not in on.ignored
    # no FP8 parameter gather, or no distributed optimizer: no such buffers
    assert not any(REUSE in n for n in _b200(MXFP8).not_modelled)
    zero0 = gather + "optim.config.use_distributed_optimizer=False"
    assert not any(REUSE in n for n in _b200(zero0).not_modelled)
    with pytest.raises(InputError, match=rf"{REUSE}='maybe': expected True or False"):
        _b200(gather + f"{REUSE}=maybe")


OGR = "trainer.strategy.ddp.overlap_grad_reduce=False"


def test_grad_reduce_overlap_off_prices_the_gather_exposed() -> None:
    """NeMo does not run Megatron-LM's validate_args (arguments.py:1028, the refusal planner
    applied); Megatron-Core asserts only the distributed optimizer or the gather's overlap
    (param_and_grad_buffer.py:397) and, with overlap_grad_reduce off, sets bucket_size None
    (distributed_data_parallel.py:135-137): one bucket per model chunk, whose all-gather the
    first forward pre-hook dispatches and then waits for (param_and_grad_buffer.py:557-561).
    The recipe's overlap_param_gather=True (llama3_8b.py:120) hides nothing then."""
    r = read(HEAD + OGR)
    par = r.doc["parallel"]
    assert (par["overlap_grad_reduce"], par["overlap_param_gather"]) == (False, False)
    assert any("priced as overlap_param_gather off" in n for n in r.notes)
    check_plan(parse_plan(r.doc, Path("run.sh")))  # was refused by the Megatron-LM rule
    both = read(HEAD + OGR + " trainer.strategy.ddp.overlap_param_gather=True")
    assert any("(the line's)" in n for n in both.notes)
    # the recipe's both-on, and both off, are read as given, without the note
    for line in (HEAD, HEAD + OGR + " trainer.strategy.ddp.overlap_param_gather=False"):
        assert not any("priced as overlap_param_gather off" in n for n in read(line).notes)


CONFIG_FIELDS = {
    # TransformerConfig (Megatron-LM d98e8a64 transformer_config.py)
    "num_layers": 65, "hidden_size": 145, "ffn_hidden_size": 180, "num_attention_heads": 148,
    "num_query_groups": 175, "kv_channels": 184, "gated_linear_unit": 221,
    "activation_func_clamp_value": 235, "glu_linear_offset": 231, "normalization": 256,
    "add_bias_linear": 212, "add_qkv_bias": 218, "qk_layernorm": 259,
    "attention_output_gate": 278, "softmax_type": 170, "no_rope_freq": 291, "qk_l2_norm": 262,
    "num_moe_experts": 239, "moe_router_topk": 760, "moe_router_score_function": 808,
    "moe_router_enable_expert_bias": 816, "moe_apply_probs_on_input": 949,
    "moe_ffn_hidden_size": 740, "moe_shared_expert_intermediate_size": 701,
    "moe_router_num_groups": 780, "moe_router_group_topk": 796, "moe_latent_size": 952,
    "multi_latent_attention": 288, "dsa_indexer_n_heads": 317, "dsa_indexer_head_dim": 320,
    "dsa_indexer_topk": 323, "window_size": 247, "window_attn_skip_freq": 251,
    "mtp_num_layers": 68, "mtp_use_repeated_layer": 82, "mamba_state_dim": 1259,
    "mamba_head_dim": 1262, "mamba_num_groups": 1265, "mamba_num_heads": 1268,
    "linear_attention_freq": 363, "linear_conv_kernel_dim": 370, "linear_key_head_dim": 373,
    "linear_value_head_dim": 376, "linear_num_key_heads": 379, "linear_num_value_heads": 382,
    # NeMo 8cfedd72 GPTConfig (its GPT model base.py)
    "vocab_size": 316, "make_vocab_size_divisible_by": 295, "position_embedding_type": 296,
}  # fmt: skip
"""The ModelArch names that are fields of the model configs NeMo's recipes build, with the line
declaring each (read from the sources at those commits)."""


def test_model_config_keys_are_the_configs_fields() -> None:
    assert set(ARCH_KEYS.values()) <= set(CONFIG_FIELDS)
    assert set(CONFIG_FIELDS) <= set(ModelArch.model_fields)  # each still read


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("model.config.activation=swiglu", "activation_func"),
        ("model.config.untie_embeddings_and_output_weights=True", "share_embeddings_and_output"),
        ("model.config.hybrid_layer_pattern=M*M*", "hybrid (Mamba)"),
        ("model.config.q_lora_rank=512", "MLATransformerConfig"),
        ("model.config.v_head_dim=128", "MLATransformerConfig"),
    ],
)
def test_planners_own_names_are_refused(override: str, says: str) -> None:
    # no field of GPTConfig / TransformerConfig at these commits: NeMo-Run raises "No parameter
    # named ..."; planner read them into the model before
    key = override.partition("=")[0]
    name = key.removeprefix("model.config.")
    why = rf"{key}=.*No parameter named {name}\);.*{re.escape(says)}"
    with pytest.raises(InputError, match=why):
        read(HEAD + override)


def test_the_cli_exits_2_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.sh"
    path.write_text(HEAD + "model.config.activation=swiglu\n")
    argv = ["check", "--megatron-args", str(path), "--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
    code, _, err = run(argv, capsys)
    assert code == 2 and "model.config.activation='swiglu': not a field" in err
    assert "Traceback" not in err
