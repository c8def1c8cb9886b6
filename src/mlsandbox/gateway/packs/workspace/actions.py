"""The ``workspace`` pack: a directory of files per episode and the agent's own Python, run as a job.

Each model's docstring is what the agent reads about the action (tool descriptions, the catalog).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from mlsandbox.gateway.actions import ActionModel
from mlsandbox.gateway.packs.core.actions import Resources
from mlsandbox.gateway.registry import ActionPack, PackAction

MAX_CONTENT_CHARS = 1 << 20
WorkspacePath = Annotated[
    str,
    Field(
        min_length=1,
        max_length=512,
        description="A path relative to the workspace, e.g. train.py or out/predictions.csv",
    ),
]


class WriteFile(ActionModel):
    """Write a text file in this episode's workspace (created with its directories, or replaced). The
    workspace is where run_python runs: a script reads and writes files there. At most 1 MiB a file and
    256 MiB in all; a path may not leave the workspace."""

    type: Literal["write_file"] = "write_file"
    path: WorkspacePath
    content: str = Field(max_length=MAX_CONTENT_CHARS, description="The file's text (UTF-8)")


class ReadFile(ActionModel):
    """Read a text file of the workspace (what a script wrote, e.g. its metrics or predictions): the
    first ``max_bytes`` bytes, and the file's size."""

    type: Literal["read_file"] = "read_file"
    path: WorkspacePath
    max_bytes: int = Field(default=65536, ge=1, le=1 << 20)


class ListFiles(ActionModel):
    """List the workspace's files and directories under ``path`` (recursively), with their sizes, and
    how much of the workspace's disk is used."""

    type: Literal["list_files"] = "list_files"
    path: str = Field(default=".", max_length=512)


class RunPython(ActionModel):
    """Run Python as a job of this episode (like train_model: the same compute pool, limits and credits;
    follow it with get_job, wait, get_logs job-N, cancel_job). Give ``path`` (a script in the workspace)
    or ``code`` (saved as a new script and run). It runs in the workspace, unprivileged and isolated, with
    the sandbox's real services already configured in its environment: ``boto3.client("s3")`` reaches the
    data lake (your episode's bucket is ``$MLSANDBOX_BUCKET``), ``mlflow`` the tracking server and
    registry (your experiment id is ``$MLSANDBOX_EXPERIMENT_ID``). pandas, numpy, scikit-learn, pyarrow,
    mlflow and boto3 are installed; there is no other network. A model a script logs with mlflow and
    registers under the episode's model name is graded like one registered with register_model.
    Killed after ``timeout_s`` seconds (at most the scenario's job limit)."""

    type: Literal["run_python"] = "run_python"
    path: WorkspacePath | None = None
    code: str | None = Field(default=None, max_length=MAX_CONTENT_CHARS)
    args: list[Annotated[str, Field(max_length=1000)]] = Field(default_factory=list, max_length=50)
    resources: Resources = Field(default_factory=Resources)
    timeout_s: float | None = Field(default=None, gt=0, le=86400)

    @model_validator(mode="after")
    def _one_source(self) -> RunPython:
        if (self.path is None) == (self.code is None):
            raise ValueError("give exactly one of path (a script in the workspace) or code")
        return self


PACK = ActionPack(
    name="workspace",
    actions=(
        PackAction(WriteFile, capability="workspaces"),
        PackAction(ReadFile, capability="workspaces", read_only=True),
        PackAction(ListFiles, capability="workspaces", read_only=True),
        PackAction(RunPython, capability="workspaces"),
    ),
    implementation="mlsandbox.gateway.packs.workspace.handlers",
    description="A workspace of files per episode and the agent's own Python, run as isolated jobs.",
)
