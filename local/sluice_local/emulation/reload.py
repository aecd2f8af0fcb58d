"""``up`` reloads a function's code when its files change, as a deploy of new code does in Lambda.

Every second the watcher compares each function's code folder (its ``CodeUri``: every file in it, by
modification time and size) with what it saw before. When one changed, the function's execution
environments are retired (:meth:`FunctionHost.retire`): idle ones end at once, busy ones when their
invocation ends, and the next invocation cold-starts on the new files. A changed layer cannot be
reloaded in place (its modules are loaded once per process and shared by every function): the
watcher says so, and how to restart.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from sluice_local.emulation.functions import FunctionHost

__all__ = ["CodeWatcher", "snapshot"]

Snapshot = dict[str, tuple[int, int]]
RESTART = "stop it (Ctrl-C) and start it again (a few seconds; the embedded stack starts empty)"


def snapshot(folder: str | Path) -> Snapshot:
    """Every file under ``folder`` (relative path → modification time in ns, size); caches and hidden
    folders (``__pycache__``, ``.venv``) are not walked."""
    root = Path(folder)
    found: Snapshot = {}
    for directory, folders, files in os.walk(root):
        folders[:] = [f for f in folders if f != "__pycache__" and not f.startswith(".")]
        for name in files:
            path = Path(directory, name)
            try:
                stat = path.stat()
            except FileNotFoundError:  # removed while listed: the next check sees it gone
                continue
            found[path.relative_to(root).as_posix()] = (stat.st_mtime_ns, stat.st_size)
    return found


def changed(before: Snapshot, after: Snapshot) -> list[str]:
    """Files added, removed or modified."""
    return sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))


class CodeWatcher:
    def __init__(
        self,
        functions: Mapping[str, FunctionHost],
        layer_dirs: Iterable[str | Path],
        announce: Callable[[str], None],
    ) -> None:
        """``announce``: told what changed and what was done (``up`` prints it on its console)."""
        self._functions = dict(functions)
        self._announce = announce
        self._code = {name: snapshot(host.spec.code_dir) for name, host in self._functions.items()}
        self._layers = {Path(d): snapshot(d) for d in layer_dirs}

    def check(self) -> list[str]:
        """Retire the environments of every function whose files changed since the last check; returns
        the functions retired."""
        retired = []
        for name, host in self._functions.items():
            now = snapshot(host.spec.code_dir)
            files = changed(self._code[name], now)
            if not files:
                continue
            self._code[name] = now
            ended = host.retire()
            retired.append(name)
            self._announce(
                f"{name}: {', '.join(files[:5])}{' …' if len(files) > 5 else ''} changed — the next "
                f"invocation cold-starts on the new code ({ended} idle environment(s) ended)"
            )
        for folder, before in self._layers.items():
            now = snapshot(folder)
            files = changed(before, now)
            if files:
                self._layers[folder] = now
                self._announce(
                    f"layer {folder}: {', '.join(files[:5])} changed — a layer's modules stay loaded in "
                    f"this process: {RESTART}"
                )
        return retired
