"""Maintainers: write notebooks/<part>.ipynb from exercises/<part>.py and Part 0's section list.

    python scripts/make_notebooks.py            # every part (refuses to replace a notebook holding work)
    python scripts/make_notebooks.py --check    # exit 1, naming them, if any notebook is out of date
    python scripts/make_notebooks.py --force    # replace even a notebook holding work (a backup is kept)

The exercise file stays the one graded source; a notebook is a view of it (docs/notebooks.md):
its markdown is the module's docstring, links into part0_theory.md and the module's given code;
each exercise is a ``%%exercise NAME`` cell (the stub, written back into the exercise file when
run) followed by a ``wb.check("NAME")`` cell. tests/test_notebooks.py fails when a notebook is
not what this script writes (a learner's exercise bodies and outputs aside).
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workbook.cli import make_parser  # noqa: E402
from workbook.mirror import is_stub, make_exercise_text  # noqa: E402
from workbook.notebook import functions_of, is_unwritten  # noqa: E402
from workbook.runs import ConfigError, command  # noqa: E402

NOTEBOOKS = ROOT / "notebooks"
README = ROOT / "README.md"
PUBLIC_REPO: str | None = None
"""The workbook's public GitHub repository, "owner/name"; None until it has one.

The one switch for everything that points at it: with None, no "Open in Colab" badge or link is
written (a link to a repository that does not exist is a 404), and the setup cell on Colab asks
for the workbook's folder to be uploaded. Set it to "owner/name", run this script, and it puts the
badge back at the top of every notebook, the [Colab] link in the README's notebook column (this
script writes that column: the rows of the README's table that link notebooks/<part>.ipynb), the
link to Part 0 on GitHub, and a `git clone` of the repository in the setup cell on Colab. Then
update docs/notebooks.md's "Colab" section.
"""


def repo_url() -> str | None:
    return f"https://github.com/{PUBLIC_REPO}" if PUBLIC_REPO else None


def colab_url(part: str) -> str | None:
    return (f"https://colab.research.google.com/github/{PUBLIC_REPO}/blob/main/notebooks/{part}.ipynb"
            if PUBLIC_REPO else None)


def notebook_links(part: str) -> str:
    """The README table's notebook cell for ``part``."""
    local = f"[.ipynb](notebooks/{part}.ipynb)"
    return f"{local}, [Colab]({colab_url(part)})" if PUBLIC_REPO else local


def readme_text(text: str) -> str:
    """``text`` (the README) with each table row that links notebooks/<part>.ipynb ending in :func:`notebook_links`."""
    out = []
    for line in text.splitlines(keepends=True):
        found = re.search(r"\(notebooks/(part\w+)\.ipynb\)", line)
        if line.startswith("|") and found:
            body = line.rstrip("\n").rstrip().removesuffix("|").rstrip()
            head = body[:body.rindex("|")]
            line = f"{head}| {notebook_links(found.group(1))} |\n"
        out.append(line)
    return "".join(out)


# Part 0's sections per part: (read first, keep open while writing). Parts 1-6 as in Part 0's reading guide.
READING = {
    "part1_ppo_core": ([1, 2, 3], [4, 5, 6, 7]),
    "part2_cartpole": ([7], [4, 9]),
    "part3_rlhf": ([1, 8], [4, 6, 9]),
    "part4_continuous": ([12], [7]),
    "part5_beyond_ppo": ([8, 10], [9]),
    "part6_data_parallel": ([11], [8]),
    "part7_reasoning": ([13], [10, 9]),
    "part8_atari": ([14], [7, 9]),
    "part9_agents": ([15], [13, 4]),
    "part10_async": ([16], [5, 13]),
    "part11_goodhart": ([17], [8, 13]),
}

# The part's training command with a small default budget (None: the part has none to run from a notebook).
TRAIN = {
    "part2_cartpole": ("cartpole", {"total_timesteps": 50_000}),
    "part3_rlhf": ("rlhf", {"iterations": 30}),
    "part4_continuous": ("continuous", {"env": "InvertedPendulum-v5", "total_timesteps": 30_000}),
    "part5_beyond_ppo": ("rlhf", {"algo": "grpo", "iterations": 30}),
    "part7_reasoning": ("reason", {"iterations": 20}),
    "part8_atari": ("atari", {"total_timesteps": 20_000}),
    "part9_agents": ("reason", {"task": "calculator", "iterations": 10}),
    "part10_async": ("reason", {"lag": 2, "correction": "token_truncate", "iterations": 10}),
}
NO_TRAIN = {
    "part1_ppo_core": "Part 2 builds a CartPole agent from these functions (`notebooks/part2_cartpole.ipynb`), and "
                      "its training cell runs them.",
    "part6_data_parallel": "Training on several processes needs `torchrun`, which a notebook kernel cannot be: in a "
                           "terminal, `torchrun --standalone --nproc_per_node=2 -m workbook cartpole --impl exercises` "
                           "(docs/torchrun.md).",
    "part11_goodhart": "The measurement these functions serve takes minutes and writes a figure: in a terminal, "
                       "`python -m workbook goodhart` (your functions, the default `--impl exercises`; docs/goodhart.md).",
}


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading (as tests/test_docs.py computes it)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def part0_sections() -> dict[int, tuple[str, str]]:
    """Section number → (title, anchor) from part0_theory.md's '## N. Title' headings."""
    out = {}
    for heading in re.findall(r"^## (\d+)\. (.+)$", (ROOT / "part0_theory.md").read_text(), re.MULTILINE):
        number, title = int(heading[0]), heading[1]
        out[number] = (title, slug(f"{number}. {title}"))
    return out


