"""mlsandbox episodes as tools for TRL's ``GRPOTrainer(environment_factory=...)`` (``mlsandbox[trl]``).

TRL makes one environment per rollout with a zero-argument factory, calls ``reset(**row)`` with the dataset
row (its string return is appended to the prompt), exposes every public method of the class as a tool (the
function's name, type hints and Google-style docstring become its JSON Schema, through transformers'
``get_json_schema``), calls the tools the model asks for with its arguments and puts their string return
in a ``tool`` message, and calls ``get_reward()`` once per finished rollout. This module gives such a class:

- :class:`MLSandboxToolEnv`: zero-argument constructor; ``reset(**row)`` starts an episode (the row's
  ``scenario`` and ``seed`` columns choose it; every other column, ``prompt`` included, is ignored) and
  returns the first observation as text (the task, the deliverable, the datasets); one public method per
  action of the catalog, plug-in packs included, typed and documented from the action's model, which
  carries the action out as a step and returns the observation as text; ``get_reward()`` submits the
  episode if the model did not, and returns its grade's score (0 to 1; ``reward = "return"`` gives the
  episode's summed reward instead).
- :func:`tool_env_class`: the same class configured (``scenario``, ``backend``, ``sandbox``, ...), for
  ``environment_factory=tool_env_class(sandbox="rl")``.

Episodes run on a sandbox that is already running (``mlsandbox up --name rl``), each isolated; ``backend``
picks local, kube or sim (or any backend :func:`mlsandbox.backends.get_backend` knows; on sim each
environment has an in-process sandbox of its own, nothing to start). A tool call with
arguments the action does not take never reaches the method: TRL reports Python's error to the model and
counts a tool failure; arguments of the wrong type or value reach the gateway, whose error observation
(with its penalty) is the tool's answer.
"""

from __future__ import annotations

import atexit
import contextlib
import inspect
import json
import types
import weakref
from collections.abc import Callable, Sequence
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from mlsandbox.env import MLSandboxEnv, decode_observation
from mlsandbox.gateway.registry import get_catalog
from mlsandbox.gateway.render import render_observation
from mlsandbox.gateway.tools import action_description, action_type, parameters_schema
from mlsandbox.scenario import Scenario, load_scenario

RESERVED = frozenset({"reset", "get_reward"})
"""Method names TRL gives a meaning of its own (an action of that name could not be a tool)."""
RewardKind = Literal["score", "return"]
_LIVE: weakref.WeakSet[ToolEnvBase] = weakref.WeakSet()


class ToolEnvBase:
    """An mlsandbox episode for TRL, without action methods (:class:`MLSandboxToolEnv` has them all)."""

    scenario: ClassVar[str | Scenario] = "tabular-quality-basic"
    backend: ClassVar[str] = "local"
    sandbox: ClassVar[str | None] = None
    reward_kind: ClassVar[RewardKind] = "score"
    max_observation_chars: ClassVar[int] = 4000

    def __init__(self) -> None:
        self._env: MLSandboxEnv | None = None
        self._done = False
        self._total_reward = 0.0
        self._grade: dict[str, Any] | None = None
        _LIVE.add(self)

    # -------------------------------------------------------------------------------- TRL's protocol

    def reset(self, **row: Any) -> str:
        """Start an episode: the row's ``scenario`` (a built-in id or a file) and ``seed`` columns pick it,
        other columns are ignored; returns the first observation (the task) as text."""
        env = self._ensure_env()
        options = {"scenario": row["scenario"]} if row.get("scenario") else None
        seed = row.get("seed")
        obs, _ = env.reset(seed=None if seed is None else int(seed), options=options)
        self._done = False
        self._total_reward = 0.0
        self._grade = None
        return render_observation(decode_observation(obs), max_chars=self.max_observation_chars)

    def get_reward(self) -> float:
        """The episode's reward for GRPO: its grade's score in [0, 1] (``reward_kind = "return"``: the sum of
        its step rewards). A rollout that ended without ``submit`` is submitted now and graded."""
        if self._env is None or not self._env.episode_running:
            return 0.0
        if not self._done:
            self._act({"type": "submit"})
        if self.reward_kind == "return":
            return float(self._total_reward)
        return float((self._grade or {}).get("score") or 0.0)

    # ------------------------------------------------------------------------------------ state (read)

    @property
    def done(self) -> bool:
        return self._done

    @property
    def grade(self) -> dict[str, Any] | None:
        """The grade once the episode is over (never shown to the model)."""
        return self._grade

    @property
    def env(self) -> MLSandboxEnv | None:
        return self._env

    # --------------------------------------------------------------------------------------- helpers

    def _ensure_env(self) -> MLSandboxEnv:
        if self._env is None:
            self._env = MLSandboxEnv(
                self.scenario, backend=self.backend, sandbox=self.sandbox, start_sandbox=False
            )
        return self._env

    def _act(self, action: dict[str, Any]) -> str:
        env = self._env
        if env is None or not env.episode_running:
            return "error: no episode is running (reset first)"
        obs, reward, terminated, truncated, info = env.step(action)
        self._total_reward += float(reward)
        text = render_observation(decode_observation(obs), max_chars=self.max_observation_chars)
        if terminated or truncated:
            self._done = True
            self._grade = info.get("grade")
            text += "\n[the episode is over]"
        return text

    def _close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


