"""The effect vocabulary: what a tool call may do, as data.

Five kinds, built with one constructor each::

    read("billing:invoice/{invoice_id}")              read a resource
    write("billing:refund/{invoice_id}")              change a resource
    network("api.stripe.com")                         reach a network destination
    spend("{amount_minor}", currency="{currency}")    spend money (minor units, :mod:`._spend`)
    disclose("email:{recipient}")                     show data to someone outside the tenant

A *target* is a resource (``service:object/...``) for ``read``/``write``, and a destination
for ``network``/``disclose``; for ``spend`` it is the currency (or ``{field}``). Targets may hold
placeholders naming a field of the tool's validated input, and the wildcards of
:mod:`airlock.policies._patterns` (``*``, ``**``) for tools that touch many records at once.
:meth:`Effect.resolve_all` substitutes the placeholders of a call. Three forms:

``{field}``       one segment: a value that is not one safe segment (``../admin``, ``a/b``,
                  ``*``) or leaves two ``@`` in its segment (``eve@evil.example`` in
                  ``email:{local}@acme.com``) is refused, so no argument can widen a target.
                  An ``email:`` domain is read as a mail server reads it (:mod:`._network`).
                  A str or an int of at most 200 characters fills it, or an enum member
                  holding one (its value).
``{field[]}``     a list field: one effect per element, each element one segment as above
                  (``disclose("email:{recipients[]}")``); at most one per effect.
``network({url})`` a placeholder that is a ``network`` effect's whole target takes a full
                  URL (or one host name): the effect reaches ``scheme://host[:port]/path``,
                  matched against grant patterns part by part (:mod:`._network`), and its
                  declared pattern is ``**`` (any URL the grant allows). ``{urls[]}`` too.
                  A placeholder in a ``network`` host is read as a URL's host is
                  (``https://{host}/x``: lower case, no final dot, no IPv4 in another form),
                  and a value fills only its part of the URL (a port digits, a host no ``@``:
                  :mod:`._placeholders`). A declared host and port are kept as a connection
                  reads them (``host.:0443`` is ``host:443``: :mod:`._target_checks`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Final, Literal, get_args

from airlock.policies._mail import mail_target
from airlock.policies._network import host_target, url_target
from airlock.policies._placeholders import PLACEHOLDER as _PLACEHOLDER
from airlock.policies._placeholders import PlacedValueError, check_network_value, placed_network
from airlock.policies._placeholders import target_parts as _parts
from airlock.policies._spend import SpendValueError, check_spend, parse_spend, spent
from airlock.policies._target_checks import checked_target

__all__ = [
    "EFFECT_KINDS",
    "SIDE_EFFECT_KINDS",
    "Effect",
    "EffectArgumentError",
    "EffectKind",
    "disclose",
    "network",
    "read",
    "spend",
    "write",
]

EffectKind = Literal["read", "write", "network", "spend", "disclose"]
EFFECT_KINDS: Final[tuple[EffectKind, ...]] = get_args(EffectKind)
SIDE_EFFECT_KINDS: Final[frozenset[EffectKind]] = frozenset({"write", "spend", "disclose"})
"""Kinds that change the world or let data out: never callable from code, approvable."""

# "\Z", not "$": "$" also matches before a final newline ("inv_1\n" is not one segment).
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_@+-][A-Za-z0-9_.@+-]{0,199}\Z")
_PARSE = re.compile(r"^\s*(read|write|network|spend|disclose)\((.+)\)\s*\Z")
_RESOLVED = re.compile(r"[!-z|~]+")  # printable ASCII but { and }: no placeholder


class EffectArgumentError(ValueError):
    """An argument cannot fill a placeholder of an effect (it is not one safe segment)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


MAX_LIST_EFFECTS: Final = 1000
"""Most effects one ``{field[]}`` placeholder expands to in one call."""


