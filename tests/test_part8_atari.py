"""Tests for Part 8 (exercises/part8_atari.py).

Run: ``pytest tests/test_part8_atari.py`` (your code) or add ``--impl=solutions``.
The network is compared with the reference under the reference's weights (copied layer by layer,
matched by shape) and probed for what the docstrings promise: the pixels reach the first
convolution in [0, 1], one trunk serves both heads and learns from both, the trunk runs once per
objective. ``EpisodicLife`` is played through a scripted game whose lives and endings are set by
the test (lost lives, game overs, a truncation on the step a life is lost, a NOOP that ends the
game) and once through real Breakout. Nothing here trains: every test takes seconds.
"""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

from workbook.atari import make_atari_env
from workbook.checking import WrongAnswer, check_exercise, compare, explain, known_mistake
from workbook.promises import layers_in_call_order

PART = "part8_atari"
POINTS = {"NatureCNN": 3, "EpisodicLife": 3, "compute_atari_objective": 2}
GAME = "BreakoutNoFrameskip-v4"


def mistake(exercise: str, name: str) -> str:
    return known_mistake(PART, exercise, name)


def pixels(batch: int, frames: int, seed: int, dtype=torch.float32) -> torch.Tensor:
    """Random screens: integer pixel values 0–255 (255 present), as ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randint(0, 256, (batch, frames, 84, 84), generator=g)
    obs[:, :, 0, 0] = 255
    return obs.to(dtype)


def layers(net: nn.Module, kind: type) -> list[nn.Module]:
    return [m for m in net.modules() if isinstance(m, kind)]


def convs_in_call_order(net: nn.Module, frame_stack: int) -> list[nn.Conv2d]:
    """The network's convolutions in the order ``logits_and_value`` applies them (by role, not by the order the
    constructor registered them); any it never applies follow, in registration order."""
    order = layers_in_call_order(net, pixels(1, frame_stack, seed=0), call="network.logits_and_value(obs)",
                                 kind=nn.Conv2d, method="logits_and_value")
    return order + [m for m in layers(net, nn.Conv2d) if m not in order]


def gain(weight: torch.Tensor) -> tuple[float, bool]:
    """The weight's gain (RMS singular value, as an out × rest matrix) and whether its singular values are all
    equal (orthogonal init): from the smaller Gram matrix, which is gain² · I exactly then (an SVD of the
    512 × 3136 layer takes seconds)."""
    w = weight.detach().double().reshape(weight.shape[0], -1)
    gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
    g2 = gram.diagonal().mean()
    return round(g2.sqrt().item(), 4), bool((gram - g2 * torch.eye(len(gram), dtype=gram.dtype)).abs().max() < 1e-4 * g2)


_SEEDED: dict[tuple, tuple[nn.Module, torch.Tensor]] = {}


def seeded_reference(ref, num_actions: int, frame_stack: int, seed: int) -> nn.Module:
    """What ``torch.manual_seed(seed); ref.NatureCNN(num_actions, frame_stack)`` makes — the same weights, and the
    global generator left where that leaves it — from a copy: its orthogonal initialisation (a QR of the 3136 × 512
    layer, 90 ms) ran about a thousand times in the meta-run's Part 8, half its time."""
    key = (ref.__name__, num_actions, frame_stack, seed)
    if key not in _SEEDED:
        torch.manual_seed(seed)
        _SEEDED[key] = (ref.NatureCNN(num_actions, frame_stack), torch.get_rng_state())
    net, state = _SEEDED[key]
    torch.set_rng_state(state)
    return copy.deepcopy(net)


def without_orthogonal_init(build):
    """``build()`` with ``nn.init.orthogonal_`` a no-op (each layer keeps PyTorch's default initialisation): for a
    network whose every weight the test overwrites, or a check that no initialisation changes (which parameters
    get a gradient, where the pixels go); the initialisation's own test builds it as it is."""
    original = nn.init.orthogonal_
    nn.init.orthogonal_ = lambda tensor, gain=1, generator=None: tensor
    try:
        return build()
    finally:
        nn.init.orthogonal_ = original


