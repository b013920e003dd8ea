"""Model resolution: packaged defaults, user paths, clear errors, atomic conversion."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from assistant.app import models
from assistant.app.config import AppConfig, load_config
from assistant.app.errors import ModelNotFoundError, UserError
from assistant.app.llm_convert import (
    COMPLETE_MARKER,
    DIGESTS_SUBDIR,
    WEIGHTS_SUBDIR,
    convert_gguf,
    converted_dir_for,
    prune_superseded,
)


def cfg_with(tmp_path: Path, text: str) -> AppConfig:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return load_config(path, env={})


def test_defaults_resolve_inside_packages(default_config: AppConfig) -> None:
    asr = models.resolve_asr(default_config)
    assert (asr / "model.bin").is_file() and "site-packages" in str(asr)
    onnx, config = models.resolve_voice(default_config)
    assert onnx.suffix == ".onnx" and config.name == onnx.name + ".json"
    gguf = models.resolve_llm_source(default_config)
    assert gguf.suffix == ".gguf" and gguf.stat().st_size > 50_000_000
    smart = models.resolve_smart_turn(default_config)
    assert smart.suffix == ".onnx" and smart.stat().st_size > 1_000_000


def test_converted_llm_is_a_plain_transformers_dir(llm_dir: Path) -> None:
    assert (llm_dir / COMPLETE_MARKER).is_file()
    assert (llm_dir / "model.safetensors").is_file()
    assert "quantization_config" not in (llm_dir / "config.json").read_text()


def test_voice_found_by_name_in_voices_dir(tmp_path: Path, default_config: AppConfig) -> None:
    onnx, config = models.resolve_voice(default_config)
    voices = tmp_path / "voices"
    voices.mkdir()
    (voices / "alice.onnx").symlink_to(onnx)
    (voices / "alice.onnx.json").symlink_to(config)
    cfg = cfg_with(tmp_path, "models:\n  voices_dir: voices\n")
    assert models.resolve_voice(cfg, "alice") == (voices / "alice.onnx", voices / "alice.onnx.json")
    assert "alice" in models.list_voices(cfg)


def test_missing_voice_lists_available(tmp_path: Path) -> None:
    cfg = cfg_with(tmp_path, "models:\n  voices_dir: voices\n")
    with pytest.raises(ModelNotFoundError, match="voice 'bob' not found.*en_US-joe-medium"):
        models.resolve_voice(cfg, "bob")


def test_voice_without_json_is_clear(tmp_path: Path) -> None:
    (tmp_path / "x.onnx").write_bytes(b"0")
    cfg = cfg_with(tmp_path, "")
    with pytest.raises(ModelNotFoundError, match="x.onnx.json is missing"):
        models.resolve_voice(cfg, str(tmp_path / "x.onnx"))


def test_user_paths_are_checked(tmp_path: Path) -> None:
    cfg = cfg_with(tmp_path, f"models:\n  asr: {tmp_path}\n  llm: {tmp_path / 'nope.gguf'}\n")
    with pytest.raises(ModelNotFoundError, match="no model.bin"):
        models.resolve_asr(cfg)
    with pytest.raises(ModelNotFoundError, match="not a .gguf file"):
        models.resolve_llm_source(cfg)
    cfg = cfg_with(tmp_path, f"models:\n  smart_turn: {tmp_path / 'turn.onnx'}\n")
    with pytest.raises(ModelNotFoundError, match="turn.onnx: no such Smart Turn ONNX file"):
        models.resolve_smart_turn(cfg)


def test_missing_package_gives_install_command() -> None:
    ghost = models.PackagedModel("ghost-model", "ghost_model_pkg", "x", "pip install ghost-model")
    with pytest.raises(ModelNotFoundError, match="pip install ghost-model"):
        models.package_dir(ghost)


def test_cache_dir_honours_config_and_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models.cache_dir(AppConfig()) == tmp_path / "xdg" / "assistant"
    cfg = cfg_with(tmp_path, "models:\n  cache_dir: mycache\n")
    assert models.cache_dir(cfg) == tmp_path / "mycache"


def test_failed_conversion_leaves_nothing_loadable(tmp_path: Path) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + os.urandom(64))
    cache = tmp_path / "cache"
    with pytest.raises(UserError, match="cannot load GGUF checkpoint"):
        convert_gguf(bad, cache, progress=lambda _m: None, show_bar=False)
    target = converted_dir_for(bad, cache)
    assert not target.exists()
    leftovers = [p for p in cache.iterdir() if p.is_dir() and p.name != DIGESTS_SUBDIR]
    assert leftovers == []  # the temporary directory was removed


def test_completed_conversion_is_reused_without_work(tmp_path: Path, llm_dir: Path) -> None:
    gguf = models.resolve_llm_source(AppConfig())
    cache = llm_dir.parent
    calls: list[str] = []
    assert convert_gguf(gguf, cache, progress=calls.append) == llm_dir
    assert calls == []  # nothing converted, nothing announced


def test_reinstalled_model_shares_one_conversion(tmp_path: Path, llm_dir: Path) -> None:
    """A reinstall (another path, a new mtime, same bytes) reuses the conversion: a
    path-and-mtime key made a new 500 MB directory per virtual environment."""
    gguf = models.resolve_llm_source(AppConfig())
    elsewhere = tmp_path / "another-venv" / gguf.name
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(gguf.read_bytes())
    assert elsewhere.stat().st_mtime_ns != gguf.stat().st_mtime_ns
    calls: list[str] = []
    assert convert_gguf(elsewhere, llm_dir.parent, progress=calls.append) == llm_dir
    assert calls == []


def test_changed_contents_get_a_new_key(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF one")
    first = converted_dir_for(gguf, tmp_path)
    gguf.write_bytes(b"GGUF two")
    assert converted_dir_for(gguf, tmp_path) != first
    assert first.name.startswith("m-")


def _conversion(cache: Path, name: str, source: Path | None) -> Path:
    d = cache / name
    d.mkdir(parents=True)
    if source is not None:
        (d / COMPLETE_MARKER).write_text(str(source) + "\n")
    (cache / (name + ".lock")).touch()
    weights = cache / WEIGHTS_SUBDIR
    weights.mkdir(exist_ok=True)
    (weights / f"{name}-0123456789ab-int4.safetensors").write_bytes(b"w")
    return d


def test_new_conversion_prunes_only_what_it_supersedes(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    gguf = tmp_path / "pkg" / "m.gguf"
    other_file = tmp_path / "elsewhere" / "m.gguf"
    for f in (gguf, other_file):
        f.parent.mkdir()
        f.write_bytes(b"GGUF")
    target = _conversion(cache, "m-aaaaaaaaaaaa", gguf)
    same_path = _conversion(cache, "m-bbbbbbbbbbbb", gguf)  # this file, before it changed
    gone = _conversion(cache, "m-cccccccccccc", tmp_path / "deleted-venv" / "m.gguf")
    kept = _conversion(cache, "m-dddddddddddd", other_file)  # another install, still there
    unfinished = _conversion(cache, "m-eeeeeeeeeeee", None)  # maybe being written now
    another_model = _conversion(cache, "n-ffffffffffff", tmp_path / "deleted-venv" / "n.gguf")

    assert prune_superseded(target, gguf) == [same_path, gone]

    left = sorted(p.name for p in cache.iterdir() if p.is_dir() and p.name != WEIGHTS_SUBDIR)
    assert left == [target.name, kept.name, unfinished.name, another_model.name]
    assert not (cache / (gone.name + ".lock")).exists()
    weights = sorted(p.name.split("-0123")[0] for p in (cache / WEIGHTS_SUBDIR).iterdir())
    assert weights == [target.name, kept.name, unfinished.name, another_model.name]


def test_a_files_digest_is_read_once_per_version(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A 4 GB model is not read at every start: its digest is remembered for its path,
    size and mtime, and read again when the file changes."""
    from assistant.app import llm_convert

    gguf, cache = tmp_path / "m.gguf", tmp_path / "cache"
    gguf.write_bytes(b"GGUF one")
    reads: list[Path] = []
    real = llm_convert._sha256

    def counting(path: Path) -> str:
        reads.append(path)
        return real(path)

    monkeypatch.setattr(llm_convert, "_sha256", counting)
    first = converted_dir_for(gguf, cache)
    assert converted_dir_for(gguf, cache) == first and len(reads) == 1
    gguf.write_bytes(b"GGUF two")
    os.utime(gguf, ns=(1, 1))
    second = converted_dir_for(gguf, cache)
    assert second != first and len(reads) == 2
    gone = tmp_path / "gone.gguf"
    gone.write_bytes(b"GGUF three")
    converted_dir_for(gone, cache)
    gone.unlink()
    assert converted_dir_for(gguf, cache) == second and len(reads) == 3
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF four")
    converted_dir_for(other, cache)  # a new file: the gone one's and m's old entries go
    memos = sorted((cache / DIGESTS_SUBDIR).iterdir())
    assert len(memos) == 2  # m.gguf now, other.gguf
    recorded = sorted(m.read_text().split("\n")[1].rsplit(":", 2)[0] for m in memos)
    assert recorded == sorted([str(gguf.resolve()), str(other.resolve())])


