"""``dataclasses.dataclass`` and ``dataclasses.make_dataclass`` as a ``restricted`` program gets
them: checked stand-ins (``airlock_language_guard.substitute`` hands them out).

dataclasses formats each field's name into the source of the methods it makes and runs that
source with the globals of the class's module, or with the real builtins when
``cls.__module__`` is not in ``sys.modules`` (a program's classes). A name of the program's
choosing, such as an ``__annotations__`` key given to a metaclass or to ``typing.TypedDict``,
then runs as Python outside the guards. So every name dataclasses will format must be an
identifier a program could write itself, of exactly ``str``; the fields a base brings must come
from a dataclass made here; and the class's metaclass must be one of the standard library's,
whose attribute look-ups the program cannot answer differently from one read to the next.

Registering the program's namespace in ``sys.modules`` would not help: the generated methods
need ``super``, ``type``, ``hash`` and ``NotImplemented``, which the guarded builtins lack, and
source compiled outside RestrictedPython reaches every class through ``().__class__`` whatever
its builtins are. The names are the boundary.

Standard library only; shipped in the image next to the runner.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from typing import Any

    from airlock.sandbox.guest.airlock_language_classes import check_base, trusted_metaclasses
else:  # in the image, the guest's modules sit side by side on the runner's path
    from airlock_language_classes import check_base, trusted_metaclasses

_FIELDS = "__dataclass_fields__"
_made: dict[int, object] = {}
"""The fields tables of the dataclasses made here, by id (holding them keeps the ids theirs).
The program holds none of them: it cannot read ``__dataclass_fields__``."""


def _check_name(name: object, what: str) -> None:
    import keyword

    # Exactly str: a subclass of the program's formats and answers isidentifier as it likes.
    if type(name) is not str:
        raise ValueError(
            f"the {what} name {name!r} is not a plain string, which restricted mode "
            "requires: give each name as a str literal"
        )
    if name != "_" and name.startswith("_"):
        raise ValueError(
            f"the {what} name {name!r} starts with '_', which restricted mode does not "
            "allow: name it without a leading underscore"
        )
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(
            f"the {what} name {name!r} is not an identifier a program could write, which "
            "restricted mode requires of a dataclass field"
        )


def _check_class(cls: object, what: str) -> None:
    """A class dataclasses may read: a standard metaclass, and bases' fields made here."""
    import dataclasses

    if not isinstance(cls, type):
        raise TypeError(
            f"{what} {cls!r} is not a class: restricted mode makes dataclasses of classes only"
        )
    if type(cls) not in trusted_metaclasses():
        raise TypeError(
            f"{what} {cls.__name__!r} has the metaclass {type(cls).__name__!r}, which "
            "restricted mode does not make dataclasses of: use dataclasses.make_dataclass"
        )
    check_base(cls, what)  # and not a metaclass itself
    for klass in cls.__mro__:
        fields = type.__getattribute__(klass, "__dict__").get(_FIELDS)
        if fields is None:
            continue
        if _made.get(id(fields)) is not fields:
            raise TypeError(
                f"the base {klass.__name__!r} of {what} {cls.__name__!r} has dataclass "
                "fields restricted mode did not make: derive only from dataclasses "
                "the program made"
            )
        for field in fields.values():  # type: ignore[attr-defined]  # a dict made here
            if type(field) is not dataclasses.Field:
                raise TypeError(f"the base {klass.__name__!r} has a field that is not a Field")
            _check_name(field.name, "field")


def _remember(cls: Any) -> Any:
    fields = type.__getattribute__(cls, "__dict__").get(_FIELDS)
    if fields is not None:
        _made[id(fields)] = fields
    return cls


def _decorate(cls: Any, options: dict[str, Any]) -> Any:
    import dataclasses

    _check_class(cls, "the class")
    own = type.__getattribute__(cls, "__dict__").get("__annotations__")
    if own is not None:
        if type(own) is not dict:
            raise TypeError(
                f"the annotations of {cls.__name__!r} are a {type(own).__name__}, not a "
                "dict: restricted mode makes dataclasses of class statements only"
            )
        # A copy the program does not hold: what is checked is what dataclasses reads, even
        # if the program's code runs meanwhile (a default's descriptor).
        checked = dict(own)
        for name in checked:
            _check_name(name, "field")
        type.__setattr__(cls, "__annotations__", checked)
    return _remember(dataclasses.dataclass(cls, **options))


def dataclass(cls: Any = None, /, **options: Any) -> Any:
    """``dataclasses.dataclass`` (as ``@dataclass`` and ``@dataclass(...)``) of a class whose
    fields are names a program could write, with a standard metaclass."""
    if cls is None:
        return lambda cls: _decorate(cls, options)
    return _decorate(cls, options)


def make_dataclass(cls_name: str, fields: Any, **options: Any) -> Any:
    """``dataclasses.make_dataclass`` with no field or namespace name that starts with ``_``
    (a program could not write one, and an object with ``__globals__`` of its choosing
    stands in for a function where the standard library reads one), and bases as
    :func:`dataclass` takes them.

    The class is made here and decorated as :func:`dataclass` decorates one, which checks its
    annotations as dataclasses reads them: a base's ``__init_subclass__`` runs while the class
    is made, after the names given here were checked."""
    import types

    checked = [field if isinstance(field, str) else tuple(field) for field in fields]
    namespace = dict(options.pop("namespace", None) or {})
    names = [field if isinstance(field, str) else field[0] for field in checked]
    for name in [cls_name, *names, *namespace]:
        # Exactly str: a subclass of the program's answers startswith as it likes, and
        # dataclasses formats a field's name into the source it runs with the real builtins.
        if type(name) is not str:
            raise ValueError(
                f"the class, field or namespace name {name!r} is not a plain string, which "
                "restricted mode requires: give each name as a str literal"
            )
        if name.startswith("_"):
            raise ValueError(
                f"the field or namespace name {name!r} starts with '_', which restricted "
                "mode does not allow: name it without a leading underscore"
            )
    bases = tuple(options.pop("bases", None) or ())
    for base in bases:
        # A class each (not an alias whose __mro_entries__ picks one), read as dataclass reads.
        _check_class(base, "the base")
    annotations: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    for field in checked:  # as dataclasses.make_dataclass reads them
        if isinstance(field, str):
            name, kind = field, "typing.Any"
        elif len(field) in (2, 3):
            name, kind = field[:2]
            if len(field) == 3:
                defaults[name] = field[2]
        else:
            raise TypeError(f"Invalid field: {field!r}")
        if name in annotations:
            raise TypeError(f"Field name duplicated: {name!r}")
        annotations[name] = kind

    def body(ns: dict[str, Any]) -> None:
        ns.update(namespace)
        ns.update(defaults)
        ns["__annotations__"] = annotations

    return _decorate(types.new_class(cls_name, bases, {}, body), options)


__all__ = ["dataclass", "make_dataclass"]
