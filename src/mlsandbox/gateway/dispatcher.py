"""The gateway: raw action -> validation -> dispatch to the backend -> observation, reward, audit log.

Bad input from an agent never raises out of :meth:`Gateway.step`: invalid JSON, an unknown action, bad
parameters, a reference to something that does not exist or a forbidden name each become an error
observation with a penalty, and nothing in the sandbox changes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from mlsandbox.backends.protocols import Runtime
from mlsandbox.data.formats import SUFFIX
from mlsandbox.errors import ActionError, Unsupported
from mlsandbox.evaluation.constraints import Violation, check_action, check_budget, wrong_mitigation
from mlsandbox.evaluation.metrics import episode_metrics
from mlsandbox.evaluation.reward import Grade, RewardTracker, grade_episode, objective_vector
from mlsandbox.faults.engine import PerturbationEngine
from mlsandbox.gateway.episode import Episode, unsupported_error
from mlsandbox.gateway.observations import StepResult, error_observation, ok_observation
from mlsandbox.gateway.registry import PackRuntime, get_catalog
from mlsandbox.gateway.telemetry import Telemetry
from mlsandbox.scenario.models import Scenario
from mlsandbox.scenario.models_goal import RegisteredModelsGoal
from mlsandbox.scenario.predictions_goal import (
    ID_COLUMN,
    PREDICTION_COLUMN,
    PROBABILITY_COLUMN,
    PredictionsFileGoal,
    features_key,
)
from mlsandbox.tasks.registry import kind_of
from mlsandbox.world import compute as P
from mlsandbox.world.datasets import generated_dataset
from mlsandbox.world.episode import DatasetRecord, EpisodeState

log = logging.getLogger(__name__)


class Gateway:
    """One episode of one scenario on a running sandbox (a :class:`Runtime`): the step loop.

    The episode itself (state, compute pool, the packs' states and the services a handler asks for) is
    :attr:`episode`, an :class:`~mlsandbox.gateway.episode.Episode`: the
    :class:`~mlsandbox.gateway.context.EpisodeContext` every pack handler, hook and supplier receives.
    The episode's audit log (every step, as JSON) goes to ``runtime.audit``; the time it reads and the
    waits it make go through ``runtime.clock``. Every job of the episode goes through its compute pool
    (:attr:`pool`, a :class:`~mlsandbox.world.compute.Pool` over ``runtime.jobs``: capacity, queue,
    reservations).
    """

    def __init__(
        self,
        runtime: Runtime,
        scenario: Scenario,
        *,
        seed: int | None = None,
        sandbox: str | None = None,
        denied_actions: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
    ) -> None:
        self.catalog = get_catalog()
        self._packs = PackRuntime.load(self.catalog)
        self.episode = Episode(
            runtime,
            scenario,
            seed=scenario.seed if seed is None else seed,
            sandbox=runtime.sandbox if sandbox is None else sandbox,
            packs=self._packs,
        )
        """The episode's context: what the packs' handlers, hooks and suppliers receive."""
        self.telemetry = Telemetry(labels, enabled=runtime.audit.location(self.state.episode_id) is not None)
        """What the audit log records besides observations (``labels``: interface, agent), for people
        watching from another process: computed only when the runtime's audit log is kept where they
        can read it (not in its memory)."""
        self._reward = RewardTracker()
        self.violation: Violation | None = None
        """The hard constraint the episode broke (it ended the episode), if any."""
        self.grade: Grade | None = None
        self._closed = False
        self.denied_actions = dict(denied_actions or {})
        """Action types refused by policy (type -> reason): a ``forbidden`` error observation, nothing done."""

    # ------------------------------------------------------------------------ the episode, read-only

    @property
    def runtime(self) -> Runtime:
        return self.episode.runtime

    @property
    def scenario(self) -> Scenario:
        return self.episode.scenario

    @property
    def seed(self) -> int:
        return self.episode.seed

    @property
    def state(self) -> EpisodeState:
        return self.episode.state

    @property
    def pool(self) -> P.Pool:
        """The episode's compute pool: every job goes through it."""
        return self.episode.pool

    @property
    def faults(self) -> PerturbationEngine | None:
        """The perturbation engine (None when the scenario has no plan)."""
        return self.episode.faults

    # ------------------------------------------------------------------------------------ lifecycle

    def start(self) -> dict[str, Any]:
        """Create the episode's isolated resources and data; return the first observation."""
        st = self.state
        rt = self.runtime
        rt.object_store.create_bucket(st.bucket)
        st.experiment_id = rt.tracking.create_experiment(
            st.experiment_name,
            tags={"mlsandbox.world.episode": st.episode_id, "mlsandbox.scenario": self.scenario.id},
        )
        for i, spec in enumerate(self.scenario.datasets):
            manifest, holdout, payloads = generated_dataset(spec, self.seed * 1000 + i)
            st.ground_truth.manifests[spec.name] = manifest
            st.ground_truth.holdouts[spec.name] = holdout
            for fmt, payload in payloads.items():
                key = f"raw/{spec.name}{SUFFIX[fmt]}"
                rt.object_store.put_object(st.bucket, key, payload)
                st.datasets[key] = DatasetRecord(key, fmt, len(payload), spec.target, "scenario")
        ctx = self.episode
        if self.scenario.perturbations:
            ctx.faults = PerturbationEngine(
                list(self.scenario.perturbations),
                st,
                rt,
                seed=self.seed,
                supplied=self._packs.supplied("fault_behaviours", ctx),
                pool=self.pool,
                addresses=[p.addresses for p in self.catalog.packs],
            )
        for _, hook in self._packs.hooks["on_start"]:
            hook(ctx)
        st.clock_start = rt.clock.time()
        if self.scenario.budget.deadline_s is not None:
            st.deadline_at = st.clock_start + self.scenario.budget.deadline_s
        self._audit(
            {"event": "start", "scenario": self.scenario.id, "seed": self.seed, **self.telemetry.start(self)}
        )
        return self.initial_observation()

    def initial_observation(self) -> dict[str, Any]:
        sc = self.scenario
        return {
            "step": 0,
            "ok": True,
            "action": None,
            "result": {
                "scenario": sc.id,
                "title": sc.title,
                "task": sc.task.strip(),
                "deliverable": self._deliverable(),
                "datasets": self.episode.dataset_list(),
                "actions": list(self.catalog.types),
                "max_steps": sc.max_steps,
            },
            "error": None,
            "budget": self.budget(),
        }

    def _deliverable(self) -> dict[str, Any]:
        """What the agent must deliver: the model's registered name, the kind of work, the metric."""
        goal = self.scenario.goal
        kind = kind_of(self.scenario.dataset(goal.dataset))
        out: dict[str, Any] = {"register_model_as": goal.model_name, "kind": kind.name}
        if self.scenario.budget.deadline_s is not None:
            out["deadline_s"] = self.scenario.budget.deadline_s
        scorer = getattr(goal, "scorer_environment", None)
        if scorer:
            out["scored_in_environment"] = list(scorer)
        if isinstance(goal, RegisteredModelsGoal):
            out["models"] = [
                {
                    "register_model_as": m.model_name,
                    "datasets": sorted(k for k in self.state.datasets if k.startswith(f"raw/{m.dataset}.")),
                    "priority": m.priority,
                    **({"deadline_s": m.deadline_s} if m.deadline_s is not None else {}),
                }
                for m in goal.models
            ]
        if goal.type in ("registered_model_metric", "predictions_file"):
            out["metric"] = kind.metric(getattr(goal, "metric", None)).name
        if isinstance(goal, PredictionsFileGoal):
            del out["register_model_as"]
            out["predictions_file"] = {
                "write_to": goal.path,
                "predict_for": features_key(goal.dataset),
                "columns": [ID_COLUMN, PREDICTION_COLUMN, PROBABILITY_COLUMN],
                "note": (
                    f"a CSV in the workspace with one row per {ID_COLUMN} of the features file (in the "
                    f"episode's bucket): {ID_COLUMN}, {PREDICTION_COLUMN} and, for a probability metric, "
                    f"{PROBABILITY_COLUMN} (the positive class's)"
                ),
            }
        return out

    def close(self) -> None:
        """Stop the episode's jobs and remove its bucket, experiment and registered models. Idempotent."""
        if self._closed:
            return
        self._closed = True
        st, rt = self.state, self.runtime
        steps: list[tuple[str, Callable[[], None]]] = [
            ("faults", self._recover_faults),
            *[
                (f"pack {name}", lambda hook=hook: hook(self.episode))
                for name, hook in reversed(self._packs.hooks["on_close"])
            ],
            ("jobs", lambda: self.pool.cleanup(st.job_label)),
            ("pool", self._close_pool),
            ("bucket", lambda: rt.object_store.delete_bucket(st.bucket)),
            ("models", self._delete_models),
            (
                "experiment",
                lambda: rt.tracking.delete_experiment(st.experiment_id) if st.experiment_id else None,
            ),
        ]
        for what, fn in steps:
            try:
                fn()
            except Exception as e:  # cleanup goes on with the rest; gc catches what is left
                log.warning("episode %s: cleaning %s failed: %s", st.episode_id, what, e)
        self._audit({"event": "close", "faults": [r.as_dict() for r in st.ground_truth.faults]})

    def _close_pool(self) -> None:
        self.pool.close()

    def _recover_faults(self) -> None:
        if self.faults is not None:
            self.faults.recover_all("episode_end")

    def _delete_models(self) -> None:
        for name in {n for (n, _) in self.state.registered}:
            self.runtime.tracking.delete_registered_model(self.state.registry_name(name))

    # ----------------------------------------------------------------------------------------- step

    def step(self, raw: Any) -> StepResult:
        t0 = time.perf_counter()
        st = self.state
        action_type: str | None = None
        grade: Grade | None = None
        if st.done:
            obs = error_observation(
                st.step, None, ActionError("episode_over", "the episode is over: call reset"), self.budget()
            )
            return StepResult(obs, 0.0, True, False, {"error": "episode_over", "reward_components": {}})
        st.step += 1
        if self.faults is not None:
            try:
                self.faults.tick()  # faults due at this step boundary, before the action is carried out
            except Exception as e:  # the engine never breaks a step
                log.warning("episode %s: perturbation tick failed: %s", st.episode_id, e)
        try:
            self.pool.pump()  # account idle reservations, start queued jobs that now fit
        except Exception as e:
            log.warning("episode %s: compute pool pump failed: %s", st.episode_id, e)
        for name, hook in self._packs.hooks["on_step"]:
            try:
                hook(self.episode)
            except Exception as e:  # a pack's hook never breaks a step
                log.warning("episode %s: pack %s step hook failed: %s", st.episode_id, name, e)
        violation: Violation | None = None
        try:
            action = parse_action(raw)
            action_type = type_of(action)
            if action_type in self.denied_actions:
                raise ActionError("forbidden", self.denied_actions[action_type])
            violation = check_action(self.scenario, action.model_dump(mode="json"))
            if violation is not None:  # refused before it runs; the episode ends below
                raise ActionError("constraint_violation", violation.message)
            if self.faults is not None:
                self.faults.observe_action(action.model_dump())
            try:
                result = self._packs.handlers[action_type](self.episode, action)
            except ActionError:
                raise
            except Unsupported as e:  # a capability this backend refuses: nothing was changed
                raise unsupported_error(e) from None
            except Exception as e:
                # A failure the handler did not turn into an agent's error (a backend's own exception, a
                # plug-in's bug): a backend_error observation, never an exception out of step().
                log.exception("episode %s: %s failed", st.episode_id, action_type)
                raise ActionError("backend_error", f"{action_type} failed: {type(e).__name__}: {e}") from None
            wrong = wrong_mitigation(self.scenario, action.model_dump(mode="json"))
            if wrong is not None:
                st.wrong_mitigations.append(wrong)
            self.episode.refresh_jobs()
            obs = ok_observation(st.step, action_type, result, self.budget())
            invalid = False
            err_code = None
        except ActionError as e:
            invalid = violation is None
            st.invalid_actions += int(invalid)
            self.episode.refresh_jobs()
            # A parameter error names the refused action (the observation's ``action``), as a success would.
            refused = action_type or (_declared_type(raw) if e.code == "invalid_parameters" else None)
            obs = error_observation(st.step, refused, e, self.budget())
            err_code = e.code
        violation = violation or check_budget(st)
        self.violation = violation
        terminated = st.submitted or violation is not None
        truncated = not terminated and st.step >= self.scenario.max_steps
        if terminated or truncated:
            st.done = True
            self._recover_faults()  # graded on a healthy sandbox
            self.episode.stop_running_jobs()
            for name, hook in self._packs.hooks["on_end"]:
                try:
                    hook(self.episode)
                except Exception as e:  # a pack's hook never breaks a step
                    log.warning("episode %s: pack %s end hook failed: %s", st.episode_id, name, e)
            grade = grade_episode(st, self.runtime.tracking)
            self.grade = grade
        credits = st.credits_used
        comps = self._reward.step(
            st,
            action_type=action_type,
            ok=bool(obs["ok"]),
            invalid=invalid,
            grade=grade,
            violation=violation is not None,
            done=st.done,
        )
        reward = float(sum(comps.values()))
        info: dict[str, Any] = {
            "episode_id": st.episode_id,
            "step": st.step,
            "action": action_type,
            "error": err_code,
            "reward_components": comps,
            "reward_vector": objective_vector(comps),
            "credits_used": round(credits, 4),
            "invalid_actions": st.invalid_actions,
            "milestones": sorted(self._reward.milestones),
            "timings": {"step_s": round(time.perf_counter() - t0, 6)},
        }
        if violation is not None:
            info["constraint_violation"] = violation.as_dict()
        if grade is not None:
            info["grade"] = grade.as_dict()
            info["metrics"] = episode_metrics(st)
        record: dict[str, Any] = {
            "event": "step",
            "raw": _jsonable(raw),
            "observation": obs,
            "reward": reward,
            "info": info,
        }
        if self.telemetry.enabled:
            record["telemetry"] = self.telemetry.step(self)
        self._audit(record)
        return StepResult(obs, reward, terminated, truncated, info)

    # ------------------------------------------------------------------------------------- records

    def budget(self) -> dict[str, Any]:
        """The budget every observation carries (the episode's)."""
        return self.episode.budget()

    def pack_telemetry(self) -> dict[str, Any]:
        """What the packs add to a step's telemetry (each pack's optional ``telemetry(ctx)``), merged in
        catalog order; a pack whose supplier fails is left out of this step's record."""
        out: dict[str, Any] = {}
        for name, supply in self._packs.suppliers.get("telemetry", []):
            try:
                out.update(supply(self.episode))
            except Exception as e:  # telemetry never breaks a step
                log.debug("episode %s: pack %s telemetry failed: %s", self.state.episode_id, name, e)
        return out

    @property
    def audit_location(self) -> str | None:
        """Where a person finds this episode's audit log (None when the runtime keeps it in memory)."""
        return self.runtime.audit.location(self.state.episode_id)

    def _audit(self, record: dict[str, Any]) -> None:
        st = self.state
        record = {"t": round(self.runtime.clock.time(), 3), "episode": st.episode_id, **record}
        try:
            self.runtime.audit.append(st.episode_id, record)
        except Exception as e:  # the audit log never breaks a step
            log.warning("episode %s: audit log append failed: %s", st.episode_id, e)


def type_of(action: BaseModel) -> str:
    """An action model's ``type`` (the literal default of its ``type`` field, as the catalog reads it)."""
    return str(type(action).model_fields["type"].default)


def parse_action(raw: Any) -> BaseModel:
    """An action model from a model, a dict or a JSON string; :class:`ActionError` for anything else."""
    catalog = get_catalog()
    if isinstance(raw, BaseModel) and isinstance(raw, catalog.models):
        return raw
    if isinstance(raw, bytes | bytearray):
        try:
            raw = raw.decode()
        except UnicodeDecodeError:
            raise ActionError("invalid_json", "the action is not UTF-8 text") from None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ActionError(
                "invalid_json", f"the action is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}"
            ) from None
    if not isinstance(raw, dict):
        raise ActionError(
            "invalid_json", f"an action is a JSON object with a 'type' field, got {type(raw).__name__}"
        )
    kind = raw.get("type")
    if kind not in catalog.types:
        raise ActionError(
            "unknown_action",
            f"unknown action type {kind!r}; known: {', '.join(catalog.types)}",
        )
    try:
        return catalog.adapter.validate_python(raw)
    except ValidationError as e:
        problems = [
            {"field": ".".join(str(p) for p in err["loc"][1:]) or "<action>", "message": err["msg"]}
            for err in e.errors(include_url=False)
        ]
        msg = "; ".join(f"{p['field']}: {p['message']}" for p in problems)
        raise ActionError(
            "invalid_parameters", f"invalid parameters for {kind}: {msg}", details=problems
        ) from None


def _declared_type(raw: Any) -> str | None:
    """The catalog action type a raw action names (a dict or JSON object text with a known ``type``)."""
    if isinstance(raw, bytes | bytearray):
        raw = raw.decode(errors="replace")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return None
    kind = raw.get("type") if isinstance(raw, dict) else None
    return kind if isinstance(kind, str) and kind in get_catalog().types else None


def _jsonable(raw: Any) -> Any:
    if isinstance(raw, BaseModel):
        return raw.model_dump()
    if isinstance(raw, bytes | bytearray):
        return raw.decode(errors="replace")
    try:
        json.dumps(raw)
        return raw
    except (TypeError, ValueError):
        return repr(raw)
