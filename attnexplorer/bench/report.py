"""The text report of ``attnexplorer bench``: its figures, one section a row kind (those that
were measured: ``--only`` measures some), each figure marked ``ok`` or ``MISSED`` against its
target."""

from __future__ import annotations

from .notes import load_text, repeats_note


def mark(met) -> str:
    return "  -" if met is None else (" ok" if met else " MISSED")


def _list_note(rows) -> str:
    """The medians' repeats and the load average around a list of rows (one kind's), from
    its first row; nothing when the rows do not say."""
    if not rows or not isinstance(rows[0], dict):
        return ""
    first = rows[0]
    return repeats_note({**first, "load_after": rows[-1].get("load_after", first.get("load_after"))},
                        "repeats each")


def format_report(r: dict) -> str:
    m = r["machine"]
    out = [f"attnexplorer bench — {m['cpu']}, {m['cores']} cores, torch {m['torch']} "
           f"({m['torch_threads']} threads), devices: {', '.join(m['devices'])}"]
    if "date" in r:
        # Every wall-clock figure below moves with the machine's load: say when and how busy.
        out.append(f"run {r['date']}, load average {load_text(r.get('load_before'))} at the start, "
                   f"{load_text(r.get('load_after'))} at the end")
    out.append("")
    if "engine" in r:
        out.append("Engine vs bare torch softmax(QKᵀ·s)·V, d = 64 (target ≤ 1.3× at n ≥ 256)" + _list_note(r["engine"]))
        out.append(f"  {'device':7}{'n':>6}{'heads':>6}{'engine ms':>11}{'bare ms':>10}{'ratio':>7}")
        for row in r["engine"]:
            out.append(f"  {row['device']:7}{row['n']:>6}{row['heads']:>6}{row['engine_ms']:>11.3f}"
                       f"{row['bare_ms']:>10.3f}{row['ratio']:>7.2f}{mark(row['met'])}")
    if r.get("stages"):
        out.append("")
        out.append("With biases, 8 query heads sharing 2 K/V heads, RoPE or ALiBi, d = 512, d_k = 64 (target ≤ 1.3×)"
                   + _list_note(r["stages"]) + ";")
        out.append("rope+new: also QK-norm, soft-capping and a sink per head")
        out.append(f"  {'device':7}{'positions':>10}{'n':>6}{'engine ms':>11}{'bare ms':>10}{'ratio':>7}")
        for row in r["stages"]:
            out.append(f"  {row['device']:7}{row['positions']:>10}{row['n']:>6}{row['engine_ms']:>11.3f}"
                       f"{row['bare_ms']:>10.3f}{row['ratio']:>7.2f}{mark(row['met'])}")
    if "redraw" in r:
        out.append("")
        out.append("Edit → every visible panel redrawn, main window 1280×800, d = 64, 1 head" + _list_note(r["redraw"]))
        for row in r["redraw"]:
            target = f" (target ≤ {row['target_ms']:.0f} ms)" if row["target_ms"] else ""
            cpu = f", GUI thread {row['gui_cpu_ms']:.1f} ms" if row.get("gui_cpu_ms") is not None else ""
            out.append(f"  n = {row['n']:>4}: {row['median_ms']:7.1f} ms{target}{mark(row['met'])}{cpu}")
    d = r.get("drag")
    if d is not None:
        out.append("")
        out.append(f"Dragging the sine τ slider at N = {d['n']}: {d['redraws_per_s']:.0f} redraws/s "
                   f"({d['median_ms']:.1f} ms each, {d['gui_cpu_ms']:.1f} ms of it the GUI thread's processor time; "
                   f"target ≥ {d['target_per_s']:.0f}){mark(d['met'])}; one undo step: {d['undo_steps'] == 1}"
                   + repeats_note({**d, "repeats": d.get("steps")}, "frames"))
    e = r.get("edit_cost")
    if e is not None:
        growth = "not measured here" if e["growth_mb"] is None else f"{e['growth_mb']:.1f} MB"
        out.append("")
        out.append(f"One W_q cell edit at {e['heads']} heads, d = d_k = d_v = {e['d']}, typed into the window's table: "
                   f"{e['median_ms']:.1f} ms until every panel is painted (target ≤ {e['target_ms']:.0f})"
                   f"{mark(e['median_ms'] <= e['target_ms'])}")
        if "compute_ms" in e:
            out.append(f"  of which the engine {e['compute_ms']:.1f} ms and Qt's repaint {e['paint_ms']:.1f} ms, all on the "
                       f"GUI thread (the compute runs inline at this size); the thread's own processor time "
                       f"{e['gui_cpu_ms']:.1f} ms (less than the wall time when other work shares the machine"
                       + (f"; load average {e['load_average']:.1f}" if e.get("load_average") is not None else "") + ")")
        out.append(f"  {e['edits']} edits of different cells ({e['undo_steps']} undo steps) raised "
                   f"{'peak' if e.get('peak') else 'resident'} memory by {growth}"
                   + (f", {e['memory_files_mb']:.1f} MB of it copy-on-write memory files" if e.get("memory_files_mb") else "")
                   + f" (target < {e['target_mb']:.0f})"
                   f"{mark(None if e['growth_mb'] is None else e['growth_mb'] < e['target_mb'])}")
    if "heatmap" in r:
        out += ["", "Heatmap redraw vs matplotlib imshow + canvas.draw(), 600×500 px (target ≥ 10×)"
                + _list_note(r["heatmap"])]
    for row in r.get("heatmap", ()):
        out.append(f"  n = {row['n']:>4}: {row['pyqtgraph_ms']:7.2f} ms vs {row['matplotlib_ms']:7.1f} ms "
                   f"= {row['speedup']:5.1f}×{mark(row['met'])}   (right after a matplotlib draw: "
                   f"{row['pyqtgraph_first_ms']:.2f} ms = {row['matplotlib_ms'] / row['pyqtgraph_first_ms']:.1f}×)")
        if "speedup_annotated" in row:
            out.append(f"            with a number in every cell on both sides: {row['matplotlib_annotated_ms']:.1f} ms "
                       f"= {row['speedup_annotated']:.1f}×")
    big = r.get("large")  # each section only when its row was measured (--only)
    if big is not None and "error" in big:
        out += ["", f"Large session n = {big['n']}: FAILED: {big['error']}"]
    elif big is not None:
        out.append("")
        out.append(f"Large session n = {big['n']}, {big['heads']} heads: compute {big['compute_ms']:.0f} ms, "
                   f"edit → drawn {big['edit_to_drawn_ms']:.0f} ms" + repeats_note(big, "edits in one fresh process"))
        out.append(f"  longest GUI block while computing {big['max_block_while_computing_ms']:.0f} ms (target ≤ 50), "
                   f"overall {big['max_block_ms']:.0f} ms; peak memory {big['peak_mb']:.0f} MB (target < 2048)"
                   f"{mark(big['met'])}")
        if big.get("scroll_step_ms") is not None:
            out.append(f"  embedding table scroll step: {big['scroll_step_ms']:.1f} ms")
    s = r.get("startup")
    if s is not None and "error" in s:
        out += ["", f"Start-up: FAILED: {s['error']}"]
    elif s is not None:
        out.append("")
        torch_note = "torch was already loaded then" if s["torch_at_first_paint"] else "before torch had loaded"
        out.append(f"Start-up of `attnexplorer --preset pronoun`, a fresh process (imports of torch and Qt alone: "
                   f"{s['baseline_s']:.2f} s)")
        out.append(f"  first painted window {s['first_paint_s']:.2f} s ({torch_note}; target ≤ "
                   f"{s['target_paint_s']:.1f} s){mark(s['paint_met'])}")
        out.append(f"  every panel drawn {s['drawn_s']:.2f} s (target ≤ {s['target_drawn_s']:.1f} s){mark(s['drawn_met'])}")
    if "export" in r:
        from .export import format_export

        out += format_export(r["export"], mark)
    if "long" in r:
        from .long import format_long

        out += format_long(r, mark)
    if "fit_steps" in r or "fit_gui" in r:
        from .fit import format_fit

        out += format_fit(r, mark)
    if r.get("models"):
        from .real_models import format_rows

        out.append("")
        out.extend(format_rows(r["models"]))
    if r.get("behaviour"):
        from .behaviour import format_rows as behaviour_rows

        out.append("")
        out.extend(behaviour_rows(r["behaviour"]))
    if r.get("generation"):
        from .generation import format_row as generation_row

        out.append("")
        out.extend(generation_row(r["generation"]))
    if r.get("heads"):
        from .heads import format_row as heads_row

        out.append("")
        out.extend(heads_row(r["heads"]))
    out.append("")
    seconds = r.get("row_seconds")
    if seconds:
        out.append(f"({r['seconds']:.0f} s in all: " + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()) + ")")
    else:
        out.append(f"({r['seconds']:.0f} s in all)")
    return "\n".join(out)

