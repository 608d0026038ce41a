"""Build the effect inventory: every tool a subject can see, what it touches, and how.

For each subject (:mod:`airlock.inventory._subjects`) the registry's own visibility rules
decide which tools appear (:meth:`airlock.tools.Registry.visible`, from ``direct`` and from
``code``); the subject's grant decides how much of each declared effect a call may use; its
approval rules decide, by amount, whether a call goes ahead, waits for approval or is refused
(:func:`airlock.policies.approval_cases`). From those, each tool's *reach*:

- ``code``: a sandboxed program can call it and some call needs no approval;
- ``direct``: the model can call it and some call needs no approval;
- ``after_approval``: some direct call goes ahead only once approved;
- ``proposal``: a sandboxed program may propose it (the tool's contract says
  ``proposable`` and the grant lists it in ``propose``): its preview waits in the program's
  batch, and only an approval commits it. Listed apart from ``code``, which stays reads only.

A tool with side effects reachable from code would break the core promise of airlock, so it
is never listed as such: building the inventory fails with :class:`UnsafeRegistryError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final, Protocol

from airlock.inventory._errors import UnsafeRegistryError
from airlock.inventory._model import (
    BroadTool,
    ComposedView,
    EffectEntry,
    EffectTotal,
    GrantSummary,
    HarnessConnection,
    Inventory,
    PathView,
    Reach,
    SandboxEffects,
    SubjectInventory,
    ToolEntry,
)
from airlock.inventory._subjects import Subject
from airlock.inventory._tool_facts import (
    credentials_for,
    destinations,
    idempotency,
    requirements,
)
from airlock.policies import (
    EFFECT_KINDS,
    SIDE_EFFECT_KINDS,
    Effect,
    Grant,
    Principal,
    approval_cases,
    coverage,
    network,
    refusal,
)
from airlock.tools import Caller, ToolDefinition, ToolSpec

__all__ = ["ToolCatalog", "build_inventory", "effect_label", "subject_inventory"]

_READ_ONLY_ACCESS: Final = frozenset({"read", "readonly", "read_only", "view", "list", "get"})
_KIND_ORDER: Final = {kind: i for i, kind in enumerate(EFFECT_KINDS)}


class ToolCatalog(Protocol):
    """What the inventory needs of a registry (:class:`airlock.tools.Registry` is one)."""

    def specs(self) -> Sequence[ToolSpec]:
        """Every registered tool."""
        ...

    def visible(self, principal: Principal, caller: Caller) -> Sequence[ToolDefinition]:
        """The tools ``principal`` may see from ``caller``."""
        ...


def build_inventory(
    catalog: ToolCatalog,
    subjects: Iterable[Subject],
    *,
    sandbox: SandboxEffects,
    registry: str,
    policy: str,
    harness: Sequence[HarnessConnection] = (),
) -> Inventory:
    """The inventory of ``catalog`` for each subject, with the sandbox's own effect set and
    the harness's own connections (:func:`harness_connections`).

    Raises:
        UnsafeRegistryError: a tool with side effects is callable from code.
        ToolFactError: a tool declares a destination or credential that does not parse.
    """
    return Inventory(
        registry=registry,
        policy=policy,
        sandbox=sandbox,
        harness=tuple(harness),
        subjects=tuple(subject_inventory(catalog, subject) for subject in subjects),
    )


def subject_inventory(catalog: ToolCatalog, subject: Subject) -> SubjectInventory:
    """The inventory of one subject.

    Raises:
        UnsafeRegistryError: a tool with side effects is callable from code.
        ToolFactError: a tool declares a destination or credential that does not parse.
    """
    specs = {spec.name: spec for spec in catalog.specs()}
    direct = {d.name for d in catalog.visible(subject.principal, "direct")}
    code = {d.name for d in catalog.visible(subject.principal, "code")}
    entries = tuple(
        _tool_entry(specs[name], subject, direct=name in direct, code=name in code)
        for name in sorted(direct | code)
        if name in specs
    )
    grant = subject.grant
    return SubjectInventory(
        kind=subject.kind,
        name=subject.name,
        user_id=subject.principal.user_id,
        tenant_id=subject.principal.tenant_id,
        every_tenant=subject.every_tenant,
        self_approval=subject.self_approval,
        grant=GrantSummary(
            scopes=tuple(sorted(grant.scopes)),
            effects=tuple(sorted(str(e) for e in grant.effects)),
            spend_limits=dict(sorted(grant.spend_limits.items())),
            propose=tuple(sorted(grant.propose)),
        ),
        tools=entries,
        composed=_composed(entries),
    )


def effect_label(effect: Effect) -> str:
    """The pattern an effect may reach, as ``kind(pattern)``; ``spend(* USD)`` for a spend
    whose amount comes from the input."""
    if effect.kind == "spend":
        amount = effect.amount if isinstance(effect.amount, int) else "*"
        return f"spend({amount} {effect.target})"
    return f"{effect.kind}({effect.pattern})"


def _tool_entry(spec: ToolSpec, subject: Subject, *, direct: bool, code: bool) -> ToolEntry:
    side = [str(e) for e in spec.effects if e.is_side_effect]
    if code and side:
        raise UnsafeRegistryError(spec.name, side)
    grant = subject.grant
    effects = tuple(
        sorted(
            (
                EffectEntry(
                    kind=e.kind,
                    declared=str(e),
                    pattern=e.pattern,
                    grant=coverage(grant, e),
                )
                for e in spec.effects
            ),
            key=lambda entry: (_KIND_ORDER[entry.kind], entry.declared),
        )
    )
    approval = approval_cases(
        spec.name,
        spec.effects,
        reversible=spec.reversible,
        approvals=subject.approvals,
        grant=grant,
    )
    denied = refusal(spec.scope, spec.effects, approval, grant)
    reach: list[Reach] = []
    if denied is None:
        allows = any(case.verdict == "allow" for case in approval)
        if code and allows:
            reach.append("code")
        if direct and allows:
            reach.append("direct")
        if direct and any(case.verdict == "ask" for case in approval):
            reach.append("after_approval")
        proposable = spec.write is not None and spec.write.proposable
        if direct and proposable and grant.allows_proposal(spec.name) and reach:
            reach.append("proposal")
        if not reach:
            denied = "no caller may reach it without an approval it cannot get"
    hosts = destinations(spec)
    urls = [e for e in spec.effects if e.kind == "network" and e.takes_url]
    granted: set[str] = set()
    if urls:  # what a call names: the granted patterns it may match
        granted = {
            allowed.target
            for allowed in grant.effects
            for effect in urls
            if allowed.kind == "network" and coverage(Grant(effects=(allowed,)), effect) != "none"
        }
        hosts = tuple(sorted({*hosts, *granted}))
    # A role, or a principal no entry binds to a tenant, holds authority in whichever tenant
    # the session names: every tenant's credential applies.
    bound = subject.kind == "principal" and not subject.every_tenant
    tenant = subject.principal.tenant_id if bound else None
    credentials, credential_tenant = credentials_for(spec, tenant)
    return ToolEntry(
        name=spec.name,
        callers=tuple(sorted(spec.callers)),
        scope=spec.scope,
        reversible=spec.reversible,
        effects=effects,
        destinations=hosts,
        credentials=credentials,
        credential_tenant=credential_tenant,
        requires=requirements(spec),
        approval=approval,
        idempotency=idempotency(spec),
        reach=tuple(reach),
        network=spec.reaches_network,
        denied_because=denied,
        broader_than_scope=_broader(spec, hosts, granted),
    )


def _broader(spec: ToolSpec, hosts: Sequence[str], granted: Iterable[str]) -> tuple[str, ...]:
    service, _, access = spec.scope.partition(".")
    read_only = access.rsplit(".", 1)[-1] in _READ_ONLY_ACCESS
    reasons: list[str] = []
    for effect in spec.effects:
        if effect.is_side_effect and read_only:
            reasons.append(f"declares {effect} under the read-only scope {spec.scope!r}")
        if effect.kind in ("read", "write"):
            owner = effect.target.split(":", 1)[0]
            if owner != service:
                reasons.append(
                    f"{effect.kind}s {owner!r} resources outside its scope's service {service!r}"
                )
        if "**" in effect.pattern and not effect.takes_url:  # a URL's reach: granted below
            reasons.append(f"{effect_label(effect)} spans every level below its prefix")
    reasons.extend(
        f"network({pattern}) spans every level below its prefix"
        for pattern in sorted(granted)
        if "**" in pattern or _any_host_at_any_depth(pattern)
    )
    if len(hosts) > 1:
        reasons.append(f"reaches {len(hosts)} network destinations: {', '.join(hosts)}")
    reasons.extend(
        f"network destination {host!r} is a pattern, not one host" for host in hosts if "*" in host
    )
    return tuple(reasons)


def _any_host_at_any_depth(pattern: str) -> bool:
    """Whether the URL grant ``pattern`` lets a call name any host at any depth (``*``,
    ``*://*``, ``https://*``): it covers a made-up deep URL of its own scheme."""
    scheme, _, rest = pattern.partition("://")
    scheme = scheme if rest and "*" not in scheme else "https"
    probe = network(f"{scheme}://a.b.c.example.org/x/y/z")
    return Grant(effects=(network(pattern),)).covers(probe)


def _labels(tool: ToolEntry) -> set[str]:
    """The patterns a tool may reach, its adapter's destinations included. A
    ``network({url})`` effect reaches what a call names: its destinations already hold the
    patterns the grant allows for it, so the declaration itself (``**``) is no label."""
    declared = (Effect.parse(e.declared) for e in tool.effects)
    labels = {effect_label(effect) for effect in declared if not effect.takes_url}
    labels.update(f"network({host})" for host in tool.destinations)
    return labels


def _kind_of(label: str) -> str:
    return label.split("(", 1)[0]


def _path(entries: Sequence[ToolEntry], reach: Reach) -> PathView:
    chosen = [t for t in entries if reach in t.reach]
    effects: set[str] = set()
    for tool in chosen:
        effects |= _labels(tool)
    return PathView(tools=tuple(t.name for t in chosen), effects=tuple(sorted(effects)))


def _composed(entries: Sequence[ToolEntry]) -> ComposedView:
    reachable = [t for t in entries if t.reach]
    from_code = _path(entries, "code")
    leaked = [label for label in from_code.effects if _kind_of(label) in SIDE_EFFECT_KINDS]
    if leaked:  # unreachable while _tool_entry refuses such tools; kept as a last guard
        raise UnsafeRegistryError(", ".join(from_code.tools), leaked)
    totals = []
    for kind in EFFECT_KINDS:
        tools = 0
        patterns: set[str] = set()
        for tool in reachable:
            found = {label for label in _labels(tool) if _kind_of(label) == kind}
            if found:
                tools += 1
                patterns |= found
        totals.append(EffectTotal(kind=kind, tools=tools, patterns=tuple(sorted(patterns))))
    return ComposedView(
        from_code=from_code,
        proposable_from_code=_path(entries, "proposal"),
        direct=_path(entries, "direct"),
        after_approval=_path(entries, "after_approval"),
        totals=tuple(totals),
        broader_than_scope=tuple(
            BroadTool(tool=t.name, reasons=t.broader_than_scope)
            for t in reachable
            if t.broader_than_scope
        ),
    )
