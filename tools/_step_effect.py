"""What a claimed step sends: its tool's write contract, and the effect that was approved,
rebuilt from the ledger."""

from __future__ import annotations

from pydantic import BaseModel

from airlock.tools._errors import UpstreamError
from airlock.tools._preview import Preview, canonical_json
from airlock.tools._spec import ToolSpec
from airlock.tools._write_contract import WriteContract

__all__ = ["contract_of", "effect_of"]


def contract_of(spec: ToolSpec) -> WriteContract:
    """The write contract of ``spec``.

    Raises:
        UpstreamError: ``spec`` is no write tool's.
    """
    if spec.write is None:  # the registry routes only write tools here
        raise UpstreamError(detail=f"{spec.name} is not a write tool")
    return spec.write


def effect_of(contract: WriteContract, preview: Preview) -> BaseModel:
    """The approved effect, rebuilt from the ledger (never recomputed). From its JSON form, as
    JSON: a strict model takes back what JSON spells as strings (dates, decimals).

    Raises:
        ValueError: the stored effect does not build the model (a pydantic
            ``ValidationError``), or holds NaN.
    """
    return contract.effect_model.model_validate_json(canonical_json(preview.effect))