def _close_all() -> None:
    for env in list(_LIVE):
        with contextlib.suppress(Exception):  # cleanup at exit goes on; gc catches the rest
            env._close()


atexit.register(_close_all)


# ------------------------------------------------------------------------------ methods from the catalog


def _simplify(tp: Any) -> Any:
    """A type transformers' ``get_json_schema`` understands: nested models become ``dict[str, Any]``,
    ``Annotated`` metadata is dropped (its constraints are in the docstring), anything else is ``Any``."""
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return _simplify(args[0])
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return dict[str, Any]
    if origin is Union or origin is types.UnionType:
        return Union[tuple(_simplify(a) for a in args)]  # noqa: UP007
    if origin is Literal:
        return tp
    if origin is list:
        return list.__class_getitem__(_simplify(args[0])) if args else list
    if origin is dict:
        return dict.__class_getitem__((str, _simplify(args[1]))) if len(args) == 2 else dict
    if tp in (int, float, str, bool, type(None), Any, dict, list):
        return tp
    return Any


_CONSTRAINTS = (
    ("minimum", "at least {}"),
    ("exclusiveMinimum", "above {}"),
    ("maximum", "at most {}"),
    ("exclusiveMaximum", "below {}"),
    ("minLength", "at least {} characters"),
    ("maxLength", "at most {} characters"),
    ("maxItems", "at most {} items"),
    ("maxProperties", "at most {} entries"),
)


def _facts(schema: dict[str, Any]) -> list[str]:
    """What values a JSON Schema allows, in a few words each (``anyOf`` branches merged, null left out)."""
    if "anyOf" in schema:
        return [f for branch in schema["anyOf"] if branch.get("type") != "null" for f in _facts(branch)]
    facts = []
    if "enum" in schema:
        facts.append("one of " + ", ".join(map(str, schema["enum"])))
    if "pattern" in schema:
        facts.append(f"matching {schema['pattern']}")
    facts += [template.format(schema[key]) for key, template in _CONSTRAINTS if key in schema]
    if schema.get("type") == "object" and schema.get("properties"):
        fields = ", ".join(
            f"{k} ({v.get('type', 'any')})" if isinstance(v, dict) else k
            for k, v in schema["properties"].items()
        )
        facts.append(f"an object with {fields}")
    return facts


def _describe(schema: dict[str, Any]) -> str:
    """One line about a parameter from its JSON Schema: its description, then what values it takes."""
    parts = [schema["description"].rstrip(".")] if schema.get("description") else []
    facts = _facts(schema)
    if not parts and isinstance(schema.get("type"), str):
        facts.insert(0, f"a {schema['type']}")
    if "default" in schema:
        facts.append(f"default {json.dumps(schema['default'])}")
    if facts:
        parts.append(", ".join(facts))
    return " ".join("; ".join(parts).split()) or "see the action's description"


