"""What the test_emit_torchtitan*.py files build torchtitan plans from: torchtitan's job-config
schema (planner/inputs/torchtitan_job_config_schema.json), the bundled torchtitan example, and the
[training] and [cluster] tables of a torchtitan job on 64 H100.
"""

from __future__ import annotations

import json

from paths import REPO

from planner.inputs import torchtitan_toml

SCHEMA = json.loads(torchtitan_toml.SCHEMA.read_text())
EXAMPLE = REPO / "examples" / "torchtitan-llama3.1-405b-h100.toml"
TITAN = "[training]\nframework = 'torchtitan'\nseq_length = 8192\nglobal_batch_size = 128\n"
CLUSTER64 = '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 64\n'
