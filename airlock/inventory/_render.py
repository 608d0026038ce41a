"""Renderings of an inventory: a readable table, Markdown for a pull request, and JSON.

All three are pure functions of :class:`Inventory`, so they say the same thing; the JSON one
follows the published schema (``airlock/inventory.schema.json``).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Literal, assert_never

from rich.console import Console
from rich.table import Table
from rich.text import Text

from airlock.inventory._model import (
    ApprovalCase,
    HarnessConnection,
    Inventory,
    PathView,
    SandboxEffects,
    SubjectInventory,
    ToolEntry,
)
from airlock.policies import DISTINCT_USER

__all__ = ["Format", "approval_text", "harness_rows", "render", "sandbox_rows"]

Format = Literal["table", "json", "markdown"]
_WIDTH = 240
_SELF_APPROVAL = "self approval: whoever asks for a write may approve it (no second person)"
_USERS = {
    DISTINCT_USER: "distinct: a uid and gid of each container's own, which no host user has "
    "(the kernel's per-user budgets are its own)"
}


def render(inventory: Inventory, fmt: Format) -> str:
    """``inventory`` as text in ``fmt``, ending with a newline."""
    if fmt == "json":
        return inventory.model_dump_json(indent=2) + "\n"
    if fmt == "markdown":
        return _markdown(inventory)
    if fmt == "table":
        return _table(inventory)
    assert_never(fmt)


def approval_text(cases: Sequence[ApprovalCase]) -> str:
    """``allow (default)``, or by amount: ``allow (r1); ≥ 10000 USD ask (r2)``; by target
    class when rules name targets: ``for network(docs.example.com): allow (r1); otherwise:
    ask (r2)``."""
    classes: dict[tuple[str, ...], list[str]] = {}
    for case in cases:
        amount = f"≥ {case.from_amount} {case.currency or ''}".rstrip() + " "
        prefix = amount if case.from_amount else ""
        classes.setdefault(case.targets, []).append(f"{prefix}{case.verdict} ({case.rule})")
    if list(classes) == [()]:
        return "; ".join(classes[()])
    parts = [
        f"for {', '.join(targets)}: {'; '.join(steps)}"
        for targets, steps in classes.items()
        if targets
    ]
    if () in classes:
        parts.append(f"otherwise: {'; '.join(classes[()])}")
    return "; ".join(parts)


def _reach_text(tool: ToolEntry) -> str:
    if tool.reach:
        text = ", ".join(r.replace("_", " ") for r in tool.reach)
        return text + ("; network" if tool.network else "")
    return f"denied: {tool.denied_because}"


def _credentials_text(tool: ToolEntry) -> list[str]:
    if tool.credential_tenant is None:
        return list(tool.credentials)
    if not tool.credentials:
        return [f"none for tenant {tool.credential_tenant}"]
    return [f"{name} (tenant {tool.credential_tenant})" for name in tool.credentials]


def _requires_text(tool: ToolEntry) -> list[str]:
    return [r.text for r in tool.requires]


def _effects_text(tool: ToolEntry) -> list[str]:
    return [
        e.declared + ("" if e.grant == "full" else f" [grant: {e.grant}]") for e in tool.effects
    ]


def _grant_line(subject: SubjectInventory) -> str:
    grant = subject.grant
    limits = ", ".join(f"{amount} {cur}" for cur, amount in grant.spend_limits.items())
    return (
        f"scopes: {', '.join(grant.scopes) or 'none'}; effects: "
        f"{', '.join(grant.effects) or 'none'}; spend limits: {limits or 'none'}"
        + (f"; programs may propose: {', '.join(grant.propose)}" if grant.propose else "")
    )


def _heading(subject: SubjectInventory) -> str:
    if subject.kind == "role":
        return f"role {subject.name}"
    tenant = f"tenant {subject.tenant_id}"
    if subject.every_tenant:  # the grant applies in every tenant, not only where computed
        tenant = f"every tenant, computed in {subject.tenant_id}"
    if subject.name == "*":
        return f"principal * (any principal not named; {tenant})"
    return f"principal {subject.name} ({tenant})"


def _path_text(view: PathView) -> str:
    if not view.tools:
        return "nothing"
    return f"{', '.join(view.tools)} — {', '.join(view.effects)}"


def sandbox_rows(sandbox: SandboxEffects) -> list[tuple[str, str]]:
    """The sandbox's effect set as (setting, value) rows, shortest form first."""
    limits = sandbox.limits
    return [
        ("network", sandbox.network),
        ("root file system", sandbox.root_filesystem),
        *[
            (f"mount {m.path}", m.mode + (f", {m.size_bytes} bytes" if m.size_bytes else ""))
            for m in sandbox.mounts
        ],
        ("user", _USERS.get(sandbox.user, sandbox.user)),
        ("capabilities", ", ".join(sandbox.capabilities) or "none (all dropped)"),
        ("no new privileges", "yes" if sandbox.no_new_privileges else "NO"),
        ("environment", ", ".join(sandbox.environment) or "empty"),
        ("timeout", f"{limits.timeout_s:g} s"),
        ("memory", f"{limits.memory_bytes} bytes, swap {limits.swap_bytes} bytes"),
        ("cpus", f"{limits.cpus:g}"),
        ("processes", str(limits.pids)),
        ("open files", str(limits.open_files)),
        ("output", f"{limits.output_bytes} bytes per stream"),
        ("language mode", sandbox.language_mode),
        ("imports (restricted)", ", ".join(sandbox.allowed_imports)),
        (
            "seccomp",
            f"sha256 {sandbox.seccomp_sha256}, {len(_call_names(sandbox))} calls, "
            f"every other: {sandbox.seccomp_default}",
        ),
        ("seccomp conditions", ", ".join(c for c in sandbox.seccomp_allowed if " " in c) or "none"),
        ("second seccomp layer", ", ".join(r.split(":", 1)[0] for r in sandbox.guest_seccomp)),
        ("runtime", sandbox.runtime),
        ("masked paths", ", ".join(sandbox.masked_paths)),
        ("image", f"{sandbox.image} ({sandbox.image_digest})"),
        ("image packages", ", ".join(sandbox.image_packages) or f"none ({sandbox.image_kind})"),
        ("other settings", "\n".join(sandbox.other_settings) or "none"),
        (
            "inputs",
            f"host files an operator gives, read-only at /data/NAME, each when the grant "
            f"holds read(file:NAME); at most {limits.input_bytes} bytes per run",
        ),
        (
            "artifacts",
            f"files left in /out, at most {limits.artifact_files} files and "
            f"{limits.artifact_bytes} bytes, stored under $AIRLOCK_HOME/artifacts and "
            "returned as references",
        ),
    ]


