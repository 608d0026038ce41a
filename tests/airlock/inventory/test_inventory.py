"""The inventory of the test registry: golden outputs, the composed view, its invariants."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict
from typer.testing import CliRunner

from airlock.cli import app
from airlock.inventory import (
    Inventory,
    PolicyDocument,
    Subject,
    SubjectInventory,
    SubjectKind,
    ToolEntry,
    ToolFactError,
    UnsafeRegistryError,
    build_inventory,
    harness_connections,
    inventory_json_schema,
    load_policy_document,
    render,
    sandbox_effects,
    subject_inventory,
)
from airlock.policies import (
    SIDE_EFFECT_KINDS,
    Effect,
    Grant,
    Principal,
    SandboxProfile,
    disclose,
    network,
    parse_policy,
    read,
    spend,
    write,
)
from airlock.sandbox import read_image_digest
from airlock.tools import Caller, Registry, ToolDefinition, ToolSpec
from tests.airlock.inventory_registry import POLICY, POLICY_ARG, REGISTRY_REF, REPO, registry

GOLDEN = Path(__file__).with_name("golden")
UPDATE = os.environ.get("AIRLOCK_UPDATE_GOLDEN") == "1"
runner = CliRunner()


@pytest.fixture(autouse=True)
def _no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    # The image digest depends on the machine; with no engine it is always "unknown". The
    # harness section names the engine socket and $AIRLOCK_HOME: fixed for the golden files.
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/airlock-test-docker.sock")
    monkeypatch.setenv("AIRLOCK_HOME", "/var/lib/airlock")
    monkeypatch.delenv("AIRLOCK_IMAGE", raising=False)
    for name in ("AIRLOCK_DATABASE_URL", "OTEL_EXPORTER_OTLP_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)  # they name other stores, a collector
    for name in [n for n in os.environ if n.lower().endswith("_proxy")]:
        monkeypatch.delenv(name)  # a proxy the model's requests would go through
    monkeypatch.chdir(REPO)


def _subjects() -> dict[str, SubjectInventory]:
    document = load_policy_document(POLICY)
    subjects = document.select(every_principal=True, roles=["billing_agent"])
    return {f"{s.kind}:{s.name}": subject_inventory(registry, s) for s in subjects}


def _tool(subject: SubjectInventory, name: str) -> ToolEntry:
    return next(t for t in subject.tools if t.name == name)


# -- golden outputs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "suffix"), [("table", "txt"), ("json", "json"), ("markdown", "md")]
)
def test_golden_output(fmt: str, suffix: str) -> None:
    args = ["inventory", "--registry", REGISTRY_REF, "--policy", POLICY_ARG]
    result = runner.invoke(app, [*args, "--all", "--role", "billing_agent", "--format", fmt])
    assert result.exit_code == 0, result.output
    golden = GOLDEN / f"inventory.{suffix}"
    if UPDATE:
        golden.write_text(result.output)
    assert result.output == golden.read_text(), (
        f"{golden.name} is out of date; rerun with AIRLOCK_UPDATE_GOLDEN=1 and review the diff"
    )


def test_json_output_follows_the_model_and_the_digest_is_unknown_without_an_engine() -> None:
    result = runner.invoke(
        app, ["inventory", "--registry", REGISTRY_REF, "--policy", POLICY_ARG, "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    inventory = Inventory.model_validate_json(result.output)
    assert inventory.sandbox.image_digest == "unknown"
    assert [s.name for s in inventory.subjects] == ["*", "alice", "bob"]


def test_published_schema_is_up_to_date() -> None:
    published = json.loads((REPO / "airlock" / "inventory" / "inventory.schema.json").read_text())
    assert published == inventory_json_schema(), (
        "regenerate airlock/inventory/inventory.schema.json with airlock.inventory.inventory_json_schema()."
        "inventory_json_schema()"
    )


# -- what the inventory says -----------------------------------------------------------------


def test_alice_reaches_reads_from_code_and_refunds_directly_with_approval_by_amount() -> None:
    alice = _subjects()["principal:alice"]
    composed = alice.composed
    assert composed.from_code.tools == (
        "billing_invoice_get",
        "billing_invoice_list",
        "web_page_fetch",
    )
    assert "billing_refund_create" in composed.direct.tools
    assert composed.after_approval.tools == ("billing_refund_create",)
    refund = _tool(alice, "billing_refund_create")
    assert refund.reach == ("direct", "after_approval")
    assert refund.credentials == ("BILLING_API_KEY",)
    assert refund.destinations == ("api.billing.example",)
    assert refund.idempotency == "keyed"
    assert [(c.from_amount, c.verdict, c.rule) for c in refund.approval] == [
        (0, "allow", "refund-auto"),
        (10000, "ask", "large-refund"),
        (50001, "deny", "spend_limit"),
    ]
    assert "crm_customer_get" not in {t.name for t in alice.tools}  # no crm.read scope
    totals = {t.kind: t.tools for t in composed.totals}
    assert totals == {"read": 3, "write": 1, "network": 4, "spend": 1, "disclose": 0}


def test_a_read_tool_reaching_several_hosts_is_broader_than_its_scope() -> None:
    anyone = _subjects()["principal:*"]
    broad = {b.tool: b.reasons for b in anyone.composed.broader_than_scope}
    assert set(broad) == {"web_page_fetch"}
    assert any("2 network destinations" in r for r in broad["web_page_fetch"])
    assert any("pattern" in r for r in broad["web_page_fetch"])


def test_a_deny_rule_makes_a_visible_tool_unreachable() -> None:
    bob = _subjects()["principal:bob"]
    fetch = _tool(bob, "web_page_fetch")
    assert fetch.reach == ()
    assert fetch.denied_because is not None
    assert "no-fetch" in fetch.denied_because
    assert "web_page_fetch" not in bob.composed.from_code.tools
    assert "crm_customer_get" in bob.composed.from_code.tools


def test_a_role_carries_only_its_own_authority() -> None:
    role = _subjects()["role:billing_agent"]
    assert role.grant.scopes == ("billing.read", "billing.write")
    assert "web_page_fetch" not in {t.name for t in role.tools}


def test_an_effect_outside_the_grant_denies_the_tool() -> None:
    subject = load_policy_document(POLICY).principal("*")
    assert all(
        e.grant == "full" for t in subject_inventory(registry, subject).tools for e in t.effects
    )
    no_network = replace(
        subject, grant=Grant(scopes=subject.grant.scopes, effects=(read("billing:invoice/inv_*"),))
    )
    tools = {t.name: t for t in subject_inventory(registry, no_network).tools}
    get = tools["billing_invoice_get"]
    assert get.reach == ()
    assert get.effects[0].grant == "partial"  # some invoices, not every one
    assert "network(api.billing.example)" in (get.denied_because or "")


def test_sandbox_effects_come_from_the_container_configuration() -> None:
    effects = sandbox_effects(
        SandboxProfile(language_mode="full", tmpfs_bytes=2**21), image="img", image_digest="d"
    )
    assert effects.network == "none"
    assert effects.root_filesystem == "read-only"
    assert effects.capabilities == ()
    assert effects.no_new_privileges
    assert effects.environment == ()
    assert effects.language_mode == "full"
    tmp = next(m for m in effects.mounts if m.path == "/tmp")
    assert tmp.size_bytes == 2**21
    assert "noexec" in tmp.mode
    assert len(effects.seccomp_sha256) == 64
    assert "ptrace" not in effects.seccomp_allowed
    assert effects.runtime == "runc"
    assert any(line.startswith("execve: EPERM") for line in effects.guest_seccomp)
    assert not any(line.startswith("fork:") for line in effects.guest_seccomp)  # full mode
    assert effects.guest_seccomp_pfc is not None
    gvisor = sandbox_effects(SandboxProfile(runtime="runsc"), image="img", image_digest="d")
    assert gvisor.runtime == "runsc"
    assert any(line.startswith("fork: EPERM") for line in gvisor.guest_seccomp)


def test_image_digest_is_unknown_when_no_engine_answers() -> None:
    assert read_image_digest("airlock-sandbox:latest", timeout=1) == "unknown"


# -- a write can never be reachable from code -----------------------------------------------


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Output(BaseModel):
    pass


class FakeCatalog:
    """A registry without registration checks, to show the inventory guards on its own."""

    def __init__(self, specs: Sequence[ToolSpec]) -> None:
        self._specs = tuple(specs)

    def specs(self) -> tuple[ToolSpec, ...]:
        return self._specs

    def visible(self, principal: Principal, caller: Caller) -> list[ToolDefinition]:
        return [
            ToolDefinition(name=s.name, description=s.description, parameters={})
            for s in self._specs
            if caller in s.callers and principal.has_scope(s.scope)
        ]


def _spec(name: str, effects: Sequence[Effect], callers: frozenset[Caller]) -> ToolSpec:
    return ToolSpec(
        name=name,
        description="A tool. Use it. It does nothing.",
        handler=lambda: {},
        input_model=_Input,
        output_model=_Output,
        effects=tuple(effects),
        callers=callers,
        scope="svc.use",
    )


_EFFECTS = [
    read("svc:thing/*"),
    network("api.svc.example"),
    write("svc:thing/*"),
    spend(100, currency="USD"),
    disclose("email:*"),
]


def _wide(
    *, tenant: str = "t", kind: SubjectKind = "principal", every_tenant: bool = False
) -> Subject:
    subject = load_policy_document(POLICY).principal("*")
    return replace(
        subject,
        kind=kind,
        every_tenant=every_tenant,
        principal=Principal(user_id="u", tenant_id=tenant, scopes=frozenset({"svc.use"})),
        grant=Grant(
            scopes=frozenset({"svc.use"}),
            effects=(read("svc:**"), write("svc:**"), network("**"), disclose("**")),
            spend_limits={"USD": 10**9},
        ),
    )


def _build(specs: Sequence[ToolSpec], *, tenant: str = "t") -> Inventory:
    return build_inventory(
        FakeCatalog(specs),
        [_wide(tenant=tenant)],
        sandbox=sandbox_effects(SandboxProfile(), image="img", image_digest="unknown"),
        registry="fake:catalog",
        policy="policy.toml",
    )


@pytest.mark.parametrize("effect", [e for e in _EFFECTS if e.kind in SIDE_EFFECT_KINDS])
def test_a_side_effect_tool_callable_from_code_is_refused(effect: Effect) -> None:
    spec = _spec("svc_thing_change", [read("svc:thing/*"), effect], frozenset({"direct", "code"}))
    with pytest.raises(UnsafeRegistryError) as info:
        _build([spec])
    assert info.value.code == "unsafe_registry"
    assert info.value.tool == "svc_thing_change"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from(_EFFECTS), min_size=1, max_size=3, unique=True),
            st.sampled_from([frozenset({"direct"}), frozenset({"direct", "code"})]),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_reachable_from_code_never_holds_a_side_effect(
    tools: list[tuple[list[Effect], frozenset[Caller]]],
) -> None:
    specs = [
        _spec(f"svc_thing{i}_use", effects, callers) for i, (effects, callers) in enumerate(tools)
    ]
    try:
        inventory = _build(specs)
    except UnsafeRegistryError:
        assert any("code" in s.callers and any(e.is_side_effect for e in s.effects) for s in specs)
        return
    for subject in inventory.subjects:
        code = subject.composed.from_code
        assert not [e for e in code.effects if e.split("(")[0] in SIDE_EFFECT_KINDS]
        for tool in subject.tools:
            if "code" in tool.reach:
                assert not [e for e in tool.effects if e.kind in SIDE_EFFECT_KINDS]


# -- secrets -------------------------------------------------------------------------------

SECRET = "sk_live_0123456789abcdefSECRET"


def test_secret_values_never_appear_in_any_output(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("BILLING_API_KEY", SECRET)
    base = ["inventory", "--registry", REGISTRY_REF, "--policy", POLICY_ARG]
    outputs = []
    for fmt in ("table", "json", "markdown"):
        result = runner.invoke(app, [*base, "--all", "--role", "billing_agent", "--format", fmt])
        assert result.exit_code == 0, result.output
        assert "BILLING_API_KEY" in result.output  # the name is listed ...
        outputs.append(result.output)
    lock = tmp_path / "effects.lock"
    assert runner.invoke(app, [*base, "--lock", str(lock)]).exit_code == 0
    outputs.append(lock.read_text())
    outputs.append(runner.invoke(app, [*base, "--check", str(lock)]).output)
    program = tmp_path / "p.py"
    program.write_text("tools.billing_invoice_get(invoice_id='inv_1')\n")
    for fmt in ("table", "json"):
        args = ["program-effects", str(program), "--registry", REGISTRY_REF, "--policy", POLICY_ARG]
        outputs.append(runner.invoke(app, [*args, "--format", fmt]).output)
    for output in outputs:
        assert SECRET not in output  # ... its value never is


# The table prints data as it is: brackets are no rich markup, colons no emoji codes.
# name: (what differs from a plain inventory, the text the table must show)
LITERAL_CELLS: dict[str, tuple[dict[str, str], str]] = {
    "a partial grant's note": (
        {"effect": "spend({amount_minor} USD)"},
        "spend({amount_minor} USD) [grant: partial]",
    ),
    "an IPv6 destination": (
        {"destination": "https://[fd00::1]:8443/v1"},
        "│ https://[fd00::1]:8443/v1 │",  # its cell, not the "directly" line
    ),
    "a closing tag in the policy path": ({"policy": "[/p].toml"}, "under [/p].toml"),
    "a closing tag in the registry": ({"registry": "m[/x]:registry"}, "of m[/x]:registry"),
    "a closing tag in AIRLOCK_HOME": ({"home": "/srv/airlock[/x]"}, "/srv/airlock[/x]/audit.db"),
    "a closing tag in DOCKER_HOST": ({"docker_host": "unix:///[/d].sock"}, "unix:///[/d].sock"),
    "a closing tag in AIRLOCK_IMAGE": ({"image": "img[/i]:1"}, "img[/i]:1 (unknown)"),
    "a style tag in the policy path": ({"policy": "[bold]p.toml"}, "under [bold]p.toml"),
    "an emoji code in the policy path": ({"policy": "p:warning:.toml"}, "under p:warning:.toml"),
}


def _table_with(changes: dict[str, str]) -> str:
    effects = [read("svc:thing/*")]  # one destination, so only its cell names it
    spec = replace(
        _spec("svc_thing_get", effects, frozenset({"direct"})),
        destinations=(changes.get("destination", "api.svc.example"),),
    )
    if "effect" in changes:
        spec = replace(spec, effects=(*effects, Effect.parse(changes["effect"])))
    subject = replace(_wide(), grant=replace(_wide().grant, spend_limits={"USD": 100}))
    inventory = build_inventory(
        FakeCatalog([spec]),
        [subject],
        sandbox=sandbox_effects(
            SandboxProfile(), image=changes.get("image", "img"), image_digest="unknown"
        ),
        registry=changes.get("registry", "fake:catalog"),
        policy=changes.get("policy", "policy.toml"),
        harness=harness_connections(
            home=Path(changes.get("home", "/srv/airlock")),
            model_endpoint="https://api.anthropic.com/v1/messages",
            model_credential="ANTHROPIC_API_KEY",
            mcp_host="127.0.0.1",
            docker_host=changes.get("docker_host"),
        ),
    )
    return render(inventory, "table")


@pytest.mark.parametrize("case", sorted(LITERAL_CELLS))
def test_the_table_prints_every_value_literally(case: str) -> None:
    changes, expected = LITERAL_CELLS[case]
    assert expected in _table_with(changes)


# -- completeness: every destination, each principal's credential, preconditions -------------

EVERY_FORM = (
    "*.cdn.svc.example",
    "api.svc.example:8443",
    "deploy@backup.svc.example",
    "https://api.svc.example/v1/reports",
    "postgres://db.internal:5432/app",
    "s3://svc-exports/reports",
    "smtp://mail.svc.example:587",
)


def test_every_destination_form_a_tool_declares_is_listed() -> None:
    tools = Registry()

    @tools.tool(
        effects=[read("svc:thing/*"), network("status.svc.example")],
        scope="svc.use",
        callers={"direct", "code"},
        destinations=EVERY_FORM,
    )
    def svc_thing_get() -> _Output:
        """Get the thing. Use it to look. It returns nothing else."""
        return _Output()

    inventory = _build(tools.specs())
    entry = inventory.subjects[0].tools[0]
    assert entry.destinations == tuple(sorted({*EVERY_FORM, "status.svc.example"}))
    network_total = next(t for t in inventory.subjects[0].composed.totals if t.kind == "network")
    assert network_total.patterns == tuple(
        sorted(f"network({d})" for d in {*EVERY_FORM, "status.svc.example"})
    )


def test_a_destination_that_does_not_parse_is_an_error_not_an_omission() -> None:
    spec = replace(
        _spec("svc_thing_get", [read("svc:thing/*")], frozenset({"direct"})),
        destinations=("https://user:pw@api.svc.example",),
    )
    with pytest.raises(ToolFactError) as info:
        _build([spec])  # a look-alike catalog: registration would have refused it
    assert info.value.code == "tool_fact"
    assert "carries a password" in str(info.value)


def test_a_principal_lists_its_tenants_credential_and_a_role_every_one() -> None:
    by_tenant = {"acme": "SVC_KEY_ACME", "globex": "SVC_KEY_GLOBEX"}
    spec = replace(
        _spec("svc_thing_get", [read("svc:thing/*")], frozenset({"direct"})),
        tenant_credentials=by_tenant,
    )
    subject = _build([spec]).subjects[0]  # user "u" in tenant "t": no credential there
    assert (subject.tools[0].credentials, subject.tools[0].credential_tenant) == ((), "t")
    for tenant, name in by_tenant.items():
        acme = _build([spec], tenant=tenant).subjects[0].tools[0]
        assert (acme.credentials, acme.credential_tenant) == ((name,), tenant)
    role = subject_inventory(FakeCatalog([spec]), _wide(kind="role"))
    assert (role.tools[0].credentials, role.tools[0].credential_tenant) == (
        ("SVC_KEY_ACME", "SVC_KEY_GLOBEX"),
        None,
    )


_SVC = 'scopes = ["svc.use"]\neffects = ["read(svc:**)"]'
_EVERY_TENANT = (("SVC_KEY_ACME", "SVC_KEY_GLOBEX"), None)

# Principals no entry binds to a tenant act in any tenant (an unbound entry applies whatever
# tenant the session names), so calls may send every tenant's credential.
# name: (policy entries, principal, the credentials listed and the tenant they are for)
UNBOUND_PRINCIPALS: dict[str, tuple[str, str, tuple[tuple[str, ...], str | None]]] = {
    "* without a tenant": (f'[principals."*"]\n{_SVC}', "*", _EVERY_TENANT),
    "a user * covers, * without a tenant": (f'[principals."*"]\n{_SVC}', "u", _EVERY_TENANT),
    "a named user without a tenant": (f"[principals.u]\n{_SVC}", "u", _EVERY_TENANT),
    "a named user without a tenant, * bound to one": (
        f'[principals."*"]\ntenant = "acme"\n{_SVC}\n[principals.u]\n{_SVC}',
        "u",
        _EVERY_TENANT,
    ),
}


def _credentials_of(entries: str, user: str, tenant: str | None = None) -> tuple[object, ...]:
    spec = replace(
        _spec("svc_thing_get", [read("svc:thing/*")], frozenset({"direct"})),
        tenant_credentials={"acme": "SVC_KEY_ACME", "globex": "SVC_KEY_GLOBEX"},
    )
    document = PolicyDocument(parse_policy(f"version = 1\n{entries}\n"))
    tool = subject_inventory(FakeCatalog([spec]), document.principal(user, tenant=tenant)).tools[0]
    return tool.credentials, tool.credential_tenant


@pytest.mark.parametrize("case", sorted(UNBOUND_PRINCIPALS))
def test_a_principal_in_any_tenant_lists_every_tenants_credential(case: str) -> None:
    entries, user, expected = UNBOUND_PRINCIPALS[case]
    assert _credentials_of(entries, user) == expected


def test_a_principal_bound_to_a_tenant_lists_that_tenants_credential() -> None:
    unbound = f'[principals."*"]\n{_SVC}'
    assert _credentials_of(unbound, "*", "globex") == (("SVC_KEY_GLOBEX",), "globex")
    bound = f'[principals."*"]\ntenant = "acme"\n{_SVC}'
    assert _credentials_of(bound, "*") == (("SVC_KEY_ACME",), "acme")
    # Elsewhere only * applies to u; the * subject lists what it may send there.
    own = f'{unbound}\n[principals.u]\ntenant = "acme"\n{_SVC}'
    assert _credentials_of(own, "u") == (("SVC_KEY_ACME",), "acme")


def test_preconditions_appear_per_tool() -> None:
    refund = _tool(_subjects()["principal:alice"], "billing_refund_create")
    assert [r.text for r in refund.requires] == ["billing_invoice_get(invoice_id)"]
    assert _tool(_subjects()["principal:alice"], "billing_invoice_get").requires == ()
