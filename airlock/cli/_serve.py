"""``airlock serve --mcp``: one principal's session offered to an MCP client.

The principal comes from the command line (the operator who starts the server decides whom
it acts for), never from the client. So do the programs' limits and files: ``--timeout``,
``--memory`` and ``--image`` may narrow the policy file's ``[sandbox]`` profile for this
server, never widen it (that profile is what ``airlock inventory`` reports and locks),
``--keep-state`` keeps one container for the session's programs, and ``--inputs DIR`` gives
every program the entries of ``DIR`` read-only at ``/data/NAME`` (the model sees them listed;
the principal's grant must cover ``read(file:NAME)`` for each). Exit codes: 0 the client
disconnected; 2 a usage error (bad ``--registry``, policy file, principal, an input refused,
a flag that widens the policy's sandbox), printed with its stable code; 3 the sandbox is
unavailable.

The budget (``--budget-seconds``, ``--budget-calls``, ``--budget-bytes``) is a session's: over
stdio the server has one client, so it covers the server's whole life; over HTTP each MCP
session gets its own. Its time starts at the session's first call, not when the server
starts: a server may wait long for its client. Over HTTP every request carries a bearer token,
``AIRLOCK_MCP_TOKEN`` or one generated at start and printed once on stderr.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import anyio
import typer
from rich.console import Console

from airlock.cli._approvals import default_ledger
from airlock.cli._inventory import PolicyOption, RegistryOption, TenantOption, usage_errors
from airlock.cli._sandbox_options import (
    ImageOption,
    InputsOption,
    KeepStateOption,
    MemoryOption,
    SandboxOptions,
    TimeoutOption,
)
from airlock.cli._serve_http import TOKEN_ENV, bearer_token, serve_clients
from airlock.cli._settings import Settings
from airlock.harness import (
    Budget,
    Harness,
    Session,
    database_url,
    open_audit_store,
    open_ledger,
)
from airlock.inventory import load_policy_document, load_tool_registry
from airlock.policies import Principal, UsageError
from airlock.sandbox import DockerBackend, SandboxError
from airlock.tools import AuditStore, LedgerStore, SQLiteAuditStore, SQLiteLedgerStore

__all__ = [
    "DatabaseOption",
    "ImageOption",
    "InputsOption",
    "KeepStateOption",
    "MemoryOption",
    "SandboxOptions",
    "Served",
    "TimeoutOption",
    "open_harness",
    "open_session",
    "serve",
]

DatabaseOption = Annotated[
    str | None,
    typer.Option(
        help="Database of the ledger and audit log: postgresql://USER@HOST/DB, shared by "
        "several harness processes (default: AIRLOCK_DATABASE_URL, else SQLite files).",
    ),
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Served:
    """What :func:`open_harness` opened: a harness and whom its sessions act for."""

    harness: Harness
    principal: Principal
    keep_state: bool
    inputs: dict[str, Path]

    def session(self, budget: Budget | None = None) -> Session:
        """A new session (one conversation) for the principal, with the options' state and
        inputs; ``budget`` replaces the harness's default."""
        return self.harness.session(
            self.principal, keep_state=self.keep_state, inputs=self.inputs, budget=budget
        )


