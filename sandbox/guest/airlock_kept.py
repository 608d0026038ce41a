"""What a kept session's program hands to the next one: its top-level names, as data.

Standard library only. Each program of a kept session runs in a process of its own (see
``airlock_zygote``), so nothing of one program's process reaches the next: no thread, no
child, no patched module. What is kept is explicit:

- files under the working directory ``/tmp`` (the container's own, emptied when it goes);
- top-level names, of three kinds, written to :data:`GLOBALS_FILE` after each program and
  read back before the next one:

  * plain data: ``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``,
    ``bytearray``, ``list``, ``tuple``, ``dict``, ``set``, ``frozenset``, ``OrderedDict``,
    ``Counter``, ``defaultdict`` (of a builtin type), ``deque``, ``datetime``'s ``date``,
    ``datetime``, ``time``, ``timedelta`` and ``timezone``, and ``Decimal``, nested freely;
  * functions defined by a top-level ``def`` without decorators whose defaults are
    literals: their source is kept (annotations left out) and defined again, in the next
    program's own namespace and language mode, so they see its ``tools`` and globals;
  * modules, and what ``from MODULE import NAME`` binds (a function, a class): imported
    again, through the next program's import rules, when its process has the module loaded
    already (the runner loads the default allowed imports, and an image's packages, before
    any program); another must be imported again by the program.

Anything else (a DataFrame, an instance of a program's class, a class, a lambda, an open
file) is not kept: the next program starts without that name, and the program that left it
is told so on its stderr. Keep such values as files under ``/tmp``.

Reading the file back never runs code a program wrote: the data is unpickled with no class
but the plain ones above, building no more than its bytes hold (``airlock_kept_data``; in the
next program's own time, name by name), a kept function is defined (not called) from a source
of at most :data:`MAX_DEFINITION_CHARS` whose ``def`` is as :func:`definition` keeps it
(:func:`restorable`), and no module is imported that is not loaded already, nor any attribute
looked up but where it is stored (``airlock_kept_modules``). What restoring costs is bounded
too: every entry is restored first in a throwaway child, within a share of the memory, and
only what it finished is restored for the program, as long as the trial and restoring again
take a second in all (``airlock_kept_trial``). An
entry refused is left out, and the next program told so on its stderr. The file itself is read
before the next program is known, in one pass and within bounds, whatever stands there
(``airlock_kept_file``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airlock.sandbox.guest.airlock_kept_data import is_plain, loads_data
    from airlock.sandbox.guest.airlock_kept_definitions import (
        MAX_DEFINITION_CHARS,
        MAX_DEFINITIONS_CHARS,
        compiled,
        definition,
        restorable,
        top_level_definitions,
    )
    from airlock.sandbox.guest.airlock_kept_file import (
        NotARegularFile,
        decode_names,
        encode_names,
        read_regular,
        temporary_file,
    )
    from airlock.sandbox.guest.airlock_kept_modules import entry, imported, loaded
    from airlock.sandbox.guest.airlock_kept_trial import COSTLY, TRIAL_SECONDS, UNCHECKED, tried
else:
    from airlock_kept_data import is_plain, loads_data
    from airlock_kept_definitions import (
        MAX_DEFINITION_CHARS,
        MAX_DEFINITIONS_CHARS,
        compiled,
        definition,
        restorable,
        top_level_definitions,
    )
    from airlock_kept_file import (
        NotARegularFile,
        decode_names,
        encode_names,
        read_regular,
        temporary_file,
    )
    from airlock_kept_modules import entry, imported, loaded
    from airlock_kept_trial import COSTLY, TRIAL_SECONDS, UNCHECKED, tried

GLOBALS_FILE = "/tmp/.airlock-globals"
"""Where a kept session's top-level names wait for the next program."""
MAX_KEPT_BYTES = 64 * 1024 * 1024
"""The most the kept names may take in their file: data beyond it is not kept, and a larger
file is not read."""
_NOTE_CHARS = 600
RUN_OWN_BUILTINS = frozenset({"result"})
"""What the runner adds to a program's builtins (``airlock_language``): like the names it
puts in a program's globals (``tools``, the guards), the run's own, never kept nor restored
(a kept ``def result`` would otherwise answer, and call tools, for every later program)."""


