"""The ``example`` action pack: its declarations only (light; imported to build tool schemas)."""

from typing import Literal

from pydantic import Field

from mlsandbox.gateway.actions import ActionModel
from mlsandbox.gateway.registry import ActionPack, PackAction


class DatasetLineage(ActionModel):
    """Where a dataset came from: the chain of datasets it was cleaned from, back to the scenario's raw
    data, with the origin of each link."""

    type: Literal["dataset_lineage"] = "dataset_lineage"
    dataset: str = Field(min_length=1, max_length=200, description="Dataset name as listed by list_datasets")


PACK = ActionPack(
    name="example",
    # One declaration per action: its model, the Runtime capability it needs (``capability=``; none here:
    # it reads only the episode state), its hints; the handler is ``handle_<type>`` of the implementation.
    actions=(PackAction(DatasetLineage, read_only=True),),
    implementation="mlsandbox_plugin_example.impl",
    description="An example plug-in pack: dataset lineage.",
)
