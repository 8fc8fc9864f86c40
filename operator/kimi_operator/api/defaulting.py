"""What the API server does to a custom object before validating it: drop nulls, apply defaults."""

import copy
from typing import Any


def drop_nulls(value: Any) -> Any:
    """Remove null fields, as the API server prunes nulls of non-nullable fields before validating.

    Null list items stay: the API server keeps them too, and they fail validation.
    """
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Structural defaulting: absent properties with a `default` get it, then recurse (a copy)."""
    if isinstance(value, dict):
        out = dict(value)
        properties = schema.get("properties", {})
        for name, prop in properties.items():
            if name not in out and "default" in prop:
                out[name] = copy.deepcopy(prop["default"])
        for name, item in out.items():
            if name in properties:
                out[name] = apply_defaults(properties[name], item)
            elif isinstance(schema.get("additionalProperties"), dict):
                out[name] = apply_defaults(schema["additionalProperties"], item)
        return out
    if isinstance(value, list) and "items" in schema:
        return [apply_defaults(schema["items"], item) for item in value]
    return value