@dataclass(frozen=True, slots=True)
class Effect:
    """One thing a tool call may do. Build with :func:`read`, :func:`write` and the rest."""

    kind: EffectKind
    """Which of the five kinds."""
    target: str
    """Resource, destination or (for ``spend``) currency; may hold placeholders and wildcards
    (a spend's currency is three upper-case letters, or one ``{field}``)."""
    amount: int | str | None = None
    """``spend`` only: minor units, or ``"{field}"`` naming an integer input field."""
    placeholders: frozenset[str] = field(init=False, repr=False, compare=False)
    """Input fields this effect reads its target or amount from."""
    each: str | None = field(init=False, repr=False, compare=False)
    """The list field of a ``{field[]}`` placeholder: one effect per element."""
    takes_url: bool = field(init=False, repr=False, compare=False)
    """A ``network`` effect whose whole target is one placeholder: its value is a URL."""

    def __post_init__(self) -> None:
        if self.kind not in EFFECT_KINDS:
            raise ValueError(f"unknown effect kind {self.kind!r}; use one of {EFFECT_KINDS}")
        found = _PLACEHOLDER.findall(self.target)
        names = {name for name, _ in found}
        lists = sorted({name for name, brackets in found if brackets})
        if len(lists) > 1:
            raise ValueError(
                f"{self.kind} target {self.target!r} expands {lists}; an effect may expand "
                "one list placeholder: declare one effect per list"
            )
        if lists and any(name == lists[0] and not brackets for name, brackets in found):
            raise ValueError(
                f"{self.kind} target {self.target!r} names {lists[0]!r} both as a list "
                "and as one value"
            )
        if self.kind == "spend":
            names.update(check_spend(self.target, self.amount))
        else:
            if self.amount is not None:
                raise ValueError(f"only spend effects carry an amount, not {self.kind!r}")
            object.__setattr__(self, "target", checked_target(self.kind, self.target))
        object.__setattr__(self, "placeholders", frozenset(names))
        object.__setattr__(self, "each", lists[0] if lists else None)
        whole = self.kind == "network" and _PLACEHOLDER.fullmatch(self.target) is not None
        object.__setattr__(self, "takes_url", whole)

    @property
    def is_side_effect(self) -> bool:
        """Whether this is a ``write``, ``spend`` or ``disclose`` effect."""
        return self.kind in SIDE_EFFECT_KINDS

    @property
    def pattern(self) -> str:
        """The target with each placeholder read as ``*`` (what the declaration may reach);
        ``**`` for a URL placeholder (any URL)."""
        if self.takes_url:
            return "**"
        return _PLACEHOLDER.sub("*", self.target)

    def resolve(self, args: Mapping[str, object]) -> Effect:
        """The concrete effect of one call whose validated input is ``args``.

        Raises:
            EffectArgumentError: a placeholder's value is missing or not one safe segment,
                or the effect expands a list (use :meth:`resolve_all`).
        """
        if not self.placeholders:
            return self
        if self.each is not None:
            raise EffectArgumentError(self.each, "is a list placeholder; use resolve_all")
        if self.amount is not None:  # a spend: minor units and a currency, not segments
            try:
                return _concrete_effect("spend", *spent(self.amount, self.target, args))
            except SpendValueError as exc:
                raise EffectArgumentError(exc.field, exc.reason) from None
        # A loop, not a generator, and one safe segment taken as it is: this runs for every
        # admitted call. Anything else (a number, a URL, a refusal, any network value: it
        # must fit its part of the URL) is :meth:`_value`'s.
        pieces = []
        for literal, name in _parts(self.target):
            if name is None:
                pieces.append(literal)
                continue
            value = args.get(name, _MISSING)
            if (
                type(value) is str
                and self.kind != "network"
                and _SAFE_VALUE.match(value) is not None
                and value.count("@") <= 1
            ):
                pieces.append(value)
            else:
                pieces.append(self._value(name, value))
        return self._concrete("".join(pieces))

    def resolve_all(self, args: Mapping[str, object]) -> tuple[Effect, ...]:
        """The concrete effects of one call: one, or one per element of a ``{field[]}``
        placeholder's list (none for an empty list).

        Raises:
            EffectArgumentError: as :meth:`resolve`; or the list field's value is not a
                list of at most :data:`MAX_LIST_EFFECTS` elements.
        """
        if self.each is None:
            return (self.resolve(args),)
        values = args.get(self.each, _MISSING)
        if values is _MISSING:
            raise EffectArgumentError(self.each, "is required by the tool's declared effects")
        if not isinstance(values, list | tuple):
            raise EffectArgumentError(self.each, "must be a list (its effect is {...[]})")
        if len(values) > MAX_LIST_EFFECTS:
            raise EffectArgumentError(
                self.each, f"has {len(values)} elements; at most {MAX_LIST_EFFECTS}"
            )
        parts = _parts(self.target)
        out: dict[Effect, None] = {}  # one effect per distinct target, in list order
        for item in values:
            target = "".join(
                literal
                if name is None
                else self._value(name, item if name == self.each else args.get(name, _MISSING))
                for literal, name in parts
            )
            out[self._concrete(target)] = None
        return tuple(out)

    def resolver(self) -> Callable[[Mapping[str, object]], tuple[Effect, ...]]:
        """:meth:`resolve_all` of this effect, made once for every call to come (a registry
        makes one per declared effect): the same effects, and the same errors.

        An effect without placeholders resolves to itself; one ``{field}`` placeholder in a
        resource takes a safe segment as it is, with the parts around it read once; every
        other value and every other form goes through :meth:`resolve_all`.
        """
        if not self.placeholders:
            itself = (self,)
            return lambda args: itself
        parts = _parts(self.target)
        if self.kind not in ("read", "write") or len(parts) != 3 or self.each:
            return self.resolve_all
        (before, _), (_, name), (after, _) = parts
        assert name is not None  # (the middle part of three is the placeholder)
        # The "@" the template puts in the placeholder's segment leave fewer to its value.
        ats = 1 - before.rsplit("/", 1)[-1].count("@") - after.split("/", 1)[0].count("@")
        if ats < 0:
            return self.resolve_all
        kind, safe, slow = self.kind, _SAFE_VALUE.match, self.resolve

        def resolve(args: Mapping[str, object]) -> tuple[Effect, ...]:
            value = args.get(name, _MISSING)
            # The test of resolve(); first a cheaper one that passes only values it passes
            # too (an ASCII identifier of at most 200 characters: letters, digits and "_",
            # not starting with a digit, no "@"), as most ids are. Anything else: resolve()'s.
            if type(value) is str and (
                (value.isascii() and value.isidentifier() and len(value) <= 200)
                or (safe(value) is not None and value.count("@") <= ats)
            ):
                return (_concrete_effect(kind, before + value + after, None),)
            return (slow(args),)

        return resolve

    def _value(self, name: str, value: object) -> str:
        if value is _MISSING:
            raise EffectArgumentError(name, "is required by the tool's declared effects")
        if isinstance(value, Enum):  # a field typed as an enum arrives as its member
            value = value.value
        if not self.takes_url:
            segment = _segment(name, value)
            if self.kind == "network":
                try:
                    check_network_value(self.target, name, segment)
                except ValueError as exc:
                    raise EffectArgumentError(name, str(exc)) from None
            return segment
        if type(value) is not str:  # (a number would be a host such as 2130706433)
            raise EffectArgumentError(
                name, "must be a URL scheme://host[:port][/path], or one host name"
            )
        try:
            return url_target(value) if "://" in value else host_target(value)
        except ValueError as exc:
            raise EffectArgumentError(name, str(exc)) from None

    def _concrete(self, target: str) -> Effect:
        """The effect on ``target``, this template filled (a value holds no "/", so their
        segments align): no segment with two "@", a network target as
        :func:`placed_network` reads it, an ``email:`` domain as a mail server reads it."""
        kind, template = self.kind, self.target
        if target.count("@") > 1 and not self.takes_url:
            for mine, filled in zip(template.split("/"), target.split("/"), strict=False):
                if filled.count("@") > 1:  # (named: the segment's first placeholder)
                    why = f"would make the segment {filled!r}: at most one '@' in a segment"
                    raise EffectArgumentError(_PLACEHOLDER.findall(mine + template)[0][0], why)
        try:
            if kind == "disclose":
                target = mail_target(target)
            elif kind == "network" and not self.takes_url:
                target = placed_network(template, target)
        except PlacedValueError as exc:
            raise EffectArgumentError(exc.field, exc.reason) from None
        except ValueError as exc:  # (the domain ends a target: its last placeholder)
            raise EffectArgumentError(_PLACEHOLDER.findall(template)[-1][0], str(exc)) from None
        # Built without __post_init__: the template was checked once, every value just now.
        return _concrete_effect(kind, target, None)

    def __str__(self) -> str:
        if self.kind == "spend":
            return f"spend({self.amount} {self.target})"
        return f"{self.kind}({self.target})"

    @classmethod
    def parse(cls, text: str, *, resolved: bool = False) -> Effect:
        """Read the form :func:`str` writes: ``read(billing:invoice/*)``, ``spend(500 USD)``.
        ``resolved``: an effect a call resolved (as a preview keeps it), built as
        :meth:`resolve` builds one, without a declaration's checks (a filled target may be
        over 256 characters); it holds no placeholder, white space or control character.

        Raises:
            ValueError: ``text`` is not an effect (a resolved one); the message says why.
        """
        match = _PARSE.match(text)
        if match is None:
            raise ValueError(
                f"{text!r} is not an effect; write kind(target), for example "
                "'read(billing:invoice/*)', with kind one of " + ", ".join(EFFECT_KINDS)
            )
        kind, inner = match.group(1), match.group(2).strip()
        target, amount = parse_spend(text, inner) if kind == "spend" else (inner, None)
        if not resolved:  # (kind matched the Literal's values)
            return cls(kind, target, amount)  # type: ignore[arg-type]
        if isinstance(amount, str) or not _RESOLVED.fullmatch(target):
            raise ValueError(f"{text!r} is not a resolved effect: a placeholder or white space")
        return _concrete_effect(kind, target, amount)  # type: ignore[arg-type]


