"""Handlers of the ``example`` pack (imported when an episode runs).

Each handler takes the episode's context (:class:`~mlsandbox.gateway.context.EpisodeContext`: the
scenario, the episode state, the declared Runtime, the pack's typed state, named services) and the
validated action.
"""

from dataclasses import dataclass
from typing import Any

from mlsandbox.gateway.context import EpisodeContext
from mlsandbox_plugin_example.pack import DatasetLineage


@dataclass
class ExampleState:
    """What the pack remembers of an episode (``ctx.pack_state(ExampleState)``: one per episode, typed)."""

    lookups: int = 0


def handle_dataset_lineage(ctx: EpisodeContext, action: DatasetLineage) -> dict[str, Any]:
    rec = ctx.dataset(action.dataset)  # not_found error observation for an unknown dataset
    chain = []
    while rec is not None:
        chain.append({"dataset": rec.key, "origin": rec.origin})
        rec = ctx.state.datasets.get(rec.parent) if rec.parent else None
    ctx.pack_state(ExampleState).lookups += 1
    return {"dataset": action.dataset, "lineage": chain}
