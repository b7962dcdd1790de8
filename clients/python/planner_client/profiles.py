"""`planner`'s config file: named profiles, each a server, a key and an output format.

    # $XDG_CONFIG_HOME/planner/config.toml, by default ~/.config/planner/config.toml (on every system)
    profile = "prod"        # the profile used when neither --profile nor PLANNER_PROFILE names one

    [profiles.default]      # what every profile falls back on
    url = "http://127.0.0.1:8000"
    output = "table"

    [profiles.prod]
    url = "https://planner.example.com"
    api_key_command = "pass show planner/prod"   # or api_key = "cpk_..."

Read with tomllib; written by `planner config set` through the small writer below (string values only), the
file readable by its owner alone since it may hold a key.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

OUTPUTS = ("table", "json", "csv")
DEFAULT_PROFILE = "default"
# What a profile may set, and what `planner config --help` says of each.
KEYS = {
    "url": "The server, e.g. https://planner.example.com.",
    "api_key": "The API key (cpk_...): kept in the file, which only you may read.",
    "api_key_command": "A command that prints the API key, e.g. 'pass show planner/prod', instead of "
    "api_key: run without a shell, when a command needs the key.",
    "output": f"How answers print: {', '.join(OUTPUTS)}.",
}
# The two ways of giving a profile's key: one setting, so a profile gives one or the other.
KEY_SETTINGS = ("api_key", "api_key_command")
PROFILE_NAME = re.compile(r"[A-Za-z0-9_-]+")
HEADER = (
    "# planner's profiles (planner config --help). `planner config set` rewrites this file: other comments\n"
    "# are not kept.\n"
)


class ConfigError(Exception):
    """The config file cannot be used: the message names the file and what is wrong with it."""


def config_path(environ: Mapping[str, str] = os.environ) -> Path:
    """$XDG_CONFIG_HOME/planner/config.toml, or ~/.config/planner/config.toml when it is unset or not an
    absolute path (the XDG Base Directory rule), on every system alike."""
    base = environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".config"
    return root / "planner" / "config.toml"


@dataclass
class Config:
    path: Path
    profile: str | None = None  # the file's choice of profile (planner config use)
    profiles: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> Config:
        """The file at `path`, or an empty config when there is none."""
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls(path)
        except OSError as error:
            raise ConfigError(f"{path}: {error.strerror}") from error
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"{path}: not valid TOML: {error}") from error
        return cls(path, *_checked(document, path))

    def selected(self, name: str | None) -> str:
        """The profile in force: `name` (--profile or PLANNER_PROFILE), else the file's, else default; a name
        the file has no profile of is an error, but for default, which may be left out."""
        chosen = name or self.profile or DEFAULT_PROFILE
        if chosen != DEFAULT_PROFILE and chosen not in self.profiles:
            known = ", ".join(sorted(self.profiles)) or "none"
            raise ConfigError(f"no profile {chosen!r} in {self.path} (profiles: {known})")
        return chosen

    def lookup(self, profile: str, key: str) -> tuple[str, str | None]:
        """A setting as `profile` gives it, else as the default profile does: (the profile it came from, its
        value), None when neither gives it. api_key and api_key_command are one setting: `key` is either."""
        names = KEY_SETTINGS if key in KEY_SETTINGS else (key,)
        for name in dict.fromkeys((profile, DEFAULT_PROFILE)):
            values = self.profiles.get(name, {})
            if any(setting in values for setting in names):
                return name, values.get(key)
        return DEFAULT_PROFILE, None

    def set(self, profile: str, key: str, value: str) -> None:
        """Set `key` of `profile` (made if missing); a key replaces the profile's other way of giving one."""
        check_profile_name(profile)
        check_value(key, value, where=f"{key}")
        values = self.profiles.setdefault(profile, {})
        if key in KEY_SETTINGS:
            for other in KEY_SETTINGS:
                values.pop(other, None)
        values[key] = value

    def unset(self, profile: str, key: str) -> None:
        check_key(key, where=key)
        if key not in self.profiles.get(profile, {}):
            raise ConfigError(f"profile {profile!r} in {self.path} has no {key}")
        del self.profiles[profile][key]

    def use(self, profile: str) -> None:
        check_profile_name(profile)
        self.profile = profile
        self.selected(None)  # a profile the file has (or default)

    def text(self) -> str:
        """The file's TOML: the profile chosen, then each profile's table."""
        lines = [HEADER.rstrip("\n")]
        if self.profile is not None:
            lines.append(f"profile = {toml_string(self.profile)}")
        for name, values in self.profiles.items():
            lines += ["", f"[profiles.{name}]"]
            lines += [f"{key} = {toml_string(value)}" for key, value in values.items()]
        return "\n".join(lines) + "\n"

    def write(self) -> None:
        """Replace the file at once (a reader never sees half of it), readable and writable by its owner
        alone; through a symbolic link, the file it points to."""
        target = self.path.resolve()
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as file:
                if hasattr(os, "fchmod"):  # the mode os.open gave less the umask's bits: exactly 0600
                    os.fchmod(file.fileno(), 0o600)
                file.write(self.text())
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, target)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise


