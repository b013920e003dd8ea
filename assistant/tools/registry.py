"""The tools of one conversation, by name."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from assistant.tools.errors import ToolSchemaError, UnknownToolError
from assistant.tools.spec import ToolSpec

__all__ = ["ToolRegistry"]


class ToolRegistry:
    """Tool specs by name, in the order given (the order the model is shown them).

    Immutable once built; two tools of one name are a `ToolSchemaError`.
    """

    def __init__(self, specs: Iterable[ToolSpec] = ()) -> None:
        self._specs: dict[str, ToolSpec] = {}
        for spec in specs:
            if not isinstance(spec, ToolSpec):
                raise TypeError(f"expected a ToolSpec, got {type(spec).__name__}")
            if spec.name in self._specs:
                raise ToolSchemaError(spec.name, "name", "two tools have this name")
            self._specs[spec.name] = spec

    def get(self, name: str) -> ToolSpec:
        """The spec called `name`; `UnknownToolError` (listing the tools) if none is."""
        spec = self._specs.get(name)
        if spec is None:
            raise UnknownToolError(name, self.names)
        return spec

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._specs)

    def specs_for_template(self) -> list[dict[str, Any]]:
        """Every tool as an OpenAI-style function definition, for a chat template's
        ``tools=`` (``{"type": "function", "function": {name, description, parameters}}``)."""
        return [spec.template_dict() for spec in self._specs.values()]

    def speculative_ok(self, name: str) -> bool:
        """Whether a call of `name` may run during a speculative draft (False for a
        name not here)."""
        spec = self._specs.get(name)
        return spec is not None and spec.speculative_ok

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    def __bool__(self) -> bool:
        return bool(self._specs)

    def __repr__(self) -> str:
        return f"ToolRegistry({list(self._specs)})"
