"""DeepSeek sparse attention on a Megatron-LM command line: --experimental-attention-variant dsa
with the --dsa-indexer-* sizes, the kernel backend and the indexer loss, what is noted and what
is refused; and a Megatron-LM log's printed DSA arguments read back.

Oracle: Megatron-LM d98e8a64 megatron/core/transformer/transformer_config.py (the dsa_indexer_*
fields: n_heads, head_dim and topk default None, topk_freq 1, loss_coeff None,
dsa_kernel_backend Literal["none", "tilelang", "cudnn"] = "none"; `__post_init__` asserts
`not self.apply_rope_fusion` for "dsa"), experimental_attention_variant/dsa.py
(`is_dsa_skip_topk_layer` raises ValueError for topk_freq < 1; `indexer_loss_coeff > 0` decides
the loss), dsa_kernels.py `use_fused_dsa_kernels` (False under attention_backend unfused),
dsa_cudnn_kernels.py `_assert_supported_indexer_scoring` (RuntimeError without the ReLU), and
the hybrid models' layer-allocation module's `Symbols` (D = DS_ATTENTION)."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.inputs import megatron_args, megatron_dsa, megatron_log, megatron_log_args
from planner.inputs.errors import InputError
from planner.inputs.megatron_flags import READ, megatron_flags
from planner.inputs.plan import parse_plan
from planner.search.rules import check_plan

BASE = (
    "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 4096 "
    "--micro-batch-size 1 --global-batch-size 8 --bf16 --position-embedding-type rope "
    "--no-rope-fusion --normalization RMSNorm --disable-bias-linear --vocab-size 32000 --swiglu "
    "--multi-latent-attention --q-lora-rank 512 --kv-lora-rank 512 --qk-head-dim 128 "
    "--qk-pos-emb-head-dim 64 --v-head-dim 128 --qk-layernorm "
    "--tensor-model-parallel-size 2 --sequence-parallel "
)
DSA = (
    "--experimental-attention-variant dsa --dsa-indexer-n-heads 64 --dsa-indexer-head-dim 128 "
    "--dsa-indexer-topk 2048 "
)


def read(text: str, gpus: int = 8) -> megatron_args.Reading:
    return megatron_args.read(text, "h100-sxm-80gb", gpus, "train.sh")


def test_a_dsa_line_reads_and_checks() -> None:
    r = read(BASE + DSA)
    model = r.doc["model"]
    assert (model["dsa_indexer_n_heads"], model["dsa_indexer_head_dim"]) == (64, 128)
    assert model["dsa_indexer_topk"] == 2048
    # Megatron's defaults: backend none, no indexer loss
    assert r.doc["training"]["dsa_kernel_backend"] == "none"
    assert "dsa_indexer_loss_coeff" not in r.doc["training"]
    assert not any("experimental-attention-variant" in m for m in r.not_modelled)
    plan = check_plan(parse_plan(r.doc))
    job = plan.job
    assert job.arch.has_dsa and not job.fused_rope
    assert (job.dsa_kernel_backend, job.dsa_indexer_loss_coeff) == ("none", 0.0)
    assert not job.dsa_indexer_use_sparse_loss


def test_backend_and_loss_are_training_fields() -> None:
    text = BASE + DSA + "--dsa-kernel-backend tilelang --dsa-indexer-loss-coeff 0.01 "
    r = read(text + "--dsa-indexer-use-sparse-loss")
    training = r.doc["training"]
    assert training["dsa_kernel_backend"] == "tilelang"
    assert training["dsa_indexer_loss_coeff"] == 0.01
    assert training["dsa_indexer_use_sparse_loss"] is True
    job = check_plan(parse_plan(r.doc)).job
    assert (job.dsa_kernel_backend, job.dsa_indexer_loss_coeff) == ("tilelang", 0.01)


def test_the_read_flags_are_megatron_flags() -> None:
    # megatron_flags.txt: the option strings Megatron-LM d98e8a64's parser accepts
    assert set(megatron_dsa.FLAGS) <= READ
    assert set(megatron_dsa.FLAGS) <= megatron_flags()


def test_numeric_flags_are_ignored_megatron_flags() -> None:
    # RoPE interleaving, the Hadamard rotation, the key norm's epsilon and fp32 input change
    # numerics only: Megatron-LM flags the reader does not read, listed as ignored
    extra = (
        "--dsa-indexer-rope-interleaved --no-dsa-indexer-rotate-activation "
        "--dsa-indexer-k-norm-epsilon 1e-6 --dsa-indexer-k-norm-fp32"
    )
    r = read(BASE + DSA + extra)
    assert set(r.ignored) >= {
        "--dsa-indexer-rope-interleaved",
        "--no-dsa-indexer-rotate-activation",
        "--dsa-indexer-k-norm-epsilon",
        "--dsa-indexer-k-norm-fp32",
    }
    assert not r.unknown and not r.not_modelled


def test_topk_sharing_is_noted_not_modelled() -> None:
    r = read(BASE + DSA + "--dsa-indexer-topk-freq 4 --dsa-indexer-skip-topk-offset 2")
    (note,) = [m for m in r.not_modelled if "--dsa-indexer-topk-freq" in m]
    assert "--dsa-indexer-topk-freq 4 (--dsa-indexer-skip-topk-offset 2)" in note
    assert "over-estimated" in note
    # frequency 1 (Megatron's default): every layer computes its own top-k, whatever the offset
    r1 = read(BASE + DSA + "--dsa-indexer-topk-freq 1 --dsa-indexer-skip-topk-offset 3")
    assert not r1.not_modelled


def test_unfused_attention_backend_runs_no_dsa_kernel() -> None:
    r = read(BASE + DSA + "--dsa-kernel-backend cudnn --attention-backend unfused")
    assert r.doc["training"]["dsa_kernel_backend"] == "none"
    assert any("--dsa-kernel-backend cudnn: read as none" in n for n in r.notes)


def test_a_negative_loss_coefficient_runs_no_loss() -> None:
    r = read(BASE + DSA + "--dsa-indexer-loss-coeff -0.5")
    assert "dsa_indexer_loss_coeff" not in r.doc["training"]
    assert any("--dsa-indexer-loss-coeff -0.5: read as 0" in n for n in r.notes)


def test_yarn_positions_need_no_rope_flag() -> None:
    # validate_args turns RoPE fusion off for position embeddings other than rope
    text = (BASE + DSA).replace("--position-embedding-type rope --no-rope-fusion", "")
    r = read(text + "--position-embedding-type yarn")
    assert r.doc["model"]["position_embedding_type"] == "rope"
    assert not check_plan(parse_plan(r.doc)).job.fused_rope


@pytest.mark.parametrize(
    ("drop", "extra", "needle"),
    [
        ("--dsa-indexer-n-heads 64 ", "", "--dsa-indexer-n-heads: required"),
        ("--dsa-indexer-head-dim 128 ", "", "--dsa-indexer-head-dim: required"),
        ("--dsa-indexer-topk 2048 ", "", "--dsa-indexer-topk: required"),
        ("", "--dsa-indexer-topk-freq 0", "--dsa-indexer-topk-freq: expected at least 1"),
        ("", "--dsa-indexer-skip-topk-offset -1", "--dsa-indexer-skip-topk-offset: expected"),
        ("", "--dsa-kernel-backend flashmla", "--dsa-kernel-backend: expected one of"),
        (
            "",
            "--dsa-kernel-backend cudnn --no-dsa-indexer-scoring-relu",
            "--no-dsa-indexer-scoring-relu: cannot be combined",
        ),
        ("--no-rope-fusion ", "", "--no-rope-fusion: required"),
    ],
)
def test_bad_lines_name_the_flag(drop: str, extra: str, needle: str) -> None:
    text = (BASE + DSA).replace(drop, "") if drop else BASE + DSA
    with pytest.raises(InputError, match=needle) as err:
        read(text + extra)
    assert "train.sh" in str(err.value)


def test_unknown_variant_is_refused() -> None:
    # experimental_attention_variant: Optional[Literal['gdn', 'gdn2', 'dsa', 'gated_delta_net']]
    with pytest.raises(InputError, match="expected one of gdn, gdn2, dsa, gated_delta_net"):
        read(BASE + "--experimental-attention-variant sparse")


def test_hybrid_d_layers_are_refused() -> None:
    # Megatron's hybrid pattern symbol D is a DSA layer (validate_args turns on MLA for it):
    # not modelled, refused naming the flag (exit 2)
    hybrid = BASE + "--hybrid-layer-pattern M*DM "
    with pytest.raises(InputError, match=r"--hybrid-layer-pattern: 'D' \(DeepSeek sparse"):
        read(hybrid)
    # the variant beside a hybrid pattern without D layers: not modelled either
    with pytest.raises(InputError, match="dsa: DeepSeek sparse attention in a hybrid stack"):
        read(BASE + DSA + "--hybrid-layer-pattern M*M*")


def test_tp_without_sequence_parallel_is_refused_by_the_rules() -> None:
    # AbsorbedMLASelfAttention asserts sequence_parallel when tensor_model_parallel_size > 1
    r = read((BASE + DSA).replace("--sequence-parallel ", ""))
    with pytest.raises(InputError, match=r"parallel\.sequence_parallel"):
        check_plan(parse_plan(r.doc))


LOG = """\
------------------------ arguments ------------------------
  add_bias_linear ................................. False
  apply_rope_fusion ............................... False
  dsa_indexer_head_dim ............................ 128
  dsa_indexer_loss_coeff .......................... 0.01
  dsa_indexer_n_heads ............................. 64
  dsa_indexer_rotate_activation ................... True
  dsa_indexer_scoring_relu ........................ True
  dsa_indexer_skip_topk_offset .................... 0
  dsa_indexer_topk ................................ 2048
  dsa_indexer_topk_freq ........................... 1
  dsa_indexer_use_sparse_loss ..................... True
  dsa_kernel_backend .............................. tilelang
  experimental_attention_variant .................. dsa
  global_batch_size ............................... 8
  hidden_size ..................................... 1024
  kv_lora_rank .................................... 512
  multi_latent_attention .......................... True
  num_attention_heads ............................. 16
  num_experts ..................................... None
  num_layers ...................................... 4
  position_embedding_type ......................... rope
  q_lora_rank ..................................... 512
  seq_length ...................................... 4096
  sequence_parallel ............................... True
  tensor_model_parallel_size ...................... 2
  vocab_size ...................................... 32000
  world_size ...................................... 8