def network_like_reference(cls, ref, num_actions: int, frame_stack: int, seed: int = 0) -> nn.Module:
    """``cls``'s network with the reference's seeded weights copied in, each layer matched by its shape."""
    source = seeded_reference(ref, num_actions, frame_stack, seed)
    with torch.no_grad():
        for p in source.parameters():  # biases start at 0: give them values so a missing one shows
            p.add_(0.01 * torch.randn(p.shape))
    net = without_orthogonal_init(lambda: cls(num_actions, frame_stack))  # every layer is overwritten below
    theirs = {tuple(m.weight.shape): m for m in layers(source, (nn.Conv2d, nn.Linear))}
    with torch.no_grad():
        for mine in layers(net, (nn.Conv2d, nn.Linear)):
            match = theirs.get(tuple(mine.weight.shape))
            if match is None:
                raise WrongAnswer(f"NatureCNN({num_actions}, {frame_stack}) has a {type(mine).__name__} with weight "
                                  f"shape {tuple(mine.weight.shape)}, which the Nature CNN does not have")
            mine.weight.copy_(match.weight)
            mine.bias.copy_(match.bias)
    return net


# --- NatureCNN -----------------------------------------------------------------------------------

@pytest.mark.exercise("NatureCNN")
@pytest.mark.parametrize("num_actions,frame_stack", [(4, 4), (6, 2), (5, None)])
def test_nature_cnn_layers_and_initialisation(impl, ref, num_actions, frame_stack):
    # frame_stack None: the argument left out (the default, 4 frames).
    def run(cls):
        torch.manual_seed(0)
        net = cls(num_actions) if frame_stack is None else cls(num_actions, frame_stack)
        convs = [{"in": m.in_channels, "out": m.out_channels, "kernel": m.kernel_size, "stride": m.stride,
                  "gain, orthogonal": gain(m.weight), "largest |bias|": m.bias.detach().abs().max().item()}
                 for m in convs_in_call_order(net, frame_stack or 4)]
        linears = sorted(({"weight shape": tuple(m.weight.shape), "gain, orthogonal": gain(m.weight),
                           "largest |bias|": m.bias.detach().abs().max().item()} for m in layers(net, nn.Linear)),
                         key=lambda d: d["weight shape"])
        return {"convolutions, in the order applied": convs, "linear layers, by shape": linears,
                "number of parameters": sum(p.numel() for p in net.parameters())}

    check_exercise(impl, ref, "NatureCNN", run, rtol=1e-3, atol=1e-6,
                   call=f"NatureCNN({num_actions}" + (") — the default frame_stack=4" if frame_stack is None
                                                          else f", frame_stack={frame_stack})"),
                   cache_key=f"NatureCNN layers {num_actions} {frame_stack}")


@pytest.mark.exercise("NatureCNN")
@pytest.mark.parametrize("num_actions,frame_stack,batch,dtype", [(4, 4, 3, torch.float32), (6, 2, 1, torch.uint8)])
def test_nature_cnn_outputs_match_reference(impl, ref, num_actions, frame_stack, batch, dtype):
    def run(cls):
        net = network_like_reference(cls, ref, num_actions, frame_stack)
        obs = pixels(batch, frame_stack, seed=batch, dtype=dtype)
        with torch.no_grad():
            both = net.logits_and_value(obs)
            return {"network(obs)": net(obs), "network.value(obs)": net.value(obs),
                    "network.logits_and_value(obs)": tuple(both)}

    check_exercise(impl, ref, "NatureCNN", run, rtol=1e-4, atol=1e-5,
                   call=f"NatureCNN({num_actions}, {frame_stack}) with the reference's weights on {batch} "
                        f"{dtype} screen(s) of pixels 0–255",
                   cache_key=f"NatureCNN outputs {num_actions} {frame_stack} {batch} {dtype}")


@pytest.mark.exercise("NatureCNN")
def test_pixels_reach_the_first_convolution_in_zero_one(impl):
    net = without_orthogonal_init(lambda: impl.NatureCNN(4, 4))  # what this checks does not depend on the init
    seen = []
    first = convs_in_call_order(net, 4)[0]
    handle = first.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach().clone()))
    obs = pixels(2, 4, seed=3)
    try:
        with torch.no_grad():
            net(obs)
            net.value(obs)
            net.logits_and_value(obs)
    finally:
        handle.remove()
    expected = [obs / 255.0] * 3
    problem = compare(seen, expected, rtol=1e-6, atol=1e-6, path="input of the first Conv2d")
    if problem:
        labels = []
        if seen and seen[0].max() > 2:
            labels.append(mistake("NatureCNN", "pixels_not_scaled"))
        elif seen and seen[0].min() < -0.5:
            labels.append(mistake("NatureCNN", "scaled_to_minus_one_one"))
        raise WrongAnswer(explain("network(obs), network.value(obs), network.logits_and_value(obs) on pixels 0–255: "
                                  "what the first convolution receives", problem, labels))


