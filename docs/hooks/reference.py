"""MkDocs hook: the reference pages, generated at build time rather than typed by hand.

``mkdocs.yml`` names this file under ``hooks:``. :func:`on_files` adds three pages to the site, none of
which exists in ``docs/``:

- ``reference/cli.md``: every command and sub-command of the ``mlsandbox`` command line, walked from the
  command tree that typer builds (:func:`cli_reference`);
- ``reference/actions.md``: every action of the built-in packs, from the action models: description,
  pack, the Runtime capability it needs, its parameters from the JSON Schema (:func:`action_reference`);
- ``reference/benchmarks.md``: one table per published benchmark file, ``benchmarks/results/*.json``
  (:func:`benchmark_reference`).

The generators return Markdown and need nothing from MkDocs, so a unit test runs them directly.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"

PAGES = {
    "reference/cli.md": "cli_reference",
    "reference/actions.md": "action_reference",
    "reference/benchmarks.md": "benchmark_reference",
}
"""The generated pages: path in the site's sources -> the function of this module that writes it."""

GENERATED_NOTE = (
    "!!! note\n    This page is generated when the site is built ({what}); do not edit it by hand.\n"
)


def _cell(text: object) -> str:
    """Text fit for one cell of a Markdown table."""
    return " ".join(str(text).split()).replace("|", "\\|")


# --------------------------------------------------------------------------------------------- the CLI


def _subcommands(cmd: Any, ctx: Any) -> Iterator[tuple[str, Any]]:
    if not hasattr(cmd, "list_commands"):
        return
    for name in cmd.list_commands(ctx):
        sub = cmd.get_command(ctx, name)
        if sub is not None and not getattr(sub, "hidden", False):
            yield name, sub


def cli_commands() -> list[tuple[str, Any, Any]]:
    """Every command of the ``mlsandbox`` command line, depth first: ``(path, command, context)``."""
    import typer

    from mlsandbox.cli.main import app

    root = typer.main.get_command(app)
    out: list[tuple[str, Any, Any]] = []

    def walk(cmd: Any, ctx: Any) -> None:
        out.append((ctx.command_path, cmd, ctx))
        for name, sub in _subcommands(cmd, ctx):
            walk(sub, sub.context_class(sub, info_name=name, parent=ctx))

    walk(root, root.context_class(root, info_name="mlsandbox"))
    return out


def _usage(cmd: Any, ctx: Any) -> str:
    pieces = cmd.collect_usage_pieces(ctx) if hasattr(cmd, "collect_usage_pieces") else ["[OPTIONS]"]
    return " ".join([ctx.command_path, *pieces])


def _params(cmd: Any, ctx: Any) -> list[tuple[str, str]]:
    rows = []
    for p in cmd.params:
        if getattr(p, "hidden", False):
            continue
        record = p.get_help_record(ctx) if hasattr(p, "get_help_record") else None
        if record:
            rows.append((record[0], record[1] or ""))
        else:  # an argument without a help record: its name and its help, if any
            rows.append((str(p.name).upper(), getattr(p, "help", None) or ""))
    return rows


def cli_reference() -> str:
    """The CLI reference page (Markdown)."""
    lines = [
        "# Command-line reference",
        "",
        GENERATED_NOTE.format(what="from the typer application `mlsandbox.cli.main:app`"),
        "Every command takes `--help`, which prints the same text.",
        "",
    ]
    commands = cli_commands()
    top = [(path, cmd) for path, cmd, ctx in commands if ctx.parent is not None and ctx.parent.parent is None]
    lines += ["| command | what it does |", "| --- | --- |"]
    for path, cmd in top:
        summary = (cmd.help or "").strip().split("\n\n")[0]
        anchor = path.replace(" ", "-")
        lines.append(f"| [`{path}`](#{anchor}) | {_cell(summary)} |")
    lines.append("")
    for path, cmd, ctx in commands:
        depth = len(path.split())  # the root and its commands: level 2; sub-commands below them
        level = "#" * min(max(depth, 2), 6)
        anchor = path.replace(" ", "-")
        lines += [f"{level} `{path}` {{#{anchor}}}", ""]
        if cmd.help:
            lines += [" ".join(cmd.help.split()), ""]
        lines += ["```text", _usage(cmd, ctx), "```", ""]
        params = _params(cmd, ctx)
        if params:
            lines += ["| option | description |", "| --- | --- |"]
            lines += [f"| `{_cell(decl)}` | {_cell(text)} |" for decl, text in params]
            lines.append("")
        subs = list(_subcommands(cmd, ctx))
        if subs and depth > 1:  # the root's commands are the table at the top
            lines.append("Sub-commands: " + ", ".join(f"[`{n}`](#{anchor}-{n})" for n, _ in subs) + ".")
            lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ the actions