def _action_method(model: type[BaseModel]) -> Callable[..., str]:
    """``def <type>(self, <params>) -> str``: typed and documented from ``model``."""
    name = action_type(model)
    props = parameters_schema(model).get("properties", {})
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    required: set[str] = set()
    for field_name, field in model.model_fields.items():
        if field_name == "type":
            continue
        tp = _simplify(field.annotation)
        if field.is_required():
            required.add(field_name)
            params.append(
                inspect.Parameter(field_name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=tp)
            )
        else:
            tp = tp | None if tp is not Any else Any
            params.append(
                inspect.Parameter(
                    field_name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=tp, default=None
                )
            )
        annotations[field_name] = tp
    annotations["return"] = str

    def method(self: ToolEnvBase, *args: Any, **kwargs: Any) -> str:
        bound = signature.bind(self, *args, **kwargs)
        values = {
            k: v for k, v in bound.arguments.items() if k != "self" and (v is not None or k in required)
        }
        return self._act({"type": name, **values})

    signature = inspect.Signature(params, return_annotation=str)
    args_doc = "\n".join(f"    {p}: {_describe(props.get(p, {}))}" for p in model.model_fields if p != "type")
    doc = action_description(model)
    if args_doc:
        doc += "\n\nArgs:\n" + args_doc
    doc += "\n\nReturns:\n    The observation after the action, as text (an error says what was wrong)."
    method.__name__ = method.__qualname__ = name
    method.__doc__ = doc
    method.__signature__ = signature  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    return method


def _action_methods(actions: Sequence[str] | None = None) -> dict[str, Callable[..., str]]:
    """One method per action of the catalog (or of ``actions``, in catalog order), by name."""
    catalog = get_catalog()
    if actions is not None:
        unknown = sorted(set(actions) - set(catalog.types))
        if unknown:
            raise ValueError(f"unknown actions {unknown}; the catalog has: {', '.join(catalog.types)}")
    out = {}
    for model in catalog.models:
        name = action_type(model)
        if actions is not None and name not in actions:
            continue
        if name in RESERVED or name.startswith("_") or hasattr(ToolEnvBase, name):
            continue  # it would clash with TRL's protocol or the class's own members
        out[name] = _action_method(model)
    return out


MLSandboxToolEnv: type[ToolEnvBase] = type(
    "MLSandboxToolEnv",
    (ToolEnvBase,),
    {
        "__module__": __name__,
        "__doc__": "An mlsandbox episode whose actions are tools: one public method per action of the catalog "
        "(plug-in packs included).",
        **_action_methods(),
    },
)


def tool_env_class(
    *,
    scenario: str | Scenario = "tabular-quality-basic",
    backend: str = "local",
    sandbox: str | None = None,
    actions: Sequence[str] | None = None,
    reward_kind: RewardKind = "score",
    max_observation_chars: int = 4000,
) -> type[ToolEnvBase]:
    """An environment class for ``GRPOTrainer(environment_factory=...)`` with these settings; ``actions``
    limits the tools to those actions (the whole catalog by default: a smaller set makes shorter prompts)."""
    if reward_kind not in ("score", "return"):
        raise ValueError(f"reward_kind must be 'score' or 'return', got {reward_kind!r}")
    if max_observation_chars < 80:
        raise ValueError("max_observation_chars must be at least 80")
    if isinstance(scenario, str):
        load_scenario(scenario)  # a broken scenario fails here, not in the first rollout
    attrs: dict[str, Any] = {
        "scenario": scenario,
        "backend": backend,
        "sandbox": sandbox,
        "reward_kind": reward_kind,
        "max_observation_chars": max_observation_chars,
        "__module__": __name__,
        "__doc__": MLSandboxToolEnv.__doc__,
        **_action_methods(actions),
    }
    return type("MLSandboxToolEnv", (ToolEnvBase,), attrs)


def action_tools(env: ToolEnvBase) -> dict[str, Callable[..., str]]:
    """The tools TRL derives from ``env`` (its public methods but ``reset`` and ``get_reward``), by name."""
    return {
        n: getattr(env, n)
        for n, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
        if not n.startswith("_") and n not in RESERVED
    }


__all__ = ["RESERVED", "MLSandboxToolEnv", "ToolEnvBase", "action_tools", "tool_env_class"]