-------------------- end of arguments ---------------------
"""


def test_a_logs_printed_dsa_arguments_read_back() -> None:
    # _print_args prints every argument, defaults included; apply_rope_fusion False is
    # --no-rope-fusion (store_false), the DSA sizes and training fields come back as flags
    (run,) = megatron_log.parse(LOG, Path("dsa.log")).runs
    words = megatron_log_args.words(run)
    assert "--no-rope-fusion" in words and "--no-dsa-indexer-scoring-relu" not in words
    doc = megatron_log_args.reading(run, "h100-sxm-80gb", 8, vocab_size=32000).doc
    assert doc["model"]["dsa_indexer_topk"] == 2048
    assert doc["training"]["dsa_kernel_backend"] == "tilelang"
    assert doc["training"]["dsa_indexer_use_sparse_loss"] is True
    # a run without DSA prints the DSA defaults too: they are not read as flags
    plain = LOG.replace(" dsa\n", " None\n")
    (run,) = megatron_log.parse(plain, Path("plain.log")).runs
    assert not any("dsa" in w for w in megatron_log_args.words(run))


@pytest.mark.parametrize(
    ("precision", "field"),
    [("--fp16 ", "precision"), ("", "precision"), ("--fp16 --fp8-format hybrid ", "params_dtype")],
)
def test_dsa_needs_bf16_activations(precision: str, field: str) -> None:
    # Megatron-LM d98e8a64 dsa.py:264-266: rotate_activation asserts bf16 input, and the indexer
    # rotates q and k by default (transformer_config.py:348, dsa.py:1311-1313); --fp16, fp32
    # (neither flag) and FP8 over fp16 parameters give activations of another dtype
    r = read(BASE.replace("--bf16 ", precision) + DSA)
    with pytest.raises(InputError, match=f"training.{field}: .* rotate_activation asserts bf16"):
        check_plan(parse_plan(r.doc))
