"""The lock file and ``--check``: a table of real changes (to the tools, the policy file, its
sandbox profile and the harness), each built into an inventory and a lock and judged growth,
shrink or neutral, both ways round."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import pytest
from typer.testing import CliRunner

from airlock.cli import app
from airlock.frontends import ANTHROPIC_URL
from airlock.inventory import (
    SANDBOX_RULES,
    Change,
    EffectLock,
    PolicyDocument,
    SandboxEffects,
    Selection,
    build_inventory,
    compare_locks,
    harness_connections,
    lock_from_inventory,
    lock_text,
    read_lock,
    render_changes,
    sandbox_effects,
    write_lock,
)
from airlock.policies import Effect, network, parse_policy, read
from airlock.tools import Registry, ToolSpec, WriteContract, requires
from tests.airlock.inventory_registry import POLICY, POLICY_ARG, REGISTRY_REF, REPO, registry

runner = CliRunner()
ALICE = "principal:alice"
GET = "billing_invoice_get"
LIST = "billing_invoice_list"
REFUND = "billing_refund_create"
FETCH = "web_page_fetch"
CRM = "crm_customer_get"
SELECTION = Selection(every_principal=True, principals=(), roles=(), tenant=None)
Expected = Literal["growth", "shrink", "neutral"]


@pytest.fixture(autouse=True)
def _no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/airlock-test-docker.sock")
    monkeypatch.setenv("AIRLOCK_HOME", "/srv/airlock")
    monkeypatch.delenv("AIRLOCK_DATABASE_URL", raising=False)
    for name in [n for n in os.environ if n.lower().endswith("_proxy") or n.startswith("PG")]:
        monkeypatch.delenv(name)  # they move the harness's connections
    monkeypatch.chdir(REPO)


# -- a world: tools, policy file (with its sandbox table) and the harness's endpoints ---------


@dataclass(frozen=True)
class World:
    specs: tuple[ToolSpec, ...]
    policy: str
    model_endpoint: str = ANTHROPIC_URL
    home: Path = Path("/srv/airlock")
    docker_host: str | None = None
    database: str | None = None
    spans_endpoint: str | None = None
    spans_credential: str | None = None
    image: str = "img"
    environ: tuple[tuple[str, str], ...] = ()  # the harness's (libpq's, the proxies')


BASE = World(specs=registry.specs(), policy=POLICY.read_text())
Edit = Callable[[World], World]


def lock_of(world: World) -> EffectLock:
    tools = Registry()
    for spec in world.specs:
        tools.register(spec)
    document = PolicyDocument(parse_policy(world.policy, source=POLICY_ARG))
    inventory = build_inventory(
        tools,
        document.select(every_principal=True),
        sandbox=sandbox_effects(
            document.policy.sandbox, image=world.image, image_digest="sha256:x"
        ),
        registry=REGISTRY_REF,
        policy=POLICY_ARG,
        harness=harness_connections(
            home=world.home,
            model_endpoint=world.model_endpoint,
            model_credential="ANTHROPIC_API_KEY",
            mcp_host="127.0.0.1",
            docker_host=world.docker_host,
            database=world.database,
            spans_endpoint=world.spans_endpoint,
            spans_credential=world.spans_credential,
            approval_page=("127.0.0.1", 8470),
            environ=dict(world.environ),
        ),
    )
    return lock_from_inventory(inventory, SELECTION)


def tool(name: str, **changes: Any) -> Edit:
    """Change fields of one tool's spec."""

    def edit(world: World) -> World:
        specs = tuple(replace(s, **changes) if s.name == name else s for s in world.specs)
        return replace(world, specs=specs)

    return edit


def effects(name: str, *declared: str) -> Edit:
    return tool(name, effects=tuple(Effect.parse(text) for text in declared))


def added(spec: ToolSpec) -> Edit:
    return lambda w: replace(w, specs=(*w.specs, spec))


def dropped(name: str) -> Edit:
    return lambda w: replace(w, specs=tuple(s for s in w.specs if s.name != name))


def policy(old: str, new: str) -> Edit:
    """Replace text of the policy file (which must hold ``old`` exactly once)."""

    def edit(world: World) -> World:
        assert world.policy.count(old) == 1, old
        return replace(world, policy=world.policy.replace(old, new))

    return edit


