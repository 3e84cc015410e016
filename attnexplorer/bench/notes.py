"""How a bench row's figures were taken, as its report line says it: shared by the report and
the rows that write their own lines (fit, long), which the report imports."""

from __future__ import annotations


def repeats_note(row: dict, what: str) -> str:
    """" (median of 5 edits in one fresh process; load average 1.02 → 1.10)": how a row's
    figures were taken, where the row says."""
    parts = []
    if (row.get("repeats") or 0) > 1:  # a single run (``--quick``) is no median
        parts.append(f"median of {row['repeats']} {what}")
    if row.get("load_before") is not None or row.get("load_after") is not None:
        parts.append(f"load average {load_text(row.get('load_before'))} → {load_text(row.get('load_after'))}")
    return f" ({'; '.join(parts)})" if parts else ""


def load_text(value) -> str:
    """A load average as the report writes it ("unknown" when it was not read)."""
    return "unknown" if value is None else f"{value:.2f}"
