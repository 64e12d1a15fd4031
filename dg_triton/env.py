"""Environment variables, read the same way everywhere.

Every ``DG_JIT_*`` variable that is unset falls back to the same name with the ``DJ_JIT_*`` prefix
(a process-wide default shared by several JIT libraries, API.md section 11). Values are read on
each call, not cached at import, so tests and users can change them at run time.
"""
import os

_FALLBACK_PREFIXES = (("DG_JIT_", "DJ_JIT_"),)


def get_env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    if value is not None:
        return value
    for prefix, fallback in _FALLBACK_PREFIXES:
        if name.startswith(prefix):
            value = os.environ.get(fallback + name[len(prefix):])
            if value is not None:
                return value
    return default


def env_flag(name: str) -> bool:
    """True when the variable is set to anything but '', '0', 'false', 'no', 'off'."""
    value = get_env(name)
    return value is not None and value.strip().lower() not in ("", "0", "false", "no", "off")


def env_int(name: str, default: int) -> int:
    value = get_env(name)
    if value is None or value.strip() == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer, got {value!r}") from None