@pytest.mark.exercise("NatureCNN")
def test_one_trunk_learns_from_both_heads(impl):
    torch.manual_seed(0)
    net = without_orthogonal_init(lambda: impl.NatureCNN(4, 4))  # what this checks does not depend on the init
    obs = pixels(3, 4, seed=0)

    def touched(output: torch.Tensor) -> set[str]:
        net.zero_grad(set_to_none=True)
        output.sum().backward()
        return {name for name, p in net.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}

    from_policy, from_value = touched(net(obs)), touched(net.value(obs))
    shared = from_policy & from_value
    convs = {name for name, p in net.named_parameters()
             if any(p is m.weight for m in layers(net, nn.Conv2d))}
    problem = None
    if not convs or not convs <= shared:
        problem = (f"the convolutions' weights must get gradient from both the logits and the value; "
                   f"from both: {sorted(shared) or 'none'}; convolutions: {sorted(convs)}")
    elif from_policy == from_value:
        problem = "the logits and the value depend on exactly the same parameters: the two heads must be different layers"
    if problem:
        raise WrongAnswer(explain("NatureCNN(4, 4): which parameters the logits and the value backpropagate into",
                                  problem, [mistake("NatureCNN", "separate_value_trunk")] if not shared else []))
    runs = []
    handle = layers(net, nn.Conv2d)[0].register_forward_hook(lambda *args: runs.append(1))
    try:
        with torch.no_grad():
            net.logits_and_value(obs)
    finally:
        handle.remove()
    if len(runs) != 1:
        raise WrongAnswer(explain("NatureCNN(4, 4).logits_and_value(obs)",
                                  f"the first convolution ran {len(runs)} times; the trunk must run once for both heads"))


GRADIENT_PATHS = {  # output → {part of the network: does it get gradient from that output}
    "network(obs)": {"trunk": True, "actor_head": True, "critic_head": False},
    "network.value(obs)": {"trunk": True, "actor_head": False, "critic_head": True},
    "network.logits_and_value(obs)[0]": {"trunk": True, "actor_head": True, "critic_head": False},
    "network.logits_and_value(obs)[1]": {"trunk": True, "actor_head": False, "critic_head": True},
}


