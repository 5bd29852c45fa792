"""Megatron-LM's T5 (planner/model/t5.py, planner/inputs/megatron_t5.py): its functional-test line
reads as an encoder and a decoder of 12 layers each; its parameters, model FLOPs and memory.

Oracles: hand arithmetic from MCore's T5 layer specs (t5_spec.py: each encoder layer a dense
transformer layer, each decoder layer one more attention block with its norm, the cross-attention),
and Megatron-LM's own measured peak for this line (golden values of the calibration case
t5/t5_mcore_te_tp1_pp1_vp1_resume_torch, SHA-256 prefix 8, on DGX H100:
mem-max-allocated-bytes 6,207,810,560 at steps 52-100, NVIDIA/Megatron-LM d98e8a64
tests/functional_tests/test_cases/t5/t5_mcore_te_tp1_pp1_vp1_resume_torch/
golden_values_dev_dgx_h100.json)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.emit.launch import render
from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.hybrid import DENSE
from planner.inputs.plan import Plan, parse_plan
from planner.model import cost, memory, t5
from planner.model.layer_time import gpu_of, layer_time
from planner.model.stage_params import stage_params
from planner.search.rules import violations

# the functional test's line (model_config.yaml's MODEL_ARGS, paths and logging left out)
LINE = (
    "--encoder-num-layers 12 --decoder-num-layers 12 --hidden-size 768 --num-attention-heads 12 "
    "--kv-channels 64 --ffn-hidden-size 3072 --encoder-seq-length 512 --decoder-seq-length 128 "
    "--max-position-embeddings 512 --tensor-model-parallel-size 1 "
    "--pipeline-model-parallel-size 1 --micro-batch-size 4 --global-batch-size 32 --bf16 "
    "--vocab-extra-ids 100 --transformer-impl transformer_engine "
    "--vocab-file bert-large-cased-vocab.txt --tokenizer-type BertWordPieceCase "
    "--calculate-per-token-loss --deterministic-mode --attention-softmax-in-fp32 "
    "--attention-backend unfused"
)

H, F = 768, 3072
# one dense layer with biases and LayerNorms (weight + bias): QKV h x 3h + 3h, output h x h + h,
# fc1 h x F + F, fc2 F x h + h, two norms 2 x 2h
ATTENTION = H * 3 * H + 3 * H + H * H + H  # 2,362,368
LAYER = ATTENTION + H * F + F + F * H + H + 2 * 2 * H  # 7,087,872
CROSS = ATTENTION + 2 * H  # the cross-attention and its norm: 2,363,904


def plan(extra: str = "", gpu: str = "h100-sxm-80gb") -> Plan:
    return parse_plan(megatron_args.read(LINE + extra, gpu, 8, "t5").doc)


def test_the_line_reads_as_an_encoder_and_a_decoder() -> None:
    r = megatron_args.read(LINE, "h100-sxm-80gb", 8, "t5")
    assert r.doc["model"]["num_layers"] == 12
    assert r.doc["training"]["seq_length"] == 128  # the decoder's
    assert r.doc["training"]["t5_encoder"] == [12, 512]
    assert any(n.startswith("--decoder-num-layers") for n in r.notes)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (" --num-layers 12", "cannot be given with --num-layers"),  # validate_args asserts
        (" --pipeline-model-parallel-size 2", "Pipeline parallelism is not supported for T5"),
    ],
)
def test_what_megatron_refuses_is_refused(extra: str, needle: str) -> None:
    line = LINE.replace("--pipeline-model-parallel-size 1 ", "")
    with pytest.raises(InputError, match=needle):
        p = parse_plan(megatron_args.read(line + extra, "h100-sxm-80gb", 16, "t5").doc)
        if violations(p.job, p.require_layout()):
            raise InputError(violations(p.job, p.require_layout())[0].message)


def test_without_the_decoders_sequence_it_cannot_be_sized() -> None:
    with pytest.raises(InputError, match="--decoder-seq-length: required for T5"):
        megatron_args.read(LINE.replace("--decoder-seq-length 128 ", ""), "h100-sxm-80gb", 8, "t")


def test_parameters_by_hand() -> None:
    p = plan()
    dense, expert = stage_params(p.job, p.require_layout(), 0, (range(12),))
    vocab = 29184  # 28,996 + 100 extra ids = 29,096, padded to a multiple of 128
    encoder = 12 * LAYER + 2 * H  # and its final norm
    decoder = 12 * (LAYER + CROSS) + 2 * H
    embeddings = vocab * H + 512 * H  # words (tied to the output layer) and learned positions
    assert expert == 0
    assert dense == encoder + decoder + embeddings == 221_285_376


def test_model_flops_by_hand() -> None:
    # per sample: the encoder's linear layers 6 x params x 512 tokens and attention 12 x 512^2 x
    # 768; each decoder layer's cross-attention: Q and output over 128 tokens, K and V over 512,
    # attention of 128 queries over 512 keys
    encoder = 12 * (6 * LAYER * 512 + 12 * 512 * 512 * 768)
    cross = 12 * (6 * (2 * 128 * H * H + 512 * H * 2 * H) + 12 * 128 * 512 * 768)
    assert t5.model_flops_per_sample(plan().job) == encoder + cross


def test_the_cross_attention_and_the_encoder_take_time() -> None:
    p = plan()
    lay = p.require_layout()
    g = gpu_of(p.job)
    layer = layer_time(p.job, lay, g, DENSE)
    crossed = t5.cross_attention(p.job, lay, g, layer)
    assert crossed.fwd > layer.fwd and crossed.bwd > layer.bwd
    decoder_only = replace(p.job, t5_encoder=None)
    assert cost.estimate(p.job, lay).step_time_s > cost.estimate(decoder_only, lay).step_time_s


def test_the_peak_against_megatrons_measured_one() -> None:
    # 6,207,810,560 bytes measured (module docstring); the model's allocated peak within 5%
    p = plan()
    got = memory.estimate(p.job, p.require_layout()).stages[-1].allocated
    assert got == pytest.approx(6_207_810_560, rel=0.05)


def test_no_launch_target_runs_it() -> None:
    with pytest.raises(InputError, match="no launch target runs T5"):
        render(plan(), "megatron-args")


def test_experts_and_t5_are_refused() -> None:
    doc = megatron_args.read(LINE + " --num-experts 8", "h100-sxm-80gb", 8, "t5").doc
    with pytest.raises(InputError, match=r"training\.t5_encoder: planner models T5 with dense"):
        parse_plan(doc)
