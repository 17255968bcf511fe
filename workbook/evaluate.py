"""``python -m workbook evaluate RUN_DIR``: evaluate, and watch, an agent a training command saved.

    python -m workbook evaluate runs/cartpole-solutions-seed1-20260101-120000
    python -m workbook evaluate runs/hopper-solutions-seed1-... --episodes 100 --sample --seeds 7
    python -m workbook evaluate runs/invertedpendulum-... --video --wandb offline
    python -m workbook evaluate runs/breakout-solutions-seed1-... --episodes 5 --seeds 1 2

It reads the run's ``agent.pt`` (or, for a run that was interrupted, its ``checkpoint.pt``),
rebuilds the agent from the arguments saved with it, and plays ``--episodes`` episodes side by
side. Part 4 agents see their observations through the normaliser saved with them, frozen:
without those statistics a reloaded agent gets inputs on the wrong scale and acts like a random
one. ``--greedy`` (the default) takes the most likely action (Part 4: the mean), ``--sample``
draws from the policy as in training. With no ``--seeds`` and ``--episodes`` the evaluation is
the one the training run ended with, so it prints the same figure (``--seeds 1 2 3``: one
evaluation per seed). An ``atari`` run (Part 8) is evaluated as its training run was, whole
games with sampled actions (workbook/atari/evaluate.py says why; it has no ``--greedy``).
``--video`` records one
episode as MP4 under ``RUN_DIR/video/`` (gymnasium's RecordVideo; needs moviepy and pygame) and
with ``--wandb offline|online`` also logs it, with the figures, to a new wandb run in RUN_DIR.
Nothing is written without ``--video`` or ``--wandb``.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from workbook.checkpoints import CHECKPOINT, load_run, run_kind
from workbook.cli import add_impl_option, make_parser, require_at_least, require_unique_seeds, seed_value
from workbook.runs import WANDB_MODES, ConfigError, check_can_create, command, start_wandb, stub_error

TASKS = {  # command → where its Task is (what rebuilds, evaluates and films its agent)
    "cartpole": "workbook.cartpole.train:CARTPOLE",
    "continuous": "workbook.continuous.train:CONTINUOUS",
    "atari": "workbook.atari.train:ATARI",
}
SAMPLED_ONLY = ("atari",)
"""Commands whose agents are evaluated (in training too) with sampled actions only, by the Task's own evaluation."""
ENV_COMMANDS = tuple(TASKS)
LM_COMMANDS = ("rlhf", "reason")


def _task(name: str):
    os.environ.setdefault("MUJOCO_GL", "egl")  # headless MuJoCo rendering for Part 4's --video
    where, attribute = TASKS[name].split(":")
    return getattr(importlib.import_module(where), attribute)


def policy(task_name: str, module: Any, trainer: Any, sample: bool) -> Callable[[torch.Tensor], np.ndarray]:
    """Observation batch → actions: the greedy action (what training evaluates) or a sample from the policy."""
    actor = trainer.actor
    if task_name == "cartpole":
        if sample:
            return lambda obs: torch.distributions.Categorical(logits=actor(obs)).sample().numpy()
        return lambda obs: actor(obs).argmax(-1).numpy()
    from workbook.continuous.evaluate import _action_space, greedy_policy

    if not sample:
        return greedy_policy(actor, trainer.obs_normalizer, module.clip_action, trainer.args.env_id)
    space = _action_space(trainer.args.env_id)
    low, high = space.low.astype(np.float32), space.high.astype(np.float32)
    return lambda obs: module.clip_action(actor.dist(trainer.obs_normalizer(obs, update=False)).sample(), low, high)


