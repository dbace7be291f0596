"""Validation helpers and JSON round trip shared by every frozen config dataclass.

A bad value raises ``ValueError`` naming the owner and field, the value and what is allowed.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, fields
from typing import Any, TypeVar

# The largest size or count a config takes (2^31 - 1): larger ones overflow the 32-bit
# indices of kernels and libraries before any memory check could name them (--d-model 2**63
# ended in a C++ backtrace); what fits in memory is checked when a model is built.
MAX_SIZE = 2**31 - 1


def require_positive(owner: str, name: str, value: Any, most: int = MAX_SIZE) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{owner}.{name}={value!r} is invalid: it must be a positive integer")
    if value > most:
        raise ValueError(f"{owner}.{name}={value:,} is invalid: at most {most:,}")


def require_non_negative(owner: str, name: str, value: Any, integer: bool = False) -> None:
    """``value`` must be a number >= 0 (an integer with ``integer``)."""
    kinds = (int,) if integer else (int, float)
    if (isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value)
            or value < 0):  # fmt: skip
        kind = "integer" if integer else "finite number"
        raise ValueError(f"{owner}.{name}={value!r} is invalid: it must be a non-negative {kind}")


def require_choice(owner: str, name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{owner}.{name}={value!r} is invalid: choose one of {list(allowed)}")


def require_probability(owner: str, name: str, value: Any, exclude_zero: bool = False) -> None:
    """``value`` must be a float in [0, 1), or in (0, 1) with ``exclude_zero``."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not (0.0 < value < 1.0 if exclude_zero else 0.0 <= value < 1.0):
        interval = "(0, 1)" if exclude_zero else "[0, 1)"
        raise ValueError(f"{owner}.{name}={value!r} is invalid: it must be a float in {interval}")


def require_eps(owner: str, name: str, value: Any) -> None:
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not 0 < value < math.inf):  # fmt: skip
        raise ValueError(f"{owner}.{name}={value!r} is invalid: it must be a positive float")


def require_seed(owner: str, name: str, value: Any) -> None:
    """A seed torch can take: an integer in [0, 2^63)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise ValueError(f"{owner}.{name}={value!r} is invalid: a seed is an integer in [0, 2^63)")


def require_divisible(owner: str, name: str, value: int, n_heads: int, why: str) -> None:
    if value % n_heads:
        raise ValueError(
            f"{owner}.{name}={value} is not divisible by n_heads={n_heads}: {why}; "
            f"use a multiple of {n_heads}"
        )


_C = TypeVar("_C", bound="JsonConfig")


def _as_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _as_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_json(item) for item in value]
    return value


class JsonConfig:
    """JSON round-trip shared by the config dataclasses."""

    def to_dict(self) -> dict[str, Any]:
        """The fields as ``config.json`` holds them (tuples as lists), so a config made in
        memory compares equal to the one read back from a run directory."""
        return _as_json(asdict(self))  # type: ignore[call-overload]

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True)

    @classmethod
    def from_dict(cls: type[_C], data: dict[str, Any]) -> _C:
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"{cls.__name__} got unknown field(s) {unknown}; known fields: {sorted(known)}"
            )
        return cls(**data)

    @classmethod
    def from_json(cls: type[_C], text: str) -> _C:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{cls.__name__}: the text is not valid JSON ({err})") from err
        if not isinstance(data, dict):
            raise ValueError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
        return cls.from_dict(data)
