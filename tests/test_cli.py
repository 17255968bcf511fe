"""The layer around the exercises: every command's --help, one-line errors, run folders, wandb.

The commands run for real (in a subprocess where the process' own behaviour is the point: exit
status, no traceback, the time wandb may take) with tiny settings and ``--wandb disabled``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbook.__main__ import COMMANDS
from workbook.__main__ import main as workbook_main
from workbook.cli import parse_value
from workbook.runs import ConfigError

ROOT = Path(__file__).resolve().parent.parent
ONE_LINE_ERROR = re.compile(r"error: [^:\n]+: [^\n]+\n")


def run(*argv: str, cwd: Path = ROOT, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbook", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})))


def test_every_command_answers_help_without_side_effects(tmp_path):
    # One process for all of them (imports are the slow part); the dispatcher is the real one.
    script = ("import sys; from workbook.__main__ import main\n"
              "for name in sys.argv[1:]:\n"
              "    try:\n        main([name, '--help'])\n    except SystemExit as e:\n"
              "        assert e.code == 0, (name, e.code)\n    else:\n        raise AssertionError(name + ' ignored --help')\n"
              "    print('HELP-OK', name)\n")
    proc = subprocess.run([sys.executable, "-c", script, *COMMANDS], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [line for line in proc.stdout.splitlines() if line.startswith("HELP-OK")] == [f"HELP-OK {c}" for c in COMMANDS]
    assert "--debug" in proc.stdout and "--overwrite" in proc.stdout
    assert list(tmp_path.iterdir()) == [], "--help wrote something"


def test_a_ctrl_c_no_command_handles_itself_is_one_line_and_exit_130(capsys):
    """pretrain, evaluate, ... (the training loops stop at Ctrl-C by their own handlers, and grade says more)."""
    from workbook.runs import INTERRUPTED, command

    @command
    def main(argv):
        raise KeyboardInterrupt

    assert main([]) == INTERRUPTED == 130
    assert capsys.readouterr().err == "interrupted (Ctrl-C)\n"
    assert main(["--debug"]) == 130 and "Traceback" in capsys.readouterr().err


def test_a_ctrl_c_while_a_command_still_imports_is_one_line_and_exit_130(capsys, monkeypatch):
    """Before the command's own handler exists: Ctrl-C in the first seconds, while torch loads, was a traceback."""
    import importlib

    from workbook import __main__ as cli

    def interrupted(name):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib, "import_module", interrupted)
    assert cli.main(["goodhart", "--seeds", "0"]) == 130
    assert capsys.readouterr().err == "interrupted (Ctrl-C) while starting: nothing was written\n"


def test_unknown_command_is_named_with_the_list_of_commands():
    proc = run("bogus")
    assert proc.returncode == 2 and proc.stdout == ""
    assert ONE_LINE_ERROR.fullmatch(proc.stderr) and "'bogus'" in proc.stderr
    assert all(name in proc.stderr for name in COMMANDS)


@pytest.mark.parametrize("argv", [
    ["cartpole", "--set", "num_envs=2.5"],
    ["rlhf", "--mini-batch-size", "7"],
])
def test_bad_option_is_one_line_in_a_real_process(argv, tmp_path):
    proc = run(*argv, "--runs-dir", str(tmp_path / "runs"))
    assert proc.returncode == 2, proc.stderr
    assert ONE_LINE_ERROR.fullmatch(proc.stderr), proc.stderr
    assert not (tmp_path / "runs").exists()
    if argv[0] == "cartpole":
        debug = run(*argv, "--debug", "--runs-dir", str(tmp_path / "runs"))
        assert debug.returncode == 2 and "Traceback" in debug.stderr and debug.stderr.endswith(proc.stderr)


