"""Lessons, Qt-free: quotes bound to the session, the checks of a step, the state of a run."""

import math

import pytest

from attnexplorer.core.editing.edits import set_cell
from attnexplorer.core.compute.engine import compute
from attnexplorer.core.lessons import LessonError, QuoteError, default_steps, fill, parse_ref, steps_from_list
from attnexplorer.core.lessons.model import Lesson
from attnexplorer.core.lessons.quotes import HIDDEN_MARK, refs_in, render
from attnexplorer.core.lessons.runtime import LessonRun, answer
from attnexplorer.core.inputs.presets import build_preset


@pytest.fixture(scope="module")
def pronoun():
    return build_preset("pronoun").session


def test_quotes_read_the_engine(pronoun):
    r = compute(pronoun, dtype="float64")
    she, dog = r.tokens.index("she"), r.tokens.index("dog")
    assert render(parse_ref("scores[she, dog]:.2f"), r) == f"{r.scores[0, she, dog]:.2f}" == "13.83"
    assert render(parse_ref("Q[she]:.2f"), r) == "[2.64, 1.46, 0.94]"
    assert render(parse_ref("Q[she, 2]:.2f"), r) == "0.94"
    assert render(parse_ref("top weights[she]"), r) == "dog"
    assert render(parse_ref("d_k"), r) == "3"
    assert render(parse_ref("weights[#6, #1]:.3f"), r) == "0.883"
    assert render(parse_ref("scale:.4f"), r) == f"{1 / math.sqrt(3):.4f}"
    assert len(render(parse_ref("output:.2f"), r).splitlines()) == 9


def test_quotes_follow_an_edit(pronoun):
    """The text is bound to the session: an edit to W_k changes the number quoted."""
    before = fill("k(dog)·q = {scores[she, dog]:.2f}", compute(pronoun)).text
    edited = set_cell(pronoun, "W_k", 0, 0, 0.0)
    after = fill("k(dog)·q = {scores[she, dog]:.2f}", compute(edited)).text
    r = compute(edited, dtype="float64")
    assert before == "k(dog)·q = 13.83"
    assert after == f"k(dog)·q = {r.scores[0, 6, 1]:.2f}" != before


