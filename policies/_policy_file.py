"""Policy files: grants and approval rules per role and per principal, in TOML.

Format (``version = 1``)::

    version = 1

    [roles.billing_reader]                  # a named bundle of authority
    scopes = ["billing.read"]               # scopes the role may use
    effects = [                             # effect patterns: kind(pattern)
      "read(billing:invoice/*)",
      "network(api.billing.example)",
    ]

    [roles.billing_agent]
    scopes = ["billing.read", "billing.write"]
    effects = ["write(billing:refund/*)"]
    spend_limits = { USD = 50000 }          # most one call spends (its spends added up)
    propose = ["billing_refund_create"]     # write tools programs may propose from code

    [[roles.billing_agent.rules]]           # approval rules, see policies._approval
    id = "large-refund"                     # unique in the file, recorded in the audit log
    action = "ask"                          # allow | ask | deny
    tools = ["billing_refund_*"]            # optional, default ["*"]
    effect = "spend"                        # optional: read|write|network|spend|disclose
    min_amount = 10000                      # optional, minor units: what the call spends
                                            # in one currency, its spends added up
    currency = "USD"                        # optional: calls that spend in it (with
                                            # min_amount: at least that much in it)
    reversible = false                      # optional

    [[roles.web_reader.rules]]              # rules may name what a call reaches:
    id = "docs-hosts"                       # allow fetches of these targets ...
    action = "allow"
    effect = "network"                      # targets need the kind they are targets of
    targets = ["https://docs.example.com/**", "*.python.org"]

    [[roles.web_reader.rules]]
    id = "other-hosts"                      # ... and ask a person for any other host:
    action = "ask"                          # a rule with targets decides the effects it
    effect = "network"                      # names, one without them the rest (a deny
                                            # always wins; see policies._approval)

    [principals."*"]                        # applies to every principal
    roles = ["billing_reader"]

    [principals.u_alice]                    # keyed by Principal.user_id
    tenant = "acme"                         # optional: applies only in this tenant
    roles = ["billing_agent"]
    # scopes, effects, spend_limits and rules may also be given here directly

    self_approval = false                   # optional (top level, before any table): may
                                            # the person who asked approve their own write?

    [sandbox]                               # optional: the profile programs run under
    language_mode = "restricted"            # any SandboxProfile field: timeout_s,
    timeout_s = 10.0                        # memory_bytes, cpus, pids_limit, ...

A principal's grant is the union of the entries that apply to it (``"*"`` and its user id)
and of their roles, with scopes cut down to those the session gave the principal: a policy
file never grants a scope the session did not. A principal no entry names gets an empty
grant. ``[sandbox]`` is the deployment's :class:`SandboxProfile` (the hardened defaults for
every key it leaves out): ``airlock serve`` and ``chat`` run programs under it (a harness of
your own passes ``DockerBackend(profile=policy.sandbox)``), and the effect inventory and its
lock file show it. Unknown keys, unknown roles, malformed effects,
duplicate rule ids and profile values out of range are refused with a
:class:`PolicyFileError` naming the file, the key and, when it can be found, the line.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
    ValidationError,
)

from airlock.policies._approval import ApprovalPolicy, ApprovalRule
from airlock.policies._effects import Effect
from airlock.policies._errors import UsageError
from airlock.policies._grant import Grant
from airlock.policies._principal import SCOPE_PATTERN, Principal
from airlock.policies._sandbox_profile import SandboxProfile
from airlock.policies._spend import CURRENCY

__all__ = ["Policy", "PolicyFileError", "load_policy", "parse_policy"]

KeyPath = tuple[str | int, ...]
_Fail = Callable[[str, KeyPath], "PolicyFileError"]


class PolicyFileError(UsageError):
    """A policy file is malformed; :attr:`path`, :attr:`line` and :attr:`key` say where."""

    code = "policy_file"

    def __init__(self, reason: str, *, path: str, key: str | None = None, line: int | None = None):
        where = path + (f":{line}" if line is not None else "")
        super().__init__(f"{where}: {key + ': ' if key else ''}{reason}")
        self.reason = reason
        self.path = path
        self.key = key
        self.line = line


_Scope = Annotated[str, StringConstraints(pattern=SCOPE_PATTERN, max_length=128)]
_Currency = Annotated[str, StringConstraints(pattern=f"^{CURRENCY.pattern}$")]
_ToolPattern = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_*]{1,64}$")]
_Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_*][A-Za-z0-9_.@:-]{0,127}$")]


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    scopes: tuple[_Scope, ...] = ()
    effects: tuple[str, ...] = ()
    spend_limits: dict[_Currency, Annotated[StrictInt, Field(ge=0)]] = {}
    propose: tuple[_ToolPattern, ...] = ()
    rules: tuple[ApprovalRule, ...] = ()


class _Role(_Entry):
    description: str = ""


class _PrincipalEntry(_Entry):
    roles: tuple[_Name, ...] = ()
    tenant: _Name | None = None


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1]
    self_approval: StrictBool = False
    roles: dict[_Name, _Role] = {}
    principals: dict[_Name, _PrincipalEntry] = {}
    sandbox: SandboxProfile = SandboxProfile()


@dataclass(frozen=True, slots=True)
class _Authority:
    grant: Grant
    rules: tuple[ApprovalRule, ...]


@dataclass(frozen=True, slots=True)
class _Binding:
    tenant: str | None
    authority: _Authority


@dataclass(frozen=True, slots=True)
class Policy:
    """A loaded policy file: ask it for a principal's grant and approval rules, a role's
    own authority, and the names the file declares (for the effect inventory)."""

    source: str
    """Where the policy came from (a path, or the name given to :func:`parse_policy`)."""
    roles: frozenset[str]
    """Names of the roles the file declares."""
    _bindings: Mapping[str, _Binding] = field(repr=False)
    sandbox: SandboxProfile = field(default_factory=SandboxProfile, repr=False)
    """The sandbox profile of ``[sandbox]``: the defaults for every key the file leaves out."""
    _roles: Mapping[str, _Authority] = field(repr=False, default_factory=dict)
    self_approval: bool = False
    """Whether the person who asked for a write may approve it (``self_approval = true``)."""

    @property
    def principals(self) -> tuple[str, ...]:
        """Keys of ``[principals]`` (user ids, and ``*`` for every principal), in file order."""
        return tuple(self._bindings)

    @property
    def tenants(self) -> Mapping[str, str | None]:
        """The ``tenant`` each ``[principals]`` entry is bound to (``None``: any tenant)."""
        return MappingProxyType({key: b.tenant for key, b in self._bindings.items()})

    @property
    def scopes(self) -> frozenset[str]:
        """Every scope the file grants, to a role or a principal entry."""
        found: set[str] = set()
        for authority in (*self._roles.values(), *(b.authority for b in self._bindings.values())):
            found |= authority.grant.scopes
        return frozenset(found)

    def grant_for(self, principal: Principal) -> Grant:
        """The grant (cap(u)) for ``principal``: its entries' union, scopes cut to the session's."""
        grant = Grant()
        for authority in self._applicable(principal):
            grant = grant.union(authority.grant)
        return grant.restrict_scopes(principal.scopes)

    def approvals_for(self, principal: Principal) -> ApprovalPolicy:
        """The approval rules that apply to ``principal``, in file order."""
        rules: list[ApprovalRule] = []
        for authority in self._applicable(principal):
            rules.extend(r for r in authority.rules if r not in rules)
        return ApprovalPolicy(tuple(rules))

    def role_grant(self, role: str) -> Grant:
        """The grant the role ``role`` gives by itself: its scopes, effects and limits.

        Raises:
            KeyError: the file declares no role ``role`` (see :attr:`roles`).
        """
        return self._role(role).grant

    def role_approvals(self, role: str) -> ApprovalPolicy:
        """The approval rules of the role ``role``, in file order.

        Raises:
            KeyError: the file declares no role ``role`` (see :attr:`roles`).
        """
        return ApprovalPolicy(self._role(role).rules)

    def _role(self, role: str) -> _Authority:
        found = self._roles.get(role)
        if found is None:
            known = ", ".join(sorted(self._roles)) or "none"
            raise KeyError(f"{self.source}: no role {role!r}; the policy declares: {known}")
        return found

    def _applicable(self, principal: Principal) -> list[_Authority]:
        found = []
        for key in ("*", principal.user_id):
            binding = self._bindings.get(key)
            if binding is not None and binding.tenant in (None, principal.tenant_id):
                found.append(binding.authority)
        return found


def load_policy(path: str | Path) -> Policy:
    """Read and validate the policy file at ``path``.

    Raises:
        PolicyFileError: the file cannot be read, is not TOML, or breaks the format.
    """
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyFileError(f"cannot read the policy file: {exc}", path=source) from exc
    return parse_policy(text, source=source)


def parse_policy(text: str, *, source: str = "<policy>") -> Policy:
    """Validate policy TOML given as text; ``source`` names it in errors.

    Raises:
        PolicyFileError: the text is not TOML or breaks the format.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"line (\d+)", str(exc))
        line = int(match.group(1)) if match else None
        raise PolicyFileError(f"not valid TOML: {exc}", path=source, line=line) from exc
    except RecursionError:
        # tomllib reads nested arrays and inline tables by recursion: a few hundred levels
        # exhaust the stack, which no policy needs.
        raise PolicyFileError(
            "not valid TOML: a value is nested too deeply (arrays or inline tables inside "
            "each other hundreds of levels deep); a policy needs two or three",
            path=source,
        ) from None

    def fail(reason: str, key: KeyPath) -> PolicyFileError:
        return PolicyFileError(reason, path=source, key=_dotted(key), line=_find_line(text, key))

    try:
        parsed = _File.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        loc = tuple(p for p in first["loc"] if not _is_union_tag(p))
        raise fail(_reason(first["type"], first["msg"]), loc) from None

    seen_rules: dict[str, KeyPath] = {}
    roles: dict[str, _Authority] = {}
    for name, role in parsed.roles.items():
        roles[name] = _authority(role, ("roles", name), fail, seen_rules)
    bindings: dict[str, _Binding] = {}
    for user, entry in parsed.principals.items():
        key: KeyPath = ("principals", user)
        authority = _authority(entry, key, fail, seen_rules)
        for i, role_name in enumerate(entry.roles):
            if role_name not in roles:
                known = ", ".join(sorted(roles)) or "none declared"
                raise fail(f"unknown role {role_name!r} (roles: {known})", (*key, "roles", i))
            merged = authority.grant.union(roles[role_name].grant)
            authority = _Authority(merged, roles[role_name].rules + authority.rules)
        bindings[user] = _Binding(entry.tenant, authority)
    return Policy(
        source=source,
        roles=frozenset(roles),
        _bindings=bindings,
        _roles=roles,
        sandbox=parsed.sandbox,
        self_approval=parsed.self_approval,
    )


