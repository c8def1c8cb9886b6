"""The action catalog as function-calling tool schemas (OpenAI, Anthropic, MCP) and plain JSON Schema.

One tool per action: the tool's name is the action's ``type``, its description the action model's docstring,
its parameters the model's JSON Schema without the ``type`` discriminator (the tool name carries it), with
``$defs`` inlined and pydantic's auto-generated ``title`` keywords dropped. A tool call comes back into the
gateway through :func:`tool_call_to_action`, which puts the tool name back as the ``type``.

Given a backend's :class:`~mlsandbox.backends.protocols.Support`, an action whose capability (declared by
its pack) the backend refuses is marked (its description starts with ``[unsupported on the NAME backend:
...]``) or, with ``omit_unsupported``, left out. ``actions`` narrows the catalog (:func:`scenario_actions`:
the actions useful in a scenario; :func:`pack_actions`: the actions of some packs).

Formats: ``openai`` (Chat Completions ``tools``), ``responses`` (the Responses API's flat function tools),
``anthropic`` and ``json-schema``. ``strict`` rewrites every tool's parameters for OpenAI's strict function
calling (:func:`strict_schema`: every object closed, every property required, an optional one nullable
through a type union, no ``default``/``patternProperties``/keywords strict mode refuses; a free-form map
becomes a JSON object written as text) and sets ``"strict": true``; :func:`tool_call_to_action` with
``strict=True`` turns such a call back into the action (JSON text decoded, a null optional dropped).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Collection
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, TypeAdapter

from mlsandbox.gateway.registry import get_catalog

if TYPE_CHECKING:
    from mlsandbox.backends.protocols import Support
    from mlsandbox.scenario.models import Scenario

ToolFormat = Literal["openai", "responses", "anthropic", "json-schema"]
TOOL_FORMATS: tuple[str, ...] = ("openai", "responses", "anthropic", "json-schema")
STRICT_FORMATS: tuple[str, ...] = ("openai", "responses", "anthropic")
"""Formats that take ``strict`` (a list of tools; ``json-schema`` is one schema of the action object)."""

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


def _models(
    support: Support | None, omit_unsupported: bool, actions: Collection[str] | None = None
) -> list[tuple[type[BaseModel], str | None]]:
    out = []
    for m in get_catalog().models:
        if actions is not None and action_type(m) not in actions:
            continue
        mark = refusal(m, support)
        if mark is None or not omit_unsupported:
            out.append((m, mark))
    return out


def _described(model: type[BaseModel], mark: str | None) -> str:
    text = action_description(model)
    return text if mark is None else f"{mark} {text}"


# ----------------------------------------------------------------------------------- filters


def pack_actions(packs: Collection[str]) -> list[str]:
    """The action types of the named packs (catalog order); ValueError naming an unknown pack."""
    catalog = get_catalog()
    known = {p.name: p for p in catalog.packs}
    unknown = [p for p in packs if p not in known]
    if unknown:
        raise ValueError(f"unknown action pack(s) {', '.join(unknown)}; packs: {', '.join(known)}")
    return [t for p in catalog.packs if p.name in packs for t in p.types]


def scenario_packs(scenario: Scenario) -> list[str]:
    """The packs whose actions are useful in ``scenario``: ``core``, ``compute`` and ``tracking`` always;
    ``sources`` when it declares data sources, ``flows`` when it declares pipelines, ``serving`` when it
    declares serving (or its goal is a deployment), ``config`` when a fault of the config category is
    planned; every plug-in pack; a team scenario's roles' packs."""
    wanted = {"core", "compute", "tracking"}
    if scenario.sources:
        wanted.add("sources")
    if scenario.pipelines.upstream or scenario.pipelines.start_runs:
        wanted.add("flows")
    if scenario.serving is not None or scenario.goal.type == "deployment_slo":
        wanted.add("serving")
    if any(getattr(p.fault, "category", None) == "config" for p in scenario.perturbations):
        wanted.add("config")
    if scenario.team is not None:
        for role in scenario.team.roles.values():
            wanted.update(role.packs)
    return [p.name for p in get_catalog().packs if p.name in wanted or p.origin != "builtin"]


def scenario_actions(scenario: Scenario) -> list[str]:
    """The actions of :func:`scenario_packs` (and a team role's single actions), without those the
    scenario forbids outright (a hard constraint on the action type whatever its parameters)."""
    actions = pack_actions(scenario_packs(scenario))
    if scenario.team is not None:
        extra = {a for role in scenario.team.roles.values() for a in role.actions}
        actions += [t for t in get_catalog().types if t in extra and t not in actions]
    from fnmatch import fnmatchcase

    banned = [f.action for f in scenario.constraints.forbidden_actions if not f.params]
    return [a for a in actions if not any(fnmatchcase(a, pattern) for pattern in banned)]


# ----------------------------------------------------------------------------------- strict mode

_STRICT_KEEP = frozenset(
    {
        "type", "description", "enum", "const", "pattern", "format", "minimum", "maximum",
        "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems",
    }
)  # fmt: skip
"""Keywords OpenAI's strict mode accepts besides the structural ones rebuilt below (``properties``,
``required``, ``additionalProperties``, ``items``, ``anyOf``); every other one (``default``,
``patternProperties``, ``propertyNames``, ``minLength``, ``maxProperties``, ...) is dropped: the gateway
still checks the action against the full schema."""
_JSON_TEXT = "A JSON object written as text"


def _types(schema: dict[str, Any]) -> set[str]:
    t = schema.get("type")
    found = {t} if isinstance(t, str) else set(t or [])
    for branch in schema.get("anyOf", []):
        found |= _types(branch)
    return found


def _free_form(schema: dict[str, Any]) -> bool:
    """An object that takes keys it does not name (a map); a closed object without properties is not."""
    return (
        schema.get("type") == "object"
        and not schema.get("properties")
        and schema.get("additionalProperties") is not False
    )


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if "null" in _types(schema):
        return schema
    out = dict(schema)
    if "anyOf" in out:
        out["anyOf"] = [*out["anyOf"], {"type": "null"}]
        return out
    if "type" not in out:
        return {"anyOf": [out, {"type": "null"}]}
    t = out["type"]
    out["type"] = [*(t if isinstance(t, list) else [t]), "null"]
    if "enum" in out and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]
    return out


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` rewritten for OpenAI's strict function calling (see the module docstring)."""
    if _free_form(schema):
        desc = schema.get("description")
        text = f"{_JSON_TEXT}, e.g. '{{\"key\": 1}}'."
        return {"type": "string", "description": f"{desc} ({text})" if desc else text}
    if "anyOf" in schema:
        branches = [strict_schema(b) for b in schema["anyOf"]]
        out: dict[str, Any] = {k: v for k, v in schema.items() if k in ("description",)}
        if all(set(b) == {"type"} and isinstance(b["type"], str) for b in branches):
            out["type"] = list(dict.fromkeys(b["type"] for b in branches))
            if len(out["type"]) == 1:
                out["type"] = out["type"][0]
        else:
            out["anyOf"] = branches
        return out
    if "allOf" in schema and len(schema["allOf"]) == 1:
        merged = {**schema["allOf"][0], **{k: v for k, v in schema.items() if k != "allOf"}}
        return strict_schema(merged)
    out = {k: v for k, v in schema.items() if k in _STRICT_KEEP}
    if schema.get("type") == "object":
        required = set(schema.get("required", []))
        props = {}
        for name, sub in schema.get("properties", {}).items():
            rewritten = strict_schema(sub)
            props[name] = rewritten if name in required else _nullable(rewritten)
        out["properties"] = props
        out["required"] = list(props)
        out["additionalProperties"] = False
    if "items" in schema:
        out["items"] = strict_schema(schema["items"])
    return out