@pytest.mark.exercise("NatureCNN")
def test_each_output_trains_the_trunk_and_its_own_head_only(impl):
    # Every call the training loop differentiates through (Part 2's actor and critic use network(obs) and
    # value(obs); the learning phase uses logits_and_value), output by output: which parts get gradient. A
    # detach inside one call (only logits_and_value, say) changes no output and passes every value test.
    torch.manual_seed(0)
    net = without_orthogonal_init(lambda: impl.NatureCNN(4, 4))  # what this checks does not depend on the init
    obs = pixels(3, 4, seed=2)
    parts = {name: list(getattr(net, name).parameters()) for name in ("trunk", "actor_head", "critic_head")
             if isinstance(getattr(net, name, None), nn.Module)}
    if len(parts) < 3:
        return  # named by test_the_trunk_and_the_heads_are_the_attributes_the_docstring_names
    outputs = {"network(obs)": lambda: net(obs), "network.value(obs)": lambda: net.value(obs),
               "network.logits_and_value(obs)[0]": lambda: net.logits_and_value(obs)[0],
               "network.logits_and_value(obs)[1]": lambda: net.logits_and_value(obs)[1]}
    for output, expected in GRADIENT_PATHS.items():
        net.zero_grad(set_to_none=True)
        outputs[output]().sum().backward()
        got = {name: all(p.grad is not None and p.grad.abs().sum() > 0 for p in params) for name, params in parts.items()}
        partly = [name for name, params in parts.items() if not got[name] and any(p.grad is not None for p in params)]
        if got != expected:
            wrong = [name for name in expected if got[name] != expected[name]]
            said = "; ".join(f"{name} gets {'gradient' if got[name] else 'gradient in only some parameters' if name in partly else 'no gradient'}"
                             f", expected {'gradient in every parameter' if expected[name] else 'none'}" for name in wrong)
            labels = []
            if output.startswith("network.logits_and_value") and wrong == ["trunk"]:
                labels = [mistake("NatureCNN", "value_detached_in_logits_and_value" if output.endswith("[1]")
                                  else "policy_detached_in_logits_and_value")]
            raise WrongAnswer(explain(f"NatureCNN(4, 4): {output}.sum().backward()", said, labels))
    # The docstring: "Gradients as in the two separate calls". Which parts get gradient is not enough: a
    # logits_and_value that scales one path's gradient into the trunk (0.5·f + 0.5·f.detach()) changes no output
    # and no gradient's presence, but every step of the shared trunk (mistake value_gradient_scaled_in_logits_and_value).
    named = [(name, p) for name, params in parts.items() for p in params]
    for output, separate in (("network.logits_and_value(obs)[0]", "network(obs)"),
                             ("network.logits_and_value(obs)[1]", "network.value(obs)")):
        seen = []
        for call in (output, separate):
            net.zero_grad(set_to_none=True)
            outputs[call]().sum().backward()
            seen.append([None if p.grad is None else p.grad.clone() for _, p in named])
        for (name, _), together, alone in zip(named, *seen):
            if (together is None) != (alone is None) or (alone is not None and not torch.allclose(together, alone, rtol=1e-4, atol=1e-7)):
                labels = [mistake("NatureCNN", "value_gradient_scaled_in_logits_and_value")] if output.endswith("[1]") else []
                raise WrongAnswer(explain(f"NatureCNN(4, 4): {output}.sum().backward() and {separate}.sum().backward()",
                                          f"the {name} gets a different gradient from each (the docstring: gradients as in "
                                          "the two separate calls)", labels))


@pytest.mark.exercise("NatureCNN")
def test_the_trunk_and_the_heads_are_the_attributes_the_docstring_names(impl):
    # network(obs) = actor_head(features(obs)); value(obs) = critic_head(features(obs)); features(obs) is the trunk
    # on obs / 255 — the scaling in features (its docstring) or as the trunk's first step (the class docstring's
    # diagram "trunk: obs / 255 → conv ..."): either is allowed (alternative scaling_inside_the_trunk).
    torch.manual_seed(0)
    net = without_orthogonal_init(lambda: impl.NatureCNN(5, 3))  # what this checks does not depend on the init
    obs = pixels(2, 3, seed=4)
    children = dict(net.named_children())
    missing = [name for name in ("trunk", "actor_head", "critic_head") if not isinstance(children.get(name), nn.Module)]
    if missing:
        raise WrongAnswer(explain("NatureCNN(5, 3)", f"no registered submodule {missing} (its submodules: "
                                  f"{sorted(children)}): build self.trunk, self.actor_head and self.critic_head",
                                  [mistake("NatureCNN", "parts_named_otherwise")]))
    with torch.no_grad():
        features = net.features(obs)
        got = {"network(obs)": net(obs), "network.value(obs)": net.value(obs)}
        expected = {"network(obs)": net.actor_head(features), "network.value(obs)": net.critic_head(features)}
        problem = compare(got, expected, rtol=1e-5, atol=1e-6)
        if problem is None and all(compare(features, net.trunk(x), rtol=1e-5, atol=1e-6) for x in (obs / 255.0, obs)):
            problem = "features(obs) is neither trunk(obs / 255) nor (with the scaling inside the trunk) trunk(obs)"
    if problem:
        raise WrongAnswer(explain("NatureCNN(5, 3) on pixels 0–255: logits = actor_head(features(obs)), value = "
                                  "critic_head(features(obs)), features(obs) = the trunk on obs / 255", problem))


# --- EpisodicLife ----------------------------------------------------------------------------------

