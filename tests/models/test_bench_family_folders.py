"""The bench's "open a model of another family from a folder" rows: the folder it builds opens
through attnexplorer's own reader and forward (what the row times), and the rows report the
median of their probes against MiniLM's target."""

import pytest

from attnexplorer.bench import real_models
from attnexplorer.bench.family_folder import FAMILIES, build_family_folder
from attnexplorer.models import load_model


@pytest.mark.parametrize("family", FAMILIES)
def test_the_bench_folder_opens_natively(family, tmp_path):
    folder = build_family_folder(tmp_path / family, family, layers=2, hidden=48)
    loaded = load_model(str(folder))
    assert loaded.engine == "attnexplorer" and loaded.family.name == family, loaded.notes
    run = loaded.run(real_models.TEXT_32)
    assert len(run.ids) > 20 and run.attentions.shape[:2] == (2, 6)


def test_the_rows_report_the_median_against_minilms_target(monkeypatch, tmp_path):
    seconds = iter([0.5, 0.2, 9.0] * 2 * len(FAMILIES))
    built = []

    def probe(code, folder, text):
        if text == "Hello":
            return {"seconds": 0.0}
        return {"seconds": next(seconds), "import_s": 0.1, "open_s": 0.1, "run_s": 0.1, "paint_s": 0.1,
                "tokens": 33, "engine": "attnexplorer", "from_cache": False, "layers": 6, "heads": 6}

    monkeypatch.setattr("attnexplorer.bench.family_folder.build_family_folder",
                        lambda folder, family: built.append(family) or folder)
    rows = real_models.bench_family_folders(repeats=3, probe=probe)
    assert built == list(FAMILIES) and [r["model"] for r in rows] == [f"{f} (folder)" for f in FAMILIES]
    assert all(r["seconds"] == 0.5 and r["met"] and r["target_s"] == real_models.TARGETS["minilm"] for r in rows)
    assert "gemma2 (folder)" in "\n".join(real_models.format_rows(rows))
