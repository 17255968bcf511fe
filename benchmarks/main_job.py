"""How long does ``make main`` take on a fresh model cache? (A benchmark, not a test.)

    python benchmarks/main_job.py            # python -m workbook main, with an empty WORKBOOK_CACHE

Runs the main job in a subprocess with ``WORKBOOK_CACHE`` pointing at a new empty folder, so the
review GPT is pretrained inside the measured time exactly as on a fresh clone (the setup of
``.venv`` is not included: ``make main`` after ``make setup``). Prints the job's output with the
time each of its sections started, the load average (the CPU may be shared), and, as its last
line, one JSON object: total wall time, seconds per section, the exit code and the 3-minute check.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workbook.cli import make_parser  # noqa: E402
from workbook.runs import command  # noqa: E402


@command
def main(argv: list[str] | None = None) -> int:
    make_parser("benchmarks/main_job.py", __doc__.split("\n\n")[0]).parse_args(argv)
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="workbook-cache-") as cache:
        env = os.environ | {"WORKBOOK_CACHE": cache, "PYTHONPATH": str(ROOT)}
        start = time.perf_counter()
        marks: list[tuple[str, float]] = []
        job = subprocess.Popen([sys.executable, "-m", "workbook", "main"], cwd=ROOT, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1)
        for line in job.stdout:
            now = time.perf_counter() - start
            section = re.match(r"== (\d)\. (.*) ==", line.strip())
            if section:
                marks.append((section.group(2).split(" (")[0].split(":")[0], now))
            print(f"{now:7.1f}s | {line}", end="", flush=True)
        code = job.wait()
        total = time.perf_counter() - start
    ends = [t for _, t in marks[1:]] + [total]
    sections = {name: round(end - t, 1) for (name, t), end in zip(marks, ends)}
    result = {"total_wall_s": round(total, 1), "sections_s": sections, "exit_code": code,
              "loadavg_start": round(load_start, 2), "loadavg_end": round(os.getloadavg()[0], 2),
              "ok_3_minutes": code == 0 and total <= 180.0}
    print(json.dumps(result))
    return 0 if result["ok_3_minutes"] else 1


if __name__ == "__main__":
    sys.exit(main())
