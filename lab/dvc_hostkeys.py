"""Host-key verification for DVC's SSH remotes. dvc-ssh passes `known_hosts=None` to asyncssh, which accepts
any host key, and its remote config has no option to change that. `lab dvc-setup` installs a .pth file
that imports this module in every Python process of the venv; it patches dvc_ssh as it is imported, so a
plain `dvc push` / `dvc pull` checks the server's key against LAB_SSH_KNOWN_HOSTS (default
~/.ssh/known_hosts) and refuses an unknown or changed key ("Host key is not trusted")."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

PTH_NAME = "lab_dvc_hostkeys.pth"


def known_hosts() -> str | tuple[()]:
    path = Path(os.environ.get("LAB_SSH_KNOWN_HOSTS", "~/.ssh/known_hosts")).expanduser()
    return str(path) if path.exists() else ()  # no file: trust nothing


def patch(mod: ModuleType) -> None:
    fs = mod.SSHFileSystem
    if getattr(fs, "_lab_verifies_host_keys", False):
        return
    original = fs._prepare_credentials

    def _prepare_credentials(self: Any, **config: Any) -> Any:
        info = original(self, **config)
        info["known_hosts"] = known_hosts()
        return info

    fs._prepare_credentials = _prepare_credentials
    fs._lab_verifies_host_keys = True


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "dvc_ssh":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            patch(module)

        setattr(loader, "exec_module", exec_and_patch)  # noqa: B010 (mypy: no method assignment)
        found: importlib.machinery.ModuleSpec = spec
        return found


def install_hook() -> None:
    if "dvc_ssh" in sys.modules:
        patch(sys.modules["dvc_ssh"])
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def install_pth() -> Path:
    """Write the .pth file into this interpreter's site-packages (idempotent)."""
    import sysconfig

    pth = Path(sysconfig.get_paths()["purelib"]) / PTH_NAME
    line = "import lab.dvc_hostkeys as _h; _h.install_hook()\n"
    if not pth.exists() or pth.read_text() != line:
        pth.write_text(line)
    return pth
