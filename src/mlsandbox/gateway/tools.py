"""The action catalog as function-calling tool schemas (OpenAI, Anthropic, MCP) and plain JSON Schema.

One tool per action: the tool's name is the action's ``type``, its description the action model's docstring,
its parameters the model's JSON Schema without the ``type`` discriminator (the tool name carries it), with
``$defs`` inlined and pydantic's auto-generated ``title`` keywords dropped. A tool call comes back into the
gateway through :func:`tool_call_to_action`, which puts the tool name back as the ``type``.

Given a backend's :class:`~mlsandbox.backends.protocols.Support`, an action whose capability (declared by
its pack) the backend refuses is marked (its description starts with ``[unsupported on the NAME backend:
...]``) or, with ``omit_unsupported``, left out.
"""

from __future__ import annotations

import copy
import json
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, TypeAdapter

from mlsandbox.backends.protocols import Support
from mlsandbox.gateway.registry import get_catalog

ToolFormat = Literal["openai", "anthropic", "json-schema"]
TOOL_FORMATS: tuple[str, ...] = ("openai", "anthropic", "json-schema")

# Keywords whose value is one subschema / a list of subschemas / a map of name -> subschema.
_SCHEMA_KEYS = ("items", "additionalProperties", "propertyNames", "not", "contains", "if", "then", "else")
_SCHEMA_LIST_KEYS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_MAP_KEYS = ("properties", "$defs", "patternProperties")


def action_type(model: type[BaseModel]) -> str:
    return str(model.model_fields["type"].default)


def action_description(model: type[BaseModel]) -> str:
    """The model's docstring as one paragraph per blank-line-separated block, whitespace normalised."""
    doc = model.__doc__ or ""
    blocks = [" ".join(block.split()) for block in doc.strip().split("\n\n")]
    return "\n\n".join(b for b in blocks if b)


def parameters_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON Schema of an action's parameters: an object schema without ``type``, ``$defs`` inlined."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})
    schema = _inline_refs(schema, defs, ())
    props = dict(schema.get("properties", {}))
    props.pop("type", None)
    required = [r for r in schema.get("required", []) if r != "type"]
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    out["additionalProperties"] = False
    return _strip_titles(out)


def refusal(model: type[BaseModel], support: Support | None) -> str | None:
    """Why the backend of ``support`` refuses the action ``model`` (its pack's declared capability), as
    the mark its tool carries; None when it does not (or no support is given)."""
    if support is None:
        return None
    name = action_type(model)
    capability = get_catalog().capability(name)
    why = None if capability is None else support.reason(capability)
    if why is None:
        return None
    return f"[unsupported on the {support.backend} backend ({capability}): {why}]"


def _models(support: Support | None, omit_unsupported: bool) -> list[tuple[type[BaseModel], str | None]]:
    out = []
    for m in get_catalog().models:
        mark = refusal(m, support)
        if mark is None or not omit_unsupported:
            out.append((m, mark))
    return out


def _described(model: type[BaseModel], mark: str | None) -> str:
    text = action_description(model)
    return text if mark is None else f"{mark} {text}"


def tool_specs(support: Support | None = None, *, omit_unsupported: bool = False) -> list[dict[str, Any]]:
    """``[{name, description, parameters}]`` for every action, in catalog order (marked or left out
    where ``support`` refuses its capability)."""
    return [
        {"name": action_type(m), "description": _described(m, mark), "parameters": parameters_schema(m)}
        for m, mark in _models(support, omit_unsupported)
    ]


def openai_tools(support: Support | None = None, *, omit_unsupported: bool = False) -> list[dict[str, Any]]:
    """Chat Completions ``tools``: ``{"type": "function", "function": {name, description, parameters}}``."""
    return [
        {"type": "function", "function": spec}
        for spec in tool_specs(support, omit_unsupported=omit_unsupported)
    ]


def anthropic_tools(
    support: Support | None = None, *, omit_unsupported: bool = False
) -> list[dict[str, Any]]:
    """Anthropic Messages ``tools``: ``{name, description, input_schema}``."""
    return [
        {"name": s["name"], "description": s["description"], "input_schema": s["parameters"]}
        for s in tool_specs(support, omit_unsupported=omit_unsupported)
    ]


