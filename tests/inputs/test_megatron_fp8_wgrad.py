"""--no-fp8-wgrad / --disable-fp8-wgrad and --te-precision-config-file on a Megatron-LM line.

Oracles:
- Megatron-LM d98e8a64 megatron/core/transformer/transformer_config.py:631 (`fp8_wgrad: bool =
  True`, both flags set it False) reaches Transformer Engine only through the delayed-scaling
  recipe: megatron/core/fp8_utils.py:772-776 (TE >= 2.1) and :805-809 (TE < 2.1) pass
  `override_linear_precision=(False, False, not config.fp8_wgrad)`; the tensorwise, blockwise,
  mxfp8 and custom recipes (:777-792) do not take it.
- Transformer Engine from 2.0 (commit 544dd14b4, "Update main branch with TE 2.0 code, update
  version to 2.1.0.dev0") has no `override_linear_precision` in `DelayedScaling`
  (transformer_engine/common/recipe/__init__.py; d0067d0d :173-270 neither), a pydantic
  dataclass, which drops an unknown keyword; no module reads it (`git grep
  override_linear_precision d0067d0d` finds nothing). So on the TE >= 2.1 that fp8_utils.py:772
  requires for its first branch the wgrad GEMM stays FP8 whatever the flag says: the same step
  time and memory, read as a no-op with a note.
- --te-precision-config-file: megatron/training/arguments.py:2020-2022 ("per-module precision
  overrides"), argument_utils.py:365-368 (`quant_recipe = load_quantization_recipe(path)`, a
  YAML of module-name matchers, megatron/core/quantization/utils.py:23-26): planner does not
  read that file, so the line exits 2 naming the flag.
"""

from __future__ import annotations

import pytest

from planner.inputs import megatron_args
from planner.inputs.errors import InputError

SMALL = (
    "--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 4096 "
    "--max-position-embeddings 4096 --micro-batch-size 1 --bf16 --vocab-size 32000 "
    "--tokenizer-type NullTokenizer --use-distributed-optimizer "
)


def read(extra: str) -> megatron_args.Reading:
    return megatron_args.read(SMALL + extra, "h100-sxm-80gb", 8, "train.sh")


@pytest.mark.parametrize("flag", ["--no-fp8-wgrad", "--disable-fp8-wgrad"])
@pytest.mark.parametrize("recipe", ["delayed", "tensorwise", "mxfp8", "blockwise"])
def test_fp8_wgrad_off_is_read_as_a_no_op_with_a_note(flag: str, recipe: str) -> None:
    """Before: the flag was listed among the ignored flags with no word on why; now it is read,
    with a note naming why it changes nothing (fp8_utils.py:772-776 for delayed scaling, which
    TE >= 2.0 drops; the other recipes never take it), and the plan is the one without it."""
    base = f"--fp8-format hybrid --fp8-recipe {recipe} "
    with_flag = read(base + flag)
    without = read(base)
    assert flag not in with_flag.ignored
    note = next(n for n in with_flag.notes if n.startswith(flag))
    assert "fp8_utils.py:772-776" in note
    if recipe == "delayed":
        assert "override_linear_precision" in note and "2.0" in note
    else:
        assert f"{recipe} recipe" in note
    # the same plan document, so the same step time and memory: the wgrad GEMM at the FP8 rate
    # and the FP8 input TE keeps for it (linear.py d0067d0d saves the quantised input)
    assert with_flag.doc == without.doc


def test_fp8_wgrad_off_without_fp8_is_a_no_op() -> None:
    """fp8_wgrad is read only inside the FP8 recipe (fp8_utils.py:772-809): a bf16 line."""
    reading = read("--no-fp8-wgrad")
    note = next(n for n in reading.notes if n.startswith("--no-fp8-wgrad"))
    assert "without --fp8-format" in note
    assert reading.doc == read("").doc


def test_te_precision_config_file_is_refused() -> None:
    """Before: accepted and ignored, the line judged at one recipe for every module while the
    YAML may set another per module (argument_utils.py:365-368)."""
    with pytest.raises(InputError) as raised:
        read("--fp8-format hybrid --te-precision-config-file prec.yaml")
    message = str(raised.value)
    assert message.startswith("train.sh: --te-precision-config-file")
    assert "planner does not model per-module precision overrides" in message
