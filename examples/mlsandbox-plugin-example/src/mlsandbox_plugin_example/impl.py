"""Handlers of the ``example`` pack (imported when an episode runs)."""

from dataclasses import dataclass
from typing import Any


@dataclass
class ExampleState:
    """What the pack remembers of an episode (``gw.pack_state(ExampleState)``: one per episode, typed)."""

    lookups: int = 0


def dataset_lineage(gw: Any, action: Any) -> dict[str, Any]:
    rec = gw.dataset(action.dataset)  # not_found error observation for an unknown dataset
    chain = []
    while rec is not None:
        chain.append({"dataset": rec.key, "origin": rec.origin})
        rec = gw.state.datasets.get(rec.parent) if rec.parent else None
    gw.pack_state(ExampleState).lookups += 1
    return {"dataset": action.dataset, "lineage": chain}


HANDLERS = {"dataset_lineage": dataset_lineage}