class ScriptedGame(gym.Env):
    """A game whose lives the test sets: observation = steps into the game; a life is lost every
    ``lose_every`` steps and one gained on each step in ``gain_at``; the game terminates when the lives
    reach 0 and truncates after ``truncate_at`` steps. Its info holds the lives and the step (``frame``).
    It records every action, and counts the resets and the seeds and options they were given."""

    observation_space = spaces.Box(0, np.inf, shape=(1,), dtype=np.float32)
    action_space = spaces.Discrete(4)

    def __init__(self, lives: int = 3, lose_every: int = 3, truncate_at: int | None = None, gain_at: tuple = ()):
        self.start_lives, self.lose_every, self.truncate_at, self.gain_at = lives, lose_every, truncate_at, gain_at
        self.resets, self.actions, self.seeds, self.options, self.t, self.lives = 0, [], [], [], 0, lives

    def _obs(self):
        return np.array([self.t], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.resets += 1
        self.seeds.append(seed)
        self.options.append(options)
        self.t, self.lives = 0, self.start_lives
        return self._obs(), {"lives": self.lives, "frame": self.t}

    def step(self, action):
        self.actions.append(int(action))
        self.t += 1
        if self.t % self.lose_every == 0:
            self.lives -= 1
        if self.t in self.gain_at:
            self.lives += 1
        truncated = self.truncate_at is not None and self.t >= self.truncate_at
        return self._obs(), float(self.t), self.lives == 0, truncated, {"lives": self.lives, "frame": self.t}


def play(cls, game: ScriptedGame, script: str) -> list:
    """Run ``script`` ('r' = reset, 's' = step with action 2) through ``cls(game)``; one record per call.

    ``wrapper.game_over`` is recorded as the docstrings set it: the game's own ending after a step, False
    after a reset; ``wrapper.lives`` after every call. Of the info returned, the game's keys are recorded
    (the wrapper passes it on unchanged; a key it adds is not judged)."""
    env = cls(game)
    trace = []
    for i, call in enumerate(script):
        if call == "r":
            obs, info = env.reset(seed=100 + i, options={"call": i})
            trace.append({"call": f"#{i} reset", "obs": float(obs[0]), "info": {k: info.get(k) for k in ("lives", "frame")},
                          "wrapper.lives": float(env.lives), "wrapper.game_over": bool(env.game_over),
                          "game resets so far": game.resets, "seed of the last game reset": game.seeds[-1],
                          "options of the last game reset": game.options[-1]})
        else:
            obs, reward, terminated, truncated, info = env.step(2)
            trace.append({"call": f"#{i} step", "obs": float(obs[0]), "reward": reward, "terminated": bool(terminated),
                          "truncated": bool(truncated), "info": {k: info.get(k) for k in ("lives", "frame")},
                          "wrapper.lives": float(env.lives), "wrapper.game_over": bool(env.game_over)})
    trace.append({"actions the game received": game.actions})
    return trace


SCRIPTS = {
    # 3 lives, one lost every 3 steps: two lost lives (NOOP in between), then the game over and a real reset.
    "lives lost, then game over": (dict(lives=3, lose_every=3), "rsssrsssrsssrss"),
    # the game is truncated on the very step a life is lost: terminated and truncated; the reset is real.
    "truncated on a lost life": (dict(lives=5, lose_every=4, truncate_at=4), "rssssrss"),
    # a life every step: the NOOP after the first lost life loses the last one, so reset must reset.
    "the NOOP ends the game": (dict(lives=2, lose_every=1), "rsrsrs"),
    # a life gained on step 2 and lost on step 3: back to the count of the start, and still a lost life.
    "a life gained, then lost": (dict(lives=3, lose_every=3, gain_at=(2,)), "rsssrs"),
}


@pytest.mark.exercise("EpisodicLife")
@pytest.mark.parametrize("scenario", list(SCRIPTS))
def test_episodic_life_on_a_scripted_game(impl, ref, scenario):
    kwargs, script = SCRIPTS[scenario]
    check_exercise(impl, ref, "EpisodicLife", lambda cls: play(cls, ScriptedGame(**kwargs), script),
                   call=f"EpisodicLife(ScriptedGame({kwargs})) through the calls {script!r} ({scenario})")


@pytest.mark.exercise("EpisodicLife")
def test_lost_life_is_terminal_and_the_game_goes_on(impl):
    # Worked out by hand: 3 lives, one lost every 3 steps.
    game = ScriptedGame(lives=3, lose_every=3)
    env = impl.EpisodicLife(game)
    obs, info = env.reset(seed=7)
    ends = [env.step(1)[2:4] for _ in range(3)]
    problems = []
    if ends != [(False, False), (False, False), (True, False)]:
        problems.append(f"(terminated, truncated) of steps 1–3 were {ends}; the third loses a life: (True, False)")
    obs, info = env.reset(seed=8)
    if game.resets != 1 or game.actions[-1:] != [0] or float(obs[0]) != 4.0:
        problems.append(f"after the lost life, reset restarted the game or did not take one NOOP (game resets: "
                        f"{game.resets}, expected 1; last action received: {game.actions[-1:]}, expected [0]; "
                        f"observation {float(obs[0])}, expected 4.0)")
    if getattr(env, "lives", None) != 2:
        problems.append(f"wrapper.lives is {getattr(env, 'lives', None)} after that reset, expected 2")
    if problems:
        labels = [mistake("EpisodicLife", "resets_game_on_life_loss")] if game.resets > 1 else []
        labels += [mistake("EpisodicLife", "no_terminal_on_life_loss")] if ends[2] == (False, False) else []
        labels += [mistake("EpisodicLife", "life_loss_as_truncation")] if ends[2] == (False, True) else []
        raise WrongAnswer(explain("EpisodicLife(ScriptedGame(lives=3, lose_every=3)): reset, 3 steps, reset",
                                  "; ".join(problems), labels))


@pytest.mark.exercise("EpisodicLife")
def test_episodic_life_on_breakout(impl):
    # The real ALE: play randomly (FIRE after every reset serves the ball) until a life is lost, then to the end.
    env = make_atari_env(GAME, episodic_life=impl.EpisodicLife)
    rng = np.random.default_rng(0)
    obs, info = env.reset(seed=0)
    lives, frames, problems = [info["lives"]], [], []
    for _ in range(20_000):
        obs, reward, terminated, truncated, info = env.step(int(rng.integers(4)))
        if terminated or truncated:
            if "episode_frame_number" not in info:
                raise WrongAnswer(explain(f"EpisodicLife on {GAME}: step", f"the info returned lost the game's keys "
                                          f"(it holds {sorted(info)}): pass the game's info on unchanged"))
            game_over, frame = "episode" in info, info["episode_frame_number"]
            obs, info = env.reset()
            lives.append(info["lives"])
            frames.append((frame, info.get("episode_frame_number", -1)))
            if game_over or len(lives) > 7:
                break
    env.close()
    if lives[:2] != [5, 4]:
        problems.append(f"lives after the first resets: {lives[:2]}, expected [5, 4] (a lost life must not restart "
                        "the game)")
    elif frames[0][1] <= frames[0][0]:
        problems.append(f"the game's frame number went from {frames[0][0]} back to {frames[0][1]} at the reset after "
                        "a lost life: the emulator was reset")
    if lives[-1] != 5 or len(lives) < 6:
        problems.append(f"lives seen at each reset: {lives}; expected 5, 4, 3, 2, 1 and then a new game with 5")
    if problems:
        raise WrongAnswer(explain(f"EpisodicLife on {GAME}, random play until the game is over", "; ".join(problems)))


# --- compute_atari_objective ---------------------------------------------------------------------------

def make_minibatch(ref, network, seed: int, size: int = 12):
    g = torch.Generator().manual_seed(seed)
    obs = pixels(size, network.trunk[0].in_channels, seed)
    with torch.no_grad():
        logits, values = network.logits_and_value(obs)
    actions = torch.randint(0, logits.shape[1], (size,), generator=g)
    logprobs = torch.log_softmax(logits + 0.3 * torch.randn(logits.shape, generator=g), -1)[torch.arange(size), actions]
    values = values.squeeze(-1) + 0.1 * torch.randn(size, generator=g)
    advantages = torch.randn(size, generator=g)
    return ref.ReplayMinibatch(obs=obs, actions=actions, logprobs=logprobs, values=values, advantages=advantages,
                               returns=values + advantages + 0.5)


def grads(module: nn.Module) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in module.parameters()])