def load_agent(state: dict, impl: str | None) -> tuple[Any, Any, Any, str]:
    """(task, module, trainer with the saved weights and normalisers, impl) from an agent.pt or checkpoint.pt."""
    task = _task(state["command"])
    impl = impl or state["impl"]
    module = importlib.import_module(f"{impl}.{task.part}")
    try:
        args = getattr(module, task.args_class)(**state["args"])
    except (TypeError, ValueError) as error:
        raise ConfigError("RUN_DIR", f"its saved settings do not fit {impl}/{task.part}.py ({error})") from None
    try:
        trainer = task.make_trainer(module, args)  # one process: the part's own trainer class
    except NotImplementedError:  # the stub by name, as the training commands say it
        raise stub_error(impl, f"exercises/{task.part}.py") from None
    weights = state["trainer"] if "trainer" in state else state
    try:
        if "network" in weights:  # Part 8's agent.pt: the one network that is both actor and critic
            trainer.network.load_state_dict(weights["network"])
        else:
            trainer.actor.load_state_dict(weights["actor"])
            trainer.critic.load_state_dict(weights["critic"])
        if "obs_normalizer" in weights:
            trainer.obs_normalizer.load_state_dict(weights["obs_normalizer"])
    except (KeyError, RuntimeError) as error:
        raise ConfigError("RUN_DIR", f"its weights do not fit the agent ({type(error).__name__}: "
                                     f"{str(error).splitlines()[0][:160]})") from None
    trainer.envs.close()  # the trainer's own environments are not used: evaluation makes its own
    return task, module, trainer, impl


