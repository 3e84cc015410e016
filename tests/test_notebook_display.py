"""Results and sessions show themselves in a notebook without JavaScript, and ``ax.show``
opens the window without blocking (issue 27, item 23)."""

import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import attnexplorer as ax
from attnexplorer.core.notebook.figure import viridis


def test_a_result_is_an_svg_heatmap_with_its_token_labels():
    r = ax.compute(ax.build_preset("pronoun").session)
    svg = r._repr_svg_()
    root = ET.fromstring(svg)            # well-formed
    ns = "{http://www.w3.org/2000/svg}"
    texts = [t.text for t in root.iter(f"{ns}text")]
    assert texts[0] == "weights — head 0"
    assert texts.count("she") == 2 and texts.count("dog") == 2        # down the side and along the bottom
    rects = list(root.iter(f"{ns}rect"))
    assert len(rects) == r.n * r.n
    titles = [rect.find(f"{ns}title").text for rect in rects]
    assert "she → dog: 0.8830" in titles and "The → dog: blocked" in titles
    assert "<script" not in svg


def test_the_png_is_a_valid_image_of_the_cells():
    r = ax.compute(ax.build_preset("pronoun").session)
    png = r._repr_png_()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    from PIL import Image
    import io

    image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    size = image.shape[0] // r.n
    she, dog = r.tokens.index("she"), r.tokens.index("dog")
    assert tuple(image[she * size + 1, dog * size + 1]) == tuple(viridis(np.array(r.weights[0, she, dog])))


def test_a_session_shows_its_weights_and_a_large_one_is_pooled():
    s = ax.build_preset("pronoun").session
    assert s._repr_svg_() == ax.compute(s)._repr_svg_()
    big = ax.build_preset("random", {"n": 300, "d": 4, "d_k": 2, "heads": 1}).session
    svg = big._repr_svg_()
    assert "max-pooled, 3×3 cells a cell" in svg and svg.count("<rect") == 100 * 100


def test_viridis_ends():
    assert tuple(viridis(np.array(0.0))) == (68, 1, 84) and tuple(viridis(np.array(1.0))) == (253, 231, 37)


def test_show_opens_the_window_in_a_process_of_its_own_and_returns(tmp_path):
    launched = []
    s = ax.build_preset("dessert").session

    def launch(argv, **kwargs):
        launched.append((argv, kwargs))
        return "handle"

    from attnexplorer.commands.show import show

    for obj in (s, ax.compute(s), ax.session_to_dict(s)):
        assert show(obj, launch=launch) == "handle"
        argv, kwargs = launched[-1]
        assert argv[:3] == [sys.executable, "-m", "attnexplorer"] and kwargs["start_new_session"]
        assert ax.load_session(argv[3]) == s
    ax.save_session(s, tmp_path / "mine.json")
    show(str(tmp_path / "mine.json"), launch=launch)
    assert launched[-1][0][3] == str((tmp_path / "mine.json").resolve())


@pytest.mark.parametrize("bad, message", [(42, "not int"), ("no-such.json", "cannot be read")])
def test_show_refuses_in_the_notebook(bad, message):
    with pytest.raises(ax.AttnExplorerError, match=message):
        ax.show(bad)


def test_show_does_not_block(tmp_path):
    # the real launch: the call returns while the window's process starts up
    s = ax.build_preset("pronoun").session
    process = ax.show(s)
    try:
        assert isinstance(process, subprocess.Popen)
    finally:
        process.kill()
        process.wait(timeout=60)
