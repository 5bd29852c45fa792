"""The command line: the thin typer app (`app`, one module per command: catalog, check, explain,
suggest, scale, launch, calibrate), the options they share (`common`, `ops_options`,
`space_flags`; `calibration`: --calibration, --megatron-log and how they print), and what
they print: rich tables (`render`, `render_suggest`), the job suggest and scale planned with its
defaults marked (`job_text`), `--json` dictionaries (`report`), SVG plots (`plot`, `timeline`).

The top layer: it may import every package below it (inputs, model, ops, search, calibration,
emit), and it is
the only one that imports typer or rich. Nothing below it prints, reads options or exits.
"""

from planner.cli.app import main

__all__ = ["main"]