@pytest.mark.exercise("compute_atari_objective")
@pytest.mark.parametrize("seed,frame_stack,settings,wrapped", [
    (0, 4, dict(), False), (1, 2, dict(vf_coef=1.0, ent_coef=0.0, clip_coef=0.2), False),
    (2, 4, dict(vf_coef=0.25, ent_coef=0.05), True)])
def test_atari_objective_and_its_gradients_match_reference(impl, ref, seed, frame_stack, settings, wrapped):
    # wrapped: the network as the trainer passes it, in a OnePass (its CriticView views that), which answers
    # network(obs), network.value(obs) and network.logits_and_value(obs) only.
    def run(fn):
        network = seeded_reference(ref, 4, frame_stack, seed)
        minibatch = make_minibatch(ref, network, seed)
        actor = ref.OnePass(network) if wrapped else network
        objective = fn(actor, ref.CriticView(actor), minibatch, impl.AtariPPOArgs(**settings))
        if objective.requires_grad:
            objective.backward()
        return {"objective": objective.detach(), "gradient w.r.t. the trunk": grads(network.trunk),
                "gradient w.r.t. the actor head": grads(network.actor_head),
                "gradient w.r.t. the critic head": grads(network.critic_head)}

    call = (f"compute_atari_objective({'OnePass(' if wrapped else ''}NatureCNN(4, {frame_stack}){')' if wrapped else ''}, "
            f"its CriticView, a minibatch of 12, AtariPPOArgs({settings})), then backward()")
    try:
        check_exercise(impl, ref, "compute_atari_objective", run, rtol=1e-4, atol=1e-7, call=call,
                       cache_key=f"atari objective {seed} {frame_stack} {settings} {wrapped}")
    except AttributeError as error:
        if not wrapped:
            raise
        raise WrongAnswer(explain(call, f"AttributeError: {error} — the trainer's network is wrapped: use only "
                                  "network(obs), network.value(obs) and network.logits_and_value(obs)",
                                  [mistake("compute_atari_objective", "network_internals_used")])) from None