def _authority(
    entry: _Entry,
    key: KeyPath,
    fail: _Fail,
    seen_rules: dict[str, KeyPath],
) -> _Authority:
    effects = []
    for i, text in enumerate(entry.effects):
        try:
            effect = Effect.parse(text)
            Grant(effects=(effect,))
        except ValueError as exc:
            raise fail(str(exc), (*key, "effects", i)) from None
        effects.append(effect)
    for i, rule in enumerate(entry.rules):
        if rule.id in seen_rules:
            first = _dotted(seen_rules[rule.id])
            raise fail(f"rule id {rule.id!r} is already used at {first}", (*key, "rules", i, "id"))
        seen_rules[rule.id] = (*key, "rules", i, "id")
    grant = Grant(
        scopes=frozenset(entry.scopes),
        effects=tuple(effects),
        spend_limits=entry.spend_limits,
        propose=frozenset(entry.propose),
    )
    return _Authority(grant, entry.rules)


def _is_union_tag(part: str | int) -> bool:
    # pydantic puts the name of a tried type into ``loc`` ("str", "int", "literal[...]").
    return isinstance(part, str) and (part in {"str", "int", "bool"} or part.startswith("literal"))


def _reason(kind: str, message: str) -> str:
    if kind == "extra_forbidden":
        return "unknown key; check its spelling against the format in policies._policy_file"
    if kind == "missing":
        return "required key is missing"
    return message


