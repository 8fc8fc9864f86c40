"""The base of every KimiDeployment API model: strict, camelCase, immutable."""

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
CONFIG_MAP_KEY = r"^[-._a-zA-Z0-9]+$"  # a key of a ConfigMap's data


class ApiModel(BaseModel):
    """Strict like the API server: no coercion ("8" is not 8), unknown fields are errors."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=False,
        validate_by_alias=True,
        serialize_by_alias=True,
        frozen=True,
    )


def nested_default() -> dict[str, Any]:
    """Schema extra for an optional object whose own fields all have defaults.

    `default: {}` makes the API server create the object and then fill in its defaults, exactly as
    pydantic's `default_factory` does.
    """
    return {"default": {}}
