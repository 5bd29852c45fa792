"""How `planner suggest` and `planner scale` say which job they planned (on stderr, before the
search): every headline field of the job, the ones nobody gave marked "(default)", and the flags
that would set those. `--json` carries the same as `defaulted`.
"""

from __future__ import annotations

from rich.console import Console

from planner.inputs.job_request import JOB_FIELDS, JobRequest

DEFAULT_MARK = " (default)"


def job_lines(
    verb: str, req: JobRequest, values: dict[str, object], defaulted: tuple[str, ...]
) -> list[str]:
    """'planning (flags): model llama3.1-70b, ..., seq_length 8192 (default), ...' and, when
    something defaulted, a line naming the flags that set those fields."""
    fields = ", ".join(
        f"{k} {v}{DEFAULT_MARK if k in defaulted else ''}" for k, v in values.items()
    )
    lines = [f"{verb} ({req.origin}): {fields}"]
    if defaulted:
        flags = ", ".join(JOB_FIELDS[k][1] for k in defaulted if k in JOB_FIELDS)
        lines.append(f"(default) = not given, planner's default; set with {flags}")
    return lines


def print_job(
    err: Console,
    verb: str,
    req: JobRequest,
    values: dict[str, object] | None = None,
    defaulted: tuple[str, ...] | None = None,
) -> None:
    """The job lines on `err`, without rich markup (a job file's path may hold brackets)."""
    vals = req.values() if values is None else values
    marks = req.defaulted if defaulted is None else defaulted
    for line in job_lines(verb, req, vals, marks):
        err.print(line, markup=False, highlight=False)
