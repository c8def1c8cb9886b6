"""Handlers of the ``example`` pack (imported when an episode runs)."""

from typing import Any


def dataset_lineage(gw: Any, action: Any) -> dict[str, Any]:
    rec = gw.dataset(action.dataset)  # not_found error observation for an unknown dataset
    chain = []
    while rec is not None:
        chain.append({"dataset": rec.key, "origin": rec.origin})
        rec = gw.state.datasets.get(rec.parent) if rec.parent else None
    gw.ext["example"]["lookups"] = gw.ext["example"].get("lookups", 0) + 1
    return {"dataset": action.dataset, "lineage": chain}


HANDLERS = {"dataset_lineage": dataset_lineage}
