"""Gated delta nets on a Megatron-LM command line: --experimental-attention-variant gdn with
--linear-attention-freq and the --linear-* sizes, the hybrid pattern's G layers, the ModelZoo's
development-branch spelling, and what is refused; and the launch writing them back.

Oracle: Megatron-LM d98e8a64 transformer_config.py (`experimental_attention_variant`'s values, the
asserts of `__post_init__`: the frequency required with gdn, the head counts divisible by tp x cp),
experimental_attention_variant_module_specs.py `get_linear_attention_pattern` (an int N: every
N-th layer softmax attention); the expected layer kinds are counted by hand in the comments."""

from __future__ import annotations

import pytest

from planner.emit.megatron_model import model_args
from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.hybrid import DENSE, DENSE_GDN, GDN, MLP
from planner.inputs.plan import parse_plan
from planner.model import memory
from planner.search.rules import check_plan

BASE = (
    "--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
    "--micro-batch-size 1 --global-batch-size 8 --bf16 --position-embedding-type rope "
    "--normalization RMSNorm --disable-bias-linear --vocab-size 32000 --swiglu "
)
GDN_FLAGS = "--linear-num-key-heads 8 --linear-num-value-heads 16 --linear-key-head-dim 64 "


def read(text: str, gpus: int = 8) -> megatron_args.Reading:
    return megatron_args.read(text, "h100-sxm-80gb", gpus, "train.sh")


def test_a_gdn_line_reads_and_fits() -> None:
    r = read(BASE + GDN_FLAGS + "--experimental-attention-variant gdn --linear-attention-freq 4")
    model = r.doc["model"]
    assert model["linear_attention_freq"] == 4
    assert (model["linear_num_key_heads"], model["linear_key_head_dim"]) == (8, 64)
    assert not any("experimental-attention-variant" in m for m in r.not_modelled)
    plan = check_plan(parse_plan(r.doc))
    # layers 1..8: 4 and 8 keep softmax attention, the other six are gated delta nets
    kinds = plan.job.arch.layer_kinds
    assert (kinds.count(DENSE_GDN), kinds.count(DENSE)) == (6, 2)
    assert kinds[3] == DENSE and kinds[7] == DENSE
    assert memory.estimate(plan.job, plan.require_layout()).fits
    # the launch writes the variant, the pattern and the sizes back
    args = dict((a[0], a[1] if len(a) > 1 else None) for a in model_args(plan))
    assert args["--experimental-attention-variant"] == "gdn"
    assert args["--linear-attention-freq"] == "4"
    assert (args["--linear-num-key-heads"], args["--linear-value-head-dim"]) == ("8", "128")


def test_the_list_pattern_and_the_deprecated_spelling() -> None:
    text = BASE + "--experimental-attention-variant gated_delta_net "
    r = read(text + "--linear-attention-freq '([1]*3+[0]*1)*2'")
    assert r.doc["model"]["linear_attention_freq"] == [1, 1, 1, 0, 1, 1, 1, 0]


def test_the_development_branch_spelling_is_read_with_a_note() -> None:
    r = read(BASE + "--linear-attention-type gated_delta_net --linear-attention-freq 2")
    assert r.doc["model"]["linear_attention_freq"] == 2
    assert "--linear-attention-type" not in r.unknown
    assert any("--linear-attention-type gated_delta_net" in n for n in r.notes)


def test_hybrid_g_layers_are_gated_delta_nets() -> None:
    r = read(BASE + GDN_FLAGS + "--hybrid-layer-pattern G*G-G*G-")
    plan = check_plan(parse_plan(r.doc))
    kinds = plan.job.arch.layer_kinds
    # G * G - G * G -: four gated delta nets, two attention, two MLP
    assert (kinds.count(GDN), kinds.count(MLP)) == (4, 2)
    assert plan.job.arch.linear_num_key_heads == 8


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        ("--experimental-attention-variant gdn", "--linear-attention-freq: required"),
        ("--experimental-attention-variant gdn2 --linear-attention-freq 2", "gdn2"),
        ("--linear-attention-type mamba --linear-attention-freq 2", "not a gated delta net"),
        ("--experimental-attention-variant gdn --linear-attention-freq '[1]*3'", "entries"),
    ],
)
def test_bad_lines_name_the_flag(flags: str, needle: str) -> None:
    with pytest.raises(InputError, match=needle) as err:
        check_plan(parse_plan(read(BASE + flags).doc))
    assert "train.sh" in str(err.value) or "linear_attention_freq" in str(err.value)


def test_heads_must_divide_by_tp_times_cp() -> None:
    # 16 key heads (Megatron's default) split over tp 4 x cp 8 = 32: refused
    text = BASE + "--experimental-attention-variant gdn --linear-attention-freq 2 "
    text += "--tensor-model-parallel-size 4 --context-parallel-size 8 --sequence-parallel "
    with pytest.raises(InputError, match="linear_num_key_heads"):
        check_plan(parse_plan(read(text, gpus=32).doc))


def test_dsa_is_not_a_gated_delta_net() -> None:
    # "dsa" is megatron_dsa's (tests/inputs/test_megatron_dsa.py): its indexer sizes are
    # required, and no gated delta net is read
    with pytest.raises(InputError, match="--dsa-indexer-n-heads: required"):
        read(BASE + GDN_FLAGS + "--experimental-attention-variant dsa --multi-latent-attention")


def test_gdn_norm_out_recompute() -> None:
    # Megatron raises ValueError for gdn_norm_out without a gated delta net; with one, the gated
    # norm's output, rstd and out_proj's input are no longer kept: less memory per GPU
    recompute = "--recompute-granularity selective --recompute-modules gdn_norm_out "
    with pytest.raises(InputError, match="gdn_norm_out needs gated delta nets"):
        check_plan(parse_plan(read(BASE + recompute).doc))
    gdn = BASE + GDN_FLAGS + "--experimental-attention-variant gdn --linear-attention-freq 4 "
    kept = check_plan(parse_plan(read(gdn).doc))
    dropped = check_plan(parse_plan(read(gdn + recompute).doc))
    assert dropped.require_layout().recompute_modules == ("gdn_norm_out",)
    peak = [memory.estimate(p.job, p.require_layout()).peak for p in (kept, dropped)]
    assert peak[1] < peak[0]