def builtin_packs() -> tuple[Any, ...]:
    """The built-in action packs (installed plug-ins left out: the site documents mlsandbox itself)."""
    from mlsandbox.gateway.registry import discover_packs

    return discover_packs(plugins=False)


def _schema_type(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in prop:
        return str(prop["$ref"]).rsplit("/", 1)[-1]
    if "const" in prop:
        return json.dumps(prop["const"])
    if "enum" in prop:
        return " | ".join(json.dumps(v) for v in prop["enum"])
    for key in ("anyOf", "oneOf"):
        if key in prop:
            return " or ".join(_schema_type(p, defs) for p in prop[key])
    kind = prop.get("type", "any")
    if kind == "array" and isinstance(prop.get("items"), dict):
        return f"array of {_schema_type(prop['items'], defs)}"
    if kind == "object" and isinstance(prop.get("additionalProperties"), dict):
        return f"object of {_schema_type(prop['additionalProperties'], defs)}"
    return str(kind)


def _constraints(prop: dict[str, Any]) -> str:
    names = {
        "minimum": ">=",
        "exclusiveMinimum": ">",
        "maximum": "<=",
        "exclusiveMaximum": "<",
        "minLength": "min length",
        "maxLength": "max length",
        "minItems": "min items",
        "maxItems": "max items",
        "pattern": "pattern",
    }
    return ", ".join(f"{label} `{prop[k]}`" for k, label in names.items() if k in prop)


def _parameter_rows(schema: dict[str, Any]) -> list[str]:
    defs = schema.get("$defs", {})
    required = set(schema.get("required", []))
    rows = []
    for name, prop in schema.get("properties", {}).items():
        if name == "type":
            continue
        default = "" if "default" not in prop else f"`{json.dumps(prop['default'])}`"
        text = prop.get("description", "")
        extra = _constraints(prop)
        if extra:
            text = f"{text} ({extra})" if text else extra
        rows.append(
            f"| `{name}` | {_cell(_schema_type(prop, defs))} | {'yes' if name in required else 'no'} "
            f"| {_cell(default)} | {_cell(text)} |"
        )
    return rows


def _nested_models(schema: dict[str, Any]) -> list[str]:
    lines = []
    for name, sub in schema.get("$defs", {}).items():
        rows = _parameter_rows(sub)
        if not rows:
            continue
        doc = " ".join(str(sub.get("description", "")).split())
        lines += [f"`{name}`{': ' + doc if doc else ''}", ""]
        lines += ["| field | type | required | default | description |", "| --- | --- | --- | --- | --- |"]
        lines += [*rows, ""]
    return lines


def action_types() -> list[str]:
    """Every action type of the built-in packs, in catalog order."""
    return [t for pack in builtin_packs() for t in pack.types]


def action_reference() -> str:
    """The action reference page (Markdown)."""
    packs = builtin_packs()
    lines = [
        "# Action reference",
        "",
        GENERATED_NOTE.format(what="from the action models of the built-in packs"),
        "Each action is one JSON object whose `type` names it, with the parameters below. "
        "`mlsandbox tools --format json-schema` prints the same schemas; the [Actions](../actions.md) page "
        "gives an overview by pack. *Needs* is the Runtime capability a backend may refuse "
        "(an `unsupported` error observation); an action without one runs on every backend.",
        "",
        "| pack | actions |",
        "| --- | --- |",
    ]
    for pack in packs:
        links = ", ".join(f"[`{t}`](#{t})" for t in pack.types)
        lines.append(f"| `{pack.name}` | {links} |")
    lines.append("")
    for pack in packs:
        lines += [f"## Pack `{pack.name}` {{#pack-{pack.name}}}", ""]
        if pack.description:
            lines += [" ".join(pack.description.split()), ""]
        for model, action_type in zip(pack.models, pack.types, strict=True):
            schema = model.model_json_schema()
            lines += [f"### `{action_type}` {{#{action_type}}}", ""]
            doc = " ".join((model.__doc__ or "").split())
            if doc:
                lines += [doc, ""]
            facts = [f"pack `{pack.name}`"]
            capability = pack.capabilities.get(action_type)
            facts.append(f"needs `{capability}`" if capability else "needs no refusable capability")
            if action_type in pack.read_only:
                facts.append("read-only")
            if action_type in pack.destructive:
                facts.append("destructive")
            lines += ["*" + "; ".join(facts) + ".*", ""]
            rows = _parameter_rows(schema)
            if rows:
                lines += [
                    "| parameter | type | required | default | description |",
                    "| --- | --- | --- | --- | --- |",
                    *rows,
                    "",
                ]
            else:
                lines += ["No parameters.", ""]
            lines += _nested_models(schema)
    return "\n".join(lines)


# --------------------------------------------------------------------------------------- the benchmarks


def format_number(value: float | int) -> str:
    """A figure rounded for reading: integers as they are, floats to about three significant digits."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if math.isnan(value) or math.isinf(value):
        return str(value)
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.1f}"
    if magnitude == 0:
        return "0"
    return f"{value:.3g}"


def _scalar(value: Any) -> str:
    if isinstance(value, (int, float)):
        return format_number(value)
    if value is None:
        return "null"
    return str(value)


MAX_LIST = 12
MAX_ROWS = 300


def flatten(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """``(dotted path, text)`` rows of any JSON value: nested dicts and lists of objects become paths,
    a list of plain values one row (the first :data:`MAX_LIST` of them)."""
    if isinstance(value, dict):
        if not value:
            yield path, "{}"
        for key, sub in value.items():
            yield from flatten(sub, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        if value and all(isinstance(v, (dict, list)) for v in value):
            for i, sub in enumerate(value):
                yield from flatten(sub, f"{path}[{i}]")
        else:
            shown = ", ".join(
                _scalar(v) if not isinstance(v, (dict, list)) else json.dumps(v) for v in value[:MAX_LIST]
            )
            more = f", ... ({len(value)} values)" if len(value) > MAX_LIST else ""
            yield path, f"[{shown}{more}]"
    else:
        yield path, _scalar(value)


def _machine_line(machine: Any) -> str:
    if not isinstance(machine, dict):
        return ""
    parts = []
    if "cpus" in machine or "cpu_model" in machine:
        parts.append(f"{machine.get('cpus', '?')} x {machine.get('cpu_model', '?')}")
    if "reference_ms" in machine:
        parts.append(f"reference workload {_scalar(machine['reference_ms'])} ms")
    if "load_average_1m" in machine:
        parts.append(f"load average {_scalar(machine['load_average_1m'])}")
    if "python" in machine:
        parts.append(f"Python {machine['python']}")
    return "Machine: " + ", ".join(parts) + "." if parts else ""


def benchmark_table(name: str, data: Any) -> list[str]:
    """The section of one benchmark file: its machine line, then one table of its flattened figures."""
    lines = [f"## `{name}`", ""]
    machine = data.get("machine") if isinstance(data, dict) else None
    if machine is not None:
        line = _machine_line(machine)
        if line:
            lines += [line, ""]
        data = {k: v for k, v in data.items() if k != "machine"}
    rows = list(flatten(data))
    if not rows:
        return [*lines, "No figures in this file.", ""]
    lines += ["| figure | value |", "| --- | --- |"]
    lines += [f"| `{_cell(path) or '(value)'}` | {_cell(text)} |" for path, text in rows[:MAX_ROWS]]
    if len(rows) > MAX_ROWS:
        lines.append(f"| ... | {len(rows) - MAX_ROWS} more rows in the file |")
    return [*lines, ""]


def benchmark_reference(results: Path = RESULTS) -> str:
    """The benchmark results page (Markdown): one table per ``*.json`` file of ``results``."""
    lines = [
        "# Benchmark results",
        "",
        GENERATED_NOTE.format(what="from the published results, `benchmarks/results/*.json`"),
        "`make bench`, `make bench-reliability` and the benchmarks run on their own write their figures "
        "to `.bench/*.json`, which git ignores; `make bench-publish` copies them to "
        "`benchmarks/results/`, which is committed, and this page shows them: one table per file, nested "
        "figures as dotted paths, numbers rounded. The figures measured before this page existed are on "
        "[Measurements](../measurements.md).",
        "",
    ]
    files = sorted(results.glob("*.json")) if results.is_dir() else []
    if not files:
        return "\n".join(
            [
                *lines,
                "No published results yet: run `make bench && make bench-publish`, then commit them.",
                "",
            ]
        )
    for path in files:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            lines += [f"## `{path.name}`", "", f"Cannot be read: {_cell(e)}", ""]
            continue
        lines += benchmark_table(path.name, data)
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ MkDocs hook


def generate(page: str) -> str:
    """The Markdown of one generated page (a key of :data:`PAGES`)."""
    content: str = globals()[PAGES[page]]()
    return content


def on_files(files: Any, config: Any) -> Any:
    """Adds the generated pages to the site's files (MkDocs >= 1.6: ``File.generated``)."""
    from mkdocs.structure.files import File

    for page in PAGES:
        files.append(File.generated(config, page, content=generate(page)))
    return files