def appended(toml: str) -> Edit:
    return lambda w: replace(w, policy=w.policy + "\n" + toml)


def sandboxed(**profile: object) -> Edit:
    lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in profile.items())
    return appended(f"[sandbox]\n{lines}\n")


def both(*edits: Edit) -> Edit:
    def edit(world: World) -> World:
        for each in edits:
            world = each(world)
        return world

    return edit


def same(world: World) -> World:
    return world


def _export_spec() -> ToolSpec:
    get = next(s for s in registry.specs() if s.name == GET)
    return replace(
        get,
        name="billing_invoice_export",
        description="Export invoices as a file. Use it for bulk reviews. It returns no cards.",
        effects=(read("billing:invoice/*"), network("api.billing.example")),
        destinations=("api.billing.example", "https://exports.billing.example/v2"),
        credentials=("BILLING_API_KEY", "EXPORT_TOKEN"),
    )


# Billing tools that pick a credential by the principal's tenant.
_PER_TENANT = both(
    *(
        tool(n, tenant_credentials={"acme": "BILLING_KEY_ACME", "globex": "BILLING_KEY_GLOBEX"})
        for n in (GET, LIST, REFUND)
    )
)

# ... and one more tenant's: a principal in any tenant (here *) may send it too.
_ONE_MORE_TENANT = both(
    *(
        tool(
            n,
            tenant_credentials={
                "acme": "BILLING_KEY_ACME",
                "globex": "BILLING_KEY_GLOBEX",
                "initech": "BILLING_KEY_INITECH",
            },
        )
        for n in (GET, LIST, REFUND)
    )
)

# Ask before any fetch from the CDN hosts, then let one of them through without asking.
_ASK_CDN = (
    '[[roles.billing_reader.rules]]\nid = "ask-cdn"\naction = "ask"\neffect = "network"\n'
    'targets = ["*.cdn.example.net"]\n'
)
_ALLOW_ONE_CDN = (
    '[[roles.billing_reader.rules]]\nid = "one-cdn"\naction = "allow"\neffect = "network"\n'
    'targets = ["a.cdn.example.net"]\n'
)


_DB = "postgresql://airlock@db.example.net/airlock"
_COLLECTOR = "https://collector.example.net:4318/v1/traces"


def _database(url: str) -> Edit:
    return lambda w: replace(w, database=url)


def _spans(endpoint: str, credential: str | None = None) -> Edit:
    return lambda w: replace(w, spans_endpoint=endpoint, spans_credential=credential)


def _environ(**variables: str) -> Edit:
    return lambda w: replace(w, environ=(*w.environ, *variables.items()))


# name: (before, after, the change before -> after, the change after -> before)
def _proposable(world: World) -> World:
    """The refund tool's contract lets programs propose it (not yet the policy)."""
    refund = next(s for s in world.specs if s.name == REFUND)
    contract = WriteContract(
        prepare=lambda args, principal: args,
        commit=lambda effect, key: {},
        effect_model=refund.input_model,
        intent=("invoice_id",),
        proposable=True,
    )
    return tool(REFUND, write=contract)(world)


_PROPOSE = policy(
    "spend_limits = { USD = 50000 }",
    'spend_limits = { USD = 50000 }\npropose = ["billing_refund_*"]',
)


