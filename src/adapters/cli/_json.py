"""JSON for the CLI's reports: cattrs unstructures attrs values, with our time formats."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from enum import Enum

import cattrs

__all__ = ["dumps"]

_converter = cattrs.Converter()
_converter.register_unstructure_hook(datetime, lambda d: d.isoformat())
_converter.register_unstructure_hook(timedelta, lambda d: d.total_seconds())
_converter.register_unstructure_hook(Enum, lambda e: e.value)


def dumps(value: object) -> str:
    """One line of JSON for an attrs value (or a structure of them)."""
    return json.dumps(_converter.unstructure(value), ensure_ascii=False, sort_keys=True)
