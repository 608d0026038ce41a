"""The ``airlock`` command: one Typer app, one command group per module of this package.

Every command runs under :func:`one_line_errors`: an :class:`~airlock.policies.AirlockError`
that a command did not handle itself (an unusable ledger or audit store above all: a
directory, not a database, damaged, read-only, locked, replaced) is printed as one line,
``error (CODE): MESSAGE`` naming the file, and the command exits 2; never a traceback.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console

from airlock.cli._approvals import approvals_app, receipts_app, reconcile
from airlock.cli._approvals_serve import serve_approvals
from airlock.cli._artifacts import artifacts_app
from airlock.cli._audit import audit_app
from airlock.cli._chat import chat
from airlock.cli._inventory import inventory, program_effects
from airlock.cli._run import doctor, run
from airlock.cli._serve import serve
from airlock.policies import AirlockError

__all__ = ["app", "main", "one_line_errors"]

app = typer.Typer(
    name="airlock",
    help="Run model-written programs in network-isolated containers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command()(run)
app.command()(doctor)
app.add_typer(audit_app, name="audit")
app.add_typer(artifacts_app, name="artifacts")
approvals_app.command("serve")(serve_approvals)
app.add_typer(approvals_app, name="approvals")
app.add_typer(receipts_app, name="receipts")
app.command()(reconcile)
app.command()(inventory)
app.command("program-effects")(program_effects)
app.command()(serve)
app.command()(chat)


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Print an escaping :class:`~airlock.policies.AirlockError` (alone, or as the only kind
    in an exception group from a task group) as ``error (CODE): MESSAGE`` and exit 2."""
    try:
        yield
    except AirlockError as exc:
        raise _exit(exc) from None
    except BaseExceptionGroup as group:
        errors, rest = group.split(AirlockError)
        if errors is None or rest is not None:
            raise
        raise _exit(_first(errors)) from None


def _first(group: BaseExceptionGroup[AirlockError]) -> AirlockError:
    found = group.exceptions[0]
    return _first(found) if isinstance(found, BaseExceptionGroup) else found


def _exit(exc: AirlockError) -> typer.Exit:
    message = getattr(exc, "message", None) or str(exc)  # a ToolError's str repeats its code
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        f"error ({exc.code}): {message}", markup=False
    )
    return typer.Exit(2)


def _guarded(callback: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        with one_line_errors():
            return callback(*args, **kwargs)

    run.one_line_errors = True  # type: ignore[attr-defined]
    return run


def _guard(group: typer.Typer) -> None:
    """Run every command of ``group`` and its sub-groups under :func:`one_line_errors`."""
    for command in group.registered_commands:
        if command.callback is not None and not getattr(command.callback, "one_line_errors", False):
            command.callback = _guarded(command.callback)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _guard(sub.typer_instance)


_guard(app)


def main() -> None:
    """Console-script entry point."""
    app()
