"""How every long command shows its progress: a bar on a terminal, a plain line every so often elsewhere.

On a terminal (the stream is a TTY) a ``tqdm`` bar redraws in place (in Jupyter, a widget bar). Anywhere else (``> log``,
``| tee``, ``nohup``, CI) a bar would be a wall of carriage returns, and no output at all leaves
a 15-minute run silent until its end; there, one plain line is printed every ``every_s`` seconds
(``WORKBOOK_PROGRESS_EVERY_S``, default 30) and once more when the run stops, in the style of
CleanRL's ``global_step=…, episodic_return=…``::

    atari: global_step=40960/165000 (25%), episodic_return=3.4, sps=191, 214 s

Every command (cartpole, continuous, atari, rlhf, reason, pretrain) uses :class:`Progress`;
``--no-progress`` turns both off.
"""

from __future__ import annotations

import os
import sys
import time
from typing import IO, Any

DEFAULT_EVERY_S = 30.0


def every_s() -> float:
    """Seconds between two progress lines off a terminal (``WORKBOOK_PROGRESS_EVERY_S``, default 30)."""
    try:
        return max(0.0, float(os.environ.get("WORKBOOK_PROGRESS_EVERY_S") or DEFAULT_EVERY_S))
    except ValueError:
        return DEFAULT_EVERY_S


def in_notebook() -> bool:
    """Inside a Jupyter kernel (workbook.notebook.train), where tqdm.auto draws a widget bar."""
    ipython = sys.modules.get("IPython")
    try:
        return type(ipython.get_ipython()).__name__ == "ZMQInteractiveShell"
    except AttributeError:
        return False


def is_terminal(stream: IO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or a fake stream
        return False


class Progress:
    """Progress over ``total`` units (steps, iterations): a bar on a terminal, else a line every :func:`every_s`.

    ``counter``: the name of the count in the plain lines (``global_step``, ``iteration``);
    ``prefix``: what starts each line (the command). :meth:`update` takes the position reached
    (not an increment) and the metrics to show; :meth:`close` prints the last line off a terminal.
    ``enabled=False`` shows nothing (``--no-progress``).
    """

    def __init__(self, total: int, *, initial: int = 0, counter: str = "step", prefix: str = "", unit: str = "step",
                 enabled: bool = True, stream: IO | None = None, unit_scale: bool = False):
        self.total, self.n, self.counter, self.prefix = total, initial, counter, prefix
        self.stream = stream or sys.stdout
        self.metrics: dict[str, Any] = {}
        self.enabled = enabled
        self.bar = None
        self.start = self.last = time.perf_counter()
        self.shown = initial  # the position of the last plain line
        if enabled and (is_terminal(self.stream) or in_notebook()):
            from tqdm.auto import tqdm  # a widget bar in Jupyter, text on a terminal

            self.bar = tqdm(total=total, initial=initial, unit=unit, unit_scale=unit_scale, dynamic_ncols=True,
                            mininterval=0.5, desc=prefix or None, file=self.stream)

    def update(self, n: int, **metrics: Any) -> None:
        """The run reached position ``n``; ``metrics`` (name → value or preformatted text) go in the postfix/line."""
        if not self.enabled:
            return
        self.metrics = metrics
        if self.bar is not None:
            if metrics:
                self.bar.set_postfix({k: _text(v) for k, v in metrics.items()}, refresh=False)
            self.bar.update(n - self.bar.n)
            self.n = n
            return
        self.n = n
        now = time.perf_counter()
        if now - self.last >= every_s():
            self._line(now)

    def line(self) -> str:
        """The plain progress line for the position reached and the last metrics."""
        done = f"{self.counter}={self.n}/{self.total}"
        if self.total:
            done += f" ({100 * self.n / self.total:.0f}%)"
        parts = [done] + [f"{k}={_text(v)}" for k, v in self.metrics.items()]
        return (f"{self.prefix}: " if self.prefix else "") + ", ".join(parts) + f", {time.perf_counter() - self.start:.0f} s"

    def _line(self, now: float) -> None:
        self.last, self.shown = now, self.n
        print(self.line(), file=self.stream, flush=True)

    def close(self) -> None:
        """Close the bar; off a terminal, print the final position unless the last line already showed it."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.enabled and self.n != self.shown:
            self._line(time.perf_counter())
        self.enabled = False


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
