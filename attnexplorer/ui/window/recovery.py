"""At start-up: offer the work left by a window that crashed or was killed."""

from __future__ import annotations

from ..autosave import remove_recovery, scan_recoveries


def offer_recovery(window) -> bool:
    """Offer each orphaned recovery file, newest first, through ``window.ask_restore``; restore
    the first one accepted. Each is claimed before it is offered, so two windows never offer
    the same one. A declined file is removed; unreadable ones were set aside (the status bar
    says where). Returns True when something was restored."""
    actions = window.actions
    scan = scan_recoveries(actions.autosaver.directory)
    if scan.set_aside:
        more = f" and {len(scan.set_aside) - 1} more there" if len(scan.set_aside) > 1 else ""
        window.status.show_message(f"An unreadable recovery file was set aside: {scan.set_aside[0]}{more}")
    for found in scan.found:
        recovery = actions.autosaver.claim(found)
        if recovery is None:
            continue  # another window took it
        if window.ask_restore(recovery):
            actions.restore(recovery)
            return True
        remove_recovery(recovery.file)
    return False