@pytest.mark.exercise("compute_atari_objective")
def test_atari_objective_runs_the_trunk_once(impl, ref):
    network = seeded_reference(ref, 6, 4, seed=0)
    runs = []
    handle = network.trunk.register_forward_hook(lambda *args: runs.append(1))
    try:
        impl.compute_atari_objective(network, ref.CriticView(network), make_minibatch(ref, network, 0),
                                     impl.AtariPPOArgs())
    finally:
        handle.remove()
    runs = len(runs) - 1  # make_minibatch ran it once
    if runs != 1:
        raise WrongAnswer(explain("compute_atari_objective(NatureCNN(6, 4), ...): passes through the trunk",
                                  f"{runs} passes; use network.logits_and_value(obs) once",
                                  [mistake("compute_atari_objective", "trunk_run_twice")] if runs == 2 else []))


# --- given code (not graded) -------------------------------------------------------------------

def test_atari_args_reject_a_bad_frame_stack(ref):
    with pytest.raises(ValueError, match="frame_stack must be a positive integer"):
        ref.AtariPPOArgs(frame_stack=0)


@pytest.mark.parametrize("env_id,frame_stack", [(GAME, 4), ("ALE/Pong-v5", 2)])
def test_preprocessed_observations_and_clipped_rewards(env_id, frame_stack):
    env = make_atari_env(env_id, frame_stack=frame_stack)
    obs, _ = env.reset(seed=0)
    rewards = set()
    for _ in range(200):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        rewards.add(reward)
    env.close()
    assert obs.shape == (frame_stack, 84, 84) and obs.dtype == np.uint8
    assert rewards <= {-1.0, 0.0, 1.0}


def wrappers_of(env: gym.Env) -> list[str]:
    names = []
    while isinstance(env, gym.Wrapper):
        names.append(type(env).__name__)
        env = env.env
    return names


@pytest.mark.parametrize("episodic_life", [True, False])
@pytest.mark.parametrize("clip_rewards", [True, False])
def test_atari_args_episodic_life_and_clip_rewards_switch_their_wrappers(ref, episodic_life, clip_rewards):
    # Both switches at both values: each adds its wrapper when on and leaves it out when off.
    args = ref.AtariPPOArgs(num_envs=1, num_steps_per_rollout=8, total_timesteps=8, num_minibatches=1,
                            episodic_life=episodic_life, clip_rewards=clip_rewards)
    trainer = ref.AtariPPOTrainer(args)
    chain = wrappers_of(trainer.envs.envs[0])
    trainer.envs.close()
    assert ("EpisodicLife" in chain) == episodic_life, chain
    assert ("TransformReward" in chain) == clip_rewards, chain