def _call_names(sandbox: SandboxEffects) -> set[str]:
    # An entry is a call's name, or its name and the argument conditions one rule needs.
    return {entry.split(" ", 1)[0] for entry in sandbox.seccomp_allowed}


def harness_rows(connections: Sequence[HarnessConnection]) -> list[tuple[str, str]]:
    """The harness's connections as (name, what and where) rows, like :func:`sandbox_rows`."""
    rows = []
    for c in connections:
        credential = f", sending {c.credential}" if c.credential else ""
        rows.append((c.name, f"{c.direction} {c.kind}: {c.target}{credential}\n"
                     f"{c.used_by}\n{c.note}"))  # fmt: skip
    return rows


# -- table -------------------------------------------------------------------------------


def _table(inventory: Inventory) -> str:
    out = io.StringIO()
    # Every cell and line is data (hosts like https://[fd00::1], "[grant: partial]", paths
    # from the environment), never rich markup or emoji codes: each is printed as a Text.
    console = Console(file=out, width=_WIDTH, color_system=None, highlight=False, soft_wrap=False,
                      markup=False, emoji=False)  # fmt: skip
    line = console.print
    line(Text(f"effect inventory of {inventory.registry} under {inventory.policy}"))
    for subject in inventory.subjects:
        line()
        line(Text(_heading(subject)))
        line(Text(_grant_line(subject)))
        if subject.self_approval:
            line(Text(_SELF_APPROVAL))
        table = Table(show_lines=True)
        for column in ("tool", "callers", "scope", "effects", "destinations", "credentials"):
            table.add_column(column, no_wrap=True)
        for column in ("requires", "approval", "idempotency", "reach"):
            table.add_column(column, overflow="fold")
        for tool in subject.tools:
            cells = (
                tool.name,
                ", ".join(tool.callers),
                tool.scope,
                "\n".join(_effects_text(tool)),
                "\n".join(tool.destinations) or "-",
                "\n".join(_credentials_text(tool)) or "-",
                "\n".join(_requires_text(tool)) or "-",
                approval_text(tool.approval),
                tool.idempotency,
                _reach_text(tool),
            )
            table.add_row(*(Text(cell) for cell in cells))
        line(table if subject.tools else Text("no visible tools"))
        composed = subject.composed
        line(Text(f"from code (reads only): {_path_text(composed.from_code)}"))
        line(
            Text(
                "proposable from code (each approved before it is made): "
                + _path_text(composed.proposable_from_code)
            )
        )
        line(Text(f"directly: {_path_text(composed.direct)}"))
        line(Text(f"after approval: {_path_text(composed.after_approval)}"))
        totals = "; ".join(
            f"{t.kind} {t.tools} tool(s), {len(t.patterns)} pattern(s)" for t in composed.totals
        )
        line(Text(f"totals: {totals}"))
        for broad in composed.broader_than_scope:
            line(Text(f"broader than scope: {broad.tool}: {'; '.join(broad.reasons)}"))
    line()
    table = Table("sandbox", "value", title=None)
    for name, value in sandbox_rows(inventory.sandbox):
        table.add_row(Text(name), Text(value))
    line(table)
    line()
    table = Table("harness", "connection", title=None)
    for name, value in harness_rows(inventory.harness):
        table.add_row(Text(name), Text(value))
    line(table if inventory.harness else Text("harness: no connections listed"))
    return out.getvalue()