@asynccontextmanager
async def open_harness(
    registry_ref: str,
    policy: Path,
    *,
    user: str,
    tenant: str | None,
    ledger: Path | None,
    settings: Settings,
    options: SandboxOptions | None = None,
    database: str | None = None,
) -> AsyncIterator[Served]:
    """A harness over the registry, the policy, a Docker sandbox and the ledger (``ledger.db``
    in ``AIRLOCK_HOME`` when None), open for as long as the block runs, and the principal
    ``user`` its sessions act for. Calls are audited in ``audit.db`` in ``AIRLOCK_HOME``
    unless the registry has a store of its own, each durable before its answer returns; the
    log is flushed and closed at the end. ``options`` narrow the policy's sandbox profile,
    keep state and give inputs; artifacts are stored in ``AIRLOCK_HOME/artifacts``.

    Raises:
        RegistryRefError, PolicyFileError, UsageError: the registry, policy or principal is
            not usable, or an option widens the policy's sandbox profile; ``InputRefused``
            for an input outside the grant or not mountable.
        LedgerError: the ledger or the audit store cannot be used or made (a folder on its
            path is a file, say); the subclass says why, the message names the file.
        SandboxError: the Docker engine or the sandbox image is unavailable.
    """
    options = options or SandboxOptions()
    catalog = load_tool_registry(registry_ref)
    document = load_policy_document(policy)
    subject = document.principal(user, tenant=tenant)
    # The policy's profile is what the inventory reports and the lock holds: flags narrow it.
    profile = options.checked_profile(document.policy.sandbox, policy=policy)
    files = options.input_files()
    # A database URL (--database, AIRLOCK_DATABASE_URL) holds both stores; else the files.
    url = database_url(database)
    store: LedgerStore
    if url is not None and ledger is None:
        store = open_ledger(url, busy_timeout=settings.busy_timeout)
    else:
        # The store makes its folder (mode 0700), or says in one line why it cannot.
        store = SQLiteLedgerStore(ledger or default_ledger(), busy_timeout=settings.busy_timeout)
    audit: AuditStore | None = None
    try:
        if catalog.audit.provisional and url is not None:
            audit = open_audit_store(url, busy_timeout=settings.busy_timeout)
        elif catalog.audit.provisional:
            audit = SQLiteAuditStore(settings.audit_db, busy_timeout=settings.busy_timeout)
        async with DockerBackend(
            image=settings.image,
            data_image=settings.data_image,
            profile=profile,
            # A kept session takes one warm container and keeps it: more would idle.
            pool_size=min(settings.pool_size, 1) if options.keep_state else settings.pool_size,
            inputs=files,
        ) as backend:
            harness = Harness(
                catalog, document.policy, backend, store, audit=audit, artifacts=settings.artifacts
            )
            if harness.writes is not None:
                # Writes a crash left undecided are resolved before this session commits any.
                await harness.writes.reconcile()
            yield Served(
                harness=harness,
                principal=subject.principal,
                keep_state=options.keep_state,
                inputs=files,
            )
    finally:
        store.close()
        if audit is not None:
            catalog.audit.close()


@asynccontextmanager
async def open_session(
    registry_ref: str,
    policy: Path,
    *,
    user: str,
    tenant: str | None,
    ledger: Path | None,
    settings: Settings,
    options: SandboxOptions | None = None,
    database: str | None = None,
    budget: Budget | None = None,
) -> AsyncIterator[Session]:
    """A session for ``user`` over :func:`open_harness`'s harness (see there), with
    ``budget`` (the harness's default when None), open for as long as the block runs. While
    it is open, the session's paused writes that a person approves are committed within a
    second (:meth:`Session.watch_writes`).

    Raises:
        RegistryRefError, PolicyFileError, UsageError: the registry, policy or principal is
            not usable; ``InputRefused`` for an input outside the grant or not mountable.
        SandboxError: the Docker engine or the sandbox image is unavailable.
    """
    async with open_harness(
        registry_ref,
        policy,
        user=user,
        tenant=tenant,
        ledger=ledger,
        settings=settings,
        options=options,
        database=database,
    ) as served:
        session = served.session(budget)
        try:
            async with _watching(session):
                yield session
        finally:
            await session.close()


@asynccontextmanager
async def _watching(session: Session) -> AsyncIterator[None]:
    """Approved writes commit while the server waits for the model's next call."""
    failed: Exception | None = None
    async with anyio.create_task_group() as watching:
        watching.start_soon(session.watch_writes)
        try:
            yield
        except Exception as exc:  # raised below, outside the task group: not as a group
            failed = exc
        watching.cancel_scope.cancel()
    if failed is not None:
        raise failed


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    # SIGTERM or SIGINT ends serving by cancellation, so the sandbox's containers and the
    # ledger are closed on the way out instead of being left to the next start-up's reaper.
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as received:
        async for _ in received:
            scope.cancel()
            return


