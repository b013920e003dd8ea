"""Config loading: precedence, errors that name the key and the file, shipped defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from assistant.app.config import AppConfig, load_config, parse_override
from assistant.app.errors import ConfigError

PROJECT_CONFIG = Path(__file__).resolve().parents[2] / "config.yaml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_shipped_config_equals_builtin_defaults() -> None:
    shipped = load_config(PROJECT_CONFIG, env={})
    assert shipped.to_yaml_dict() == AppConfig().to_yaml_dict()
    # and every section of the model appears in the file (no undocumented section)
    assert set(yaml.safe_load(PROJECT_CONFIG.read_text())) == set(AppConfig().to_yaml_dict())


def test_precedence_cli_over_env_over_file_over_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, "vad:\n  end_of_turn_ms: 700\n  short_pause_ms: 250\n")
    env = {"ASSISTANT__VAD__END_OF_TURN_MS": "800", "ASSISTANT__VAD__MIN_SPEECH_MS": "90"}
    cfg = load_config(path, env=env, overrides={"vad.end_of_turn_ms": 900})
    assert cfg.vad.end_of_turn_ms == 900  # CLI
    assert cfg.vad.min_speech_ms == 90  # env
    assert cfg.vad.short_pause_ms == 250  # file
    assert cfg.vad.prefix_padding_ms == AppConfig().vad.prefix_padding_ms  # default
    no_cli = load_config(path, env=env)
    assert no_cli.vad.end_of_turn_ms == 800


def test_unknown_key_names_key_and_file(tmp_path: Path) -> None:
    path = write(tmp_path, "vad:\n  end_of_trun_ms: 700\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert "vad.end_of_trun_ms" in str(err.value)
    assert str(path) in str(err.value)


def test_a_retired_key_says_it_is_no_longer_used(tmp_path: Path) -> None:
    path = write(tmp_path, "echo:\n  reference_jitter_ms: 40\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert "'echo.reference_jitter_ms' is no longer used" in str(err.value)
    assert "remove it" in str(err.value) and str(path) in str(err.value)


def test_unknown_section_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "vadd:\n  x: 1\n")
    with pytest.raises(ConfigError, match="unknown section 'vadd'"):
        load_config(path, env={})


@pytest.mark.parametrize(
    "text, key",
    [
        ("vad:\n  end_of_turn_ms: soon\n", "vad.end_of_turn_ms"),
        ("engine:\n  dtype: float8\n", "engine.dtype"),
        ("audio:\n  frame_ms: 25\n", "audio.frame_ms"),
        ("turns:\n  speculate: 'yes'\n", "turns.speculate"),
        ("engine:\n  page_size: 0\n", "engine.page_size"),
    ],
)
def test_wrong_type_names_key_and_file(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert key in str(err.value) and str(path) in str(err.value)


def test_env_error_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="ASSISTANT__ENGINE__MAX_BATCH"):
        load_config(PROJECT_CONFIG, env={"ASSISTANT__ENGINE__MAX_BATCH": "many"})


def test_malformed_yaml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "vad: [\n"), env={})
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml", env={})


def test_parse_override() -> None:
    assert parse_override("vad.end_of_turn_ms=700") == ("vad.end_of_turn_ms", 700)
    assert parse_override("llm.stop=['User:']") == ("llm.stop", ["User:"])
    with pytest.raises(ConfigError):
        parse_override("end_of_turn_ms")


def test_list_values_become_tuples(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "llm:\n  stop: ['User:', '###']\n"), env={})
    assert cfg.llm.stop == ("User:", "###")


def test_unquoted_yaml_off_means_off(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "echo:\n  mode: off\n"), env={})
    assert cfg.echo.mode == "off"
    assert load_config(PROJECT_CONFIG, env={"ASSISTANT__ECHO__MODE": "off"}).echo.mode == "off"
    with pytest.raises(ConfigError, match="echo.mode"):
        load_config(write(tmp_path, "echo:\n  mode: on\n"), env={})


def test_the_project_config_and_demo_recording_are_found_from_any_directory(
        tmp_path: Path) -> None:
    from assistant.app.config import default_config_path
    from assistant.commands.demo import DEMO_WAV

    found = default_config_path(tmp_path)  # no config.yaml there: the project's own
    assert found is not None and found.is_file() and found.parent.joinpath("pyproject.toml").is_file()
    assert DEMO_WAV.is_file()  # the bundled recording, not a path that gets rebuilt


def test_the_engine_leaves_a_core_to_asr_and_tts_unless_told(tmp_path: Path) -> None:
    from assistant.loop.setup import engine_threads

    assert AppConfig().engine.threads == 0
    assert [engine_threads(0, cores) for cores in (1, 2, 4, 16)] == [1, 1, 3, 15]
    assert engine_threads(2, cores=2) == 2 and engine_threads(3, cores=16) == 3
    assert load_config(write(tmp_path, "engine:\n  threads: 2\n"), env={}).engine.threads == 2
    with pytest.raises(ConfigError, match="engine.threads"):
        load_config(write(tmp_path, "engine:\n  threads: -1\n"), env={})
