"""``assistant config``: print the effective configuration."""

from __future__ import annotations

import argparse
import json

from assistant.app.config import AppConfig

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "config",
        help="print the effective configuration",
        description="Print the configuration after applying config file, environment "
        "(ASSISTANT__SECTION__KEY=value) and --set overrides, in that order of precedence.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    parser.add_argument("section", nargs="?", help="print only this section")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    import yaml

    from assistant.app.errors import ConfigError

    data = cfg.to_yaml_dict()
    if args.section:
        if args.section not in data:
            raise ConfigError(f"unknown section '{args.section}' (known: {', '.join(data)})")
        data = {args.section: data[args.section]}
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(yaml.safe_dump(data, sort_keys=False).rstrip())
    return 0
