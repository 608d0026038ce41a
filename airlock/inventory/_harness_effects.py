"""The harness's own connections: what airlock itself reaches, outside any tool.

Tools are not the only way data leaves or enters: the harness sends conversations to a model
provider, accepts MCP clients, drives the container engine through its socket (root-equivalent
on the host), and keeps the audit log and the ledger in files. :func:`harness_connections`
lists them from what the command line knows (its settings and the front ends' endpoints), so
a reviewer sees them beside the tools, and the lock file holds each one in a form that reads
the same on every machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from airlock.inventory._model import HarnessConnection

__all__ = ["DEFAULT_DOCKER_HOST", "harness_connections"]

DEFAULT_DOCKER_HOST: Final = "unix:///var/run/docker.sock"
"""Where the Docker client connects when ``DOCKER_HOST`` is not set."""


def harness_connections(
    *,
    home: Path,
    model_endpoint: str,
    model_credential: str,
    mcp_host: str,
    docker_host: str | None,
) -> tuple[HarnessConnection, ...]:
    """The connections of airlock's own commands: the model provider at ``model_endpoint``
    (authenticated with the credential named ``model_credential``), the MCP listener (stdio,
    or HTTP on ``mcp_host``), the container engine at ``docker_host`` (``DOCKER_HOST``; the
    default socket when None), and the audit and ledger stores in ``home``."""
    engine = docker_host or DEFAULT_DOCKER_HOST
    return (
        HarnessConnection(
            name="model provider",
            direction="outbound",
            kind="https",
            target=model_endpoint,
            locked_as=model_endpoint,
            credential=model_credential,
            used_by="made by airlock chat with a live model (--replay makes none)",
            note=(
                "the conversation, the tool definitions and every result shown to the model "
                "leave the host here"
            ),
        ),
        HarnessConnection(
            name="mcp listener",
            direction="inbound",
            kind="mcp",
            target=f"stdio; with --http PORT: http://{mcp_host}:PORT/mcp",
            locked_as=f"stdio; with --http PORT: http://{mcp_host}:PORT/mcp",
            credential=None,
            used_by="opened by airlock serve --mcp",
            note=(
                "a client acts as the principal the server was started for; HTTP listens on "
                "loopback only"
            ),
        ),
        HarnessConnection(
            name="docker engine",
            direction="local" if engine.startswith("unix://") else "outbound",
            kind="unix socket" if engine.startswith("unix://") else "docker api",
            target=engine,
            locked_as=f"DOCKER_HOST, default {DEFAULT_DOCKER_HOST}",
            credential=None,
            used_by="every command that runs programs (run, serve, chat, doctor)",
            note=(
                "root-equivalent on the engine's host: the harness starts and removes sandbox "
                "containers through it; programs never see it"
            ),
        ),
        _store(
            "audit store",
            home / "audit.db",
            home,
            "written by serve, chat, run and a Harness of your own (the default audit log), "
            "read by airlock audit",
            note="its chain key is audit.db.key beside it",
        ),
        _store(
            "ledger",
            home / "ledger.db",
            home,
            "written by the write path (previews, approvals, receipts), read by airlock "
            "approvals, receipts and reconcile",
        ),
    )


def _store(name: str, path: Path, home: Path, used_by: str, *, note: str = "") -> HarnessConnection:
    return HarnessConnection(
        name=name,
        direction="local",
        kind="sqlite file",
        target=str(path),
        locked_as=f"$AIRLOCK_HOME/{path.relative_to(home)}",
        credential=None,
        used_by=used_by,
        note="readable by whoever can read $AIRLOCK_HOME; never mounted into a sandbox"
        + (f"; {note}" if note else ""),
    )
