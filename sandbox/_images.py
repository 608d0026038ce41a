"""The sandbox images and what each holds beyond the standard library.

``base`` (``airlock-sandbox``, ``Dockerfile.sandbox``): Python 3.11, the guest runner and its
two packages (RestrictedPython, pyseccomp). ``data`` (``airlock-sandbox-data``,
``Dockerfile.data``, built on the base by ``sandbox/image/build-data.sh``): the same, plus
:data:`DATA_PACKAGES`, at exactly these versions (the build downloads these wheels on the
host; nothing is fetched inside the build). The image records them in a label
(:data:`PACKAGES_LABEL`), which ``airlock doctor`` compares with this list.

Why these and no more: numpy, pandas and pyarrow load, join, filter and aggregate tables
(CSV, Parquet, Arrow, JSON); matplotlib draws charts into files; the rest are what they
import. scipy and duckdb were left out: neither is needed to load, join, filter or aggregate
(pandas does all four), and together they would add about 150 MB to every data container's
image and a second query engine with its own threads to keep within the pids limit. An
operator who needs them adds them here and to the build (see ``docs/data.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

__all__ = ["DATA_IMPORTS", "DATA_PACKAGES", "IMAGE_LABEL", "PACKAGES_LABEL", "packages_text"]

DATA_PACKAGES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "numpy": "2.4.6",
        "pandas": "3.1.1",
        "pyarrow": "26.0.1",
        "matplotlib": "3.11.2",
        # what those import
        "contourpy": "1.3.3",
        "cycler": "0.12.1",
        "fonttools": "4.68.0",
        "kiwisolver": "1.5.1",
        "packaging": "26.4",
        "pillow": "13.0.0",
        "pyparsing": "3.3.3",
        "python-dateutil": "4.0.0",
        "tzdata": "2026.6",
    }
)
"""Package -> version in the data image: its wheels, downloaded on the host."""

DATA_IMPORTS: Final[tuple[str, ...]] = (
    "numpy",
    "pyarrow",
    "pandas",
    "matplotlib",
    "matplotlib.pyplot",
)
"""Imported by a data image's runner while it warms up, before any run: a program's
``import pandas`` then costs nothing."""

IMAGE_LABEL: Final = "io.airlock.image"
"""The label naming an image's kind (``base`` or ``data``)."""
PACKAGES_LABEL: Final = "io.airlock.packages"
"""The label listing an image's added packages, ``name==version`` separated by spaces."""


def packages_text(packages: Mapping[str, str]) -> str:
    """``name==version`` pairs, sorted, separated by spaces (the label's form)."""
    return " ".join(f"{name}=={version}" for name, version in sorted(packages.items()))
