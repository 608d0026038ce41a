"""The effect inventory as data: what each principal can reach, and what the sandbox allows.

These frozen records are the one source of every rendering (table, Markdown, JSON) and of
the lock file. Their JSON Schema is published as ``airlock/inventory.schema.json``
(:func:`inventory_json_schema`; a test keeps the file up to date).
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from airlock.policies import ApprovalCase, Coverage, EffectKind, LanguageMode
from airlock.tools import Caller

__all__ = [
    "ApprovalCase",
    "BroadTool",
    "ComposedView",
    "ConnectionDirection",
    "EffectEntry",
    "EffectTotal",
    "GrantCoverage",
    "GrantSummary",
    "HarnessConnection",
    "Idempotency",
    "Inventory",
    "Mount",
    "PathView",
    "Reach",
    "Requirement",
    "SandboxEffects",
    "SandboxLimits",
    "SubjectInventory",
    "SubjectKind",
    "ToolEntry",
    "inventory_json_schema",
]

INVENTORY_VERSION: Final = 2

Reach = Literal["code", "direct", "after_approval", "proposal"]
"""How a tool can be reached: from a sandboxed program, by the model directly without
approval, directly once a person or policy approves the preview, or as a *proposal* from a
sandboxed program (a write whose preview waits in the program's batch; it is committed only
once approved, never from code)."""
GrantCoverage = Coverage
Idempotency = Literal["safe", "keyed", "idempotent", "not_idempotent", "unknown"]
"""``safe``: no side effects, repeating a call changes nothing. ``keyed``: committed through
the write path with an idempotency key. ``idempotent`` / ``not_idempotent``: declared by the
tool. ``unknown``: a tool with side effects that says neither."""
SubjectKind = Literal["principal", "role"]
ConnectionDirection = Literal["outbound", "inbound", "local"]
"""``outbound``: the harness connects to it; ``inbound``: it listens for it; ``local``: a
file or socket on the harness's own machine."""


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EffectEntry(_Record):
    """One declared effect of a tool, and how much of it the subject's grant allows."""

    kind: EffectKind = Field(description="read, write, network, spend or disclose.")
    declared: str = Field(
        description="The effect as the tool declares it, e.g. 'read(billing:invoice/{id})'."
    )
    pattern: str = Field(
        description=(
            "What the declaration may reach: the target with each placeholder read as '*' "
            "(for spend: the currency)."
        )
    )
    grant: GrantCoverage = Field(description="How much of the pattern the grant covers.")


class Requirement(_Record):
    """Evidence a call needs first (``requires=``): an earlier successful call of ``tool`` in
    the same run whose arguments agree with this call's on ``fields``."""

    tool: str = Field(description="The tool whose successful call is the evidence.")
    fields: dict[str, str] = Field(
        description="Each input field of this tool -> the field of ``tool`` that must be equal."
    )

    @property
    def text(self) -> str:
        """As ``requires`` is written: ``billing_invoice_get(invoice_id)``, and a field that
        agrees with a differently named one as ``id=invoice_id``."""
        pairs = ", ".join(
            mine if mine == theirs else f"{mine}={theirs}"
            for mine, theirs in sorted(self.fields.items())
        )
        return f"{self.tool}({pairs})"


class ToolEntry(_Record):
    """One tool the subject can see, with everything a call of it can touch."""

    name: str = Field(description="Tool name, service_object_verb.")
    callers: tuple[Caller, ...] = Field(description="Who may call it: direct and/or code.")
    scope: str = Field(description="Scope needed to see and call it.")
    reversible: bool = Field(description="Whether its effects can be undone.")
    effects: tuple[EffectEntry, ...] = Field(description="Declared effects, sorted.")
    destinations: tuple[str, ...] = Field(
        description="Network destinations of the tool and its adapter (hosts or patterns)."
    )
    credentials: tuple[str, ...] = Field(
        description=(
            "Names of the credentials this subject's calls send (never their values): the one "
            "for its tenant when the adapter picks one per tenant and the subject is bound to "
            "a tenant, else every one it declares."
        )
    )
    credential_tenant: str | None = Field(
        description=(
            "The tenant whose credential ``credentials`` lists, when the adapter picks one per "
            "tenant; None when the subject's calls may send any of them (the adapter does not "
            "pick by tenant, or the subject acts in any tenant: a role, or a principal no "
            "policy entry binds to a tenant)."
        )
    )
    requires: tuple[Requirement, ...] = Field(
        description="Evidence each call needs first (preconditions); empty when none."
    )
    approval: tuple[ApprovalCase, ...] = Field(
        description=(
            "The approval verdict by amount, from the subject's approval rules; per target "
            "class when rules name targets (a case's 'targets'; none: every other call)."
        )
    )
    idempotency: Idempotency = Field(description="Whether repeating a call is safe.")
    reach: tuple[Reach, ...] = Field(
        description="How the subject can reach it; empty when every call would be refused."
    )
    network: bool = Field(
        default=False,
        description=(
            "It declares a network effect or its adapter has destinations: a read that "
            "reaches the network, never advertised as read-only (from code, only the "
            "destinations the grant lists)."
        ),
    )
    denied_because: str | None = Field(description="Why no call can succeed, when reach is empty.")
    broader_than_scope: tuple[str, ...] = Field(
        description="Ways its effects go beyond what its scope's name suggests."
    )