def section_links(numbers: list[int]) -> str:
    sections = part0_sections()
    missing = [n for n in numbers if n not in sections]
    if missing:
        raise ConfigError("part0_theory.md", f"has no section(s) {missing} (READING names them); nothing was written")
    return ", ".join(f"[§{n} {sections[n][0]}](../part0_theory.md#{sections[n][1]})" for n in numbers)


def points(part: str) -> dict[str, int]:
    for node in ast.parse((ROOT / "tests" / f"test_{part}.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "POINTS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise KeyError(f"tests/test_{part}.py has no POINTS")


def _cell(kind: str, source: str, cell_id: str) -> dict:
    cell = {"cell_type": kind, "id": cell_id, "metadata": {}, "source": source.splitlines(keepends=True)}
    if kind == "code":
        cell |= {"execution_count": None, "outputs": []}
    return cell


def setup_source(part: str) -> str:
    fetch = (f'''    if not found:  # the first run on Colab: fetch the workbook
        subprocess.run(["git", "clone", "--depth", "1", "{repo_url()}", "/content/workbook"], check=True)
        found = [Path("/content/workbook")]
''' if PUBLIC_REPO else '''    if not found:
        raise SystemExit("On Colab, upload the workbook's folder first, then run this cell again: "
                         "docs/notebooks.md, section Colab")
''')
    return f'''# Setup: run this cell first. On Colab it installs the workbook (untested there; docs/notebooks.md, Colab).
import subprocess, sys
from pathlib import Path

if "google.colab" in sys.modules:  # the workbook's folder in /content, pip-installed once per runtime
    found = [p for p in [Path("/content"), *sorted(Path("/content").glob("*")), *sorted(Path("/content").glob("*/*"))]
             if (p / "exercises").is_dir() and (p / "workbook").is_dir()]
{fetch}    if subprocess.run([sys.executable, "-m", "pip", "show", "-q", "ppo-rlhf-workbook"]).returncode != 0:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "-e", str(found[0])], check=True)
    here = found[0]
else:
    here = Path.cwd()
root = next(p for p in [here, *here.parents] if (p / "exercises").is_dir() and (p / "workbook").is_dir())
sys.path.insert(0, str(root))  # this checkout's workbook and exercises, whatever else is installed

from workbook import notebook as wb

wb.start("{part}")
'''


def chunks(source: str, exercises: set[str]) -> list[tuple[str, str, str]]:
    """The module after its docstring, in order: ('given', text, '') and ('exercise', text, name) pieces."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    body = tree.body[1:] if tree.body and isinstance(tree.body[0], ast.Expr) else tree.body
    out: list[tuple[str, str, str]] = []
    cursor = tree.body[0].end_lineno if body is not tree.body else 0
    for node in body:
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]) - 1
        name = getattr(node, "name", None)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and name in exercises:
            out.append(("given", "".join(lines[cursor:start]), ""))
            out.append(("exercise", "".join(lines[start:node.end_lineno]), name))
            cursor = node.end_lineno
    out.append(("given", "".join(lines[cursor:]), ""))
    merged: list[tuple[str, str, str]] = []
    for kind, text, name in out:
        if kind == "given" and not text.strip():
            continue
        merged.append((kind, text.strip("\n") + "\n", name))
    return merged


RULE = re.compile(r"^#\s*-{3,}\s*$")
TITLED_RULE = re.compile(r"^#\s*-{2,}\s+(.+?)\s+-{3,}\s*$")


def sections(text: str) -> list[tuple[str | None, str]]:
    """Given code split at its banner comments: (banner title or None, the text under it up to the next banner).

    A banner is ``# --- title ---`` or a ``# ---`` rule, ``# Title``, ``# ---`` rule.
    """
    lines = text.splitlines(keepends=True)
    out: list[tuple[str | None, list[str]]] = [(None, [])]
    i = 0
    while i < len(lines):
        line = lines[i].rstrip("\n")
        titled = TITLED_RULE.match(line)
        if titled:
            out.append((titled.group(1), []))
            i += 1
        elif (RULE.match(line) and i + 2 < len(lines) and RULE.match(lines[i + 2].rstrip("\n"))
              and lines[i + 1].startswith("#")):
            out.append((lines[i + 1].lstrip("#").strip(), []))
            i += 3
        else:
            out[-1][1].append(lines[i])
            i += 1
    return [(title, "".join(body).strip("\n")) for title, body in out if title or "".join(body).strip()]


def only_comments(text: str) -> bool:
    return all(line.lstrip().startswith("#") for line in text.splitlines() if line.strip())


def comment_prose(text: str) -> str:
    """Comment lines as Markdown text: the ``#`` gone, a blank line between paragraphs kept."""
    return "\n".join(re.sub(r"^\s*#\s?", "", line) for line in text.splitlines())


def given_markdown(part: str, text: str) -> str:
    """The markdown cell of a piece of given code: each banner a heading, comments alone as text, code as a block."""
    out, said = [], False
    for title, body in sections(text):
        if title:
            out.append(f"## {title[0].upper()}{title[1:]}")
        if not body.strip():
            continue
        if only_comments(body):
            out.append(comment_prose(body))
            continue
        if not said:
            out.append(f"Given code from `exercises/{part}.py` (not an exercise; read it, don't run it):")
            said = True
        out.append(f"```python\n{body}\n```")
    return "\n\n".join(out)


def build(part: str) -> dict:
    """The notebook of ``part`` as a JSON-ready dict (deterministic: same inputs, same bytes)."""
    path = ROOT / "exercises" / f"{part}.py"
    source = path.read_text()
    worth = points(part)
    docstring = ast.get_docstring(ast.parse(source), clean=False) or ""
    title, _, rest = docstring.strip().partition("\n")
    title = title.rstrip(".")
    first, keep = READING[part]
    badge = (f"[![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url(part)})\n\n"
             if PUBLIC_REPO else "")
    on_colab = (f"[on GitHub]({repo_url()}/blob/main/part0_theory.md)" if PUBLIC_REPO
                else "`part0_theory.md` in the workbook's folder")
    intro = (f"# {title}\n\n{badge}"
             f"**Read first** in Part 0: {section_links(first)}. **Keep open:** {section_links(keep)}. "
             f"(On Colab, Part 0 is {on_colab}.)\n\n"
             "How this notebook works:\n\n"
             f"- `exercises/{part}.py` is the graded file; this notebook is a view of it. Running an exercise cell "
             "(`%%exercise NAME`) writes its definition into that file, so `pytest` and `python -m workbook grade` "
             "see your notebook work — and a version you wrote in the file is never overwritten (docs/notebooks.md).\n"
             "- The cell after each exercise runs that exercise's tests, the same as "
             f"`pytest tests/test_{part}.py -k NAME`, with the same messages.\n"
             "- Run the setup cell first.")
    cells = [_cell("markdown", intro, "intro"), _cell("code", setup_source(part), "setup")]
    if rest.strip():
        cells.append(_cell("markdown", f"## What this part is\n\n{rest.strip(chr(10))}", "about"))
    number = 0
    for i, (kind, text, name) in enumerate(chunks(source, set(worth))):
        if kind == "given":
            cells.append(_cell("markdown", given_markdown(part, text), f"given-{i}"))
            continue
        number += 1
        pts = worth[name]
        cells.append(_cell("markdown", f"## Exercise {number}: `{name}` ({pts} point{'s' * (pts != 1)})\n\n"
                                       "Fill in the stub below (its docstring has the formula, the shapes and the traps), "
                                       "run the cell, then run the check.", f"about-{name}"))
        cells.append(_cell("code", f"%%exercise {name}\n{text}", f"exercise-{name}"))
        cells.append(_cell("code", f'wb.check("{name}")', f"check-{name}"))
    if part in TRAIN:
        cmd, options = TRAIN[part]
        kwargs = ", ".join(f"{k}={v!r}" if not isinstance(v, int) else f"{k}={v:_}" for k, v in options.items())
        cells.append(_cell("markdown", "## Train it\n\n"
                                       f"`python -m workbook {cmd}` as a call, on a small budget (raise it; any option of "
                                       f"`python -m workbook {cmd} --help` is a keyword). The run folder is under `runs/`, "
                                       "as from the command line; interrupting the kernel is Ctrl-C: the run is saved and "
                                       "the line that resumes it is printed.", "about-train"))
        cells.append(_cell("code", f'wb.train("{cmd}", {kwargs})', "train"))
    elif part == "part1_ppo_core":
        cells.append(_cell("markdown", "## See them at work\n\nYour `compute_advantages` on one episode for three values "
                                       "of λ, and your `make_optimizer`'s learning-rate schedule, drawn here. Then train "
                                       f"them: {NO_TRAIN[part]}", "about-train"))
        cells.append(_cell("code", "wb.see_part1()", "train"))
    else:
        cells.append(_cell("markdown", f"## Next\n\n{NO_TRAIN[part]}", "next"))
    cells.append(_cell("markdown", f"Your grade counts this notebook's work: `python -m workbook grade --part {part}` "
                                   "in a terminal.", "grade"))
    return {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                                         "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def dumps(notebook: dict) -> str:
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"


def parts() -> list[str]:
    return sorted(p.stem for p in (ROOT / "exercises").glob("part*.py"))


def exercise_cell_body(source: str) -> tuple[str, str]:
    """('%%exercise NAME' line, the definition) of an exercise cell's source."""
    head, _, text = source.partition("\n")
    return head, text


def stale_cells(existing: dict, wanted: dict, part: str) -> list[str]:
    """How ``existing`` differs from ``wanted`` beyond a learner's exercise bodies and outputs ([] if it does not)."""
    have, want = existing.get("cells", []), wanted["cells"]
    problems = []
    if [c.get("id") for c in have] != [c["id"] for c in want]:
        return [f"cells differ: {[c.get('id') for c in have]} != {[c['id'] for c in want]}"]
    for h, w in zip(have, want):
        got, expected = "".join(h.get("source", [])), "".join(w["source"])
        if h.get("cell_type") != w["cell_type"]:
            problems.append(f"{w['id']}: a {h.get('cell_type')} cell where a {w['cell_type']} cell belongs")
        elif got != expected and not (w["id"].startswith("exercise-") and _same_but_bodies(got, expected)):
            problems.append(f"{w['id']}: differs from what scripts/make_notebooks.py writes")
    return problems


def _same_but_bodies(got: str, expected: str) -> bool:
    """The cell is the generated stub once its written functions are stubbed again (a learner's work)."""
    head, text = exercise_cell_body(got)
    want_head, want_text = exercise_cell_body(expected)
    try:
        node, = ast.parse(text).body
    except (SyntaxError, ValueError):
        return False  # work in progress is fine in a learner's notebook, but not in the repository
    stubbed = {name for name, fn in functions_of(ast.parse(want_text).body[0]).items() if is_stub(fn)}
    if head.split()[:2] != want_head.split()[:2] or not stubbed <= set(functions_of(node)):
        return False
    return make_exercise_text(text, stubbed).strip() == want_text.strip()


def holds_work(existing: dict, part: str) -> list[str]:
    """Exercises whose cell in ``existing`` holds more than the stub (a learner's work)."""
    out = []
    for cell in existing.get("cells", []):
        if str(cell.get("id", "")).startswith("exercise-"):
            _, text = exercise_cell_body("".join(cell.get("source", [])))
            try:
                written = not is_unwritten(text, part)
            except (SyntaxError, IndexError):
                written = True
            if written:
                out.append(cell["id"].removeprefix("exercise-"))
    return out


@command
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("scripts/make_notebooks.py", "Write notebooks/<part>.ipynb from exercises/<part>.py.")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a notebook is out of date")
    parser.add_argument("--force", action="store_true", help="replace notebooks holding written exercises (backed up)")
    args = parser.parse_args(argv)
    stale = []
    built = {part: build(part) for part in parts()}  # every one first: a missing Part 0 section stops before any is written
    for part, wanted in built.items():
        target = NOTEBOOKS / f"{part}.ipynb"
        existing = json.loads(target.read_text()) if target.exists() else None
        if args.check:
            problems = ["missing"] if existing is None else stale_cells(existing, wanted, part)
            stale += [f"{target.relative_to(ROOT)}: {p}" for p in problems]
            continue
        if existing is not None and target.read_text() == dumps(wanted):
            continue
        work = holds_work(existing, part) if existing else []
        if work and not args.force:
            raise ConfigError(str(target.relative_to(ROOT)), f"holds written exercises ({', '.join(work)}); nothing was "
                                                             "changed (--force replaces it after keeping a backup)")
        if work:
            shutil.copy2(target, target.with_name(f"{target.name}.{time.strftime('%Y%m%d-%H%M%S')}.bak"))
        NOTEBOOKS.mkdir(exist_ok=True)
        target.write_text(dumps(wanted))
        print(f"wrote {target.relative_to(ROOT)}")
    readme = README.read_text()
    if readme_text(readme) != readme:
        if args.check:
            stale.append("README.md: its table's notebook column is not what PUBLIC_REPO gives")
        else:
            README.write_text(readme_text(readme))
            print("wrote README.md (the notebook column)")
    if stale:
        print("\n".join(stale) + "\nregenerate with: python scripts/make_notebooks.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