def _checked(document: dict, path: Path) -> tuple[str | None, dict[str, dict[str, str]]]:
    """The file's chosen profile and its profiles, or ConfigError naming what is wrong and where."""
    unknown = set(document) - {"profile", "profiles"}
    if unknown:
        raise ConfigError(
            f"{path}: unknown key {sorted(unknown)[0]!r} (the file has profile and [profiles.*])"
        )
    chosen = document.get("profile")
    if chosen is not None and not isinstance(chosen, str):
        raise ConfigError(f"{path}: profile must be a profile's name, a string")
    profiles = document.get("profiles", {})
    if not isinstance(profiles, dict) or not all(isinstance(values, dict) for values in profiles.values()):
        raise ConfigError(f"{path}: profiles must be tables, e.g. [profiles.{DEFAULT_PROFILE}]")
    for name, values in profiles.items():
        try:
            check_profile_name(name)
            for key, value in values.items():
                check_value(key, value, where=f"[profiles.{name}] {key}")
        except ConfigError as error:
            raise ConfigError(f"{path}: {error}") from None
        if all(key in values for key in KEY_SETTINGS):
            raise ConfigError(f"{path}: [profiles.{name}] has api_key and api_key_command: give one")
    return chosen, profiles


def check_profile_name(name: str) -> None:
    if not PROFILE_NAME.fullmatch(name):
        raise ConfigError(f"profile name {name!r}: letters, digits, - and _ only")


def check_key(key: str, *, where: str) -> None:
    if key not in KEYS:
        raise ConfigError(f"{where}: unknown key; a profile has {', '.join(KEYS)}")


def check_value(key: str, value: object, *, where: str) -> None:
    check_key(key, where=where)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: must be a string that is not empty")
    if key == "output" and value not in OUTPUTS:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(OUTPUTS)}")
    if key == "url" and not re.match(r"https?://[^/]", value):
        raise ConfigError(f"{where}: {value!r} is not an http:// or https:// URL")


def toml_string(text: str) -> str:
    """`text` as a TOML basic string: quotes, backslashes and control characters escaped (TOML 1.0,
    section String)."""
    escaped = []
    for character in text:
        code = ord(character)
        if character in '"\\':
            escaped.append("\\" + character)
        elif (code < 0x20 and character != "\t") or code == 0x7F:
            escaped.append(f"\\u{code:04X}")
        else:
            escaped.append(character)
    return '"' + "".join(escaped) + '"'


def masked(key: str) -> str:
    """An API key as `planner config list` shows it: its public key id (what `planner key list` shows), never
    its secret."""
    prefix, _, rest = key.partition("_")
    key_id, separator, _ = rest.partition("_")
    return f"{prefix}_{key_id}_****" if prefix == "cpk" and separator else "****"