def _dotted(key: KeyPath) -> str:
    out = ""
    for part in key:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else f'"{part}"'
            out += ("." if out else "") + text
    return out


# Each part can match in one way only (the key before the first "]", its spaces stripped
# later): a lazy key between two runs of spaces took quadratic time on a long line of them.
_HEADER = re.compile(r"^\s*(\[\[?)([^\]]*)\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r'^\s*([A-Za-z0-9_-]+|"[^"]*"|\'[^\']*\')\s*=')


def _split_dotted(text: str) -> tuple[str, ...]:
    parts = re.findall(r'"([^"]*)"|\'([^\']*)\'|([A-Za-z0-9_-]+)', text)
    return tuple(next(p for p in groups if p) if any(groups) else "" for groups in parts)


def _find_line(text: str, key: KeyPath) -> int | None:
    """The line of ``key`` (or of its nearest ancestor) in ``text``; a best effort."""
    lines: dict[KeyPath, int] = {}
    counts: dict[KeyPath, int] = {}
    table: KeyPath = ()
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            path: KeyPath = _split_dotted(header.group(2))
            if header.group(1) == "[[":
                index = counts.get(path, 0)
                counts[path] = index + 1
                path = (*path, index)
            table = path
            lines.setdefault(table, number)
            continue
        found = _KEY.match(line)
        if found:
            lines.setdefault((*table, found.group(1).strip("\"'")), number)
    for end in range(len(key), 0, -1):
        if key[:end] in lines:
            return lines[key[:end]]
    return None