class GrantSummary(_Record):
    """The subject's grant, cap(u), as the policy file gives it."""

    scopes: tuple[str, ...] = Field(description="Scopes the subject may use.")
    effects: tuple[str, ...] = Field(description="Effect patterns the subject may exercise.")
    spend_limits: dict[str, int] = Field(
        description="Largest spend per call, in minor units, by currency."
    )
    propose: tuple[str, ...] = Field(
        default=(),
        description="Tool-name patterns of the writes the subject's programs may propose.",
    )


class PathView(_Record):
    """The tools reachable one way, and the union of their effect patterns."""

    tools: tuple[str, ...] = Field(description="Tool names, sorted.")
    effects: tuple[str, ...] = Field(description="Effect patterns, e.g. 'read(billing:*)'.")


class EffectTotal(_Record):
    """How much of one effect kind the subject can reach."""

    kind: EffectKind = Field(description="The effect kind.")
    tools: int = Field(ge=0, description="Reachable tools declaring an effect of this kind.")
    patterns: tuple[str, ...] = Field(description="Distinct reachable patterns of this kind.")


class BroadTool(_Record):
    """A tool whose effects reach further than its scope's name suggests."""

    tool: str = Field(description="Tool name.")
    reasons: tuple[str, ...] = Field(description="What makes it broader, one line each.")


class ComposedView(_Record):
    """Everything the subject can reach, by path, with totals."""

    from_code: PathView = Field(
        description="Reachable from a sandboxed program without approval: reads only."
    )
    proposable_from_code: PathView = Field(
        default=PathView(tools=(), effects=()),
        description=(
            "Writes a sandboxed program may propose, never make: each proposal is a preview "
            "that waits, in the program's batch, for a person or policy to approve it."
        ),
    )
    direct: PathView = Field(description="Reachable by the model directly, without approval.")
    after_approval: PathView = Field(
        description="Reachable directly only once a person or policy approves (some amounts)."
    )
    totals: tuple[EffectTotal, ...] = Field(description="Per effect kind, every kind listed.")
    broader_than_scope: tuple[BroadTool, ...] = Field(
        description="Reachable tools whose effects go beyond their scope's name."
    )


class SubjectInventory(_Record):
    """The inventory of one principal (or role)."""

    kind: SubjectKind = Field(description="principal or role.")
    name: str = Field(description="User id ('*': any principal not named), or role name.")
    user_id: str = Field(description="User id the inventory was computed for.")
    tenant_id: str = Field(description="Tenant the inventory was computed for.")
    every_tenant: bool = Field(
        description=(
            "Whether it acts in every tenant (no policy entry binds it to one): tenant_id is "
            "then only the tenant its grant was computed in."
        )
    )
    self_approval: bool = Field(
        description=(
            "Whether the person who asked for one of its writes may approve it "
            "(self_approval = true in the policy file): no second person is needed."
        )
    )
    grant: GrantSummary = Field(description="The subject's grant.")
    tools: tuple[ToolEntry, ...] = Field(description="Every tool the subject can see, sorted.")
    composed: ComposedView = Field(description="The reachable set, composed.")


class Mount(_Record):
    """A file system mounted into the sandbox container."""

    path: str = Field(description="Path inside the container.")
    mode: str = Field(description="Mount options, e.g. 'ro' or 'rw,noexec,nosuid,nodev'.")
    size_bytes: int | None = Field(description="Size cap of a tmpfs, in bytes.")


class SandboxLimits(_Record):
    """Resource limits of one run."""

    timeout_s: float = Field(description="Wall-clock deadline; the container is killed after.")
    memory_bytes: int = Field(description="Memory limit.")
    swap_bytes: int = Field(description="Swap allowed beyond the memory limit.")
    cpus: float = Field(description="CPU quota in cores.")
    pids: int = Field(description="Most processes and threads at once.")
    open_files: int = Field(description="Open-files limit.")
    output_bytes: int = Field(description="Cap on captured stdout and stderr, each.")
    input_bytes: int = Field(
        default=0,
        description="Most bytes of inputs (host files mounted read-only at /data/NAME) one "
        "run may be given; each input also needs read(file:NAME) in the grant.",
    )
    artifact_bytes: int = Field(
        default=0,
        description="The most bytes of files (artifacts) one run returns "
        "(/out holds this and a page per file more).",
    )
    artifact_files: int = Field(
        default=0, description="Most files one run may leave in /out for the host."
    )
    proposals: int = Field(
        default=0,
        description="Most writes one program may propose (tools.propose.NAME), each waiting "
        "for approval; a higher limit is growth.",
    )


