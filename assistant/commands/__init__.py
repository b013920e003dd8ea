"""CLI subcommands: each module exposes ``register(subparsers)`` and ``run(args, cfg)``.

``demo`` is the exception: the program behind ``make demo``
(``python -m assistant.commands.demo``), not a subcommand.
"""
