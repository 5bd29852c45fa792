"""The precision a Megatron job's multi-token-prediction (MTP) layers run in.

Megatron-LM d98e8a64 megatron/core/transformer/multi_token_prediction.py builds every MTP depth
under `get_fp8_context(config, is_init=True)` (:1927-1928), a null context unless --fp8-param
(fp8_utils.py:848-852), and runs its forward under an FP8 autocast only when config.fp8 is set
(:1386-1394: "TODO: currently ignoring FP4 in MTP layers"). So under FP8 the MTP layers are FP8
like the decoder's, while under NVFP4 (no config.fp8) they build bf16 weights and run their
GEMMs, eh_proj included, in bf16 with 16-bit saved inputs: `planner.model.stage_params` counts
their weights unquantised, `planner.model.stage_time` times them as the job's bf16 twin
(`bf16_layers.bf16_twin`) and `planner.model.stage_activations` counts their activations at 16
bits. torchtitan's float8 / MX converters pick modules by name: left as the job's precision.
"""

from __future__ import annotations

from planner.inputs.plan import Job


def mtp_quantised(job: Job) -> bool:
    """The job's MTP layers run in FP8 / NVFP4: any quantised job but Megatron's NVFP4 one."""
    return job.quantised and not (job.precision == "fp4" and job.framework == "megatron")