def action_json_schema(support: Support | None = None, *, omit_unsupported: bool = False) -> dict[str, Any]:
    """One JSON Schema (draft 2020-12) for an action object, ``type`` discriminator included."""
    catalog = get_catalog()
    models = _models(support, omit_unsupported)
    if len(models) == len(catalog.models):
        schema = catalog.adapter.json_schema()
    else:
        union: Any = Union[tuple(m for m, _ in models)] if len(models) > 1 else models[0][0]  # noqa: UP007
        schema = TypeAdapter(Annotated[union, Field(discriminator="type")]).json_schema()
    defs = schema.get("$defs", {})
    for m, mark in models:
        entry = defs.get(m.__name__)
        if mark is not None and isinstance(entry, dict):
            entry["description"] = f"{mark} {entry.get('description', '')}".strip()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "mlsandbox action",
        "description": "An action for the mlsandbox gateway: a JSON object whose `type` names the action.",
        **schema,
    }


def tools_document(
    fmt: ToolFormat | str, support: Support | None = None, *, omit_unsupported: bool = False
) -> Any:
    """The catalog in one of :data:`TOOL_FORMATS` (a list of tools, or one schema for ``json-schema``);
    with ``support``, the actions its backend refuses are marked (or, ``omit_unsupported``, left out)."""
    if fmt == "openai":
        return openai_tools(support, omit_unsupported=omit_unsupported)
    if fmt == "anthropic":
        return anthropic_tools(support, omit_unsupported=omit_unsupported)
    if fmt == "json-schema":
        return action_json_schema(support, omit_unsupported=omit_unsupported)
    raise ValueError(f"unknown tool format {fmt!r}; use one of {', '.join(TOOL_FORMATS)}")


def tools_json(
    fmt: ToolFormat | str,
    *,
    indent: int | None = 2,
    support: Support | None = None,
    omit_unsupported: bool = False,
) -> str:
    return json.dumps(
        tools_document(fmt, support, omit_unsupported=omit_unsupported), indent=indent, ensure_ascii=False
    )


def tool_call_to_action(name: str, arguments: dict[str, Any] | str | None) -> dict[str, Any] | str:
    """The action for a tool call: the arguments with ``type`` set to the tool name.

    ``arguments`` may be the JSON text a model produced (OpenAI sends it as a string); text that is not a
    JSON object is handed on as is, so the gateway rejects it with its usual error observation. A stray
    ``type`` argument is ignored: the tool name decides the action.
    """
    if arguments is None:
        arguments = {}
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return arguments
        if not isinstance(parsed, dict):
            return arguments
        arguments = parsed
    return {"type": name, **{k: v for k, v in arguments.items() if k != "type"}}


# ------------------------------------------------------------------------------------------ helpers


def _inline_refs(node: Any, defs: dict[str, Any], seen: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_inline_refs(x, defs, seen) for x in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        if name in seen:
            raise ValueError(f"recursive schema {name!r} cannot be inlined")
        target = copy.deepcopy(defs[name])
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        merged = {**_inline_refs(target, defs, (*seen, name)), **_inline_refs(siblings, defs, seen)}
        return merged
    return {k: _inline_refs(v, defs, seen) for k, v in node.items()}


def _strip_titles(schema: Any) -> Any:
    """Drop the ``title`` keyword from every schema position (never a property *named* title)."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key in _SCHEMA_MAP_KEYS and isinstance(value, dict):
            out[key] = {name: _strip_titles(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LIST_KEYS and isinstance(value, list):
            out[key] = [_strip_titles(sub) for sub in value]
        elif key in _SCHEMA_KEYS and isinstance(value, dict):
            out[key] = _strip_titles(value)
        else:
            out[key] = value
    return out


__all__ = [
    "TOOL_FORMATS",
    "ToolFormat",
    "action_description",
    "action_json_schema",
    "action_type",
    "anthropic_tools",
    "openai_tools",
    "parameters_schema",
    "refusal",
    "tool_call_to_action",
    "tool_specs",
    "tools_document",
    "tools_json",
]
