"""The configuration reference is written from the typed schema and kept in step."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from assistant.app import config_reference
from assistant.app.config import AppConfig

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "configuration.md"


def test_the_committed_reference_is_what_the_schema_writes() -> None:
    assert REFERENCE.read_text(encoding="utf-8") == config_reference.render(), (
        "docs/configuration.md is out of date: run `make docs`")


def test_every_key_of_the_shipped_config_is_described_with_its_default() -> None:
    text = config_reference.render()
    shipped = yaml.safe_load((ROOT / "config.yaml").read_text(encoding="utf-8"))
    for section, keys in shipped.items():
        assert f"## `{section}`" in text
        for key in keys:
            row = next((line for line in text.splitlines()
                        if line.startswith(f"| `{key}` |")), None)
            assert row is not None, f"{section}.{key} missing"
            description = row.rstrip(" |").rsplit(" | ", 1)[-1]
            assert description.strip(), f"{section}.{key} has no description"
    # The type shows the limits the loader enforces, the default is the schema's, and a
    # pipe inside a cell is escaped.
    port = AppConfig.model_fields["server"].default.port
    assert f"| `port` | int (>= 0, <= 65535) | `{port}` |" in text
    assert '`"auto"` \\| `"fp32"`' in text


def test_check_refuses_a_stale_file_and_passes_a_fresh_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "configuration.md"
    path.write_text("# old\n", encoding="utf-8")
    assert config_reference.main(["--check", str(path)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert config_reference.main([str(path)]) == 0
    assert config_reference.main(["--check", str(path)]) == 0