_NO_PLACEHOLDERS: Final[frozenset[str]] = frozenset()
_new_object = object.__new__
# The slots of an Effect, set directly: a frozen dataclass sets each field through
# object.__setattr__, which costs more than the rest of resolving a placeholder.
_SET_KIND, _SET_TARGET, _SET_AMOUNT, _SET_PLACEHOLDERS, _SET_EACH, _SET_TAKES_URL = (
    getattr(Effect, name).__set__ for name in Effect.__slots__
)


def _concrete_effect(kind: EffectKind, target: str, amount: int | str | None) -> Effect:
    """A resolved :class:`Effect`, made without its ``__init__`` (its template was checked
    once, its values just now); the same effect ``Effect(kind, target, amount)`` is."""
    made: Effect = _new_object(Effect)
    _SET_KIND(made, kind)
    _SET_TARGET(made, target)
    _SET_AMOUNT(made, amount)
    _SET_PLACEHOLDERS(made, _NO_PLACEHOLDERS)
    _SET_EACH(made, None)
    _SET_TAKES_URL(made, False)
    return made


_MISSING: Final = object()


# The ints whose text fits a segment (200 characters, a "-" too), compared before any is
# converted: Python refuses to write one of over 4,300 digits (a ValueError), and writing a
# long one takes time that grows with its square.
_INT_LOW: Final = -(10**199)
_INT_HIGH: Final = 10**200


