"""Lesson files and the built-in lessons: refused with the place and the reason, written
back as read, and every number a built-in lesson quotes checked against what the
walkthroughs (../shared/seeds) print, computed through the engine."""

import json
import math
import re

import numpy as np
import pytest
from walkthroughs import (DESSERT_OMEGA_24, DESSERT_OUTPUT, DESSERT_SCORES_2, DESSERT_SHAPES, DESSERT_WEIGHTS_2,
                          DESSERT_X, PRONOUN_K_BALL, PRONOUN_K_DOG, PRONOUN_Q_SHE, PRONOUN_SCALED_DOG,
                          PRONOUN_SCORE_BALL, PRONOUN_SCORE_DOG, PRONOUN_WEIGHT_BALL, PRONOUN_WEIGHT_DOG)

from attnexplorer.core.compute.engine import compute
from attnexplorer.core.lessons import LessonError, fill
from attnexplorer.io.lesson_file import (builtin_lesson, builtin_lessons, dumps_lesson, is_lesson_file, load_lesson,
                                         loads_lesson, open_lesson, save_lesson)
from attnexplorer.io.session_file import save_session

MINIMAL = {"format": "attnexplorer-lesson", "version": 1, "title": "t", "preset": {"name": "pronoun"},
           "steps": [{"stage": "scores", "text": "{scores[she, dog]:.2f}"}]}


def text(obj) -> str:
    return json.dumps(obj)


@pytest.mark.parametrize("change, message", [
    (lambda o: o.update(format="attnexplorer-session"), "l.json: format is 'attnexplorer-session', expected"),
    (lambda o: o.update(version=2), "l.json: written by a newer attnexplorer (lesson version 2)"),
    (lambda o: o.update(colour=1), "l.json: has an unknown key 'colour'"),
    (lambda o: o.pop("preset"), "l.json: has neither \"preset\" nor \"session\""),
    (lambda o: o.update(session={}), "l.json: needs either \"preset\""),
    (lambda o: o.update(preset={"name": "pronoun", "params": {"tau": 1}}), "l.json: preset preset 'pronoun' has no parameter 'tau'"),
    (lambda o: o.update(preset={"name": "nope"}), "l.json: preset unknown preset 'nope'"),
    (lambda o: o["steps"][0].update(text="{weights[she, cow]}"),
     "l.json: steps[0].text {weights[she, cow]}: there is no key 'cow'"),
    (lambda o: o["steps"].append({"stage": "softmax", "ask": {"kind": "key", "of": "weights[shee]"}}),
     "l.json: steps[1].ask.of {weights[shee]}: there is no token 'shee'"),
])
def test_bad_lesson_files_are_refused_with_the_place(change, message):
    obj = json.loads(text(MINIMAL))
    change(obj)
    with pytest.raises(LessonError) as err:
        loads_lesson(text(obj), "l.json")
    assert str(err.value).startswith(message)


def test_a_bad_embedded_session_is_refused_with_its_place():
    obj = json.loads(text(MINIMAL))
    obj.pop("preset")
    obj["session"] = {"format": "attnexplorer-session", "version": 2, "tokens": ["a", "b"],
                      "embeddings": [[1, 0], [0, 1]], "heads": [{"W_q": [[1], [0]], "W_k": [[1], [0], [0]],
                                                                  "W_v": [[1], [0]]}]}
    with pytest.raises(LessonError, match=r"^l\.json: session\.heads\[0\]\.W_k has 3 rows, expected 2"):
        loads_lesson(text(obj), "l.json")


def test_not_json_and_not_a_file(tmp_path):
    with pytest.raises(LessonError, match=r"^l\.json: is not valid JSON: .* line 1"):
        loads_lesson('{"format": ', "l.json")
    with pytest.raises(LessonError, match="is not a regular file"):
        load_lesson(tmp_path)
    with pytest.raises(LessonError, match="unknown lesson 'pronon'; give a lesson file"):
        open_lesson("pronon")


def test_a_lesson_is_written_back_as_read(tmp_path):
    lesson = builtin_lesson("pronoun")
    path = tmp_path / "my-lesson.json"
    save_lesson(lesson, path)
    again = load_lesson(path)
    assert again.steps == lesson.steps
    assert again.session == lesson.session
    assert again.title == lesson.title
    assert dumps_lesson(again) == path.read_text(encoding="utf-8")
    assert is_lesson_file(path)
    save_session(lesson.session, tmp_path / "s.json")
    assert not is_lesson_file(tmp_path / "s.json")


# -- the built-in lessons quote the walkthroughs' numbers ------------------------------------------
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?")


def quoted(lesson, result):
    """Per step, the texts of every number it quotes (text, titles and prompts), filled in."""
    out = []
    for step in lesson.steps:
        texts = [step.text, step.title] + ([step.ask.prompt] if step.ask else [])
        numbers = []
        for t in texts:
            for _ref, shown, problem in fill(t, result).quotes:
                assert problem is None, problem
                numbers += NUMBER.findall(shown)
        out.append(numbers)
    return out


def printed(values) -> list[float]:
    return [float(v) for v in np.ravel(values)]


def matches(shown: str, value: float) -> bool:
    """A quoted number equals a printed one to the quote's last digit (±1: the walkthroughs
    print their own float32 rounding, e.g. -0.2627 for -0.26264992)."""
    decimals = len(shown.split(".")[1]) if "." in shown else 0
    return abs(float(shown) - value) <= 1.01 * 10.0 ** -decimals


