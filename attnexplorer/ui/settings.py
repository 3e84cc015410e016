"""Where attnexplorer keeps what it remembers, and a small typed wrapper over QSettings.

Two places, which the environment can move so that a second installation, the tests and the
bench never touch a user's files:

- **settings** (window geometry, dock layout, last session, recent files): QSettings. When the
  environment names a folder in ``ATTNEXPLORER_CONFIG_DIR``, an INI file there is used (the
  tests name one per test in ``tests/conftest.py``, the bench one per window). Otherwise the
  platform's native store under organisation and application "attnexplorer".
- **data** (the autosave recovery files): ``ATTNEXPLORER_DATA_DIR`` when set, else
  ``<config dir>/data`` when the settings folder is named, else platformdirs'
  ``user_data_dir("attnexplorer")``.

Both are read from the environment on every call, so a test can point them at ``tmp_path``
with ``monkeypatch.setenv`` and get fresh, isolated settings.
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings

APP_NAME = "attnexplorer"
ORG_NAME = "attnexplorer"
MAX_RECENT = 10

# Bump when the default dock arrangement changes in a way an old saved state would fight:
# restoreState refuses a state saved under another version and the default layout is used.
LAYOUT_VERSION = 1

def config_dir() -> Path | None:
    """The folder holding the settings INI file, or None for the platform's native store."""
    named = os.environ.get("ATTNEXPLORER_CONFIG_DIR")
    if named:
        return Path(named)
    return None


def data_dir() -> Path:
    """The folder for recovery files (created on demand by the writers, not here)."""
    named = os.environ.get("ATTNEXPLORER_DATA_DIR")
    if named:
        return Path(named)
    config = config_dir()
    if config is not None:
        return config / "data"
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def make_qsettings() -> QSettings:
    """A QSettings honouring the overrides above (callers need not care which store it is)."""
    config = config_dir()
    if config is not None:
        config.mkdir(parents=True, exist_ok=True)
        return QSettings(str(config / "attnexplorer.ini"), QSettings.Format.IniFormat)
    return QSettings(QSettings.Format.NativeFormat, QSettings.Scope.UserScope, ORG_NAME, APP_NAME)


class AppSettings:
    """What the window remembers between runs. Every getter tolerates a missing or odd value."""

    def __init__(self, qsettings: QSettings | None = None):
        self.q = qsettings if qsettings is not None else make_qsettings()

    # -- window --------------------------------------------------------------------------
    def geometry(self) -> QByteArray | None:
        value = self.q.value("window/geometry")
        return value if isinstance(value, QByteArray) and not value.isEmpty() else None

    def set_geometry(self, data: QByteArray) -> None:
        self.q.setValue("window/geometry", data)

    def window_state(self) -> QByteArray | None:
        """The saved dock layout, or None when absent or saved under another LAYOUT_VERSION."""
        value = self.q.value("window/state")
        version = self.q.value("window/state_version")
        try:
            same = int(version) == LAYOUT_VERSION
        except (TypeError, ValueError):
            same = False
        if not same or not isinstance(value, QByteArray) or value.isEmpty():
            return None
        return value

    def set_window_state(self, data: QByteArray) -> None:
        self.q.setValue("window/state", data)
        self.q.setValue("window/state_version", LAYOUT_VERSION)

    def clear_window_state(self) -> None:
        self.q.remove("window/state")
        self.q.remove("window/state_version")

    # -- sessions ------------------------------------------------------------------------
    def last_session(self) -> Path | None:
        value = self.q.value("session/last")
        return Path(value) if isinstance(value, str) and value else None

    def set_last_session(self, path: Path | None) -> None:
        if path is None:
            self.q.remove("session/last")
        else:
            self.q.setValue("session/last", str(Path(path).resolve()))

    def recent_files(self) -> list[Path]:
        """Most recent first, at most MAX_RECENT, without duplicates."""
        value = self.q.value("session/recent")
        if isinstance(value, str):  # QSettings returns a lone string for a one-item list
            value = [value]
        if not isinstance(value, list):
            return []
        out: list[Path] = []
        for item in value:
            if isinstance(item, str) and item and Path(item) not in out:
                out.append(Path(item))
        return out[:MAX_RECENT]

    def add_recent(self, path: Path) -> None:
        path = Path(path).resolve()
        items = [path] + [p for p in self.recent_files() if p != path]
        self.q.setValue("session/recent", [str(p) for p in items[:MAX_RECENT]])

    def remove_recent(self, path: Path) -> None:
        path = Path(path).resolve()
        self.q.setValue("session/recent", [str(p) for p in self.recent_files() if p != path])

    # -- how cells write numbers ---------------------------------------------------------
    def number_format(self) -> str:
        from ..core.numbers.display import DEFAULT_NUMBER_FORMAT, NUMBER_FORMATS

        value = self.q.value("view/number_format")
        return value if value in NUMBER_FORMATS else DEFAULT_NUMBER_FORMAT

    def set_number_format(self, number_format: str) -> None:
        self.q.setValue("view/number_format", number_format)

    # -- how zoomed-out heatmaps pool their cells ------------------------------------------
    def overview_pool(self) -> str:
        value = self.q.value("view/overview_pool")
        return value if value in ("max", "mean") else "max"

    def set_overview_pool(self, pool: str) -> None:
        self.q.setValue("view/overview_pool", pool)

    def sync(self) -> None:
        self.q.sync()