def test_without_episodic_life_a_lost_life_does_not_end_the_training_episode(ref):
    args = ref.AtariPPOArgs(num_envs=1, num_steps_per_rollout=8, total_timesteps=8, num_minibatches=1,
                            episodic_life=False)
    env = ref.AtariPPOTrainer(args).envs.envs[0]
    rng = np.random.default_rng(0)
    _, info = env.reset(seed=0)
    lives = info["lives"]
    for _ in range(5_000):
        _, _, terminated, truncated, info = env.step(int(rng.integers(4)))
        if info["lives"] < lives or terminated or truncated:
            break
    env.close()
    assert info["lives"] < lives and not terminated and not truncated, (lives, info["lives"], terminated, truncated)


def test_trainer_shares_the_trunk_and_lists_each_parameter_once(ref):
    args = ref.AtariPPOArgs(num_envs=2, num_steps_per_rollout=8, total_timesteps=16, num_minibatches=2,
                            batches_per_learning_phase=1)
    trainer = ref.AtariPPOTrainer(args)
    reports = []
    trainer.train(reports.append)
    trainer.envs.close()
    params = trainer.optimizer.param_groups[0]["params"]
    assert len(params) == len({id(p) for p in params}) == len(list(trainer.network.parameters()))
    assert list(trainer.critic.parameters()) == []
    assert len(reports) == 1 and reports[0].global_step == 16
    assert all(np.isfinite(v) for k, v in reports[0].stats.items() if k != "explained_variance")
    data = trainer.memory.stacked()
    assert data["obs"].shape == (8, 2, 4, 84, 84) and data["obs"].max() <= 255 and data["obs"].max() > 1


def test_on_device_gives_the_same_numbers_and_gradients(ref):
    # OnDevice moves inputs to the network's device and outputs back; on the CPU it must change nothing.
    torch.manual_seed(0)
    network = ref.NatureCNN(4, 4)
    minibatch = make_minibatch(ref, network, 0)
    results = []
    for net in (network, ref.OnDevice(network, "cpu")):
        network.zero_grad(set_to_none=True)
        objective = ref.compute_atari_objective(net, ref.CriticView(net), minibatch, ref.AtariPPOArgs())
        objective.backward()
        results.append((objective.detach(), grads(network)))
    assert list(ref.OnDevice(network, "cpu").parameters()) == list(network.parameters())
    assert compare(results[1], results[0], rtol=1e-6, atol=1e-7) is None


def test_atari_args_reject_a_missing_device(ref, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="no CUDA GPU"):
        ref.AtariPPOArgs(device="cuda")
    with pytest.raises(ValueError, match="device must be cpu or cuda"):
        ref.AtariPPOArgs(device="tpu9")


def test_one_pass_answers_the_critic_from_the_actors_pass_only_without_gradients(ref):
    torch.manual_seed(0)
    network = ref.NatureCNN(4, 4)
    actor = ref.OnePass(network)
    critic = ref.CriticView(actor)
    runs = []
    handle = network.trunk.register_forward_hook(lambda *args: runs.append(1))
    obs, other = pixels(3, 4, seed=1), pixels(3, 4, seed=2)
    try:
        with torch.no_grad():
            logits, values = actor(obs), critic(obs)
            assert len(runs) == 1  # one trunk pass for both
            assert torch.equal(logits, network(obs)) and torch.equal(values, network.value(obs))
            runs.clear()
            actor(obs)
            assert torch.equal(critic(other), network.value(other))  # another tensor: computed afresh
            actor(obs)
            obs.add_(1.0)  # changed in place since the actor saw it: computed afresh
            assert torch.equal(critic(obs), network.value(obs))
        with torch.inference_mode():  # the evaluation's tensors: inference tensors, which keep no version count
            inference_obs = pixels(3, 4, seed=3)
            runs.clear()
            assert torch.equal(actor(inference_obs), network(inference_obs))
            assert torch.equal(critic(inference_obs), network.value(inference_obs)) and len(runs) == 3
        runs.clear()
        actor(obs)
        critic(obs).sum().backward()  # with gradients nothing is kept: the value has its own graph
        assert len(runs) == 2 and network.critic_head.weight.grad is not None
    finally:
        handle.remove()
