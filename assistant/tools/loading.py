"""Tools named in the configuration: ``builtin:NAME`` or ``module:function``.

``module:function`` imports `module` (it must be importable: installed, or on
``PYTHONPATH``) and takes the attribute (a dotted path, ``module:Class.method``): a
`ToolSpec` is used as it is, any other callable becomes one from its signature
(`tool_from_function`). Every failure is a `ToolLoadError` naming the reference.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime

from assistant.tools.builtin import BUILTIN_PREFIX, BUILTIN_TOOLS, builtin_tools, local_now
from assistant.tools.errors import ToolError, ToolLoadError
from assistant.tools.registry import ToolRegistry
from assistant.tools.signature import tool_from_function
from assistant.tools.spec import ToolSpec
from assistant.tools.timers import TimerService

__all__ = ["REFERENCE_PATTERN", "build_registry", "load_tool"]

REFERENCE_PATTERN = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*"
    r"(\.[A-Za-z_][A-Za-z0-9_]*)*$")
"""``module.path:attribute.path`` (``builtin:NAME`` has the same shape)."""


def load_tool(ref: str, *, builtins: Mapping[str, ToolSpec] | None = None) -> ToolSpec:
    """The spec `ref` names: ``builtin:NAME`` from `builtins` (`builtin_tools`'s
    result), else ``module:function``."""
    if not isinstance(ref, str) or not REFERENCE_PATTERN.match(ref):
        raise ToolLoadError(f"tools.enabled {ref!r}: expected module:function or "
                            f"{BUILTIN_PREFIX}NAME")
    if ref.startswith(BUILTIN_PREFIX):
        return _builtin(ref, builtins or {})
    module_name, _, path = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise ToolLoadError(f"tools.enabled {ref!r}: no module named {exc.name!r} "
                                "(is it installed, or on PYTHONPATH?)") from None
        raise ToolLoadError(f"tools.enabled {ref!r}: importing {module_name!r} failed: "
                            f"{exc}") from None
    except Exception as exc:
        raise ToolLoadError(f"tools.enabled {ref!r}: importing {module_name!r} raised "
                            f"{type(exc).__name__}: {exc}") from None
    target: object = module
    for depth, attribute in enumerate(path.split(".")):
        if not hasattr(target, attribute):
            owner = ".".join([module_name, *path.split(".")[:depth]])
            raise ToolLoadError(f"tools.enabled {ref!r}: {owner!r} has no attribute "
                                f"{attribute!r}")
        target = getattr(target, attribute)
    if isinstance(target, ToolSpec):
        return target
    if not callable(target):
        raise ToolLoadError(f"tools.enabled {ref!r}: neither callable nor a ToolSpec "
                            f"(type {type(target).__name__})")
    try:
        return tool_from_function(target)
    except ToolError as exc:
        raise ToolLoadError(f"tools.enabled {ref!r}: {exc}") from None


def build_registry(enabled: Sequence[str], *, speculative_ok: Collection[str] | None = None,
                   timers: TimerService | None = None,
                   now: Callable[[], datetime] = local_now) -> ToolRegistry:
    """One conversation's registry from the configured references, in order.

    `speculative_ok`, when given, decides which tools may run during a speculative draft
    (by name; names of tools not enabled are ignored); None keeps each spec's own flag.
    `timers` is the conversation's timer service, which ``builtin:set_timer`` needs.
    """
    builtins = builtin_tools(timers=timers, now=now)
    specs = [load_tool(ref, builtins=builtins) for ref in enabled]
    if speculative_ok is not None:
        allowed = frozenset(speculative_ok)
        specs = [dataclasses.replace(s, speculative_ok=s.name in allowed) for s in specs]
    return ToolRegistry(specs)


def _builtin(ref: str, builtins: Mapping[str, ToolSpec]) -> ToolSpec:
    name = ref[len(BUILTIN_PREFIX):]
    if name not in BUILTIN_TOOLS:
        raise ToolLoadError(f"tools.enabled {ref!r}: no such built-in tool (built-ins: "
                            f"{', '.join(BUILTIN_TOOLS)})")
    spec = builtins.get(name)
    if spec is None:
        raise ToolLoadError(f"tools.enabled {ref!r}: needs the conversation's TimerService"
                            if name == "set_timer" else
                            f"tools.enabled {ref!r}: not among the built-ins given")
    return spec
