"""``reason`` names every stub of the learner's it would reach before anything starts (workbook/loop/calls.py).

Not graded: tests of the given code. The learner's Parts 3, 5 and 7 are the reference's here (set on
the exercises modules, as in tests/test_reason_train.py), and one function is made a stub
(``plant_stub``), so each test holds whatever the learner has filled in.
"""

from __future__ import annotations


import pytest

import exercises.part3_rlhf as ex3
import exercises.part7_reasoning as ex7
import exercises.part9_agents as ex9
import exercises.part10_async as ex10
import solutions.part10_async as sol10
from workbook.loop import reasoning
from workbook.loop.calls import learner_calls
from workbook.runs import find_stubs, is_stub_code

pytestmark = pytest.mark.usefixtures("no_curves")  # none of these tests looks at a run's curves.png


@pytest.fixture
def nothing_starts(monkeypatch):
    """Loading the model, starting a sampler or making a run folder fails the test: the check comes first."""
    from workbook.async_rl import processes
    from workbook.loop import run

    def started(*args, **kw):
        raise AssertionError("the run started before its stubs were checked")

    monkeypatch.setattr(reasoning.Reasoner, "load", started)
    monkeypatch.setattr(processes.RemoteSampling, "__init__", started)
    monkeypatch.setattr(run, "new_run_dir", started)


def stub_line(names: list[str], part: str) -> str:
    number = part.removeprefix("part").split("_")[0]
    them = "it" if len(names) == 1 else "them"
    return (f"error: --impl: exercises: {', '.join(names)} in exercises/{part}.py (Part {number}) "
            f"{'is still a stub' if len(names) == 1 else 'are still stubs'}; fill {them} in "
            f"(pytest tests/test_{part}.py shows which are done) or use --impl solutions")


# Each Part 10 function, the options that reach it, and one that reaches it only in a sampler process.
REACHED = [
    (ex10, "importance_weights", ["--samplers", "1"]),  # the README's command: corrected by default
    (ex10, "sampling_version", ["--samplers", "1"]),
    (ex10, "sampling_version", ["--lag", "2", "--correction", "none"]),
    (ex10, "may_sample", ["--samplers", "1", "--free-running", "--correction", "none"]),
    (ex10, "off_policy_sequence_mask", ["--lag", "1", "--off-policy-delta", "0.5"]),
    (ex10, "kl_loss_term", ["--lag", "1", "--kl-coef", "0.01", "--kl-estimator", "k3_is"]),
    (ex3, "batched_forward_pass", ["--task", "calculator", "--samplers", "1"]),  # also a sampler's, for its own rollout
    (ex9, "tool_reply", ["--task", "calculator", "--samplers", "1"]),  # the tool answers inside the sampler
    (ex7, "answer_reward", ["--samplers", "1"]),  # the verifier, inside the sampler
]


@pytest.mark.parametrize("module,stub,options", REACHED, ids=[f"{s}-{'_'.join(o)}" for _, s, o in REACHED])
def test_a_stub_the_run_would_reach_is_one_line_before_anything_starts(module, stub, options, filled, nothing_starts,
                                                                      plant_stub, tmp_path, capsys):
    plant_stub(module, stub)
    argv = ["--impl", "exercises", "--runs-dir", str(tmp_path / "runs"), "--run-name", "stub", "--wandb", "disabled",
            "--no-progress", *options]
    assert reasoning.main(argv) == 2
    out, err = capsys.readouterr()
    assert err == stub_line([stub], module.__name__.split(".")[1]) + "\n" and out == ""
    assert not (tmp_path / "runs").exists()


