"""Test-wide set-up: Qt runs offscreen unless the caller chose a platform (e.g. xcb under Xvfb)."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Keep the user's real settings and recovery files out of the tests.
os.environ.setdefault("ATTNEXPLORER_TESTING", "1")