def _strict_spec(spec: dict[str, Any]) -> dict[str, Any]:
    return {**spec, "parameters": strict_schema(spec["parameters"])}


# ----------------------------------------------------------------------------------- formats


def tool_specs(
    support: Support | None = None,
    *,
    omit_unsupported: bool = False,
    actions: Collection[str] | None = None,
    strict: bool = False,
) -> list[dict[str, Any]]:
    """``[{name, description, parameters}]`` for every action (or those of ``actions``), in catalog order
    (marked or left out where ``support`` refuses its capability); ``strict``: parameters in strict form."""
    specs = [
        {"name": action_type(m), "description": _described(m, mark), "parameters": parameters_schema(m)}
        for m, mark in _models(support, omit_unsupported, actions)
    ]
    return [_strict_spec(s) for s in specs] if strict else specs


def openai_tools(
    support: Support | None = None,
    *,
    omit_unsupported: bool = False,
    actions: Collection[str] | None = None,
    strict: bool = False,
) -> list[dict[str, Any]]:
    """Chat Completions ``tools``: ``{"type": "function", "function": {name, description, parameters}}``
    (``strict: true`` in the function with ``strict``)."""
    specs = tool_specs(support, omit_unsupported=omit_unsupported, actions=actions, strict=strict)
    return [{"type": "function", "function": {**s, "strict": True} if strict else s} for s in specs]


def responses_tools(
    support: Support | None = None,
    *,
    omit_unsupported: bool = False,
    actions: Collection[str] | None = None,
    strict: bool = False,
) -> list[dict[str, Any]]:
    """Responses API ``tools``: flat ``{"type": "function", name, description, parameters, strict}``."""
    specs = tool_specs(support, omit_unsupported=omit_unsupported, actions=actions, strict=strict)
    return [{"type": "function", **s, "strict": strict} for s in specs]