class SandboxEffects(_Record):
    """What a program in the sandbox can do by itself, read from the container configuration
    the Docker backend uses and from the active sandbox profile."""

    network: str = Field(description="Docker network mode: 'none' means no network at all.")
    root_filesystem: Literal["read-only", "writable"] = Field(
        description="Whether the image's file system is mounted read-only."
    )
    mounts: tuple[Mount, ...] = Field(description="tmpfs and bind mounts, sorted by path.")
    user: str = Field(description="uid:gid the program runs as.")
    capabilities: tuple[str, ...] = Field(
        description="Linux capabilities left to the program (empty when all are dropped)."
    )
    no_new_privileges: bool = Field(description="Whether set-uid binaries cannot gain rights.")
    environment: tuple[str, ...] = Field(
        description="Names of environment variables passed in; never their values."
    )
    limits: SandboxLimits = Field(description="Resource limits.")
    language_mode: LanguageMode = Field(description="restricted or full Python.")
    allowed_imports: tuple[str, ...] = Field(description="Modules a restricted program may import.")
    seccomp_sha256: str = Field(description="SHA-256 of the seccomp profile's canonical JSON.")
    seccomp_allowed: tuple[str, ...] = Field(
        description="System calls the filter allows, one entry per rule: the name alone when "
        "any arguments pass, else with the argument conditions it needs ('socket when "
        "arg0 == 1'); every other call gets the default action."
    )
    seccomp_default: str = Field(
        description="What the filter does with a call no rule allows (defaultAction), e.g. "
        "'SCMP_ACT_ERRNO'; 'unknown' when no filter was rendered.",
    )
    runtime: str = Field(
        description="OCI runtime: 'runc' (the host's kernel) or 'runsc' (gVisor's kernel)."
    )
    masked_paths: tuple[str, ...] = Field(
        description="Kernel files under /proc and /sys the program sees empty, sorted."
    )
    guest_seccomp: tuple[str, ...] = Field(
        description="The second seccomp layer, which the runner loads before the program "
        "runs: one 'call: errno when (why)' line per refused call, for the language mode."
    )
    guest_seccomp_pfc: str | None = Field(
        description="That layer's exact filter as libseccomp's PFC text (this architecture), "
        "or null when libseccomp was not available where the inventory was made."
    )
    image: str = Field(description="The sandbox image reference.")
    image_digest: str = Field(
        description="The image's content digest, or 'unknown' when no engine was reachable."
    )
    image_kind: str = Field(
        default="base",
        description="'base' (the standard library) or 'data' (numpy, pandas, pyarrow, "
        "matplotlib: more native code a program can reach).",
    )
    image_packages: tuple[str, ...] = Field(
        default=(),
        description="Packages the image adds, 'name==version' (the data image's, pinned by "
        "this airlock); empty for the base image.",
    )
    other_settings: tuple[str, ...] = Field(
        default=(),
        # A lock written before this field reads (it has none): the check then lists each
        # setting as growth, so the lock is refreshed once, on purpose.
        exclude_if=lambda settings: not settings,
        description="Every other setting the container is started with, one 'key: canonical "
        "JSON' line each, sorted: what no field above describes (namespaces, devices, "
        "privileged, security options besides the seccomp filter and no-new-privileges, "
        "ulimits besides open files, any key added later). Any change is growth.",
    )


class HarnessConnection(_Record):
    """A connection the harness itself makes or accepts, outside any tool: where model
    traffic, MCP clients, the approval page, the container engine, the stores and the audit
    spans are."""

    name: str = Field(description="What it is, e.g. 'model provider' or 'docker engine'.")
    direction: ConnectionDirection = Field(description="outbound, inbound or local.")
    kind: str = Field(description="Protocol or medium, e.g. 'https', 'unix socket', 'sqlite'.")
    target: str = Field(description="Where, as this machine resolves it (a URL, address or path).")
    locked_as: str = Field(
        description=(
            "Where, in a form that reads the same on every machine ('$AIRLOCK_HOME/audit.db'): "
            "what the lock file holds."
        )
    )
    credential: str | None = Field(description="Name of the credential it sends, if any.")
    used_by: str = Field(description="Which commands or APIs make it, and how.")
    note: str = Field(description="What reaching it means for a reviewer.")


class Inventory(_Record):
    """The effect inventory of a registry under a policy file."""

    inventory_version: Literal[2] = Field(default=INVENTORY_VERSION, description="Format version.")
    registry: str = Field(description="The registry, as MODULE:OBJECT.")
    policy: str = Field(description="The policy file.")
    sandbox: SandboxEffects = Field(
        description="The sandbox's own effect set, under the policy file's [sandbox] profile."
    )
    harness: tuple[HarnessConnection, ...] = Field(
        description="The harness's own connections: model provider, listeners (MCP, the "
        "approval page), engine, stores, audit spans."
    )
    subjects: tuple[SubjectInventory, ...] = Field(description="One entry per subject.")


def inventory_json_schema() -> dict[str, Any]:
    """The JSON Schema of :class:`Inventory` as published in ``inventory.schema.json``."""
    schema = Inventory.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **schema,
    }