class KeptGlobals:
    """The top-level names one kept program starts with and leaves (see the module)."""

    def __init__(self, path: str = GLOBALS_FILE) -> None:
        self.path = path
        self.data: dict[str, bytes] = {}
        self.functions: dict[str, str] = {}
        self.modules: dict[str, str] = {}
        self.restored: dict[str, object] = {}
        """Names defined again from the file -> the object given to the program."""
        self.notes: list[str] = []

    def read(self, *, seconds: float = TRIAL_SECONDS, memory: int | None = None) -> None:
        """Read what the previous program left; a damaged file leaves nothing kept, and so
        does whatever else a program put in its place (see ``airlock_kept_file``). Unless
        nothing is kept, every name is then restored in a child first, within ``memory``
        bytes (by default, a share of the container's): a name it did not restore, or whose
        restoring again would take the trial and :meth:`restore` together over ``seconds``,
        is left out (see ``airlock_kept_trial``)."""
        try:
            names = decode_names(read_regular(self.path, MAX_KEPT_BYTES))
        except FileNotFoundError:
            return
        except NotARegularFile as exc:
            self.notes.append(f"the kept names could not be read ({exc})")
            return
        except Exception as exc:  # whatever the previous program wrote there
            self.notes.append(f"the kept names could not be read ({type(exc).__name__})")
            return
        self.data, self.functions, self.modules = names
        total = 0
        for name, source in list(self.functions.items()):
            total += len(source)
            if total > MAX_DEFINITIONS_CHARS:
                del self.functions[name]
                over = f"over {MAX_DEFINITIONS_CHARS:,} characters in all"
                self.notes.append(f"{name} (its definition is refused here: {over})")
        self._try_ahead(seconds, memory)

    def _try_ahead(self, seconds: float, memory: int | None) -> None:
        """Restore every name in a child first (see :meth:`read`), in :meth:`restore`'s
        order; leave out what it did not restore within the bounds."""
        entries: list[tuple[dict[str, Any], str, Callable[[], object]]] = []
        for name, where in self.modules.items():
            entries.append((self.modules, name, functools.partial(_module, where)))
        for name, source in self.functions.items():
            entries.append((self.functions, name, functools.partial(compiled, name, source)))
        for name, blob in self.data.items():
            entries.append((self.data, name, functools.partial(loads_data, blob)))
        if not entries:  # (no child to make: the runs of a session that keeps nothing)
            return
        outcomes = tried([step for _, _, step in entries], seconds=seconds, memory=memory)
        costly = False
        for (kind, name, _), outcome in zip(entries, outcomes, strict=True):
            if outcome == UNCHECKED:
                self.notes.append(f"{name} (not restored: the kept names could not be checked)")
            elif outcome == COSTLY:
                after = "left out after a name too costly to restore"
                self.notes.append(f"{name} ({after if costly else 'too costly to restore here'})")
                costly = True
            else:
                continue
            del kind[name]

    def restore(
        self,
        namespace: dict[str, Any],
        compile_definition: Callable[[str], Any],
        guard: Callable[[object], str | None] | None = None,
    ) -> None:
        """Put the kept names into ``namespace``: modules imported through its own
        ``__import__``, functions defined by ``compile_definition(source)`` (code to run in
        it), data unpickled. ``guard`` (a restricted program's) says why the program may not
        hold a value; such a value is not restored.

        A kept name never takes the place of the run's own: a name ``namespace`` holds
        already (``tools``, the guards) or :data:`RUN_OWN_BUILTINS`. Nor, for a restricted
        program, a name beginning with ``_``: it cannot name one itself (RestrictedPython
        refuses them), so such a name could only stand in for a guard."""
        own = set(namespace) | RUN_OWN_BUILTINS
        for name in [*self.modules, *self.functions, *self.data]:
            if name in own or name.startswith("__"):
                self.notes.append(f"{name} (the run's own name)")
            elif guard and name.startswith("_"):
                self.notes.append(f"{name} (a name restricted mode refuses)")
            else:
                continue
            for kind in (self.modules, self.functions, self.data):
                kind.pop(name, None)
        builtins = namespace.get("__builtins__")
        importer: Callable[..., Any] = __import__
        if isinstance(builtins, dict) and callable(builtins.get("__import__")):
            importer = builtins["__import__"]
        for name, where in self.modules.items():
            refused: str | None = "not loaded ahead of the program (importing it would run it)"
            try:
                if loaded(where):
                    value = imported(where, importer, namespace)
                    refused = guard(value) if guard else None
            except Exception:
                refused = "not importable here"
            if refused:
                self.notes.append(f"{name} ({where} is {refused})")
                continue
            namespace[name] = value
            self.restored[name] = value
        for name, source in list(self.functions.items()):
            try:
                checked = restorable(name, source)
                if checked is None:
                    raise ValueError(f"{name} is not a def as it is kept")
                exec(compile_definition(checked), namespace)
            except Exception:  # whatever a program wrote (a source too deeply nested to parse)
                self.notes.append(f"{name} (its definition is refused here)")
                continue
            self.functions[name] = checked
            self.restored[name] = namespace.get(name)
        for name, blob in self.data.items():
            try:
                value = loads_data(blob)
            except Exception:
                self.notes.append(f"{name} (its data is refused here)")
                continue
            namespace[name] = value
            self.restored[name] = value

    def keep(
        self,
        namespace: dict[str, Any],
        *,
        fresh: set[str],
        defined: dict[str, tuple[int, str]],
        program_file: str,
    ) -> None:
        """Write ``namespace``'s top-level names (but ``fresh``, the run's own bindings) for
        the next program; ``defined`` are this program's keepable definitions."""
        data: dict[str, bytes] = {}
        functions: dict[str, str] = {}
        modules: dict[str, str] = {}
        dropped: list[str] = []
        sources = 0
        for name, value in namespace.items():
            if not isinstance(name, str):  # (``globals()[1] = ...``)
                dropped.append(f"{name!r} (not a name)")
                continue
            if name in fresh or name.startswith("__"):
                continue
            if name in RUN_OWN_BUILTINS:
                dropped.append(f"{name} (the run's own name)")
            elif (where := entry(value)) is not None:
                modules[name] = where
            elif isinstance(value, types.ModuleType):
                dropped.append(f"{name} (a module not imported under its name)")
            elif isinstance(value, types.FunctionType):
                source = self._function_source(name, value, defined, program_file)
                if source is None:
                    dropped.append(f"{name} (a function defined otherwise than by a plain def)")
                elif len(source) > MAX_DEFINITION_CHARS:
                    dropped.append(
                        f"{name} (a definition over {MAX_DEFINITION_CHARS:,} characters)"
                    )
                elif (sources := sources + len(source)) > MAX_DEFINITIONS_CHARS:
                    over = f"with the other definitions, over {MAX_DEFINITIONS_CHARS:,} characters"
                    dropped.append(f"{name} ({over})")
                else:
                    functions[name] = source
            elif is_plain(value):
                try:
                    data[name] = pickle.dumps(value, protocol=5)
                except Exception:
                    dropped.append(name)
            else:
                dropped.append(f"{name} ({type(value).__name__})")
        payload = encode_names(data, functions, modules)
        if len(payload) > MAX_KEPT_BYTES:
            over = f"with the other data, over {MAX_KEPT_BYTES:,} bytes"
            dropped.extend(f"{name} ({over})" for name in data)
            payload = encode_names({}, functions, modules)
        self._write(payload)
        if dropped:
            self.notes.append(", ".join(sorted(dropped)))

    def _write(self, payload: bytes) -> None:
        """Put ``payload`` where the names wait, or nothing at all (raising ``OSError``).

        The previous names go first: ``/tmp``, a small tmpfs, need not hold them and these at
        once (names of half its size could never be written again), and names not written
        leave nothing kept, never an older program's. ``payload`` is written aside and moved
        in whole, so a process ended midway leaves no file cut short where the names wait (the
        zygote removes the one aside: ``airlock_kept_file.clear_way``)."""
        temporary = temporary_file(self.path)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            with open(temporary, "wb") as file:
                file.write(payload)
            os.replace(temporary, self.path)
        except OSError:
            for leftover in (temporary, self.path):
                with contextlib.suppress(OSError):  # (a directory stays for the zygote)
                    os.unlink(leftover)
            raise

    def _function_source(
        self,
        name: str,
        value: types.FunctionType,
        defined: dict[str, tuple[int, str]],
        program_file: str,
    ) -> str | None:
        if self.restored.get(name) is value:
            return self.functions.get(name)
        code = value.__code__
        entry = defined.get(name)
        if (
            entry is None
            or code.co_filename != program_file
            or code.co_name != name
            or code.co_firstlineno != entry[0]
        ):
            return None
        return entry[1]

    def note(self) -> str:
        """A line for the program's stderr naming what the next program will not have."""
        if not self.notes:
            return ""
        text = "; ".join(self.notes)
        if len(text) > _NOTE_CHARS:
            text = text[:_NOTE_CHARS] + "..."
        return (
            f"\n[airlock] not kept for the next program: {text}. Only plain data, plain "
            "functions and imported modules are kept; write other values to files in /tmp.\n"
        )


def _module(where: str) -> object:
    """What restoring the module entry ``where`` does, with the plain ``__import__``."""
    return imported(where, __import__, {}) if loaded(where) else None


__all__ = [
    "GLOBALS_FILE",
    "MAX_DEFINITIONS_CHARS",
    "MAX_DEFINITION_CHARS",
    "MAX_KEPT_BYTES",
    "RUN_OWN_BUILTINS",
    "KeptGlobals",
    "definition",
    "is_plain",
    "loads_data",
    "restorable",
    "top_level_definitions",
]
