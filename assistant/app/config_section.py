"""The base of every ``config.yaml`` section model (`assistant.app.config_schema`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Section"]


class Section(BaseModel):
    """A frozen, strict section: an unknown key or a value of the wrong type is an error.
    Attribute docstrings are the fields' descriptions (docs/configuration.md)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True,
                              use_attribute_docstrings=True)