def anthropic_tools(
    support: Support | None = None,
    *,
    omit_unsupported: bool = False,
    actions: Collection[str] | None = None,
    strict: bool = False,
) -> list[dict[str, Any]]:
    """Anthropic Messages ``tools``: ``{name, description, input_schema}``."""
    return [
        {"name": s["name"], "description": s["description"], "input_schema": s["parameters"]}
        for s in tool_specs(support, omit_unsupported=omit_unsupported, actions=actions, strict=strict)
    ]


def action_json_schema(
    support: Support | None = None,
    *,
    omit_unsupported: bool = False,
    actions: Collection[str] | None = None,
) -> dict[str, Any]:
    """One JSON Schema (draft 2020-12) for an action object, ``type`` discriminator included."""
    catalog = get_catalog()
    models = _models(support, omit_unsupported, actions)
    if not models:
        raise ValueError("no action left to describe")
    if len(models) == len(catalog.models):
        schema = catalog.adapter.json_schema()
    else:
        union: Any = Union[tuple(m for m, _ in models)] if len(models) > 1 else models[0][0]  # noqa: UP007
        schema = (
            TypeAdapter(Annotated[union, Field(discriminator="type")]).json_schema()
            if len(models) > 1
            else TypeAdapter(union).json_schema()
        )
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
    fmt: ToolFormat | str,
    support: Support | None = None,
    *,
    omit_unsupported: bool = False,
    actions: Collection[str] | None = None,
    strict: bool = False,
) -> Any:
    """The catalog in one of :data:`TOOL_FORMATS` (a list of tools, or one schema for ``json-schema``);
    with ``support``, the actions its backend refuses are marked (or, ``omit_unsupported``, left out);
    ``actions`` narrows it; ``strict`` (the tool-list formats only) gives strict-mode parameters."""
    if fmt not in TOOL_FORMATS:
        raise ValueError(f"unknown tool format {fmt!r}; use one of {', '.join(TOOL_FORMATS)}")
    if strict and fmt not in STRICT_FORMATS:
        raise ValueError(f"strict applies to the formats {', '.join(STRICT_FORMATS)}, not {fmt!r}")
    if fmt == "json-schema":
        return action_json_schema(support, omit_unsupported=omit_unsupported, actions=actions)
    make = {"openai": openai_tools, "responses": responses_tools, "anthropic": anthropic_tools}[fmt]
    return make(support, omit_unsupported=omit_unsupported, actions=actions, strict=strict)


def tools_json(
    fmt: ToolFormat | str,
    *,
    indent: int | None = 2,
    support: Support | None = None,
    omit_unsupported: bool = False,
    actions: Collection[str] | None = None,
    strict: bool = False,
) -> str:
    return json.dumps(
        tools_document(fmt, support, omit_unsupported=omit_unsupported, actions=actions, strict=strict),
        indent=indent,
        ensure_ascii=False,
    )


def tool_call_to_action(
    name: str, arguments: dict[str, Any] | str | None, *, strict: bool = False
) -> dict[str, Any] | str:
    """The action for a tool call: the arguments with ``type`` set to the tool name.

    ``arguments`` may be the JSON text a model produced (OpenAI sends it as a string); text that is not a
    JSON object is handed on as is, so the gateway rejects it with its usual error observation. A stray
    ``type`` argument is ignored: the tool name decides the action. With ``strict`` (the tools were
    rendered with ``strict``), a JSON object written as text where the action takes an object is decoded
    and a null given for a parameter that takes no null is dropped (the parameter's default applies).
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
    args = {k: v for k, v in arguments.items() if k != "type"}
    if strict:
        model = next((m for m in get_catalog().models if action_type(m) == name), None)
        if model is not None:
            args = _from_strict(args, parameters_schema(model))
    return {"type": name, **args}


def _from_strict(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` of a strict-mode call back in the shape ``schema`` (the full parameters schema) takes."""
    types = _types(schema)
    if isinstance(value, str) and types and "string" not in types and types & {"object", "array"}:
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError:
            return value
        return _from_strict(decoded, schema) if isinstance(decoded, dict | list) else value
    branches = [schema, *schema.get("anyOf", [])]
    if isinstance(value, dict):
        props = next((b["properties"] for b in branches if b.get("properties")), None)
        if props is None:
            return value
        out = {}
        for key, v in value.items():
            sub = props.get(key)
            if sub is None:
                out[key] = v
            elif v is None and "null" not in _types(sub):
                continue
            else:
                out[key] = _from_strict(v, sub)
        return out
    if isinstance(value, list):
        items = next((b["items"] for b in branches if isinstance(b.get("items"), dict)), None)
        return value if items is None else [_from_strict(v, items) for v in value]
    return value


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
    "STRICT_FORMATS",
    "TOOL_FORMATS",
    "ToolFormat",
    "action_description",
    "action_json_schema",
    "action_type",
    "anthropic_tools",
    "openai_tools",
    "pack_actions",
    "parameters_schema",
    "refusal",
    "responses_tools",
    "scenario_actions",
    "scenario_packs",
    "strict_schema",
    "tool_call_to_action",
    "tool_specs",
    "tools_document",
    "tools_json",
]
