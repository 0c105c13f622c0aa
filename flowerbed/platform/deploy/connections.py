"""SuperLink connections in the Flower CLI's ``$FLWR_HOME/config.toml``."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

CONFIG_FILE = "config.toml"


class MissingConnectionError(LookupError):
    """A SuperLink connection that the Flower configuration does not define."""


def flwr_home(given: str | Path | None = None) -> Path:
    """The Flower CLI home: ``given``, else ``$FLWR_HOME``, else ``~/.flwr`` (Flower's rule)."""
    if given:
        return Path(given).expanduser()
    env = os.environ.get("FLWR_HOME")
    return Path(env).expanduser() if env else Path.home() / ".flwr"


def config_path(home: str | Path | None = None) -> Path:
    """Path of the Flower configuration file in ``home``."""
    return flwr_home(home) / CONFIG_FILE


def read_config(home: str | Path | None = None) -> dict[str, Any]:
    """The Flower configuration as a dict (Flower's default when the file is missing)."""
    path = config_path(home)
    if path.is_file():
        return tomllib.loads(path.read_text())
    from flwr.cli.constant import DEFAULT_FLOWER_CONFIG_TOML

    return tomllib.loads(DEFAULT_FLOWER_CONFIG_TOML)


def require_connection(name: str, home: str | Path | None = None) -> dict[str, Any]:
    """The connection ``name``, or an error naming the file and how to create it.

    Raises
    ------
    MissingConnectionError
        When the file does not exist or does not define ``[superlink.<name>]``.
    """
    path = config_path(home)
    found = read_config(home).get("superlink", {}).get(name) if path.is_file() else None
    if not isinstance(found, dict):
        raise MissingConnectionError(
            f"SuperLink connection {name!r} is not defined in {path}; start a local "
            f"deployment with `flowerbed deploy local --nodes N` (it writes "
            f"[superlink.{name}]) or add the section by hand, e.g.\n"
            f'[superlink.{name}]\naddress = "127.0.0.1:9091"\ninsecure = true'
        )
    return found


def write_connection(
    name: str,
    address: str,
    *,
    root_certificates: str | Path | None = None,
    home: str | Path | None = None,
) -> Path:
    """Add or replace ``[superlink.<name>]``, keeping every other entry; return the file."""
    import tomli_w  # a dependency of flwr

    data = read_config(home)
    entry: dict[str, Any] = {"address": address}
    if root_certificates is None:
        entry["insecure"] = True
    else:
        entry["root-certificates"] = str(Path(root_certificates).resolve())
    data.setdefault("superlink", {})[name] = entry
    path = config_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(tomli_w.dumps(data))
    os.replace(tmp, path)
    return path


def remove_connection(name: str, home: str | Path | None = None) -> None:
    """Drop ``[superlink.<name>]`` if present (other entries stay)."""
    import tomli_w

    path = config_path(home)
    if not path.is_file():
        return
    data = read_config(home)
    if data.get("superlink", {}).pop(name, None) is not None:
        path.write_text(tomli_w.dumps(data))
