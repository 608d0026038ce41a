"""Whom an inventory is about: principals and roles of a policy file, with their authority.

A *subject* is a principal (or a role) with the grant and approval rules the policy gives it.
The session normally decides a principal's scopes; an inventory has no session, so it assumes
the largest one: every scope the policy grants. What it lists is therefore the most the
principal can reach under this policy.

``*`` stands for any principal the file does not name (only ``[principals."*"]`` applies to
it). A role's subject carries the role's own authority, without ``*``.

A principal entry without ``tenant`` applies in every tenant, so the principal it names (for
``*``: any principal not named) acts in any tenant: its subject says so
(:attr:`Subject.every_tenant`), and the inventory lists every tenant's credential for it, as
for a role.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from airlock.inventory._errors import UnknownSubjectError
from airlock.inventory._model import SubjectKind
from airlock.policies import ApprovalPolicy, Grant, Policy, Principal, UsageError, load_policy

__all__ = ["ANY_PRINCIPAL", "PolicyDocument", "Subject", "load_policy_document"]

ANY_PRINCIPAL = "*"
_DEFAULT_TENANT = "default"
# The user id standing in for "any principal the file does not name"; never a named one.
_ANONYMOUS = "any-unnamed-principal"


@dataclass(frozen=True, slots=True, kw_only=True)
class Subject:
    """A principal or role, and the authority the policy gives it."""

    kind: SubjectKind
    name: str
    """User id, ``*``, or role name."""
    principal: Principal
    """Who the registry's visibility is computed for (scopes = the grant's)."""
    grant: Grant
    approvals: ApprovalPolicy
    every_tenant: bool = False
    """Whether it acts in any tenant (its own policy entry, else ``*``'s, binds none, and no
    tenant was chosen): ``principal.tenant_id`` is then only the one its grant is computed in,
    and its calls may send any tenant's credential."""
    self_approval: bool = False
    """Whether the person who asked for one of its writes may approve it (the policy file's
    ``self_approval = true``): an approval then needs no second person."""


@dataclass(frozen=True, slots=True)
class PolicyDocument:
    """A validated policy file, and the subjects it names."""

    policy: Policy

    @property
    def principals(self) -> tuple[str, ...]:
        """Keys of ``[principals]``, sorted with ``*`` (when present) first."""
        return tuple(sorted(self.policy.principals, key=lambda key: (key != ANY_PRINCIPAL, key)))

    @property
    def tenants(self) -> Mapping[str, str | None]:
        """The ``tenant`` of each principal entry."""
        return self.policy.tenants

    @property
    def roles(self) -> frozenset[str]:
        """Names of the roles the file declares."""
        return self.policy.roles

    @property
    def scopes(self) -> frozenset[str]:
        """Every scope the file grants."""
        return self.policy.scopes

    def principal(self, user_id: str, *, tenant: str | None = None) -> Subject:
        """The subject for ``user_id`` (``*``: any principal the file does not name).

        The tenant is ``tenant`` when given, else the one the file binds the user (or ``*``)
        to, else ``default``. Without ``tenant``, the user's own entry (else ``*``'s) binding
        none lets it act in any tenant (:attr:`Subject.every_tenant`).

        Raises:
            UsageError: ``user_id`` or ``tenant`` is not a valid id.
        """
        # ``None`` only for ``*``: an empty id (or tenant) is refused below, never read as
        # "any principal" (or "the file's tenant").
        lookup = user_id if user_id != ANY_PRINCIPAL else None
        chosen = (
            tenant
            if tenant is not None
            else (self.tenants.get(lookup) if lookup is not None else None)
            or self.tenants.get(ANY_PRINCIPAL)
            or _DEFAULT_TENANT
        )
        real_id = user_id if lookup is not None else self._anonymous_id()
        # The user's own entry (else ``*``) applies in every tenant when it binds none. In a
        # tenant other than its own, a user with a bound entry holds only ``*``'s authority,
        # which the ``*`` subject lists.
        own = lookup if lookup is not None and lookup in self.tenants else ANY_PRINCIPAL
        every_tenant = tenant is None and own in self.tenants and self.tenants[own] is None
        try:
            widest = Principal(user_id=real_id, tenant_id=chosen, scopes=self.scopes)
        except ValidationError:
            raise UsageError(
                f"principal {user_id!r} in tenant {chosen!r} is not a valid id: use letters, "
                "digits and _ . @ : - (starting with a letter or digit)"
            ) from None
        grant = self.policy.grant_for(widest)
        return Subject(
            kind="principal",
            name=user_id,
            principal=Principal(user_id=real_id, tenant_id=chosen, scopes=grant.scopes),
            grant=grant,
            approvals=self.policy.approvals_for(widest),
            every_tenant=every_tenant,
            self_approval=self.policy.self_approval,
        )

    def role(self, name: str) -> Subject:
        """The subject holding exactly the role ``name``.

        Raises:
            UnknownSubjectError: the file declares no such role.
        """
        if name not in self.policy.roles:
            raise UnknownSubjectError("role", name, list(self.policy.roles))
        grant = self.policy.role_grant(name)
        return Subject(
            kind="role",
            name=name,
            principal=Principal(
                user_id=f"role.{name}", tenant_id=_DEFAULT_TENANT, scopes=grant.scopes
            ),
            grant=grant,
            approvals=self.policy.role_approvals(name),
            self_approval=self.policy.self_approval,
        )

    def select(
        self,
        *,
        principals: Sequence[str] = (),
        roles: Sequence[str] = (),
        every_principal: bool = False,
        tenant: str | None = None,
    ) -> list[Subject]:
        """Subjects in a stable order: the chosen principals (all named ones with
        ``every_principal``), then the chosen roles; every principal when nothing is chosen.

        Raises:
            UnknownSubjectError: a role the file does not declare.
        """
        users = list(dict.fromkeys(principals))
        if every_principal or not (principals or roles):
            users = list(dict.fromkeys([*self.principals, *users]))
        return [self.principal(user, tenant=tenant) for user in users] + [
            self.role(name) for name in dict.fromkeys(roles)
        ]

    def _anonymous_id(self) -> str:
        candidate = _ANONYMOUS
        while candidate in self.tenants:
            candidate += "-x"
        return candidate


def load_policy_document(path: str | Path) -> PolicyDocument:
    """Read and validate the policy file at ``path``.

    Raises:
        PolicyFileError: the file cannot be read, is not TOML, or breaks the format.
    """
    return PolicyDocument(load_policy(path))