CHANGES: dict[str, tuple[Edit, Edit, Expected, Expected]] = {
    "new tool": (same, added(_export_spec()), "growth", "shrink"),
    # A program may now propose refunds: lock growth, in the grant and in the tool's reach.
    "a write proposable from code": (same, both(_proposable, _PROPOSE), "growth", "shrink"),
    "a grant that may propose, contract off": (same, _PROPOSE, "growth", "shrink"),
    "a contract that may be proposed, grant off": (same, _proposable, "neutral", "neutral"),
    "removed tool": (same, dropped(FETCH), "shrink", "growth"),
    "new effect": (
        same,
        effects(
            GET,
            "read(billing:invoice/{invoice_id})",
            "network(api.billing.example)",
            "network(docs.example.com)",
        ),
        "growth",
        "shrink",
    ),
    "wider pattern": (
        effects(GET, "read(billing:invoice/inv_{invoice_id})", "network(api.billing.example)"),
        same,
        "growth",
        "shrink",
    ),
    "narrower pattern": (
        same,
        effects(LIST, "read(billing:invoice/inv_*)", "network(api.billing.example)"),
        "shrink",
        "growth",
    ),
    "new host": (
        same,
        tool(GET, destinations=("api.billing.example", "https://status.billing.example")),
        "growth",
        "shrink",
    ),
    "wider path on a host": (
        tool(CRM, destinations=("https://crm.example/api/v1/customers",)),
        tool(CRM, destinations=("https://crm.example/api/v1",)),
        "growth",
        "shrink",
    ),
    "any scheme on a host": (
        tool(CRM, destinations=("https://crm.example",)),
        tool(CRM, destinations=("crm.example",)),
        "growth",
        "shrink",
    ),
    "new credential": (
        same,
        tool(GET, credentials=("BILLING_API_KEY", "ADMIN_TOKEN")),
        "growth",
        "shrink",
    ),
    "new caller code": (tool(GET, callers=frozenset({"direct"})), same, "growth", "shrink"),
    "ask to allow": (
        same,
        policy('id = "large-refund"\naction = "ask"', 'id = "large-refund"\naction = "allow"'),
        "growth",
        "shrink",
    ),
    "allow to ask (an ask rule on a read tool)": (
        same,
        appended('[[principals.bob.rules]]\nid = "crm"\naction = "ask"\ntools = ["crm_*"]'),
        "shrink",
        "growth",
    ),
    "a host carved out of an ask (rules on targets)": (
        appended(_ASK_CDN),
        appended(_ASK_CDN + _ALLOW_ONE_CDN),
        "growth",
        "shrink",
    ),
    "a carve-out narrowed": (
        appended(_ASK_CDN + _ALLOW_ONE_CDN.replace('"]', '", "b.cdn.example.net"]')),
        appended(_ASK_CDN + _ALLOW_ONE_CDN),
        "shrink",
        "growth",
    ),
    "deny added": (
        same,
        appended('[[principals.bob.rules]]\nid = "nl"\naction = "deny"\ntools = ["*_list"]'),
        "shrink",
        "growth",
    ),
    "spend limit up": (
        same,
        policy("spend_limits = { USD = 50000 }", "spend_limits = { USD = 90000 }"),
        "growth",
        "shrink",
    ),
    "spend limit down": (
        same,
        policy("spend_limits = { USD = 50000 }", "spend_limits = { USD = 100 }"),
        "shrink",
        "growth",
    ),
    "tenant moved": (
        _PER_TENANT,
        both(_PER_TENANT, policy('alice]\ntenant = "acme"', 'alice]\ntenant = "globex"')),
        "growth",
        "growth",
    ),
    "a tenant's credential added": (_PER_TENANT, _ONE_MORE_TENANT, "growth", "shrink"),
    "precondition removed": (same, tool(REFUND, preconditions=()), "growth", "shrink"),
    "precondition added": (
        same,
        tool(LIST, preconditions=(requires(CRM, customer_id="customer_id"),)),
        "shrink",
        "growth",
    ),
    "precondition weakened": (
        tool(REFUND, preconditions=(requires(GET, "invoice_id", amount_minor="invoice_id"),)),
        same,
        "growth",
        "shrink",
    ),
    "scope added": (
        same,
        policy('scopes = ["crm.read"]', 'scopes = ["crm.read", "billing.write"]'),
        "growth",
        "shrink",
    ),
    "grant effect widened": (
        same,
        policy('  "read(billing:invoice/*)",\n', '  "read(billing:**)",\n'),
        "growth",
        "shrink",
    ),
    "idempotency declared": (
        tool(REFUND, handler=lambda **kw: kw),
        same,
        "neutral",
        "neutral",
    ),
    "description reworded": (
        same,
        tool(GET, description="Fetch one invoice. Use it to check an amount. It omits payments."),
        "neutral",
        "neutral",
    ),
    "sandbox memory up": (same, sandboxed(memory_bytes=2**30), "growth", "shrink"),
    "sandbox timeout down": (same, sandboxed(timeout_s=2.0), "shrink", "growth"),
    "sandbox full python": (same, sandboxed(language_mode="full"), "growth", "shrink"),
    # gVisor itself narrows; its filter lets clone3 through to gVisor's kernel, a call
    # the filter did not allow before, so the switch counts as growth either way.
    "sandbox gvisor runtime": (same, sandboxed(runtime="runsc"), "growth", "growth"),
    # Another image is other code a program reaches (AIRLOCK_IMAGE, AIRLOCK_DATA_IMAGE): the
    # packages the lock lists are the ones airlock builds its own image with.
    "sandbox image swapped": (
        same,
        lambda w: replace(w, image="python:3.11"),
        "growth",
        "growth",
    ),
    "sandbox data image swapped": (
        sandboxed(image="data"),
        both(sandboxed(image="data"), lambda w: replace(w, image="python:3.11")),
        "growth",
        "growth",
    ),
    "sandbox fewer imports": (
        same,
        sandboxed(allowed_imports=["json", "math", "re"]),
        "shrink",
        "growth",
    ),
    "model provider moved": (
        same,
        lambda w: replace(w, model_endpoint="https://llm.example.net/v1/messages"),
        "growth",
        "growth",
    ),
    "airlock home moved": (
        same,
        lambda w: replace(w, home=Path("/home/op/.airlock")),
        "neutral",
        "neutral",
    ),
    # The audit log and the ledger leave the machine for a database server, or come back.
    "stores in a remote database": (same, _database(_DB), "growth", "growth"),
    "database server moved": (
        _database(_DB),
        _database(_DB.replace("db.", "db2.")),
        "growth",
        "growth",
    ),
    "database password changed": (
        _database(_DB.replace("@", ":one@")),
        _database(_DB.replace("@", ":two@")),
        "neutral",
        "neutral",
    ),
    "stores in another sqlite folder": (
        same,
        _database("sqlite:///var/db/x"),
        "neutral",
        "neutral",
    ),
    "audit spans exported": (same, _spans(_COLLECTOR), "growth", "shrink"),
    "audit spans collector moved": (
        _spans(_COLLECTOR),
        _spans(_COLLECTOR.replace("collector.", "other.")),
        "growth",
        "growth",
    ),
    # libpq's variables move the stores as the URL would; a proxy carries the model's requests.
    "the stores moved by PGHOSTADDR": (
        _database(_DB),
        both(_database(_DB), _environ(PGHOSTADDR="10.0.0.9")),
        "growth",
        "growth",
    ),
    "the stores' service moved by PGSERVICE": (
        both(_database("postgresql:///airlock"), _environ(PGSERVICE="prod")),
        both(_database("postgresql:///airlock"), _environ(PGSERVICE="reports")),
        "growth",
        "growth",
    ),
    "the stores' TLS turned off": (
        _database(_DB + "?sslmode=verify-full"),
        _database(_DB + "?sslmode=disable"),
        "growth",
        "growth",
    ),
    "libpq's variables beside SQLite stores": (
        same,
        _environ(PGHOST="db.example.net"),
        "neutral",
        "neutral",
    ),
    "a proxy for the model's requests": (
        same,
        _environ(HTTPS_PROXY="http://proxy.example:3128"),
        "growth",
        "shrink",
    ),
    "the proxy exempted by NO_PROXY": (
        _environ(HTTPS_PROXY="http://proxy.example:3128"),
        _environ(HTTPS_PROXY="http://proxy.example:3128", NO_PROXY="anthropic.com"),
        "shrink",
        "growth",
    ),
    "the collector's password in its URL": (
        _spans(_COLLECTOR),
        _spans(_COLLECTOR.replace("https://", "https://op:tok@")),
        "growth",
        "growth",
    ),
    "audit spans sent with headers": (
        _spans(_COLLECTOR),
        _spans(_COLLECTOR, "OTEL_EXPORTER_OTLP_HEADERS"),
        "growth",
        "growth",  # an outbound connection that changes at all is judged growth
    ),
}


