"""What grade and pytest say about a learner's work: never misleading, never the same thing eight times.

- an exercise that is written but calls another exercise's stub is *waiting on* that stub, not "not started";
- grade prints each part's own duration, not a running total;
- a mistake shows its diagnosis in full once per exercise, and the summary gives it with the count of failures;
- a comparison with a worked example shows expected vs got;
- a known mistake is named only when it reproduces the learner's output on that call (never one
  that returns the right answer there);
- a mistake nobody catalogued is still pointed at: the inputs at the first mismatch, the region
  where two large tensors differ, the settings by name, empty mask rows, the one setting that differs;
- the workbook's summary says why tests were skipped, without ``-rs``.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workbook import grading
from workbook.checking import WrongAnswer, assert_close, check_call, matching_mistakes
from workbook.grading import NOT_STARTED, WAITING, aggregate, format_next_steps
from workbook.mirror import make_exercise_text

ROOT = Path(__file__).resolve().parent.parent


def graded_names(part: str) -> set[str]:
    """Every function and method of the graded exercises of ``part`` (what a fresh clone has stubbed)."""
    from workbook.mirror import _functions

    tree = ast.parse((ROOT / "tests" / f"test_{part}.py").read_text())
    points = next(ast.literal_eval(n.value) for n in tree.body
                  if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "POINTS")
    return {n for n in _functions(ast.parse((ROOT / "solutions" / f"{part}.py").read_text())) if n.split(".")[0] in points}


def checkout(tmp_path: Path, tests: list[str], stubbed: dict[str, set[str]]) -> Path:
    """The package with exercises/<part>.py = the reference with ``stubbed[part]`` stubbed (set() = all written)."""
    root = tmp_path / "checkout"
    for name in ("workbook", "solutions"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "tests").mkdir()
    for name in ["conftest.py", *tests]:
        shutil.copy(ROOT / "tests" / name, root / "tests" / name)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    (root / "exercises").mkdir()
    (root / "exercises" / "__init__.py").write_text("")
    for part, names in stubbed.items():
        solution = (ROOT / "solutions" / f"{part}.py").read_text()
        (root / "exercises" / f"{part}.py").write_text(make_exercise_text(solution, names))
    return root


def pytest_in(root: Path, *argv: str) -> subprocess.CompletedProcess:
    # Without CI: with CI=true pytest repeats each whole failure message in its short summary, and these
    # tests count what the workbook itself prints.
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"PYTHONPATH": str(root), "WORKBOOK_IMPL": "exercises"}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *argv], cwd=root, capture_output=True,
                          text=True, timeout=300, env=env)


@pytest.mark.slow
def test_written_exercise_blocked_by_another_parts_stub_is_waiting(tmp_path):
    # Part 4 written except GaussianActor; Parts 1 and 2 untouched (all stubs).
    actor = {name for name in graded_names("part4_continuous") if name.startswith("GaussianActor.")}
    root = checkout(tmp_path, ["test_part4_continuous.py"], {
        "part1_ppo_core": graded_names("part1_ppo_core"), "part2_cartpole": graded_names("part2_cartpole"),
        "part4_continuous": actor})
    report = tmp_path / "report.jsonl"
    proc = pytest_in(root, "tests/test_part4_continuous.py", "-k", "compute_continuous_objective or GaussianActor",
                     f"--workbook-report={report}")
    rows = {r.exercise: r for r in aggregate(grading.read_report(report))}
    assert rows["compute_continuous_objective"].status == WAITING, proc.stdout[-3000:]
    assert rows["compute_continuous_objective"].detail == "waiting on part1_ppo_core.calc_clipped_surrogate_objective"
    assert rows["GaussianActor"].status == NOT_STARTED  # its own stub: not started, whatever else it needs
    assert "compute_continuous_objective  waiting on part1_ppo_core.calc_clipped_surrogate_objective\n" in proc.stdout
    steps = format_next_steps(list(rows.values()))
    assert "written, waiting on part1_ppo_core.calc_clipped_surrogate_objective" in steps
    assert "not started" not in next(line for line in steps.splitlines() if "compute_continuous_objective" in line)


def test_waiting_needs_every_test_blocked_or_passing():
    def result(nodeid, outcome, message=""):
        return {"kind": "result", "nodeid": nodeid, "outcome": outcome, "message": message}

    collected = [{"kind": "collected", "nodeid": f"{e}{i}", "part": "p4", "exercise": e, "points": 1}
                 for e in "ab" for i in range(2)]
    rows = aggregate(collected + [result("a0", "passed"), result("a1", WAITING, "waiting on p1.f"),
                                  result("b0", "failed", "wrong"), result("b1", WAITING, "waiting on p1.f")])
    assert [(r.status, r.detail) for r in rows] == [(WAITING, "waiting on p1.f"), ("failing", "wrong")]


def test_grade_prints_each_parts_own_duration(tmp_path, monkeypatch, capsys):
    report = tmp_path / "report.jsonl"
    clock = iter([0.0, 10.0, 25.0])
    monkeypatch.setattr(grading.time, "perf_counter", lambda: next(clock))
    progress = grading.Progress(report, 20)
    lines = []
    for part, nodeid in (("part1", "t1"), ("part2", "t2")):
        lines += [{"kind": "collected", "nodeid": nodeid, "part": part, "exercise": "e", "points": 1},
                  {"kind": "result", "nodeid": nodeid, "part": part, "exercise": "e", "outcome": "passed", "message": ""}]
        report.write_text("".join(json.dumps(r) + "\n" for r in lines))
        progress.poll()
    out = capsys.readouterr().out
    assert "part1: 1 exercises graded (1 passing) in 10 s" in out and "part2: 1 exercises graded (1 passing) in 15 s" in out


def test_ctrl_c_during_grade_is_one_line_exit_130_and_writes_no_json(tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        print("  part1_ppo_core: 8 exercises graded (8 passing) in 4 s")
        raise KeyboardInterrupt

    monkeypatch.setattr(grading, "run_suite", interrupted)
    out_json = tmp_path / "grade.json"
    try:
        code = grading.main(["--impl", "solutions", "--json", str(out_json)])
    except KeyboardInterrupt:  # caught here: raised on, it would stop this pytest session, not fail one test
        pytest.fail("Ctrl-C left grade as a KeyboardInterrupt: a traceback for the learner")
    assert code == 130
    out, err = capsys.readouterr()
    assert out.strip().splitlines()[-1] == ("interrupted: the parts listed above were graded, the others not "
                                            "(python -m workbook grade --part PART grades one part)")
    assert "Traceback" not in out + err and not out_json.exists()


def test_ctrl_c_during_the_main_jobs_grade_is_not_called_a_failing_reference(monkeypatch, capsys):
    from workbook import main_job

    monkeypatch.setattr(grading, "main", lambda argv: 130)  # what grade returns after Ctrl-C (tested above)
    assert main_job.main([]) == 130
    assert "do not pass" not in capsys.readouterr().err
    monkeypatch.setattr(grading, "main", lambda argv: 1)  # a reference that fails its tests is still said to
    assert main_job.main([]) == 1
    assert "the reference solutions do not pass their own tests" in capsys.readouterr().err


def test_a_mistake_is_diagnosed_in_full_once_with_the_count_of_failures():
    label = "[known mistake: baseline_includes_self]"
    # The exercise's own tests (its trainer test, through GroupTrainer, fails in the trainer's words instead).
    proc = pytest_in(ROOT, "tests/test_part5_beyond_ppo.py", "-k", "rloo_advantages and not trainer",
                     "--impl=mistake:part5_beyond_ppo:rloo_advantages:baseline_includes_self")
    assert proc.returncode == 1, proc.stdout[-3000:]
    failed = int(proc.stdout.rsplit(" failed", 1)[0].rsplit("\n", 1)[-1].split()[-1])
    assert failed > 1
    assert proc.stdout.count(label) == 2, proc.stdout  # the first failure in full, the summary row
    assert proc.stdout.count("the same diagnosis as") == failed - 1
    summary = next(line for line in proc.stdout.splitlines() if "✗ part5_beyond_ppo.rloo_advantages" in line)
    assert f"({failed} of " in summary and summary.endswith(label)


def test_a_worked_example_failure_shows_expected_and_got():
    got, expected = torch.tensor([-2.0, -1.0, 3.0]), torch.tensor([-3.0, -1.5, 4.5])
    with pytest.raises(WrongAnswer) as error:
        assert_close(got, expected, rtol=0, atol=1e-5, msg=lambda m: "see the worked example\n  " + m)
    text = str(error.value)
    assert "expected: tensor([-3.0000, -1.5000,  4.5000])" in text and "got:      tensor([-2., -1.,  3.])" in text
    assert "first mismatch at index (0,): expected -3, got -2" in text
    assert_close(expected + 1e-7, expected, rtol=0, atol=1e-5)  # same verdict as torch's within tolerance
    with pytest.raises(WrongAnswer, match="dtype"):
        assert_close(expected.double(), expected)


def test_a_known_mistake_that_is_right_on_the_call_is_never_named():
    # pass@k off by a hair at k = 1: the plug-in estimate and "c/n for every k" are exact there, so
    # neither can be the cause, although both are within the diagnosis' tolerance of the wrong answer.
    def run(fn):
        return fn(10, 3, 1)
    assert matching_mistakes("part7_reasoning", "pass_at_k", run, 0.3 + 1e-7, rtol=1e-5, atol=1e-5) == []
    assert matching_mistakes("part7_reasoning", "pass_at_k", run, 0.3 + 1e-7, rtol=1e-5, atol=1e-5, expected=0.3) == []
    # ...while at k = 2 the plug-in estimate is wrong, and a learner who returns it is told so.
    plug_in = 1 - (1 - 3 / 10) ** 2
    labels = matching_mistakes("part7_reasoning", "pass_at_k", lambda fn: fn(10, 3, 2), plug_in, rtol=1e-9, atol=1e-9)
    assert labels and all("[known mistake: plug_in_estimate]" in label for label in labels)


def uncatalogued(**functions):
    return type("Learner", (), {name: staticmethod(fn) for name, fn in functions.items()})


def test_an_uncatalogued_mistake_is_shown_at_its_inputs_and_where_large_outputs_differ():
    import solutions.part7_reasoning as ref

    def overlong_penalty(lengths, max_len, cache_len):  # wrong at the first penalised length only
        out = ref.overlong_penalty(lengths, max_len, cache_len).clone()
        out[lengths == max_len - cache_len + 1] = -1.0
        return out
    with pytest.raises(WrongAnswer) as error:
        check_call(uncatalogued(overlong_penalty=overlong_penalty), ref, "overlong_penalty", torch.arange(0, 26), 20, 5)
    text = str(error.value)
    assert "inputs at index (16,): lengths[16] = 16" in text, text
    assert "first mismatch at index (16,): expected -0.2, got -1" in text and "settings: max_len=20, cache_len=5" in text
    shown = [line.split(":", 1)[1] for line in text.splitlines() if line.lstrip().startswith(("expected[", "got["))]
    assert len(shown) == 2 and shown[0].strip() != shown[1].strip(), text  # never two identical elided tensors
    assert "known mistake" not in text


def test_a_loss_wrong_for_one_setting_says_which_setting_and_which_mask_rows_are_empty():
    import solutions.part7_reasoning as ref
    from tests.test_part7_reasoning import LOSS_STATS, loss_inputs
    from workbook.promises import check_call_documented_keys

    def clip_higher_loss(logprobs, old_logprobs, advantages, mask, eps_low=0.2, eps_high=0.28, normalisation="token"):
        if normalisation == "sequence":  # an uncatalogued slip: empty rows divide by 1, not skipped
            per_row = ref.clip_higher_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, "token")[1]
            n = mask.float().sum(1).clamp(min=1)
            ratio = (logprobs - old_logprobs).exp()
            a = advantages[:, None]
            per_tok = -torch.min(ratio * a, ratio.clamp(1 - eps_low, 1 + eps_high) * a) * mask
            return (per_tok.sum(1) / n).mean(), per_row
        return ref.clip_higher_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation)
    args = loss_inputs(0, spread=0.6)
    with pytest.raises(WrongAnswer) as error:
        check_call_documented_keys(uncatalogued(clip_higher_loss=clip_higher_loss), ref, "clip_higher_loss", *args, 0.2,
                                   0.28, "sequence", keys=LOSS_STATS)
    text = str(error.value)
    assert "settings: eps_low=0.2, eps_high=0.28, normalisation='sequence'" in text, text
    assert "only normalisation='sequence' differs" in text and "row 1 of mask is empty (no real token)" in text, text


@pytest.mark.slow
def test_skip_reasons_are_in_the_workbook_summary(tmp_path):
    root = checkout(tmp_path, ["test_continuous_probes.py"], {
        part: graded_names(part) for part in ("part1_ppo_core", "part2_cartpole", "part4_continuous")})
    proc = pytest_in(root, "tests/test_continuous_probes.py")
    assert proc.returncode == 0, proc.stdout[-3000:]
    skipped = int(proc.stdout.rsplit(" skipped", 1)[0].rsplit(" ", 1)[-1])
    summary = proc.stdout.split("workbook progress", 1)[1]
    assert f"{skipped} skipped: not started: needs exercises/part4_continuous.py::" in summary, summary
