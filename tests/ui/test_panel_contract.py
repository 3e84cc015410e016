"""The Panel contract: short titles for dock tabs, and ``needs`` honoured by every panel."""

from __future__ import annotations

import numpy as np
import pytest

from attnexplorer.core.compute.engine import INTERMEDIATES, STAGE_INTERMEDIATES, compute
from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.panels import PANEL_CLASSES, make_panels


@pytest.mark.parametrize("cls", PANEL_CLASSES, ids=lambda c: c.__name__)
def test_every_panel_has_a_short_title_and_names_what_it_needs(cls):
    assert cls.short_title != "Panel" and 0 < len(cls.short_title) <= 16
    assert isinstance(cls.needs, frozenset) and cls.needs
    assert cls.needs <= set(INTERMEDIATES + STAGE_INTERMEDIATES)


def test_short_titles_are_distinct():
    titles = [cls.short_title for cls in PANEL_CLASSES]
    assert len(set(titles)) == len(titles)


@pytest.mark.parametrize("preset", ["pronoun", "sine", "dessert", "rope", "translate"])
def test_each_panel_draws_a_result_computed_with_only_its_needs(preset, qtbot):
    built = build_preset(preset, {})
    document = SessionDocument(built.session)
    try:
        full = document.result
        panels = make_panels(document)
        for panel in panels:
            qtbot.addWidget(panel)
            panel.resize(480, 360)
            panel.show()
        qtbot.waitExposed(panels[0])
        for panel in panels:
            if not panel.applies_to(document.session):
                continue
            partial = compute(document.session, keep=panel.needs)
            # Everything not needed is absent, so a panel that read it would fail here.
            assert all(getattr(partial, name) is None for name in set(INTERMEDIATES) - panel.needs)
            # Published: every shown panel redraws it, those that need more than it has too.
            document.compute.publish(partial)
            panel.refresh()
            figure = panel.export_item()
            if figure is not None:
                assert figure.scene() is not None
            document.compute.publish(full)
        # What the partial results drew equals what the full one draws, panel by panel.
        weights = next(p for p in panels if p.kind == "weights")
        document.compute.publish(compute(document.session, keep=weights.needs))
        partial_image = np.array(weights.view.image.image)
        document.compute.publish(full)
        np.testing.assert_array_equal(np.isnan(partial_image), np.isnan(weights.view.image.image))
        np.testing.assert_allclose(np.nan_to_num(partial_image), np.nan_to_num(weights.view.image.image))
    finally:
        document.shutdown()


def test_a_panel_tabbed_away_waits_and_catches_up_when_its_tab_is_raised(qtbot):
    from PySide6.QtWidgets import QDockWidget

    from ui_helpers import close_window, open_window

    built = build_preset("pronoun", {})
    document, window = open_window(built.session)
    try:
        covered = [p for p in window.panels if p.isVisible() and not p.is_on_screen]
        if not covered:
            pytest.skip("the default layout tabs no panel away")
        panel = covered[0]
        x = document.session.embeddings.copy()
        x[0, 0] += 1.0
        document.edit(document.session.replace(embeddings=x), "edit")
        assert document.compute.wait_idle()
        qtbot.wait(10)
        assert panel.is_stale  # not drawn while behind another tab
        dock = panel.parentWidget()
        while not isinstance(dock, QDockWidget):
            dock = dock.parentWidget()
        dock.raise_()
        qtbot.waitUntil(lambda: not panel.is_stale, timeout=3000)
        assert panel.is_on_screen
    finally:
        close_window(document, window)


def test_a_panel_that_does_not_say_what_it_reads_gets_everything(qtbot):
    from attnexplorer.ui.window.docks import panel_needs
    from attnexplorer.ui.panels.base import Panel

    class Quiet(Panel):
        kind = "quiet"

    class Panel2(Panel):  # a name is not a statement: only the base class's default is
        needs = frozenset({"weights"})

    class Child(Panel2):
        pass

    Panel2.__name__ = "Panel"  # comparing names made Child read as "says nothing"

    document = SessionDocument(build_preset("pronoun").session)
    try:
        assert panel_needs(Quiet(document)) is None
        assert panel_needs(Panel2(document)) == {"weights"}
        assert panel_needs(Child(document)) == {"weights"}
    finally:
        document.shutdown()


def test_stale_panels_share_one_watcher_a_container_and_drawn_panels_watch_nothing(qtbot):
    # A filter of each panel's own on every container had each event of the main window
    # (three paint requests an edit) pass through fourteen Python filters.
    from PySide6.QtCore import QObject

    from ui_helpers import close_window, open_window

    document, window = open_window(build_preset("pronoun", {}).session)
    try:
        for value in (1.0, 2.0):
            x = document.session.embeddings.copy()
            x[0, 0] += value
            document.edit(document.session.replace(embeddings=x), "edit")
            assert document.compute.wait_idle()
            qtbot.wait(10)
        watches = window.findChildren(QObject, "panel-cover-watch")
        containers = [watch.parent() for watch in watches]
        assert len({id(c) for c in containers}) == len(containers)  # one a container
        watching = [panel for watch in watches for panel in watch.panels]
        stale = [p for p in window.panels if p.isVisible() and p.is_stale]
        assert stale and window in containers  # the tabbed-away panels wait on the window too
        assert all(panel.is_stale for panel in watching)
        assert not [p for p in window.panels if p.is_on_screen and p in watching]
    finally:
        close_window(document, window)
