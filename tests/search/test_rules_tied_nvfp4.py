"""Two refusals: torchtitan with tied embeddings at pp > 1, and Megatron's TP communication
overlap under NVFP4.

Oracles, each a source line at its commit:
- pytorch/torchtitan b5bcd76c torchtitan/models/common/decoder.py:168-171: "Weight tying is not
  supported with Pipeline Parallel." (NotImplementedError when pipeline_parallel_degree > 1);
  e347b1e5 distributed/pipeline_parallel.py:429-431 sets the modules a stage does not keep to
  None (the last stage loses tok_embeddings, its output weight is no longer tied);
- NVIDIA/TransformerEngine d0067d0d transformer_engine/pytorch/module/base.py:644-754
  (`fill_userbuffers_buffer_for_all_gather`: no quantizer, FP8 and MXFP8 only, else
  "Unsupported quantizer for Userbuffers"), reached from linear.py:413-419 with the input's
  quantizer (an NVFP4Quantizer under the NVFP4 recipe)."""

from __future__ import annotations

from jobs import job

from planner.inputs.layout import Layout
from planner.search import rules
from planner.search.rules.precision import tp_overlap_nvfp4, tp_overlap_runs
from planner.search.rules.torchtitan_tied import tied_pipeline

PP2 = Layout(tp=1, pp=2, dp=4)


def _ids(j, lay):  # type: ignore[no-untyped-def]
    return {v.rule for v in rules.violations(j, lay)}


def test_torchtitan_refuses_tied_embeddings_with_pipelining() -> None:
    tied = job("gemma2-2b", "h100-sxm-80gb", 8, 4096, 16, framework="torchtitan")
    v = tied_pipeline(tied, PP2)
    assert v is not None and v.field == "parallel.pp" and "Weight tying" in v.message
    assert "tt_tied_pp" in _ids(tied, PP2)
    assert tied_pipeline in rules.STRUCTURAL_RULES  # the search keeps such a model at pp 1
    # pp 1 runs; an untied model pipelines; Megatron all-reduces its tied copy (no refusal)
    assert tied_pipeline(tied, Layout(tp=1, pp=1, dp=8)) is None
    untied = job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 16, framework="torchtitan")
    assert tied_pipeline(untied, PP2) is None
    megatron = job("gemma2-2b", "h100-sxm-80gb", 8, 4096, 16)
    assert tied_pipeline(megatron, PP2) is None and "tt_tied_pp" not in _ids(megatron, PP2)


def test_nvfp4_refuses_tp_comm_overlap() -> None:
    over = Layout(tp=2, dp=4, sequence_parallel=True, tp_comm_overlap=True)
    fp4 = job("llama3.1-8b", "b200-sxm-180gb", 8, 4096, 64, precision="fp4")
    v = tp_overlap_nvfp4(fp4, over)
    assert v is not None and v.field == "parallel.tp_comm_overlap"
    assert "Unsupported quantizer for Userbuffers" in v.message
    assert tp_overlap_nvfp4(fp4, over.with_(tp_comm_overlap=False)) is None
    assert not tp_overlap_runs(fp4)
    # FP8 (delayed / current scaling, MXFP8) and bf16 fill the userbuffers: they run
    for precision in ("fp8", "bf16"):
        other = job("llama3.1-8b", "b200-sxm-180gb", 8, 4096, 64, precision=precision)
        assert tp_overlap_nvfp4(other, over) is None and tp_overlap_runs(other)