# -- markdown ----------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>") or "-"


def _code(items: Sequence[str]) -> str:
    return "<br>".join(f"`{item}`" for item in items) or "-"


def _markdown(inventory: Inventory) -> str:
    lines = [
        "# Effect inventory",
        "",
        f"Registry `{inventory.registry}`, policy `{inventory.policy}`.",
    ]
    for subject in inventory.subjects:
        composed = subject.composed
        lines += ["", f"## {_cell(_heading(subject))}", "", _cell(_grant_line(subject)), ""]
        if subject.self_approval:
            lines += [f"**{_SELF_APPROVAL}**", ""]
        lines += [
            "| tool | callers | scope | effects | destinations | credentials | requires "
            "| approval | idempotency | reach |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for tool in subject.tools:
            cells = [
                f"`{tool.name}`",
                ", ".join(tool.callers),
                f"`{tool.scope}`",
                _code(_effects_text(tool)),
                _code(tool.destinations),
                _code(_credentials_text(tool))
                if tool.credentials
                else _cell("\n".join(_credentials_text(tool))),
                _code(_requires_text(tool)),
                _cell(approval_text(tool.approval)),
                tool.idempotency,
                _cell(_reach_text(tool)),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines += [
            "",
            f"- **From code** (reads only): {_cell(_path_text(composed.from_code))}",
            "- **Proposable from code** (each approved before it is made): "
            + _cell(_path_text(composed.proposable_from_code)),
            f"- **Directly**: {_cell(_path_text(composed.direct))}",
            f"- **After approval**: {_cell(_path_text(composed.after_approval))}",
            "- **Totals**: "
            + "; ".join(
                f"{t.kind} {t.tools} tool(s), {len(t.patterns)} pattern(s)" for t in composed.totals
            ),
        ]
        for broad in composed.broader_than_scope:
            lines.append(
                f"- **Broader than scope**: `{broad.tool}`: {_cell('; '.join(broad.reasons))}"
            )
    lines += ["", "## Sandbox", "", "| setting | value |", "|---|---|"]
    lines += [f"| {name} | {_cell(value)} |" for name, value in sandbox_rows(inventory.sandbox)]
    lines += ["", "## Harness", "", "| connection | what and where |", "|---|---|"]
    lines += [f"| {name} | {_cell(value)} |" for name, value in harness_rows(inventory.harness)]
    return "\n".join(lines) + "\n"
