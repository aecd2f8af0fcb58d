"""``up``'s ready file appears whole or not at all (a reader polls for it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sluice_local.emulation import up


def test_given_a_ready_file_when_written_then_it_appears_only_once_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a reader that looks at the path the moment the file is put in place
    ready = tmp_path / "ready.json"
    text = '{"endpoint": "http://127.0.0.1:1"}' * 1000
    seen: list[tuple[bool, str]] = []
    real_replace = os.replace

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        seen.append((Path(dst).exists(), Path(src).read_text(encoding="utf-8")))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)  # the module calls os.replace
    # When the ready file is written
    up.write_atomically(ready, text)
    # Then until that moment it did not exist, the whole text was already written beside it, and
    # nothing else is left in the folder
    assert seen == [(False, text)]
    assert ready.read_text(encoding="utf-8") == text
    assert [p.name for p in tmp_path.iterdir()] == ["ready.json"]