def serve(
    registry: RegistryOption,
    policy: PolicyOption,
    user: Annotated[str, typer.Option(help="The principal the session acts for (user id).")],
    mcp: Annotated[bool, typer.Option("--mcp", help="Speak the Model Context Protocol.")] = False,
    http: Annotated[
        int | None,
        typer.Option(
            help="Serve streamable HTTP on 127.0.0.1:PORT (path /mcp) instead of stdio: each "
            "MCP session gets a session of its own, and every request needs the header "
            f"'Authorization: Bearer TOKEN' (TOKEN: {TOKEN_ENV}, else one printed at start).",
            min=1,
            max=65535,
        ),
    ] = None,
    tenant: TenantOption = None,
    ledger: Annotated[
        Path | None,
        typer.Option(help="Ledger database (default: ledger.db in AIRLOCK_HOME)."),
    ] = None,
    timeout: TimeoutOption = None,
    memory: MemoryOption = None,
    image: ImageOption = None,
    keep_state: KeepStateOption = False,
    inputs: InputsOption = None,
    database: DatabaseOption = None,
    budget_seconds: Annotated[
        float,
        typer.Option(
            help="Wall-clock seconds of a session's tool calls, counted from its first call. "
            "A session is the server's whole life over stdio (one client), one MCP session "
            "over HTTP.",
            min=1,
            max=86_400,
        ),
    ] = 600.0,
    budget_calls: Annotated[
        int, typer.Option(help="Tool calls a session may make.", min=1, max=100_000)
    ] = 200,
    budget_bytes: Annotated[
        int,
        typer.Option(help="Bytes of results a session may return to the model.", min=1024),
    ] = 2_000_000,
    max_clients: Annotated[
        int,
        typer.Option(
            help="With --http: MCP sessions served at once (each ends after 30 idle "
            "minutes, or when its client ends it).",
            min=1,
            max=1000,
        ),
    ] = 16,
) -> None:
    """Serve a session's tools (execute_code, direct reads, writes that answer with a
    preview) to an MCP client, over stdio or streamable HTTP on loopback; the files programs
    leave in /out are offered as resources."""
    # Logs go to stderr: on stdio, stdout is the protocol's.
    logging.basicConfig(level=logging.WARNING)
    settings = Settings.from_env()
    options = SandboxOptions(
        timeout=timeout, memory=memory, image=image, keep_state=keep_state, inputs=inputs
    )
    # The time starts at a session's first call: a server waits for its client, maybe long.
    budget = Budget(
        seconds=budget_seconds, calls=budget_calls, bytes=budget_bytes, starts="first_call"
    )

    async def go(token: str, from_env: bool) -> None:
        if http is not None:
            async with open_harness(
                registry,
                policy,
                user=user,
                tenant=tenant,
                ledger=ledger,
                settings=settings,
                options=options,
                database=database,
            ) as served:
                await serve_clients(
                    lambda: served.session(budget),
                    port=http,
                    token=token,
                    from_env=from_env,
                    max_clients=max_clients,
                )
            return
        async with open_session(
            registry,
            policy,
            user=user,
            tenant=tenant,
            ledger=ledger,
            settings=settings,
            options=options,
            database=database,
            budget=budget,
        ) as session:
            server = build_mcp_server(
                session, write_status=session.write_status, on_settled=session.on_settled
            )
            async with anyio.create_task_group() as group:
                group.start_soon(_stop_on_signal, group.cancel_scope)
                await serve_stdio(server)
                group.cancel_scope.cancel()

    with usage_errors():
        if not mcp:
            raise UsageError("give --mcp: the Model Context Protocol is the one served today")
        # Imported here: the MCP SDK takes a third of a second to load, and every other
        # command would pay for it; without the ``mcp`` extra this says which to install.
        from airlock.frontends.mcp import build_mcp_server, serve_stdio

        token, from_env = bearer_token() if http is not None else ("", False)
        try:
            anyio.run(go, token, from_env)
        except SandboxError as exc:
            Console(stderr=True).print(f"[red]sandbox unavailable ({exc.code}):[/] {exc}")
            raise typer.Exit(3) from None
