"""The ``airlock`` command line, and the host settings it reads (:class:`Settings`)."""

from airlock.cli._app import app, main
from airlock.cli._approvals import approvals_app, default_ledger
from airlock.cli._audit import audit_app
from airlock.cli._run import parse_size
from airlock.cli._settings import Settings

__all__ = ["Settings", "app", "approvals_app", "audit_app", "default_ledger", "main", "parse_size"]
