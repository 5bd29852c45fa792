"""Inputs: what planner reads and writes about a job, validated at the boundary.

- `plan` the plan file -> `Job` (`job`) and `Layout` (`plan_layout` the `[parallel]` table) with
  their loading and resolution, its tables the pydantic sections of `plan_sections`,
  `plan_parallel` and `cluster_sections` (frozen, extra="forbid"), `precision_checks` the
  precision settings checked as Megatron-Core checks them; `plan_writer` writes one back;
  `job_request` the job of `suggest` / `scale` (job file, flags or the default)
- `arch` the model (Megatron-LM field names; `arch_layers` its layer tables), `hardware` GPUs,
  link tiers and clusters, `layout` the parallel layout (degrees named as torchtitan's
  ParallelDims), `pipeline_layout` Megatron's --pipeline-model-parallel-layout strings
- `catalog` the bundled `hardware_catalog/` and `model_zoo/`; `hf_import` (+ `hf_families`,
  `hf_fields`) a Hugging Face config.json; `megatron_args` an existing Megatron-LM command line
  (`megatron_line` splits the text, `megatron_model` / `megatron_layout` / `megatron_vocab` /
  `megatron_values` read flag groups, `megatron_flags` + megatron_flags.txt every flag
  Megatron's parser accepts);
  `megatron_log` a Megatron-LM training log's runs (`megatron_log_args` its printed arguments
  back into flags);
  `torchtitan` a plan's torchtitan settings and `torchtitan_config` a torchtitan job TOML read
  back (`torchtitan_pipeline` its batches and stages; `torchtitan_module` and
  `torchtitan_values` its Python configuration, read and not run); `files` reading the user's files
- `errors` (exit codes, messages naming file, field and value), `fields` (strict input types),
  `units` (SI conversions; quantities as people write them)

The bottom layer: it imports nothing of planner's above it (only pydantic and the standard
library). A new GPU is a TOML file in hardware_catalog/gpus/, a new model one in model_zoo/; a
new plan-file field is a field of a section in `plan_sections` (`[parallel]`: `plan_parallel`),
carried on `Job` or `Layout`.
"""
