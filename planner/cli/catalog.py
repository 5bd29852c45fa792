"""`planner catalog [list | show]`: the GPUs and models planner knows (`catalog` alone lists
them all), and every field of one."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from planner.cli import render_catalog, report
from planner.cli.common import JsonOpt, emit_json, out
from planner.inputs import catalog
from planner.inputs.errors import InputError

app = typer.Typer(
    invoke_without_command=True,
    help="The GPUs and models planner knows.",
    rich_markup_mode=None,
)


@app.callback()
def catalog_main(ctx: typer.Context) -> None:
    """The GPUs and models planner knows (`planner catalog` alone lists them all)."""
    if ctx.invoked_subcommand is None:
        catalog_list("all", as_json=False)


@app.command("list")
def catalog_list(
    kind: Annotated[str, typer.Argument(help="gpus, models, or all")] = "all",
    as_json: JsonOpt = False,
) -> None:
    """List the GPUs and/or models in the catalog."""
    if kind not in ("gpus", "models", "all"):
        raise InputError(f"catalog list: kind: expected gpus, models or all (got {kind!r})")
    gpus = list(catalog.gpus().values()) if kind in ("gpus", "all") else []
    models = list(catalog.models().values()) if kind in ("models", "all") else []
    if as_json:
        data: dict[str, Any] = {}
        if kind in ("gpus", "all"):
            data["gpus"] = [report.gpu_dict(g) for g in gpus]
        if kind in ("models", "all"):
            data["models"] = [report.model_dict(m, full=True) for m in models]
        emit_json(data)
        return
    if gpus:
        out.print(render_catalog.gpu_table(gpus))
    if models:
        out.print(render_catalog.model_table(models))


@app.command("show")
def catalog_show(
    name: Annotated[str, typer.Argument(help="a catalog name, a config.json or a model TOML")],
    as_json: JsonOpt = False,
) -> None:
    """Every field of one GPU or model (models also get params_total and params_active)."""
    data: dict[str, Any]
    if not catalog.looks_like_path(name) and name in catalog.gpus():
        data = report.gpu_dict(catalog.gpus()[name])
        kind = "GPU"
    elif catalog.looks_like_path(name) or name in catalog.models():
        data = report.model_dict(catalog.resolve_model(name), full=True)
        kind = "model"
    else:
        known = sorted(catalog.gpus()) + sorted(catalog.models())
        raise catalog.unknown_name("GPU or model", name, known)
    if as_json:
        emit_json(data)
    else:
        out.print(render_catalog.fields_table(f"{kind} {data['name']}", data))