def _judged(changes: list[Change]) -> Expected:
    directions = {c.direction for c in changes}
    if "growth" in directions:
        return "growth"
    return "shrink" if "shrink" in directions else "neutral"


@pytest.mark.parametrize("case", sorted(CHANGES))
def test_each_change_is_judged_growth_shrink_or_neutral(case: str) -> None:
    before, after, forward, _ = CHANGES[case]
    old, new = lock_of(before(BASE)), lock_of(after(BASE))
    if forward != "neutral":
        assert old != new, "the edit must change the lock"
    changes = compare_locks(old, new)
    assert _judged(changes) == forward, render_changes(changes)


@pytest.mark.parametrize("case", sorted(CHANGES))
def test_each_change_undone_is_judged_too(case: str) -> None:
    before, after, _, backward = CHANGES[case]
    changes = compare_locks(lock_of(after(BASE)), lock_of(before(BASE)))
    assert _judged(changes) == backward, render_changes(changes)


def _kinds(before: Edit, after: Edit) -> set[tuple[str, str, str]]:
    changes = compare_locks(lock_of(before(BASE)), lock_of(after(BASE)))
    return {(c.direction, c.kind, c.detail) for c in changes}


def test_a_newly_proposable_tool_is_named_as_proposable_from_code() -> None:
    kinds = _kinds(same, both(_proposable, _PROPOSE))
    assert ("growth", "new_reach", "now reachable: proposal") in kinds
    assert ("growth", "grant_widened", "propose billing_refund_*") in kinds
    assert not any(kind == "write_from_code" for _, kind, _ in kinds)  # code stays reads only