def test_every_stub_of_the_first_part_is_named_and_the_later_parts_too(filled, nothing_starts, plant_stub, tmp_path,
                                                                          capsys):
    for name in ("importance_weights", "sampling_version"):
        plant_stub(ex10, name)
    plant_stub(ex7, "clip_higher_loss")
    assert reasoning.main(["--impl", "exercises", "--runs-dir", str(tmp_path), "--samplers", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == (stub_line(["clip_higher_loss"], "part7_reasoning")
                   + "; the run also reaches stubs in Part 10 (importance_weights, sampling_version)\n"), err


@pytest.mark.parametrize("stub,options", [("importance_weights", ["--samplers", "1", "--correction", "none"]),
                                          ("may_sample", ["--samplers", "1"]),
                                          ("off_policy_sequence_mask", ["--lag", "1"]),
                                          ("kl_loss_term", ["--lag", "1", "--kl-coef", "0.01"]),
                                          ("sampling_version", ["--sampler-dtype", "bfloat16"])])
def test_a_stub_the_run_does_not_call_is_not_in_its_way(stub, options, filled, plant_stub):
    plant_stub(ex10, stub)
    args, _ = reasoning.parse_command(["--impl", "exercises", *options])
    assert find_stubs("exercises", learner_calls(args, args.task)) == []


def test_the_learners_own_code_is_followed_to_the_stubs_it_calls(filled, plant_stub, monkeypatch):
    plant_stub(ex3, "kl_penalty")
    planted = ex3.kl_penalty
    planted.__module__ = "exercises.part3_rlhf"

    # The learner's kl_loss_term (not the reference's code) calls their Part 3's kl_penalty, a stub.
    scope = {"__name__": "exercises.part10_async", "kl_penalty": planted}
    exec("def kl_loss_term(new, ref, sampler, kind):\n    return kl_penalty(new, ref, 'k3')\n", scope)
    monkeypatch.setattr(ex10, "kl_loss_term", scope["kl_loss_term"])
    monkeypatch.setattr(ex3, "kl_penalty", planted)
    args, _ = reasoning.parse_command(["--impl", "exercises", "--lag", "1", "--kl-coef", "0.01", "--kl-estimator", "k3_is"])
    assert find_stubs("exercises", learner_calls(args, args.task)) == [("exercises/part3_rlhf.py", "kl_penalty")]
    # The reference's kl_loss_term calls kl_penalty too, but the list already holds what the reference calls.
    monkeypatch.setattr(ex10, "kl_loss_term", sol10.kl_loss_term)
    assert find_stubs("exercises", learner_calls(args, args.task)) == [("exercises/part3_rlhf.py", "kl_penalty")]
    assert find_stubs("solutions", learner_calls(args, args.task)) == []


def test_a_stub_is_known_by_its_code():
    def bare():
        raise NotImplementedError

    def with_docstring():
        """Docstring."""
        raise NotImplementedError()

    def with_message():
        raise NotImplementedError("write me")

    def written(x):
        if x:
            raise NotImplementedError()
        return x

    def other_error():
        raise ValueError()

    assert is_stub_code(bare) and is_stub_code(with_docstring) and is_stub_code(with_message)
    assert not is_stub_code(written) and not is_stub_code(other_error)


# --- the lists are what the reference calls: a run of each setting, traced -----------------------

def tiny_run(tmp_path, **options):
    """The arguments of a tiny ``reason`` run of the reference solutions, and the run."""
    base = {"impl": "solutions", "iterations": 2, "batch_size": 8, "mini_batch_size": 4, "group_size": 4,
            "eval_samples": 2, "eval_k": 2, "wandb": "disabled", "runs_dir": str(tmp_path), "run_name": "traced",
            "progress": False}
    args = reasoning.reason_args(options.pop("algo"), **(base | options))
    return args, lambda: reasoning.train_reason(args, progress=False)


TRACED = [dict(algo="dapo", task="calculator", lag=1, correction="sequence_mask", off_policy_delta=0.5, kl_coef=0.01,
               kl_estimator="k3_is"),
          dict(algo="gspo", lag=1, correction="token_truncate"), dict(algo="cispo"),
          dict(algo="grpo", task="calculator"), dict(algo="rloo"), dict(algo="ppo", task="calculator")]


@pytest.mark.slow
@pytest.mark.parametrize("options", TRACED, ids=[f"{o['algo']}-{o.get('task', 'addition')}" for o in TRACED])
def test_the_functions_listed_are_those_a_run_calls(options, tmp_path, capsys, lists_what_it_calls):
    args, run = tiny_run(tmp_path, **options)
    lists_what_it_calls(run, learner_calls(args, args.task))
    lines = capsys.readouterr().out.splitlines()
    if args.lag:
        assert lines[0].startswith("Part 10: stale batches corrected by importance_weights"), lines[:2]


# --- a stale run corrects by default, and says what it does first ------------------------------------

@pytest.mark.parametrize("options,correction", [
    ([], "none"),  # synchronous: as before (every weight would be 1)
    (["--samplers", "1"], "sequence_mask"), (["--lag", "2"], "sequence_mask"),
    (["--samplers", "1", "--correction", "none"], "none"), (["--lag", "2", "--set", "correction=none"], "none"),
    (["--samplers", "1", "--correction", "token_truncate"], "token_truncate"),
    (["--sampler-dtype", "bfloat16"], "none"),  # lag 0 in one process: stale only in precision, nothing by default
    (["--algo", "grpo", "--samplers", "1"], "none"),  # its trainer takes no correction
])
def test_a_stale_run_corrects_by_default_as_trl_does(options, correction):
    import inspect

    args, _ = reasoning.parse_command(options)
    reasoning.validate(args)
    assert args.correction == correction and args.is_cap == 3.0
    signature = inspect.signature(sol10.importance_weights).parameters
    assert (signature["mode"].default, signature["cap"].default) == ("sequence_mask", 3.0), "Part 10's own default"


def test_the_first_line_says_which_correction_mask_and_kl_estimator_are_on():
    from workbook.async_rl.sampler import sampling_line

    line = lambda *o: sampling_line(reasoning.parse_command(list(o))[0])
    assert line("--samplers", "1") == ("Part 10: stale batches corrected by importance_weights (sequence_mask, cap 3); "
                                       "off-policy sequence mask off (--off-policy-delta δ turns it on); "
                                       "no KL term in the loss (--kl-coef 0)")
    assert line("--lag", "1", "--correction", "none", "--off-policy-delta", "0.5", "--kl-coef", "0.1",
                "--kl-estimator", "k3_is", "--is-cap", "2") == (
        "Part 10: stale batches not corrected (--correction none); off-policy sequence mask on (δ = 0.5); "
        "KL term k3_is (kl_loss_term)")
    assert "--kl-estimator k3_is" in line("--lag", "1", "--kl-coef", "0.1")
    assert line("--algo", "grpo", "--lag", "1").startswith("stale batches are trained on as they are: --algo grpo")


# --- --help says what each task runs ------------------------------------------------------------------

def test_help_describes_parts_7_9_and_10_and_each_tasks_own_defaults(capsys):
    with pytest.raises(SystemExit):
        reasoning.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Parts 7, 9 and 10" in text.split("options:")[0]
    impl = text.split("--impl {exercises,solutions}", 2)[-1].split("(default:")[0]
    assert "Parts 3, 5 and 7" in impl and "Part 9" in impl and "Part 10" in impl, impl
    for task in ("addition", "multiplication", "calculator"):
        args, _ = reasoning.parse_command(["--task", task])
        for field in ("iterations", "learning_rate", "max_new_tokens"):
            flag = "--" + field.replace("_", "-")
            shown = text.split(f"{flag} {field.upper()} ", 1)[1].split("(default: ", 1)[1].split(")")[0]
            for_task = next(part for part in shown.split("; ") if task in part or "with --task" not in part)
            assert for_task.split()[0] == f"{getattr(args, field):g}", (task, field, shown)
