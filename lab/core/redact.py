"""What a run folder must not give away: credentials in URLs, and secrets in the lab checkout's diff.

Every place that records a URL or a diff passes it through here (the engine's origin, its error messages, the
lab's git diff). docs/security.md says what a run folder records and what `dvc push` sends."""

from __future__ import annotations

import re

# scheme://user:password@host or scheme://token@host: the userinfo goes, the host stays
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s:]+(?::[^/@\s]*)?@")
# `password = x`, `secret: x`, `token=x`, `key_secret ...` in a config line (DVC, INI, YAML, env files)
_SECRET_VALUE = re.compile(
    r"(?im)^(?P<lead>[+\- ]?\s*[\w.-]*(?:password|passwd|secret|token|access_key|private_key)[\w.-]*\s*[=:]\s*)\S.*$"
)
# files that hold secrets by their nature: never in a recorded diff
SECRET_PATHS = (".dvc/config.local", "*.env", ".env", "*.pem", "*.key", "*secret*", "*credentials*", ".netrc")


def redact_url(text: str) -> str:
    """`https://user:pw@host/x` -> `https://***@host/x`, anywhere in `text`."""
    return _URL_USERINFO.sub(lambda m: f"{m['scheme']}***@", text)


def redact_text(text: str) -> str:
    """URL credentials and the values of password / secret / token settings, line by line."""
    return _SECRET_VALUE.sub(lambda m: f"{m['lead']}***", redact_url(text))


def diff_excludes() -> list[str]:
    """git pathspecs that keep secret files out of a `git diff`."""
    return [f":(exclude,glob)**/{p}" for p in SECRET_PATHS]
