"""The params file the settings read: the file LAB_PARAMS_FILE names, else ./params.yaml (the checkout's, when the
lab runs from there). Read strictly, so that what it says is what is measured: a file named that does not exist,
or that is no regular file, is an error; plain YAML in UTF-8, loaded safely (a `!!python` tag is refused, never
run); a mapping of sections at the top; each key once in its mapping (PyYAML would keep the last of a section or
key given twice), with no space around it. Each refusal is one line naming the file (and the line). No file at
./params.yaml is no error: the defaults, and the run says so. What was read is a run's provenance: its path and
sha256 (`record`)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lab.core.errors import UsageError

ENV = "LAB_PARAMS_FILE"
DEFAULT = Path("params.yaml")


class ParamsError(UsageError):
    """A params file that cannot be read as the lab's settings (exit 2, as a bad setting)."""


@dataclass(frozen=True)
class ParamsFile:
    """What the settings read: the file (absolute), its sha256 (None: there was none, the defaults), its data."""

    path: Path
    sha256: str | None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def record(self) -> dict[str, str | None]:
        """The run's record of it: {path, sha256}, both None when no file was read."""
        return {"path": str(self.path) if self.sha256 else None, "sha256": self.sha256}

    def describe(self) -> str:
        """One line: which params file the settings read, or that there was none."""
        if self.sha256 is None:
            return f"params: none (no {self.path.name} in {self.path.parent}): the defaults, LAB_* variables and flags"
        return f"params: {self.path} " + (f"(sha256 {self.sha256[:12]})" if self.data else "(empty: the defaults)")


def read_params_file() -> ParamsFile:
    """The params file in force, read and checked (ParamsError if it cannot be the settings' source)."""
    named = os.environ.get(ENV)
    if named is not None and not named.strip():
        raise ParamsError(f"{ENV} is set but empty: name a params file, or unset it for ./{DEFAULT}")
    path = Path(named) if named else DEFAULT
    if not path.exists():
        if named:
            raise ParamsError(f"{ENV}={named}: no such file (the settings would be the defaults)")
        return ParamsFile(path.absolute(), None)
    if not path.is_file():
        raise ParamsError(f"params file {path}: not a regular file")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ParamsError(f"params file {path}: {e.strerror or type(e).__name__}") from None
    return ParamsFile(path.absolute(), hashlib.sha256(raw).hexdigest(), parse(raw, path))


def parse(raw: bytes, path: Path) -> dict[str, Any]:
    """The sections of a params file's bytes (an empty file or one of comments only: none)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ParamsError(f"params file {path} line {line}: not UTF-8 (byte {raw[e.start]:#04x})") from None
    try:
        data = yaml.load(text, Loader=StrictLoader)  # a SafeLoader: no tag runs anything
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        hint = " (plain YAML only: tags are not read)" if "constructor for the tag" in str(e.problem) else ""
        raise ParamsError(f"params file {path}{where}: {e.problem}{hint}") from None
    except yaml.YAMLError as e:
        raise ParamsError(f"params file {path}: not YAML ({' '.join(str(e).split())})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ParamsError(
            f"params file {path}: a mapping of sections (sweep:, server: ...) at the top, not a {type(data).__name__}"
        )
    if bad := [k for k in data if not isinstance(k, str)]:
        raise ParamsError(f"params file {path}: {bad[0]!r} is not the name of a setting")
    return data


class StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader (no tag beyond plain YAML's is constructed) that refuses a key given twice in one
    mapping, and a key with a space around it (a key that would match no setting and look like one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # an unhashable key: the safe loader's own error names it
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"{key!r} is given twice (first on line {first}; one would be lost)",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line + 1
            if isinstance(key, str) and key != key.strip():
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} has a space around it", key_node.start_mark
                )
        return super().construct_mapping(node, deep=deep)