BAD = [
    (["cartpole", "--set", "num_envs=2.5"], "num_envs", "expected int"),
    (["cartpole", "--set", "learning_rate=-1e-3"], "learning_rate", "> 0"),
    (["cartpole", "--set", "num_minibatches=3"], "num_minibatches", "does not divide"),
    (["cartpole", "--set", "nonsense=1"], "--set", "no field 'nonsense'"),
    (["cartpole", "--set", "env_id=Pendulum-v1"], "env_id", "python -m workbook continuous"),
    (["cartpole", "--set", "env_id=NoSuchEnv-v0"], "env_id", "not a gymnasium environment"),
    (["cartpole", "--eval-episodes", "0"], "--eval-episodes", "≥ 1"),
    (["cartpole", "--wandb", "bogus"], "--wandb", "invalid choice"),
    (["cartpole", "--impl", "bogus"], "--impl", "invalid choice"),
    (["cartpole", "--seeds", "1", "1"], "--seeds", "repeated"),
    (["cartpole", "--run-name", "a/b"], "--run-name", "not a folder name"),
    (["cartpole", "--bogus"], "--bogus", "unknown option"),
    (["rlhf", "--mini-batch-size", "7"], "--mini-batch-size", "does not divide"),
    (["rlhf", "--iterations", "2.5"], "--iterations", "invalid int"),
    (["rlhf", "--learning-rate", "-1"], "--learning-rate", "> 0"),
    (["rlhf", "--wandb", "bogus"], "--wandb", "invalid choice"),
    (["rlhf", "--kl-penalty", "kl2"], "--kl-penalty", "invalid choice"),
    (["rlhf", "--reward", "human"], "--reward", "invalid choice"),
    (["rlhf", "--eval-samples", "0"], "--eval-samples", "≥ 1"),
    (["grade", "--impl", "mine"], "--impl", "invalid choice"),
    (["grade", "--part", "part9"], "--part", "invalid choice"),
    (["pretrain", "--d-model", "100", "--n-head", "3"], "--n-head", "does not divide"),
]


@pytest.mark.parametrize("argv, field, what", BAD, ids=[" ".join(a) for a, _, _ in BAD])
def test_bad_setting_is_one_line_and_writes_nothing(argv, field, what, tmp_path, capsys):
    runs = tmp_path / "runs"
    extra = {"cartpole": ["--runs-dir", str(runs)], "rlhf": ["--runs-dir", str(runs)]}.get(argv[0], [])
    assert workbook_main(argv + extra) == 2
    out, err = capsys.readouterr()
    assert ONE_LINE_ERROR.fullmatch(err), err
    assert err.startswith(f"error: {field}: ") and what in err, err
    assert not runs.exists(), "a run folder was created for a run that failed validation"


def test_unwritable_runs_dir_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert workbook_main(["cartpole", "--runs-dir", str(blocker / "runs"), "--wandb", "disabled"]) == 2
    assert capsys.readouterr().err.startswith(f"error: --runs-dir: cannot create {blocker}/runs/")
    assert workbook_main(["rlhf", "--runs-dir", "/proc/runs", "--wandb", "disabled"]) == 2  # root may write anywhere else
    assert "error: --runs-dir: cannot create /proc/runs/" in capsys.readouterr().err


def test_int_fields_reject_fractions():
    assert parse_value("n", int, "12") == 12 and parse_value("n", int, "1e5") == 100_000
    assert parse_value("x", float, "1e-3") == 1e-3 and parse_value("b", bool, "false") is False
    for hint, text in ((int, "2.5"), (int, "two"), (float, "nan"), (bool, "maybe")):
        with pytest.raises(ConfigError):
            parse_value("f", hint, text)


def test_a_run_name_is_never_reused_without_overwrite(tmp_path, capsys):
    argv = ["cartpole", "--impl", "solutions", "--total-timesteps", "1024", "--eval-episodes", "1", "--wandb", "disabled",
            "--no-progress", "--runs-dir", str(tmp_path), "--run-name", "mine"]
    assert workbook_main(argv) in (0, 1)
    metrics = tmp_path / "mine" / "metrics.jsonl"
    (tmp_path / "mine" / "marker").write_text("first run")
    capsys.readouterr()
    assert workbook_main(argv) == 2
    err = capsys.readouterr().err
    assert ONE_LINE_ERROR.fullmatch(err) and err.startswith("error: --run-name: ") and "--overwrite" in err
    assert (tmp_path / "mine" / "marker").exists(), "the first run was touched"
    assert workbook_main(argv + ["--overwrite"]) in (0, 1)
    assert metrics.exists() and not (tmp_path / "mine" / "marker").exists(), "--overwrite replaces the old run"


WANDB_SCRIPT = """
import json, sys, time
from pathlib import Path
from workbook.runs import start_wandb
out = {}
for mode in sys.argv[1:]:
    start = time.perf_counter()
    run = start_wandb(mode, project="p", run_name=mode, run_dir=Path(mode), config={})
    out[mode] = {"seconds": time.perf_counter() - start, "offline": None if run is None else run.settings._offline,
                 "imported": "wandb" in sys.modules}
    if run is not None:
        run.finish()
print(json.dumps(out))
"""


