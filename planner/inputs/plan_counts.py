"""The plan's counts as capped integer types (`planner.inputs.plan_sections`, `plan_parallel`,
`plan_optimizer`, `cluster_sections`, `torchtitan`): each a strict integer from 0 or 1 up to a
physical bound, documented here.

A count without a bound reached the model's float arithmetic as a 400-digit integer and raised
OverflowError ("int too large to convert to float": a Muon step's Newton-Schulz iterations, the
weight-hash interval, a data-parallel bucket) or filled memory (a rollout model's degrees);
capped, it is refused where the plan is read, naming the file, the field and the value. Each cap
is far above any run's setting: it only turns a typo or a fuzzer's value into that message.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictInt

from planner.inputs.arch_fields import MAX_EXPERTS, MAX_LAYERS
from planner.inputs.hardware import MAX_GPUS

MAX_GLOBAL_BATCH = 1 << 24
"""Sequences per optimizer step: 16,777,216, thousands of times the batches published (Llama 3
405B: 2,048 sequences of 8,192 tokens; even a billion-token batch of 128-token sequences is
8 million). Bounds the search's enumeration of micro-batch sizes, as hardware.MAX_GPUS bounds its
degrees."""

MAX_SEQ_LENGTH = 1 << 24
"""Tokens per sequence: 16,777,216, arch_fields.MAX_WINDOW's bound, above any sequence planner
plans. A sequence of 2^35 tokens made the pipeline-split solver's integer step times overflow 64
bits."""

MAX_BUCKET_PARAMS = 10**12
"""Parameters of a data-parallel bucket (Megatron --ddp-bucket-size), and buckets of a model
chunk (--ddp-num-buckets): a trillion, the whole of the largest published models (Kimi K2, 1.04
x 10^12 parameters) while a bucket holds at most one rank's model chunk (`planner.model.dp_sync`:
a larger size is one bucket of the chunk, more buckets than parameters a bucket per tensor)."""

MAX_NS_STEPS = 1000
"""Newton-Schulz iterations of a Muon step (Megatron --muon-num-ns-steps): two hundred times
Megatron's default of 5 (arguments.py:2648, optimizer_config.py:279 at d98e8a64); each one is
three GEMMs per matrix (`planner.model.muon_time`)."""

MAX_STEP_INTERVAL = 10**12
"""Training steps between two periodic checks (Megatron
--check-weight-hash-across-dp-replicas-interval): a trillion steps of a millisecond each is 31
years, past any run's length, so a longer interval is the same as never."""

MAX_SMS = 1 << 16
"""Streaming multiprocessors a kernel may be given or a GPU's GEMMs leave free: 65,536, over 400
times the most of any catalog GPU (B200: 148); the rules compare it to the GPU's own count."""

Degree = Annotated[StrictInt, Field(gt=0, le=MAX_GPUS)]
"""A parallel degree, an instance or a pool count: GPUs in a group, no more than a cluster has
(hardware.MAX_GPUS)."""

Layers = Annotated[StrictInt, Field(gt=0, le=MAX_LAYERS)]
"""Layers (or virtual pipeline stages) of a model: at most arch_fields.MAX_LAYERS."""

LayerCount = Annotated[StrictInt, Field(ge=0, le=MAX_LAYERS)]
"""`Layers`, or none."""

Batch = Annotated[StrictInt, Field(gt=0, le=MAX_GLOBAL_BATCH)]
"""Sequences or micro-batches of a step (a micro-batch, a group of micro-batches, the pipeline
schedules of a step): no more than a global batch has (MAX_GLOBAL_BATCH)."""

BatchCount = Annotated[StrictInt, Field(ge=0, le=MAX_GLOBAL_BATCH)]
"""`Batch`, or none."""

Tokens = Annotated[StrictInt, Field(gt=0, le=MAX_SEQ_LENGTH)]
"""Tokens of a sequence or an image, a patch's side in pixels, chunks of a micro-batch's
tokens: no more than a sequence has (MAX_SEQ_LENGTH)."""

Steps = Annotated[StrictInt, Field(ge=0, le=MAX_STEP_INTERVAL)]
"""Training steps between periodic checks (0: never): MAX_STEP_INTERVAL."""

Sms = Annotated[StrictInt, Field(gt=0, le=MAX_SMS)]
"""Streaming multiprocessors: MAX_SMS."""

SmCount = Annotated[StrictInt, Field(ge=0, le=MAX_SMS)]
"""`Sms`, or none."""

Experts = Annotated[StrictInt, Field(gt=0, le=MAX_EXPERTS)]
"""Expert groups or routed experts: at most arch_fields.MAX_EXPERTS."""