def test_a_read_only_cache_still_gives_the_digest(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    blocked = tmp_path / "blocked"
    blocked.write_text("a file, not a directory")
    assert converted_dir_for(gguf, blocked).name == converted_dir_for(gguf, tmp_path).name


class _FakeTensor:
    def data_ptr(self) -> int:
        return id(self)

    def numel(self) -> int:
        return 1000

    def element_size(self) -> int:
        return 4


class _FakeModel:
    """What `_convert_into` uses of a loaded transformers model."""

    def __init__(self, error: OSError | None) -> None:
        self.config = type("Config", (), {})()
        self.error = error

    def state_dict(self) -> dict[str, _FakeTensor]:
        return {"w": _FakeTensor()}

    def save_pretrained(self, out: Path, **_kw: object) -> None:
        (out / "model.safetensors").write_bytes(b"partial")
        if self.error is not None:
            raise self.error


@pytest.mark.parametrize("free", [10**12, 100])
def test_a_full_disk_is_a_clear_error_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, free: int) -> None:
    """No room for the conversion (found before writing, or by the write itself): one
    line that says how much is needed and what to do, and no half directory."""
    import errno
    import shutil
    from collections import namedtuple

    import transformers

    model = _FakeModel(OSError(errno.ENOSPC, "No space left on device"))
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *_a, **_k: model)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *_a, **_k: None)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: usage(free * 2, free, free))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    cache = tmp_path / "cache"
    with pytest.raises(UserError, match=r"no room for the converted model \(0 MB needed, "
                       r".*models.cache_dir"):
        convert_gguf(gguf, cache, progress=lambda _m: None, show_bar=False)
    assert not converted_dir_for(gguf, cache).exists()
    assert [p for p in cache.iterdir() if p.is_dir() and p.name != DIGESTS_SUBDIR] == []