@command
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("python -m workbook evaluate", __doc__.split("\n\n")[0].split(": ", 1)[1])
    parser.add_argument("run_dir", metavar="RUN_DIR",
                        help="a run folder written by `python -m workbook cartpole|continuous|atari|rlhf|reason`")
    parser.add_argument("--episodes", type=int, default=None,
                        help="episodes to play, side by side; for an rlhf or reason run, held-out prompts to answer "
                             "(default: as many as the run's final evaluation)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--greedy", dest="sample", action="store_false", default=None,
                      help="the most likely action, Part 4's mean action (default; what training evaluates; "
                           "not for atari runs, which sample)")
    mode.add_argument("--sample", dest="sample", action="store_true", help="actions sampled from the policy")
    parser.add_argument("--seeds", type=seed_value, nargs="+", default=None, metavar="S",
                        help="one evaluation per seed: the episodes' seed, or an rlhf or reason run's sampling seed "
                             "(default: the run's own evaluation seed, which reproduces its figure)")
    add_impl_option(parser, None, "whose code rebuilds the agent (default: the one the run was trained with)")
    parser.add_argument("--video", action="store_true",
                        help="record one episode as MP4 under RUN_DIR/video/ (needs moviepy and pygame)")
    parser.add_argument("--wandb", choices=WANDB_MODES, default="disabled",
                        help="log the figures (and the video) to a new wandb run in RUN_DIR (default: disabled)")
    parser.add_argument("--wandb-project", default="ppo-rlhf-workbook",
                        help="the wandb project of that run, with --wandb offline|online (default: %(default)s)")
    options = parser.parse_args(argv)
    if options.episodes is not None:
        require_at_least("--episodes", options.episodes, 1)
    if options.seeds is not None:
        require_unique_seeds(options.seeds)
    run_dir = Path(options.run_dir)
    if run_dir.is_dir() and run_kind(run_dir) == "goodhart":  # Part 11: a measurement, not one policy
        from workbook.goodhart.report import evaluate_run

        return evaluate_run(run_dir)
    state = load_run(run_dir, "RUN_DIR", ENV_COMMANDS + LM_COMMANDS, files=("agent.pt", CHECKPOINT))
    needed = ("config", "algo", "iteration") if state["command"] in LM_COMMANDS else ("args", "impl")
    missing = [key for key in needed if key not in state]
    if missing:
        raise ConfigError("RUN_DIR", f"{run_dir}'s checkpoint lacks {', '.join(missing)}: not one this workbook wrote")
    if state["command"] in LM_COMMANDS:
        for flag, given in (("--video", options.video), ("--greedy", options.sample is False)):
            if given:
                raise ConfigError(flag, f"{run_dir} is a language-model run: it is evaluated by sampling responses "
                                        "to held-out prompts (no video, no greedy mode)")
        return evaluate_lm(run_dir, state, options)
    if state["command"] in SAMPLED_ONLY:
        if options.sample is False:
            raise ConfigError("--greedy", f"{run_dir} is an {state['command']} run: it is evaluated with sampled "
                                          "actions, as in training (workbook/atari/evaluate.py says why)")
        options.sample = True
    options.sample = bool(options.sample)
    if options.video:  # as the training commands: a missing package is an error before anything runs
        import importlib.util

        missing = [name for name in _task(state["command"]).video_modules if importlib.util.find_spec(name) is None]
        if missing:
            raise ConfigError("--video", f"needs {' and '.join(missing)}, not installed: pip install -e '.[video]' "
                                         "(or leave --video out)")
    if options.video or options.wandb != "disabled":
        check_can_create(run_dir / "video", "RUN_DIR")
    torch.set_num_threads(1)
    torch.distributions.Distribution.set_default_validate_args(False)
    task, module, trainer, impl = load_agent(state, options.impl)
    args = trainer.args
    saved_returns = state.get("eval_returns")
    episodes = options.episodes or (len(saved_returns) if saved_returns else 20)
    seeds = options.seeds or [state.get("eval_seed", 10_000 + args.seed)]

    from workbook.cartpole.evaluate import evaluate_greedy

    own = task.name in SAMPLED_ONLY  # the Task's own evaluation (no lengths), else played here
    act = None if own else policy(task.name, module, trainer, options.sample)
    what = "sampled actions" if options.sample else "greedy"
    source = ("agent.pt" if "trainer" not in state else
              f"{CHECKPOINT} of update {state['trainer']['phase']} (the run did not finish)")
    print(f"{args.env_id} agent from {run_dir}/{source} ({impl}, {state['global_step']} training steps)")
    records = []
    for seed in seeds:
        torch.manual_seed(seed)  # --sample draws from torch's generator
        lengths: list[int] = []
        if own:
            returns = task.evaluate(module, trainer, episodes, seed)
        else:
            returns = evaluate_greedy(trainer.actor, args.env_id, episodes, seed, act=act, lengths=lengths)
        lengths_arr = np.array(lengths, dtype=float)
        print(f"{what} over {episodes} episodes (seed {seed}): return {returns.mean():.1f} ± {returns.std():.1f} "
              f"(min {returns.min():.1f}, max {returns.max():.1f})"
              + (f", length {lengths_arr.mean():.1f} ± {lengths_arr.std():.1f}" if lengths else ""), flush=True)
        as_trained = own or not options.sample  # the way the training run's final evaluation picked actions
        if saved_returns and as_trained and episodes == len(saved_returns) and seed == state.get("eval_seed"):
            same = np.allclose(returns, saved_returns)
            print(f"the training run's final evaluation (same episodes): {np.mean(saved_returns):.1f} — "
                  + ("reproduced" if same else "DIFFERENT (was the agent rebuilt with other code? see --impl)"))
        records.append({"eval/seed": seed, "eval/mean_return": float(returns.mean()), "eval/std_return":
                        float(returns.std())} | ({"eval/mean_length": float(lengths_arr.mean())} if lengths else {}))

    video = None
    if options.video:  # one episode, with the first seed
        from workbook.cartpole.train import record_video

        folder = run_dir / "video" / f"evaluate-{time.strftime('%Y%m%d-%H%M%S')}"
        if task.video is not None:  # a task that films its own way (Atari: a whole game, in colour)
            video = task.video(module, trainer, folder, seeds[0])
        else:
            one = lambda obs: act(obs[None])[0]  # noqa: E731 (RecordVideo steps one environment)
            act_one = (lambda obs: int(one(obs))) if task.name == "cartpole" else one
            video = record_video(trainer.actor, args.env_id, folder, seeds[0], act_one,
                                 name_prefix="sampled" if options.sample else "greedy")
        if video is not None:
            print(f"video: {video}")
    if options.wandb != "disabled":
        run = start_wandb(options.wandb, project=options.wandb_project, run_name=f"{run_dir.name}-evaluate",
                          run_dir=run_dir, config=dataclasses.asdict(args) | {
                              "impl": impl, "episodes": episodes, "seeds": seeds, "sample": options.sample})
        if run is not None:
            for i, record in enumerate(records):
                if i == 0 and video is not None:
                    import wandb

                    record = record | {"video": wandb.Video(str(video), format="mp4")}
                run.log(record)
            run.finish()
    return 0


