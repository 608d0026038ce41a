"""``airlock artifacts``: the files programs left in ``/out``, as stored on this host.

``list RUN`` shows a run's artifacts (``airlock run``'s, or every program's of a session's
run) with size, media type and SHA-256; ``get RUN NAME`` copies one out (``--to DIR``) or
writes it to stdout (``-``). They read ``$AIRLOCK_HOME/artifacts`` (or ``--store DIR``).
Exit codes: 0 done; 2 no such run or artifact (printed with its stable code).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from airlock.cli._inventory import usage_errors
from airlock.cli._run import copy_artifacts
from airlock.cli._settings import Settings
from airlock.harness import ArtifactStore
from airlock.policies import UsageError

__all__ = ["artifacts_app"]

artifacts_app = typer.Typer(
    help="The files programs left in /out, stored under $AIRLOCK_HOME/artifacts.",
    no_args_is_help=True,
)

StoreOption = Annotated[
    Path | None,
    typer.Option("--store", help="Artifact store (default: artifacts in AIRLOCK_HOME)."),
]


def _store(store: Path | None) -> ArtifactStore:
    return ArtifactStore(store if store is not None else Settings.from_env().artifacts)


@artifacts_app.command("list")
def list_artifacts(
    run: Annotated[str, typer.Argument(help="A run id, or one program's directory.")],
    store: StoreOption = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List a run's artifacts: name, size, media type, SHA-256 and where each is stored."""
    with usage_errors():
        refs = _store(store).list(run)
        if not refs:
            raise UsageError(f"run {run!r} left no artifacts in this store")
    if json_output:
        print(json.dumps([r.model_dump() for r in refs], indent=2))
        return
    table = Table("artifact", "bytes", "media type", "sha256", "uri")
    for ref in refs:
        table.add_row(ref.name, str(ref.size_bytes), ref.media_type, ref.sha256[:16], ref.uri)
    Console(width=200).print(table)


@artifacts_app.command("get")
def get_artifact(
    run: Annotated[str, typer.Argument(help="A run id, or one program's directory.")],
    name: Annotated[str, typer.Argument(help="The artifact's name, e.g. chart.png.")],
    to: Annotated[
        str,
        typer.Option(help="Directory to copy it into, or '-' for stdout."),
    ] = ".",
    store: StoreOption = None,
) -> None:
    """Copy one artifact out of the store (its SHA-256 is printed, to compare)."""
    with usage_errors():
        ref = _store(store).get(run, name)
        if to == "-":
            with open(ref.path, "rb") as file:
                sys.stdout.buffer.write(file.read())
            sys.stdout.buffer.flush()
            return
        [copied] = copy_artifacts([ref.model_copy(update={"name": Path(name).name})], Path(to))
    Console(stderr=True).print(f"{copied} ({ref.size_bytes} bytes, sha256 {ref.sha256})")
