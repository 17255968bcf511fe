"""Run CleanRL's ppo.py (this folder) without installing tyro or tensorboard.

    python benchmarks/cleanrl/run_ppo.py --seed 1 [--total-timesteps N]
    python benchmarks/cleanrl/run_ppo.py --script ppo_continuous_action.py --env-id Hopper-v5 --cuda false --seed 1
    python benchmarks/cleanrl/run_ppo.py --script ppo_atari.py --cuda false --seed 1 --budget-s 900

``--script`` (first, if given) picks another CleanRL script of this folder.
``tyro.cli(Args)`` is stubbed by one that understands ``--field value`` for the fields of
ppo.py's ``Args`` (defaults otherwise), and tensorboard's ``SummaryWriter`` by one that writes
nothing (slightly flattering CleanRL: its real writer costs time). torch runs on one thread, as
ours does. ppo.py prints one JSON line when the last 20 episodes average >= 475 (its patch 3);
ppo_atari.py prints one when its ``--budget-s`` runs out (its patch 5). For ppo_atari.py, SB3's
Atari wrappers are replaced by the stand-ins of sb3_atari_wrappers.py (SB3 pins an older gymnasium).
"""

from __future__ import annotations

import dataclasses
import runpy
import sys
import types
from pathlib import Path


def _tyro_cli(cls):
    argv, kwargs = sys.argv[1:], {}
    types_ = {f.name: f.type for f in dataclasses.fields(cls)}
    for flag, value in zip(argv[::2], argv[1::2]):
        name = flag.lstrip("-").replace("-", "_")
        if name not in types_:
            raise SystemExit(f"error: {flag}: not a field of ppo.py's Args")
        kind = {"int": int, "float": float, "str": str, "bool": lambda v: v.lower() in ("1", "true")}.get(
            types_[name] if isinstance(types_[name], str) else types_[name].__name__, str)
        kwargs[name] = kind(value)
    return cls(**kwargs)


class _NoWriter:
    def __init__(self, *args, **kwargs):
        pass

    def add_text(self, *args, **kwargs):
        pass

    def add_scalar(self, *args, **kwargs):
        pass

    def close(self):
        pass


def main() -> None:
    import torch

    torch.set_num_threads(1)
    sys.modules["tyro"] = types.SimpleNamespace(cli=_tyro_cli)
    tensorboard = types.ModuleType("torch.utils.tensorboard")
    tensorboard.SummaryWriter = _NoWriter
    sys.modules["torch.utils.tensorboard"] = tensorboard
    # ppo_atari.py imports SB3's Atari wrappers; SB3 pins an older gymnasium, so stand-ins take its place.
    wrappers = runpy.run_path(str(Path(__file__).with_name("sb3_atari_wrappers.py")))
    atari_wrappers = types.ModuleType("stable_baselines3.common.atari_wrappers")
    atari_wrappers.__dict__.update({k: v for k, v in wrappers.items() if k.endswith("Env")})
    for name in ("stable_baselines3", "stable_baselines3.common"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["stable_baselines3.common.atari_wrappers"] = atari_wrappers
    script = "ppo.py"
    if sys.argv[1:2] == ["--script"]:
        script, sys.argv[1:3] = sys.argv[2], []
    runpy.run_path(str(Path(__file__).with_name(script)), run_name="__main__")


if __name__ == "__main__":
    main()