def test_a_new_tool_shows_every_effect_host_and_credential_it_brings() -> None:
    changes = compare_locks(lock_of(BASE), lock_of(added(_export_spec())(BASE)))
    alice = {(c.kind, c.detail) for c in changes if c.subject == ALICE}
    assert ("new_tool", "reachable: code, direct") in alice
    assert ("new_effect", "read(billing:invoice/*)") in alice
    assert ("new_effect", "network(api.billing.example)") in alice
    assert ("new_destination", "https://exports.billing.example/v2") in alice
    assert ("new_destination", "api.billing.example") in alice
    assert ("new_credential", "EXPORT_TOKEN") in alice
    assert ("new_credential", "BILLING_API_KEY") in alice
    text = render_changes(changes)
    assert "GROWTH  principal:alice billing_invoice_export: new_credential: EXPORT_TOKEN" in text


def test_a_tightening_on_a_read_tool_is_no_growth_and_says_why() -> None:
    _, after, _, _ = CHANGES["allow to ask (an ask rule on a read tool)"]
    kinds = _kinds(same, after)
    assert ("shrink", "removed_reach", "no longer: code, direct") in kinds
    assert ("change", "approval_reach", "now waits for approval") in kinds
    assert any(d == "shrink" and k == "approval_tightened" for d, k, _ in kinds)


def test_a_moved_principal_shows_its_tenant_and_its_new_credential() -> None:
    before, after, _, _ = CHANGES["tenant moved"]
    kinds = _kinds(before, after)
    moved = "acme → globex: reaches the records of tenant globex"
    assert ("growth", "tenant_moved", moved) in kinds
    assert ("growth", "new_credential", "BILLING_KEY_GLOBEX") in kinds


def test_gvisor_narrows_while_the_filter_it_needs_is_listed() -> None:
    kinds = _kinds(same, CHANGES["sandbox gvisor runtime"][1])
    assert ("shrink", "sandbox_narrowed", "runtime runc → runsc") in kinds
    assert ("growth", "sandbox_widened", "seccomp_allowed + clone3") in kinds


def test_a_removed_precondition_names_it() -> None:
    kinds = _kinds(same, CHANGES["precondition removed"][1])
    detail = "no longer requires billing_invoice_get(invoice_id)"
    assert ("growth", "precondition_removed", detail) in kinds


def test_every_sandbox_field_has_a_rule() -> None:
    # A field without one would count as growth on any change: give it a rule on purpose.
    assert set(SandboxEffects.model_fields) == set(SANDBOX_RULES)


def test_a_remote_database_and_a_collector_are_named_as_they_grow() -> None:
    kinds = _kinds(same, both(_database(_DB), _spans(_COLLECTOR)))
    spans = f"audit spans: outbound otlp/http {_COLLECTOR}"
    assert ("growth", "new_connection", spans) in kinds
    for store in ("audit store", "ledger"):
        base = "audit.db" if store == "audit store" else "ledger.db"
        moved = (
            f"{store}: local sqlite file $AIRLOCK_HOME/{base} → outbound postgresql "
            "postgresql://db.example.net/airlock"
        )
        assert ("growth", "connection_changed", moved) in kinds


