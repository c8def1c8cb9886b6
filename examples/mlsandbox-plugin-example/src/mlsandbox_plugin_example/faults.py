"""The ``example_truncated_upload`` fault type (``mlsandbox.faults`` entry point).

A real condition: the dataset's raw objects in the object store are cut to a fraction of their bytes, as
an interrupted upload leaves them; reading them fails (the Parquet/CSV reader sees a broken file). The
originals are kept and put back on recovery. A plan names it like a built-in fault::

    perturbations:
      - name: partial-upload
        when: {at_step: 1}
        target: dataset:customers
        fault: {type: example_truncated_upload, keep_fraction: 0.5}
        duration: {steps: 2}
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mlsandbox.faults.behaviours import Behaviour, FaultContext


class TruncatedUpload(Behaviour):
    targets = ("dataset",)

    class Params(BaseModel):
        model_config = ConfigDict(extra="forbid")
        keep_fraction: float = Field(default=0.5, gt=0, lt=1)

    def __init__(self, entry: Any) -> None:
        super().__init__(entry)
        self.originals: dict[str, bytes] = {}

    def _keys(self, ctx: FaultContext) -> list[str]:
        return [
            r.key
            for r in ctx.state.datasets.values()
            if r.origin == "scenario" and r.key.rsplit("/", 1)[-1].rsplit(".", 1)[0] == self.target_name
        ]

    def inject(self, ctx: FaultContext) -> None:
        store = ctx.runtime.object_store
        keep = self.fault.params.keep_fraction
        for key in self._keys(ctx):
            if key in self.originals:
                continue
            original = store.get_object(ctx.state.bucket, key)
            store.put_object(ctx.state.bucket, key, original[: max(1, int(len(original) * keep))])
            self.originals[key] = original

    def recover(self, ctx: FaultContext) -> None:
        store = ctx.runtime.object_store
        for key, original in list(self.originals.items()):
            store.put_object(ctx.state.bucket, key, original)
            del self.originals[key]

    def addresses(self, action: dict[str, Any]) -> bool:
        return action.get("type") in ("check_data_quality", "clean_dataset", "train_model") and (
            action.get("dataset") in self.originals
        )