def _wandb(tmp_path: Path, modes: list[str], **env: str) -> tuple[dict, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    base.update(HOME=str(tmp_path), PYTHONPATH=str(ROOT), **env)  # HOME: no ~/.netrc, so no stored key
    proc = subprocess.run([sys.executable, "-c", WANDB_SCRIPT, *modes], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=base)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_wandb_disabled_never_imports_it_and_offline_never_waits(tmp_path):
    # A closed port as the server: offline mode must not care.
    result, err = _wandb(tmp_path, ["disabled", "offline"], WANDB_BASE_URL="http://127.0.0.1:9", WANDB_API_KEY="a" * 40)
    assert result["disabled"] == {"seconds": result["disabled"]["seconds"], "offline": None, "imported": False}
    assert result["offline"]["offline"] is True and result["offline"]["seconds"] < 30
    assert err == ""


def test_wandb_online_falls_back_to_offline_in_bounded_time(tmp_path):
    # No credentials at all, then a key but no server (a closed localhost port): offline after WANDB_INIT_TIMEOUT.
    no_key, err = _wandb(tmp_path, ["online"])
    assert no_key["online"]["offline"] is True and no_key["online"]["seconds"] < 30
    assert err.count("\n") == 1 and "logging offline instead" in err and "wandb sync" in err
    no_net, err = _wandb(tmp_path, ["online"], WANDB_API_KEY="a" * 40, WANDB_BASE_URL="http://127.0.0.1:9",
                         WANDB_INIT_TIMEOUT="3")
    assert no_net["online"]["offline"] is True and no_net["online"]["seconds"] < 3 + 20
    assert err.count("\n") == 1 and "logging offline instead" in err


def test_only_runs_py_starts_wandb():
    """Same wandb policy in every command: nobody else calls wandb.init."""
    callers = [p.relative_to(ROOT) for p in (ROOT / "workbook").rglob("*.py") if "wandb.init(" in p.read_text()]
    assert callers == [Path("workbook/runs.py")]


# --- a stub of the learner's: one behaviour for every training command -------------------------

STUB_FIRST = {"cartpole": ("get_actor_and_critic", "part2_cartpole", 2),
              "continuous": ("GaussianActor.__init__", "part4_continuous", 4),
              "atari": ("NatureCNN.__init__", "part8_atari", 8),
              "rlhf": ("GPTWithValueHead.__init__", "part3_rlhf", 3)}
"""The first exercise code each command runs (reason: tests/test_reason_train.py); the test makes it a stub,
so that it is the one reached whatever the learner has filled in."""


def stub_line(name: str, part: str, number: int) -> str:
    return (f"error: --impl: exercises: {name} in exercises/{part}.py (Part {number}) is still a stub; fill it in "
            f"(pytest tests/test_{part}.py shows which are done) or use --impl solutions")


@pytest.mark.parametrize("command", list(STUB_FIRST))
def test_a_stub_is_one_line_naming_it_exit_2_and_no_run_folder(command, tmp_path, capsys, monkeypatch, plant_stub):
    import importlib

    name, part, _ = STUB_FIRST[command]
    plant_stub(importlib.import_module(f"exercises.{part}"), name)
    if command == "rlhf":  # a tiny review GPT instead of the cached one (pretrained for minutes on a fresh clone)
        from workbook.lm.pretrain import TINY_ARGS, pretrain
        from workbook.loop.backend import TinyGPT

        model, tok, _ = pretrain(TINY_ARGS, progress=False)
        monkeypatch.setattr(TinyGPT, "load", lambda self, args, dp: (model, tok))
    runs = tmp_path / "runs"
    argv = [command, "--impl", "exercises", "--runs-dir", str(runs), "--run-name", "stub", "--wandb", "disabled",
            "--no-progress"]
    assert workbook_main(argv) == 2
    out, err = capsys.readouterr()
    assert err == stub_line(*STUB_FIRST[command]) + "\n"
    assert not (runs / "stub").exists() and "stub" not in out, "no run folder, and none named"


def test_a_stub_reached_in_training_removes_the_new_run_folder_and_says_so(tmp_path, capsys, monkeypatch, plant_stub):
    import exercises.part1_ppo_core as ex1
    import exercises.part2_cartpole as ex2
    import solutions.part1_ppo_core as sol1
    import solutions.part2_cartpole as sol2

    # Part 1 done and the networks built: the trainer starts, and the first rollout reaches PPOAgent.play_step.
    for name in dir(ex1):
        if hasattr(ex2, name) and getattr(ex2, name) is getattr(ex1, name) and hasattr(sol1, name):
            monkeypatch.setattr(ex2, name, getattr(sol1, name))
    monkeypatch.setattr(ex2, "get_actor_and_critic", sol2.get_actor_and_critic)
    plant_stub(ex2, "PPOAgent.play_step")
    runs = tmp_path / "runs"
    assert workbook_main(["cartpole", "--impl", "exercises", "--runs-dir", str(runs), "--run-name", "mid",
                          "--wandb", "disabled", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == (stub_line("PPOAgent.play_step", "part2_cartpole", 2)
                   + f"; nothing was trained, so the new run folder {runs / 'mid'} was removed\n")
    assert not (runs / "mid").exists()


def test_a_stub_never_removes_a_folder_it_did_not_create(tmp_path, capsys):
    from workbook.runs import discard_new_run, new_run_dir

    old = tmp_path / "old"
    old.mkdir()
    (old / "metrics.jsonl").write_text("{}\n")
    assert not discard_new_run(old) and (old / "metrics.jsonl").exists(), "not created by this process: kept"
    new = new_run_dir(tmp_path, "new")
    assert discard_new_run(new) and not new.exists()


# --- progress: a bar on a terminal, a plain line every so often elsewhere (workbook/progress.py) ----

class FakeTerminal:
    def __init__(self, tty: bool):
        self.tty, self.text = tty, []

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> int:
        self.text.append(text)
        return len(text)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("every", ["0", "1000"])
def test_progress_is_a_bar_on_a_terminal_and_plain_lines_elsewhere(every, monkeypatch):
    from workbook.progress import Progress

    monkeypatch.setenv("WORKBOOK_PROGRESS_EVERY_S", every)
    terminal, log = FakeTerminal(True), FakeTerminal(False)
    for stream in (terminal, log):
        progress = Progress(30, counter="global_step", prefix="atari", stream=stream)
        for n in (10, 20, 30):
            progress.update(n, episodic_return="1.5")
        progress.close()
    assert any("\r" in t for t in terminal.text) and not any("global_step=" in t for t in terminal.text), "a bar"
    lines = "".join(log.text).splitlines()
    assert not any("\r" in t for t in log.text), "no bar off a terminal"
    expected = ["atari: global_step=10/30 (33%), episodic_return=1.5", "atari: global_step=20/30 (67%), episodic_return=1.5",
                "atari: global_step=30/30 (100%), episodic_return=1.5"]
    if every == "1000":
        expected = expected[-1:]  # none due yet: the last one only, when the run stops
    assert [line.rsplit(", ", 1)[0] for line in lines] == expected, lines
    quiet = FakeTerminal(False)
    progress = Progress(30, stream=quiet, enabled=False)
    progress.update(30)
    progress.close()
    assert quiet.text == [], "--no-progress: nothing"


@pytest.mark.parametrize("flag", [[], ["--no-progress"]])
def test_a_run_off_a_terminal_prints_progress_lines(flag, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORKBOOK_PROGRESS_EVERY_S", "0")  # a line at every update (default: every 30 s)
    assert workbook_main(["cartpole", "--impl", "solutions", "--total-timesteps", "1024", "--set", "num_envs=4",
                          "--set", "num_steps_per_rollout=128", "--runs-dir", str(tmp_path), "--wandb", "disabled",
                          *flag]) in (0, 1)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("cartpole: global_step=")]
    if flag:
        assert lines == []
    else:
        assert [line.split(",")[0] for line in lines] == ["cartpole: global_step=512/1024 (50%)",
                                                          "cartpole: global_step=1024/1024 (100%)"]
        assert all("episodic_return=" in line and "sps=" in line for line in lines)


def test_the_offline_wandb_run_is_named_with_its_sync_command(tmp_path):
    from workbook.runs import wandb_sync_line

    assert wandb_sync_line(tmp_path) is None, "no wandb folder: nothing to say"
    (tmp_path / "wandb" / "offline-run-20260101_120000-abc123").mkdir(parents=True)
    where = tmp_path / "wandb" / "offline-run-20260101_120000-abc123"
    assert wandb_sync_line(tmp_path) == f"wandb: the offline run is in {where}; upload it with: wandb sync {where}"
    (tmp_path / "wandb" / "offline-run-20260102_120000-def456").mkdir()  # a resumed run's second one
    assert wandb_sync_line(tmp_path).endswith(f"wandb sync {tmp_path / 'wandb' / 'offline-run-*'}")