def test_the_lock_reads_the_same_on_every_machine() -> None:
    here = lock_of(BASE)
    there = lock_of(replace(BASE, home=Path("/var/lib/x"), docker_host="unix:///run/d.sock"))
    assert lock_text(here) == lock_text(there)
    assert '"image_digest": "not locked"' in lock_text(here)
    assert here.harness["audit store"].locked_as == "$AIRLOCK_HOME/audit.db"


def test_an_unchanged_lock_has_no_difference_and_its_text_is_stable() -> None:
    assert compare_locks(lock_of(BASE), lock_of(BASE)) == []
    assert lock_text(lock_of(BASE)) == lock_text(lock_of(BASE))


# -- through the command line ------------------------------------------------------------


def _cli(*args: str) -> Any:
    return runner.invoke(
        app, ["inventory", "--registry", REGISTRY_REF, "--policy", args[0], *args[1:]]
    )


def test_lock_then_check_passes_and_a_grown_policy_fails(tmp_path: Path) -> None:
    lock = tmp_path / "effects.lock"
    assert _cli(POLICY_ARG, "--all", "--lock", str(lock)).exit_code == 0
    assert read_lock(lock).selection.every_principal
    unchanged = _cli(POLICY_ARG, "--check", str(lock))
    assert unchanged.exit_code == 0, unchanged.output
    assert "unchanged" in unchanged.output

    grown = tmp_path / "grown.toml"
    text = POLICY.read_text().replace(
        "spend_limits = { USD = 50000 }", "spend_limits = { USD = 90000 }"
    )
    text = text.replace('id = "no-fetch"\naction = "deny"', 'id = "no-fetch"\naction = "allow"')
    grown.write_text(text + '\n[sandbox]\nlanguage_mode = "full"\n')
    result = _cli(str(grown), "--check", str(lock))
    assert result.exit_code == 1, result.output
    assert "spend limit USD: 50000 → 90000" in result.output
    assert "principal:bob web_page_fetch: new_tool" in result.output
    assert "sandbox_widened: language_mode restricted → full" in result.output
    assert "grew" in result.output

    shrunk = tmp_path / "shrunk.toml"
    shrunk.write_text(POLICY.read_text().replace('"network(*.cdn.example.net)",\n', ""))
    result = _cli(str(shrunk), "--check", str(lock))
    assert result.exit_code == 0, result.output
    assert "SHRINK" in result.output
    assert "did not grow" in result.output


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "cannot read"),
        ("{not json", "not JSON"),
        ('{"lock_version": 1}', "lock version 1 is older"),
        ('{"lock_version": 3}', "not an effect lock"),
        ("[" * 100_000 + "]" * 100_000, "nested too deep"),
        ('{"lock_version": ' + "9" * 5000 + "}", "a number too long"),
        ('{"lock_version": NaN}', "'NaN', which is not a number"),
        ('{"lock_version": -Infinity}', "'-Infinity', which is not a number"),
    ],
)
def test_a_bad_lock_file_is_a_usage_error(tmp_path: Path, content: str | None, reason: str) -> None:
    lock = tmp_path / "effects.lock"
    if content is not None:
        lock.write_text(content)
    result = _cli(POLICY_ARG, "--check", str(lock))
    assert result.exit_code == 2
    assert "error (lock_file)" in result.output
    assert reason in result.output


# what stands where the lock file goes -> whether --lock writes it; either way nothing else
# is left beside it (no temporary file, complete or not)
LOCK_TARGETS = [
    ("nothing", True),
    ("an older lock file", True),
    ("an empty directory", False),
    ("a directory with a file in it", False),
    ("nothing, by a name as long as a name can be", True),
    ("nothing, by a name as long as a name can be, in two-byte letters", True),
]