def first_step(numbers_by_step, value, decimals=None) -> int:
    for i, numbers in enumerate(numbers_by_step):
        if any(matches(n, value) and (decimals is None or len(n.partition(".")[2]) == decimals) for n in numbers):
            return i
    raise AssertionError(f"no step quotes {value}")


def assert_in_order(numbers_by_step, groups):
    """Each group of printed numbers is quoted, and the groups come in the walkthrough's order."""
    steps = [max(first_step(numbers_by_step, v) for v in printed(g)) for g in groups]
    assert steps == sorted(steps), steps


def test_the_pronoun_lesson_quotes_the_walkthrough():
    lesson = builtin_lesson("pronoun")
    numbers = quoted(lesson, compute(lesson.session))
    assert_in_order(numbers, [PRONOUN_Q_SHE, PRONOUN_K_DOG, PRONOUN_K_BALL, [PRONOUN_SCORE_DOG, PRONOUN_SCORE_BALL],
                              [PRONOUN_SCALED_DOG], [PRONOUN_WEIGHT_DOG, PRONOUN_WEIGHT_BALL]])
    every = [n for step in numbers for n in step]
    assert "13.83" in every and "7.99" in every and "0.883" in every and "9.8" in every
    # The steps in the walkthrough's order: embeddings, projections, scores, scale, softmax,
    # mask, output, summary.
    stages = [s.stage for s in lesson.steps]
    assert stages == ["tokens", "projections", "projections", "scores", "scores", "scale", "softmax", "mask",
                      "output", "summary"]


def test_the_dessert_lesson_quotes_every_printed_number_in_order():
    lesson = builtin_lesson("dessert")
    numbers = quoted(lesson, compute(lesson.session))
    n, d, d_k, d_v = DESSERT_SHAPES
    assert_in_order(numbers, [DESSERT_X, [DESSERT_OMEGA_24], DESSERT_SCORES_2, DESSERT_WEIGHTS_2, DESSERT_OUTPUT[1],
                              DESSERT_OUTPUT])
    shapes = [int(x) for x in numbers[2] if "." not in x]
    assert {n, d, d_k, d_v} <= set(shapes)
    # Every four-decimal number the lesson quotes is one the walkthrough prints.
    every_printed = printed(DESSERT_X) + printed(DESSERT_SCORES_2) + printed(DESSERT_WEIGHTS_2) \
        + printed(DESSERT_OUTPUT) + [DESSERT_OMEGA_24]
    quoted_4 = [x for step in numbers for x in step if len(x.partition(".")[2]) == 4]
    unprinted = [x for x in quoted_4 if not any(matches(x, v) for v in every_printed)]
    # query_2 and keys[4] are quoted to set the question; the walkthrough shows them only as code.
    assert len(set(unprinted)) == 4, unprinted


def test_the_sine_lesson_quotes_the_engineered_scores():
    """The noisy-sine walkthrough prints no numbers; the lesson's are checked against its
    formulas, computed here without the engine: −(pᵢ − pⱼ)², softmax(scores/τ), the average."""
    lesson = builtin_lesson("sine")
    session = lesson.session
    result = compute(session, dtype="float64")
    n, tau = session.n, session.preset.params["tau"]
    p = np.arange(n) / (n - 1)
    scores = -(p[:, None] - p[None, :]) ** 2
    weights = np.exp(scores / tau)
    weights /= weights.sum(axis=1, keepdims=True)
    noisy = session.embeddings[:, 0]
    step = {s.stage: s for s in lesson.steps}
    assert f"{scores[10, 12]:.6f}" in fill(step["scores"].text, result).text
    assert f"{weights[10, 10]:.3f} to itself" in fill(step["softmax"].text, result).text
    assert f"output(x10) = {weights[10] @ noisy:.3f}" in fill(step["output"].text, result).text
    assert lesson.steps[-1].slider == "tau"
    assert [s.stage for s in lesson.steps] == ["tokens", "projections", "scores", "scale", "softmax", "output"]


def test_the_rope_and_translate_lessons_quote_their_presets():
    rope = builtin_lesson("rope")
    r = compute(rope.session, dtype="float64")
    every = " ".join(fill(s.text, r).text for s in rope.steps)
    assert "0.873 of its weight on the word before it" in every and "0.932 on the" in every
    # RoPE's score depends on j − i only: 9·[cos(j − i + 1) + cos((j − i + 1)/2)] at j = i − 1 is 18.
    assert f"score(sat, cat) = {9 * (math.cos(0) + math.cos(0)):.2f}" in every
    translate = builtin_lesson("translate")
    r = compute(translate.session, dtype="float64")
    every = " ".join(fill(s.text, r).text for s in translate.steps)
    expected = math.exp(6.25 / math.sqrt(3)) / (math.exp(6.25 / math.sqrt(3)) + 2)
    assert f"puts {expected:.3f} of its weight on its translation" in every


def test_every_built_in_lesson_loads_and_asks():
    for name in builtin_lessons():
        lesson = open_lesson(name)
        assert lesson.name == name and len(lesson.steps) >= 5
        assert any(s.ask is not None for s in lesson.steps), name
