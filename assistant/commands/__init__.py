"""CLI subcommands: each module exposes ``register(subparsers)`` and ``run(args, cfg)``."""