def evaluate_lm(run_dir: Path, state: dict, options: Any, *, model: Any = None, tok: Any = None) -> int:
    """An rlhf or reason run (any ``--algo``): its policy answers held-out prompts; print the task's summary and samples.

    The policy's weights come from ``checkpoint.pt``; the reference (and the tokenizer) are the
    model the run started from, loaded as the run loaded it (``model``/``tok`` replace that, in tests).
    With the run's ``eval_samples`` prompts and seed, the figures are the training run's "after"
    (a reason run: pass@1 and pass@k on its held-out problems).
    """

    from workbook import distributed
    from workbook.loop.algorithms import make_algorithm
    from workbook.loop.backend import make_backend
    from workbook.loop.rlhf import Args
    from workbook.loop.run import headline

    reason = state["command"] == "reason"
    if reason:
        from workbook.loop.reasoning import Reasoner, ReasonArgs as Args, make_task  # noqa: N817 (one name, two commands)
    fields = {f.name for f in dataclasses.fields(Args)}
    impl = options.impl or state["impl"]
    args = Args(**{k: v for k, v in state["config"].items() if k in fields} | {"impl": impl, "quiet": True})
    torch.set_num_threads(args.threads)
    if model is None:
        backend = Reasoner(args.task) if reason and not args.model else make_backend(args)
        backend.check(args)
        model, tok = backend.load(args, distributed.context())
    stub_file = "exercises/part7_reasoning.py" if reason else "exercises/part3_rlhf.py"
    try:
        if reason:
            task = make_task(args)
        else:
            from workbook.loop.task import review_task

            task = review_task(args, tok)
        algo = make_algorithm(args, model, tok, task)
    except NotImplementedError:
        raise stub_error(impl, stub_file) from None
    algo.policy.load_state_dict(state["algo"]["policy"])
    device = torch.device(args.device)
    policy, reference = algo.policy.to(device), algo.reference.to(device)
    n = options.episodes or args.eval_samples
    try:
        after = json.loads((run_dir / "summary.json").read_text()).get("after")
    except (OSError, ValueError):
        after = None
    print(f"{args.algo} policy from {run_dir}/{CHECKPOINT} ({impl}, iteration {state['iteration']} of {args.iterations}"
          f"{', ' + state['status'] if state['status'] != 'finished' else ''})")
    for seed in options.seeds or [args.seed + 777]:  # the run's own evaluation seed by default
        print(f"evaluating on {n} held-out prompts (seed {seed}"
              + (f", {args.eval_k} samples each" if reason else "") + ") …", flush=True)
        try:  # a reason run scores with the learner's answer_reward and pass_at_k
            result = task.evaluate(policy, reference, tok, task.eval_prompts(n), temperature=args.temperature,
                                   max_new_tokens=args.max_new_tokens, seed=seed)
        except NotImplementedError:
            raise stub_error(impl, stub_file) from None
        print(f"{n} held-out prompts (seed {seed}, temperature {args.temperature:g}): " + headline(task, result),
              flush=True)
        for text, score in zip(result["texts"], result["scores"]):
            print(f"  {score:+.2f}  {text}")
        proxy_run = bool(after) and "gold" in after  # an RL run of `goodhart`: trained against a proxy, gold logged
        if proxy_run:
            gold = goodhart_gold(run_dir)
            result["gold"] = gold(result["texts"]).mean().item()
            print(f"the goodhart run's gold ({gold.name}) of these samples: {result['gold']:+.3f}; the reward above is "
                  "VADER's, Part 3's, which reads a near-miss as neutral — the run was trained against a proxy")
        if after and n == args.eval_samples and seed == args.seed + 777 and state["status"] == "finished":
            # A goodhart run's "reward" was its proxy's score: compare what does not depend on the scorer, and its gold.
            keys = [key for key, _, _ in task.headline if key in after and not (proxy_run and key == "reward")]
            keys += ["gold"] if proxy_run else []
            same = all(abs(result[key] - after[key]) <= 1e-6 * max(1.0, abs(after[key])) for key in keys)
            said = (f"proxy {after['reward']:+.3f}  " + headline(task, {k: v for k, v in after.items() if k != "reward"})
                    + f"  gold {after['gold']:+.3f}") if proxy_run else headline(task, after)
            print("the training run's final evaluation (same prompts and seed): " + said + " — "
                  + ("reproduced" if same else "DIFFERENT (was the policy rebuilt with other code? see --impl)"))
    return 0


def goodhart_gold(run_dir: Path):
    """The gold of the goodhart run an RL run folder belongs to (``<run>/seed<S>/rl/<proxy>``; its config names it),
    with a ``name``; vader-words, the command's default, where the folder has been moved out of its run."""
    from workbook.goodhart.measure import gold_scorer

    config = run_dir.parent.parent.parent / "config.json"
    try:
        name = json.loads(config.read_text())["args"]["gold"]
    except (OSError, ValueError, KeyError, TypeError):
        name = "vader-words"
    gold = gold_scorer(name)
    gold.name = name
    return gold


if __name__ == "__main__":
    sys.exit(main())