@pytest.mark.parametrize("text, why", [
    ("{weights[shee, dog]}", "there is no token 'shee'"),
    ("{weights[she, dog, 1]}", "expected [row] or [row, column]"),
    ("{wieghts[she]}", "is not a value a lesson can quote"),
    ("{Q[she, 3]}", "Q has features 0..2, not 3"),
    ("{Q[she, dog]}", "the column of Q is a feature number"),
    ("{weights@2[she]}", "there is no head 2"),
    ("{scores[she]:%d}", "is not .Nf, .Ng or .Ne"),
    ("{top Q[she]}", "top needs one row of scores"),
    ("{param.tau}", "has no parameter 'tau'"),
    ("a { brace", "unmatched brace"),
])
def test_bad_quotes_say_why(pronoun, text, why):
    with pytest.raises(QuoteError, match=why.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        for ref in refs_in(text):
            from attnexplorer.core.lessons.quotes import check

            check(ref, pronoun)


def test_a_quote_the_session_lost_shows_a_question_mark(pronoun):
    from attnexplorer.core.editing.edits import set_token

    renamed = set_token(pronoun, 6, "her")
    filled = fill("w = {weights[she, dog]:.3f}; {{braces}}", compute(renamed))
    assert filled.text == "w = ?; {braces}"
    assert "there is no token 'she'" in filled.quotes[0][2]


def test_hidden_values_are_not_quoted_until_revealed(pronoun):
    r = compute(pronoun)
    hidden = (parse_ref("weights[she]"),)
    text = "{weights[she, dog]:.3f} {weights[dog, dog]:.3f} {top weights[she]} {scores[she, dog]:.1f}"
    assert fill(text, r, hidden).text == f"{HIDDEN_MARK} 1.000 {HIDDEN_MARK} 13.8"
    assert fill(text, r).text == "0.883 1.000 dog 13.8"


def step(**fields):
    return {"stage": "softmax", **fields}


@pytest.mark.parametrize("steps, where, why", [
    ([], "steps", "expected a list of at least one step"),
    ([{"stage": "soft"}], "steps[0].stage", "expected one of tokens, positions"),
    ([step(panels=["weights", "charts"])], "steps[0].panels[1]", "expected one of qkv"),
    ([step(), step(text="{weights[she, cat]}")], "steps[1].text", "there is no key 'cat'"),
    ([step(ask={"kind": "guess", "of": "weights[she]"})], "steps[0].ask.kind", "expected \"key\" or \"number\""),
    ([step(ask={"kind": "key", "of": "weights[she, dog]"})], "steps[0].ask.of", "a key question needs a whole row"),
    ([step(ask={"kind": "number", "of": "weights[she]"})], "steps[0].ask.of", "a number question needs one cell"),
    ([step(ask={"kind": "number", "of": "Q[she, 0]"})], "steps[0].ask.of", "only a row or a cell of scores"),
    ([step(ask={"kind": "number", "of": "weights[she, dog]", "tolerance": -1})], "steps[0].ask.tolerance",
     "expected a number ≥ 0"),
    ([step(hide="weights[she]")], "steps[0].hide", "expected a list"),
    ([step(select={"query": "her"})], "steps[0].select.query", "there is no token 'her'"),
    ([step(slider="tau")], "steps[0].slider", "expected a parameter of the session's preset"),
    ([step(colour="red")], "steps[0]", "has an unknown key 'colour'"),
])
def test_bad_steps_name_the_place_and_the_reason(pronoun, steps, where, why):
    with pytest.raises(LessonError) as err:
        steps_from_list(steps, pronoun)
    assert err.value.where == where
    assert why in str(err.value)
    assert str(err.value).startswith(where)


def test_a_run_steps_guesses_and_reveals(pronoun):
    steps = steps_from_list([
        {"stage": "scores", "title": "score(she, {top scores[she]})"},
        step(ask={"kind": "key", "of": "weights[she]"}, text="{weights[she, dog]:.3f}"),
        step(ask={"kind": "number", "of": "weights[she, dog]:.3f", "tolerance": 0.02}),
    ], pronoun)
    run = LessonRun(Lesson("t", pronoun, steps))
    r = compute(pronoun)
    assert run.counter(r) == "Step 1 of 3: score(she, dog)"
    assert not run.back() and run.next() and run.index == 1
    assert run.hidden() == (parse_ref("weights[she]"),)
    run.guess_key("ball")
    run.reveal()
    assert run.hidden() == ()
    assert run.verdict(r) == "Your guess: ball · answer: dog (0.883) ✗"
    run.next()
    with pytest.raises(Exception, match="'lots'"):
        run.guess_number("lots")
    run.guess_number("0.9")
    run.reveal()
    assert run.verdict(r) == "Your guess: 0.900 · answer: 0.883 ✓ right"
    run.guess_number("1/2")
    assert run.verdict(r).endswith("✗ off by 0.383")
    assert not run.next() and run.index == 2
    run.go(1)
    assert run.is_revealed() and run.guesses[1] == "ball"   # Back shows the guess and the answer again
    assert answer(steps[1].ask, r).key == "dog"


def test_default_steps_follow_the_session():
    sine = build_preset("sine").session
    names = [s.stage for s in default_steps(sine)]
    assert names == ["tokens", "projections", "scores", "scale", "softmax", "output"]
    assert default_steps(sine)[3].formula == "scaled = scores / τ"
    pronoun = build_preset("pronoun").session
    assert "mask" in [s.stage for s in default_steps(pronoun)]
    assert "embedding_scatter" in default_steps(pronoun)[0].panels