@pytest.mark.parametrize(("target", "written"), LOCK_TARGETS)
def test_a_lock_write_leaves_nothing_else_behind(
    tmp_path: Path, target: str, written: bool
) -> None:
    letter = "é" if "two-byte" in target else "e"  # (NAME_MAX counts bytes)
    long_name = "as long as a name can be" in target
    room = (255 - len(".lock")) // len(letter.encode())
    name = letter * room + ".lock" if long_name else "effects.lock"
    lock = tmp_path / name
    if target == "an older lock file":
        lock.write_text("old")
    elif not target.startswith("nothing"):
        lock.mkdir()
        if "file" in target:
            (lock / "kept").write_text("kept")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = _cli(POLICY_ARG, "--all", "--lock", str(lock))
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    if written:
        assert result.exit_code == 0, result.output
        assert read_lock(lock).selection.every_principal
        assert after == [Path(name)]
    else:
        assert result.exit_code == 2, result.output
        assert "error (lock_file)" in result.output
        assert "cannot write the lock file" in result.output
        assert after == before


_MODEL = f'"locked_as": "{ANTHROPIC_URL}"'

# an edit of a good lock's text -> what the refusal says
HOSTILE_LOCKS: dict[str, tuple[Callable[[str], str], str]] = {
    # JSON reads a lone surrogate escape, which no UTF-8 output can print.
    "a lone surrogate escape": (
        lambda text: text.replace(_MODEL, _MODEL[:-1] + '\\ud800"'),
        "holds text that is not Unicode",
    ),
    "a lone low surrogate in a key": (
        lambda text: text.replace('"model provider": {', '"model provider\\udfff": {'),
        "holds text that is not Unicode",
    ),
    "a surrogate pair is Unicode": (
        lambda text: text.replace(_MODEL, _MODEL[:-1] + '\\ud83d\\ude00"'),
        "connection_changed: model provider",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_LOCKS))
def test_a_hostile_lock_file_is_refused_or_read(tmp_path: Path, case: str) -> None:
    edit, shown = HOSTILE_LOCKS[case]
    good = tmp_path / "good.lock"
    assert _cli(POLICY_ARG, "--all", "--lock", str(good)).exit_code == 0
    text = good.read_text()
    assert _MODEL in text
    lock = tmp_path / "effects.lock"
    lock.write_text(edit(text))
    result = _cli(POLICY_ARG, "--check", str(lock))
    assert "Traceback" not in result.output
    assert shown in result.output
    assert result.exit_code == (2 if "not Unicode" in shown else 1), result.output
    if result.exit_code == 2:
        assert "error (lock_file)" in result.output


def test_a_new_tenants_credential_is_growth_for_a_principal_in_any_tenant() -> None:
    changes = compare_locks(lock_of(_PER_TENANT(BASE)), lock_of(_ONE_MORE_TENANT(BASE)))
    grown = {(c.subject, c.tool, c.kind, c.detail) for c in changes if c.direction == "growth"}
    assert grown == {
        ("principal:*", name, "new_credential", "BILLING_KEY_INITECH") for name in (GET, LIST)
    }


# a lock's selection as an earlier version wrote it -> as --check reads it
EARLIER_SELECTIONS = [
    ({"tenant": ""}, {"tenant": None}),  # an empty --tenant= then meant none given
    ({"principals": ["alice", ""]}, {"principals": ("alice", "*")}),  # "" then meant "*"
    ({"tenant": "acme", "principals": ["alice"]}, {"tenant": "acme", "principals": ("alice",)}),
]


@pytest.mark.parametrize(("written", "meant"), EARLIER_SELECTIONS)
def test_a_lock_written_with_empty_ids_is_checked_as_it_was_meant(
    written: dict[str, Any], meant: dict[str, Any]
) -> None:
    base = {"every_principal": False, "principals": [], "roles": [], "tenant": None}
    selection = Selection.model_validate({**base, **written}).as_meant()
    assert {key: getattr(selection, key) for key in meant} == meant


def test_check_reads_an_earlier_lock_written_with_an_empty_tenant(tmp_path: Path) -> None:
    lock = tmp_path / "effects.lock"
    assert _cli(POLICY_ARG, "--all", "--lock", str(lock)).exit_code == 0
    written = read_lock(lock)
    earlier = written.model_copy(update={"selection": written.selection.model_copy(
        update={"tenant": ""}
    )})  # fmt: skip
    write_lock(earlier, lock)

    result = _cli(POLICY_ARG, "--check", str(lock))

    assert result.exit_code == 0, result.output
    assert "unchanged" in result.output
