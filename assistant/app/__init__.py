"""The application shell: CLI, typed config, logging, model resolution.

Nothing is imported here, so importing a submodule stays cheap.
"""

__all__: list[str] = []
