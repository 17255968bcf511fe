"""One option vocabulary across every command and benchmark, and bad values refused in one line before anything runs.

Each command's and benchmark's real parser is captured (its ``parse_args`` raises before anything
else happens) and its options are checked against :data:`workbook.cli.VOCABULARY`: no synonym of a
vocabulary option (``--seed``, ``--run-dir``, ``--force`` ...), ``--seeds`` a list of seed values,
``--impl`` exercises|solutions, ``--wandb`` within offline|online|disabled, flags that are flags.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import runpy
import sys
from pathlib import Path

import pytest

from workbook.__main__ import COMMANDS
from workbook.__main__ import main as workbook_main
from workbook.cli import SYNONYMS, VOCABULARY, seed_value
from workbook.runs import WANDB_MODES

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))


class Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


def captured_parser(monkeypatch, run) -> argparse.ArgumentParser:
    """The parser whose ``parse_args`` ``run()`` calls first (nothing after that call runs)."""
    def stop(self, args=None, namespace=None):
        raise Captured(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", stop)
    with pytest.raises(Captured) as caught:
        run()
    return caught.value.parser


def vocabulary_problems(parser: argparse.ArgumentParser) -> list[str]:
    problems = []
    for action in parser._actions:
        for option in action.option_strings:
            if option in SYNONYMS:
                problems.append(f"{option}: spell it {SYNONYMS[option]}")
        names = set(action.option_strings)
        if "--seeds" in names and not (action.nargs in ("+", "*") and action.type is seed_value):
            problems.append("--seeds: a list of seed values (workbook.cli.add_seeds_option), not a count or one seed")
        if "--impl" in names and set(action.choices or ()) != {"exercises", "solutions"}:
            problems.append(f"--impl: choices exercises|solutions, got {action.choices}")
        if "--wandb" in names and not (action.choices and set(action.choices) <= set(WANDB_MODES)):
            problems.append(f"--wandb: choices among {WANDB_MODES}, got {action.choices}")
        if names & {"--overwrite", "--no-progress"} and action.nargs != 0:
            problems.append(f"{sorted(names)[0]}: a flag (store_true)")
        if "--set" in names and not isinstance(action, argparse._AppendAction):
            problems.append("--set: FIELD=VALUE, repeatable (action='append')")
        if names & {"--runs-dir", "--run-name", "--device"} and action.nargs not in (None, "?"):
            problems.append(f"{sorted(names)[0]}: one value")
    return problems


def mark(name: str):
    return pytest.param(name, id=name)


@pytest.mark.parametrize("name", [mark(f"command {c}") for c in COMMANDS] + [mark(f"benchmarks/{b}") for b in BENCHMARKS])
def test_options_follow_the_vocabulary(name, monkeypatch):
    if name.startswith("command "):
        command = name.removeprefix("command ")
        module = importlib.import_module(COMMANDS[command][0])
        parser = captured_parser(monkeypatch, lambda: module.main([]))
    else:
        path = ROOT / name
        monkeypatch.setattr(sys, "argv", [str(path)])
        parser = captured_parser(monkeypatch, lambda: runpy.run_path(str(path), run_name="__main__"))
    assert isinstance(parser, argparse.ArgumentParser)
    assert not vocabulary_problems(parser), vocabulary_problems(parser)


def test_the_check_catches_each_kind_of_drift():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)  # a count
    parser.add_argument("--run-dir")
    parser.add_argument("--impl", default="solutions")
    parser.add_argument("--wandb", default="disabled")
    parser.add_argument("--overwrite", type=bool)
    parser.add_argument("--set")
    found = " | ".join(vocabulary_problems(parser))
    for option in ("--seeds", "--run-dir", "--impl", "--wandb", "--overwrite", "--set"):
        assert option in found, found
    assert set(SYNONYMS.values()).isdisjoint(SYNONYMS) and all(v.split()[0] in VOCABULARY for v in SYNONYMS.values())


@pytest.mark.parametrize("command", ["cartpole", "continuous"])
@pytest.mark.parametrize("argv, what", [
    (["--seeds", "-1"], "error: --seeds: a seed is in [0, 2**32), got -1"),
    (["--seeds", "1.5"], "error: --seeds: a seed is a whole number, got '1.5'"),
    (["--seeds"], "error: --seeds: expected at least one argument"),
    (["--video"], "error: --video: needs moviepy"),
], ids=["negative", "fraction", "none", "video-without-extra"])
def test_bad_values_are_one_line_before_anything_runs(command, argv, what, tmp_path, monkeypatch, capsys):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("moviepy", "pygame") else find_spec(name, *a))
    runs = tmp_path / "runs"
    assert workbook_main([command, "--impl", "solutions", *argv, "--runs-dir", str(runs), "--wandb", "disabled"]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(what) and err.count("\n") == 1, err
    assert out == "" and not runs.exists()


def test_continuous_help_names_the_run_folders_it_writes(capsys):
    with pytest.raises(SystemExit):
        workbook_main(["continuous", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default: <env, e.g. invertedpendulum>-<impl>-seed<seed>-<time>" in text
    assert "continuous-<impl>" not in text