def _segment(name: str, value: object) -> str:
    if type(value) is int and _INT_LOW < value < _INT_HIGH:
        return str(value)
    if type(value) is not str or not _SAFE_VALUE.match(value) or value.count("@") > 1:
        raise EffectArgumentError(
            name,
            "must be one id segment: 1-200 letters, digits and _ . @ + - (no '/', no '*', "
            "at most one '@')",
        )
    return value


def read(resource: str) -> Effect:
    """The tool reads ``resource``, e.g. ``read("billing:invoice/{invoice_id}")``."""
    return Effect("read", resource)


def write(resource: str) -> Effect:
    """The tool changes ``resource``; such a tool is never callable from code."""
    return Effect("write", resource)


def network(destination: str) -> Effect:
    """The tool reaches ``destination``: a host or host pattern (``*.example.com``), a URL
    pattern (``https://docs.example.com/**``), or ``"{url}"``, a URL the call names."""
    return Effect("network", destination)


def spend(amount: int | str, *, currency: str = "USD") -> Effect:
    """The tool spends ``amount`` minor units (or the value of field ``"{field}"``) in
    ``currency``: a fixed code, or ``"{field}"`` when the call computes it (a refund in the
    invoice's currency: ``spend("{amount_minor}", currency="{currency}")``)."""
    return Effect("spend", currency, amount)


def disclose(destination: str) -> Effect:
    """The tool shows data to ``destination`` outside the tenant, e.g. ``email:{to}``."""
    return Effect("disclose", destination)
