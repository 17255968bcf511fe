"""notebooks/: current with the exercise files, and every one runs headless in a real Jupyter kernel.

Each run works on a copy of the repository in tmp_path (the notebook writes into the copy's
exercises/, never into yours). Filled with the reference, every check cell passes and every
training cell trains on a tiny budget; with the stubs, every check says "not started"; a known
mistake planted in a cell is named by its check; the write-back never overwrites work done in the
exercise file. The filled runs check only each exercise's first test (WORKBOOK_CHECK_FIRST=1):
the suite runs every test on the reference already; here what is proven is the notebook's path
to them (one check of Part 1 runs all its tests).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import io
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

_spec = importlib.util.spec_from_file_location("make_notebooks", ROOT / "scripts" / "make_notebooks.py")
make_notebooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_notebooks)

PARTS = make_notebooks.parts()
# The training cells' options in CI: a few updates, no wandb, one evaluation episode.
TINY = {
    "cartpole": 'total_timesteps=1024, eval_episodes=1, wandb="disabled"',
    "continuous": 'env="InvertedPendulum-v5", set=["total_timesteps=512", "num_envs=2"], eval_episodes=1, wandb="disabled"',
    "atari": 'set=["num_envs=2", "num_steps_per_rollout=8", "num_minibatches=2"], total_timesteps=32, eval_episodes=1, '
             'wandb="disabled"',
    "rlhf": 'iterations=2, batch_size=8, mini_batch_size=4, eval_samples=8, max_new_tokens=30, wandb="disabled"',
    "reason": 'iterations=2, batch_size=8, mini_batch_size=4, group_size=4, eval_samples=4, eval_k=4, max_new_tokens=48, '
              'wandb="disabled"',
}


def test_notebooks_are_current():
    """Each notebook is what scripts/make_notebooks.py writes from its exercise file (bodies and outputs aside)."""
    assert sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb")) == PARTS
    for part in PARTS:
        existing = json.loads((ROOT / "notebooks" / f"{part}.ipynb").read_text())
        problems = make_notebooks.stale_cells(existing, make_notebooks.build(part), part)
        assert not problems, f"notebooks/{part}.ipynb: {problems}; regenerate with python scripts/make_notebooks.py"
    readme = (ROOT / "README.md").read_text()
    assert make_notebooks.readme_text(readme) == readme, "README's notebook column: python scripts/make_notebooks.py"
    assert all(f"(notebooks/{part}.ipynb)" in readme for part in PARTS), "a README row per notebook"


def test_no_colab_link_until_the_workbook_has_a_public_address_then_one_setting_adds_them(monkeypatch):
    """A link to a repository that does not exist is a 404: none while PUBLIC_REPO is None; setting it adds them all."""
    assert make_notebooks.PUBLIC_REPO is None, "published? then update docs/notebooks.md's Colab section and this test"
    readme = (ROOT / "README.md").read_text()
    for text in [readme, *(json.dumps(make_notebooks.build(p)) for p in PARTS),
                 *((ROOT / "notebooks" / f"{p}.ipynb").read_text() for p in PARTS)]:
        assert "colab.research.google.com" not in text and "github.com/" not in text
    assert all(ast.parse("".join(make_notebooks.build(p)["cells"][1]["source"])) for p in PARTS), "the setup cell parses"
    monkeypatch.setattr(make_notebooks, "PUBLIC_REPO", "someone/workbook")
    published = make_notebooks.readme_text(readme)
    for part in PARTS:
        url = f"https://colab.research.google.com/github/someone/workbook/blob/main/notebooks/{part}.ipynb"
        row = next(line for line in published.splitlines() if f"(notebooks/{part}.ipynb)" in line)
        assert row.endswith(f"[.ipynb](notebooks/{part}.ipynb), [Colab]({url}) |"), row
        notebook = make_notebooks.build(part)
        intro, setup = ("".join(c["source"]) for c in notebook["cells"][:2])
        assert f"colab-badge.svg)]({url})" in intro and "https://github.com/someone/workbook/blob/main/part0_theory.md" in intro
        assert '"https://github.com/someone/workbook", "/content/workbook"' in setup and ast.parse(setup)
        assert make_notebooks.stale_cells(json.loads((ROOT / "notebooks" / f"{part}.ipynb").read_text()), notebook, part)
    def without_notebook_cells(text: str) -> list[str]:
        return [line.split("| [.ipynb](")[0] for line in text.splitlines()]

    assert published.count("[Colab](") == len(PARTS) and without_notebook_cells(published) == without_notebook_cells(readme)
    monkeypatch.setattr(make_notebooks, "PUBLIC_REPO", None)
    assert make_notebooks.readme_text(published) == readme


def test_a_banner_comment_is_a_heading_never_a_cell_of_its_own():
    """Given code's `# --- title ---` banners become Markdown headings; comments alone become text, not a code block."""
    given = ("import torch\n\n# ------------\n# The first part\n# ------------\n\n"
             "# --- the second part ------------\n\n# A note on what follows,\n#\n# in two paragraphs.\n\n"
             "# --- the third part -----------\nX = 1  # kept with its code\n")
    assert make_notebooks.given_markdown("partX", given) == (
        "Given code from `exercises/partX.py` (not an exercise; read it, don't run it):\n\n```python\nimport torch\n```"
        "\n\n## The first part\n\n## The second part\n\nA note on what follows,\n\nin two paragraphs.\n\n"
        "## The third part\n\n```python\nX = 1  # kept with its code\n```")
    for part in PARTS:
        for cell in make_notebooks.build(part)["cells"]:
            text = "".join(cell["source"])
            blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL) if cell["cell_type"] == "markdown" else [text]
            for block in blocks:
                assert not make_notebooks.only_comments(block), f"{part} {cell['id']}: only comments:\n{block}"
                assert not re.search(r"^#\s*-{3,}", block, re.MULTILINE), f"{part} {cell['id']}: a banner left in code"


def test_a_changed_docstring_makes_the_notebook_stale():
    part = "part1_ppo_core"
    existing = make_notebooks.build(part)
    cell = next(c for c in existing["cells"] if c["id"] == "exercise-compute_advantages")
    cell["source"] = [line.replace("Generalised advantage", "Generalized advantage") for line in cell["source"]]
    assert make_notebooks.stale_cells(existing, make_notebooks.build(part), part) == [
        "exercise-compute_advantages: differs from what scripts/make_notebooks.py writes"]


# --- a copy of the repository to run notebooks in -----------------------------------------------

def repo_copy(tmp_path: Path, reference_except: str | None = None) -> Path:
    """The repository in tmp_path/repo; with ``reference_except``, every other part's exercise file is the reference."""
    root = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.pyc", ".synced.json", "*.bak")
    for name in ("workbook", "exercises", "solutions", "tests", "notebooks", "scripts"):
        shutil.copytree(ROOT / name, root / name, ignore=ignore)
    for name in ("pyproject.toml", "part0_theory.md"):
        shutil.copy2(ROOT / name, root / name)
    for other in PARTS if reference_except else ():
        if other != reference_except:
            shutil.copy2(ROOT / "solutions" / f"{other}.py", root / "exercises" / f"{other}.py")
    return root


def solution_text(part: str, name: str) -> str:
    source = (ROOT / "solutions" / f"{part}.py").read_text()
    for node in ast.parse(source).body:
        if getattr(node, "name", None) == name:
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]) - 1
            return "".join(source.splitlines(keepends=True)[first:node.end_lineno])
    raise KeyError(name)


def fill(notebook, part: str, bodies: dict[str, str] | None = None, train: bool = True):
    """The notebook with exercise cells replaced (default: every one by the reference) and the tiny training budget."""
    for cell in notebook.cells:
        if cell.get("id", "").startswith("exercise-"):
            name = cell["id"].removeprefix("exercise-")
            text = (bodies or {}).get(name, solution_text(part, name) if bodies is None else None)
            if text is not None:
                cell.source = f"%%exercise {name}\n{text}"
        if cell.get("id") == "train" and cell.source.startswith("wb.train("):
            command = re.match(r'wb\.train\("(\w+)"', cell.source).group(1)
            cell.source = f'wb.train("{command}", {TINY[command]})' if train else "pass"
    return notebook


def execute(root: Path, part: str, notebook, env: dict | None = None, timeout: int = 600):
    """Run ``notebook`` in a fresh kernel from root/notebooks (as Jupyter does); returns the executed notebook."""
    path = root / "notebooks" / f"{part}.ipynb"
    nbformat.write(notebook, path)
    saved = dict(os.environ)
    os.environ.update({"PYTHONPATH": str(root), "WANDB_MODE": "disabled", **(env or {})})
    try:
        client = nbclient.NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                                         resources={"metadata": {"path": str(root / "notebooks")}})
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return notebook


def outputs(cell) -> str:
    text = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            text.append(out["text"])
        elif out.get("output_type") == "error":
            text.append("\n".join(out["traceback"]))
        elif "text/plain" in out.get("data", {}):
            text.append(out["data"]["text/plain"])
    return "".join(text)


def cells(notebook, prefix: str) -> list:
    return [c for c in notebook.cells if c.get("id", "").startswith(prefix)]


@pytest.fixture(scope="module")
def tiny_pretrained(tmp_path_factory):
    """A cache where the review GPT and Part 7's reasoner are tiny models (pretrained in seconds, not minutes)."""
    from workbook.lm.pretrain import PretrainArgs, TINY_ARGS, checkpoint_path, pretrain, save_checkpoint
    from workbook.reason import REASONER_ARGS, pretrain_reasoner, reasoner_checkpoint_path

    cache = tmp_path_factory.mktemp("cache")
    model, tok, _ = pretrain(TINY_ARGS, progress=False)
    save_checkpoint(checkpoint_path(dataclasses.replace(PretrainArgs(), cache_dir=str(cache))), model, tok, extra={})
    small = dataclasses.replace(TINY_ARGS, n_reviews=2000, n_heldout=50, steps=100, block_size=80, d_model=32,
                                n_layer=1, n_head=2, lr=1e-2)
    model, tok, _ = pretrain_reasoner("addition", small, progress=False)
    args = dataclasses.replace(REASONER_ARGS["addition"], cache_dir=str(cache))
    save_checkpoint(reasoner_checkpoint_path("addition", args), model, tok, extra={})
    return cache


# --- filled with the reference: every check passes, every training cell trains -------------------

# Executing notebooks in real kernels takes minutes on 2 cores: `make test` checks that every notebook is
# current and the write-back rules; `make test-notebooks` (--all-notebooks, which CI runs after `make test`)
# executes every notebook, filled, with stubs, with a planted mistake, and grade on the result.
@pytest.mark.slow
@pytest.mark.parametrize("part", PARTS)
def test_filled_notebook_runs_every_check_passes_and_training_draws_curves(part, tmp_path, request):
    if not request.config.getoption("--all-notebooks"):
        pytest.skip("run with --all-notebooks (make test-notebooks; CI runs it)")
    tiny_pretrained = request.getfixturevalue("tiny_pretrained")
    root = repo_copy(tmp_path, reference_except=part)
    notebook = fill(nbformat.read(root / "notebooks" / f"{part}.ipynb", as_version=4), part)
    done = execute(root, part, notebook, {"WORKBOOK_CHECK_FIRST": "1", "WORKBOOK_CACHE": str(tiny_pretrained)})
    errors = [outputs(c) for c in done.cells if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    assert not errors, errors[0]
    for cell in cells(done, "exercise-"):
        assert "wrote " in outputs(cell), outputs(cell)
    for cell in cells(done, "check-"):
        assert re.match(r"✓ \w+: passing \(1/1 tests", outputs(cell)), outputs(cell)
    from workbook.mirror import stubbed_functions

    assert not stubbed_functions(root / "exercises" / f"{part}.py"), "grade reads the file: every exercise is in it"
    trained = cells(done, "train")
    for cell in trained:
        images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
        assert images, f"no curves shown:\n{outputs(cell)}"
        if cell.source.startswith("wb.train("):
            assert (root / "runs").is_dir() and any((root / "runs").iterdir()), "the run folder is runs/<name>, as in the CLI"


def test_check_runs_every_test_of_an_exercise_and_grade_counts_notebook_work(tmp_path, request):
    """One exercise, no shortcut: all its tests from the check cell, and the grade table agrees."""
    if not request.config.getoption("--all-notebooks"):
        pytest.skip("run with --all-notebooks (make test-notebooks; CI runs it)")
    import subprocess

    part, name = "part2_cartpole", "get_actor_and_critic"
    root = repo_copy(tmp_path, reference_except=part)
    notebook = nbformat.read(root / "notebooks" / f"{part}.ipynb", as_version=4)
    notebook.cells = [c for c in notebook.cells if c.get("id") in ("setup", f"exercise-{name}", f"check-{name}")]
    check = outputs(cells(execute(root, part, fill(notebook, part, {name: solution_text(part, name)})), "check-")[0])
    assert re.match(rf"✓ {name}: passing \((\d+)/\1 tests, 2/2 points\)", check), check
    grade = subprocess.run([sys.executable, "-m", "workbook", "grade", "--part", part, "--json", str(tmp_path / "g.json")],
                           cwd=root, capture_output=True, text=True, timeout=600, env=dict(os.environ, PYTHONPATH=str(root)))
    rows = {r["exercise"]: r for r in json.loads((tmp_path / "g.json").read_text())["exercises"]}
    assert rows[name]["status"] == "passing" and f"{rows[name]['passed']}/{rows[name]['tests']} tests" in check, grade.stdout
    assert rows[name]["tests"] > 1
    assert {r["status"] for n, r in rows.items() if n != name} == {"not started"}


# --- the stubs, a known mistake, waiting on an earlier part -------------------------------------

def code_cell(source: str, cell_id: str):
    return nbformat.v4.new_code_cell(source, id=cell_id)


def stub_with_body(part: str, name: str, body: str) -> str:
    stub = next("".join(c["source"]) for c in make_notebooks.build(part)["cells"] if c["id"] == f"exercise-{name}")
    return stub.partition("\n")[2].replace("raise NotImplementedError()", body)


@pytest.mark.slow
def test_stubs_say_not_started_a_planted_mistake_is_named_and_a_later_part_waits(tmp_path, request):
    """Part 1's notebook as shipped (every check: not started, no traceback); then, in the same kernel, a known
    mistake planted in a cell (its check names it) and Part 4's objective written before Part 1's (it waits)."""
    if not request.config.getoption("--all-notebooks"):
        pytest.skip("run with --all-notebooks (make test-notebooks; CI runs it)")
    root = repo_copy(tmp_path)
    part, name = "part1_ppo_core", "calc_value_function_loss"
    mistake = f"{part}:{name}:sum_instead_of_mean"
    wrong = stub_with_body(part, name, "from workbook.mistakes import REGISTRY\n"
                                       f"    return REGISTRY.get({mistake!r}).impl(values, mb_returns, vf_coef)")
    later, objective = "part4_continuous", "compute_continuous_objective"
    notebook = nbformat.read(root / "notebooks" / f"{part}.ipynb", as_version=4)
    notebook.cells += [code_cell(f"%%exercise {name}\n{wrong}", "planted"), code_cell(f'wb.check("{name}")', "planted-check"),
                       code_cell(f'wb.start("{later}")', "later"),
                       code_cell(f"%%exercise {objective}\n{solution_text(later, objective)}", "later-exercise"),
                       code_cell(f'wb.check("{objective}")', "later-check")]
    done = execute(root, part, notebook)
    for cell in done.cells:
        assert not any(o.get("output_type") == "error" for o in cell.get("outputs", [])), outputs(cell)
        assert "Traceback" not in outputs(cell)
    checks = cells(done, "check-")
    assert len(checks) == 8 and all(
        re.match(r"· \w+: not started — fill in exercises/part1_ppo_core.py::", outputs(c)) for c in checks)
    check = outputs(cells(done, "planted-check")[0])
    assert check.startswith(f"✗ {name}: failing"), check
    assert "[known mistake: sum_instead_of_mean]" in check and "expected:" in check and "got:" in check, check
    assert re.match(rf"… {objective}: written, waiting on part1_ppo_core\.\w+", outputs(cells(done, "later-check")[0]))


# --- the write-back never loses work ------------------------------------------------------------

@pytest.fixture
def notebook_module(tmp_path, monkeypatch):
    root = repo_copy(tmp_path)
    spec = importlib.util.spec_from_file_location("notebook_copy", root / "workbook" / "notebook.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "ROOT", root)
    monkeypatch.setattr(module, "SYNCED", root / "notebooks" / ".synced.json")
    return module, root


def test_write_back_iterates_in_the_notebook_but_never_overwrites_work_done_in_the_file(notebook_module):
    nb, root = notebook_module
    part, name = "part1_ppo_core", "calc_entropy_bonus"
    path = root / "exercises" / f"{part}.py"
    stub = stub_with_body(part, name, "raise NotImplementedError()")
    first = stub_with_body(part, name, "return ent_coef * entropy.mean()  # v1")
    second = first.replace("# v1", "# v2")
    assert nb.write_exercise(part, name, stub)[0] == "unchanged"
    assert nb.write_exercise(part, name, first)[0] == "written" and "# v1" in path.read_text()
    assert nb.write_exercise(part, name, second)[0] == "written" and "# v2" in path.read_text()  # the notebook's own
    edited = path.read_text().replace("# v2", "# edited in the file")
    path.write_text(edited)
    assert nb.write_exercise(part, name, stub)[0] == "file-newer" and path.read_text() == edited
    assert nb.write_exercise(part, name, first)[0] == "conflict" and path.read_text() == edited
    what, message = nb.write_exercise(part, name, first, overwrite=True)
    assert what == "written" and "# v1" in path.read_text()
    backups = list(path.parent.glob(f"{path.name}.*.bak"))
    assert len(backups) == 1 and backups[0].read_text() == edited and str(backups[0].relative_to(root)) in message
    # Outside the exercise: byte for byte the file as shipped.
    other = (ROOT / "exercises" / f"{part}.py").read_text()
    assert nb.replace_definition(path.read_text(), name, nb.definition_text(other, name)) == other


@pytest.mark.parametrize("cell, says", [
    ("def calc_entropy_bonus(:\n    pass\n", "line 1"),
    ("def helper():\n    pass\n", "exactly one definition, `calc_entropy_bonus`"),
    ("import os\ndef calc_entropy_bonus(entropy, ent_coef):\n    return 0\n", "exactly one definition"),
])
def test_a_bad_cell_writes_nothing_and_says_why_in_one_line(notebook_module, cell, says):
    nb, root = notebook_module
    path = root / "exercises" / "part1_ppo_core.py"
    before = path.read_text()
    what, message = nb.write_exercise("part1_ppo_core", "calc_entropy_bonus", cell)
    assert what == "error" and message.startswith("error: calc_entropy_bonus: ") and says in message
    assert "\n" not in message and path.read_text() == before


def test_make_notebooks_refuses_to_replace_a_notebook_holding_work(tmp_path):
    part = "part1_ppo_core"
    notebook = make_notebooks.build(part)
    cell = next(c for c in notebook["cells"] if c["id"] == "exercise-calc_entropy_bonus")
    cell["source"] = ["%%exercise calc_entropy_bonus\n", stub_with_body(part, "calc_entropy_bonus", "return 0.0")]
    assert make_notebooks.holds_work(notebook, part) == ["calc_entropy_bonus"]
    assert make_notebooks.stale_cells(notebook, make_notebooks.build(part), part) == [], "a learner's body is not staleness"
    assert make_notebooks.holds_work(make_notebooks.build(part), part) == []


# --- a training cell's error line ---------------------------------------------------------------

def test_a_training_cells_error_line_wraps_at_word_boundaries(capsys, monkeypatch):
    """The command's one-line error, in a notebook: the same words, none split, each line fits an output area."""
    from workbook import notebook as wb
    from workbook.cartpole.train import main

    monkeypatch.chdir(ROOT)
    assert main(["--set", "no_such_field=1"]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("error: --set: ") and "\n" not in line and len(line) > 2 * wb.ERROR_WIDTH, line
    wb.train("cartpole", set=["no_such_field=1"])
    out, err = capsys.readouterr()
    assert wb.last_exit_code == 2 and "error:" not in out, out
    lines = err.rstrip("\n").split("\n")
    assert len(lines) > 1 and lines[0].startswith("error: --set: ") and all(l.startswith("    ") for l in lines[1:]), err
    assert all(len(l) <= wb.ERROR_WIDTH for l in lines), err
    assert " ".join(err.split()) == " ".join(line.split()), "words are split, lost or added"
    assert [w for l in lines for w in l.split()] == line.split()


@pytest.mark.parametrize("pieces", [
    ["error: a b c\n"], ["e", "rr", "or: a b c", "\n"], ["error: a b c", "\n", "next\n"]])
def test_error_lines_are_held_only_while_they_may_be_errors(pieces):
    from workbook import notebook as wb

    stream = io.StringIO()
    wrapped = wb._ErrorLines(stream)
    for piece in ["50%|###  \r", "ok ", "error: not at a line start\n", *pieces]:
        wrapped.write(piece)
        if piece == "50%|###  \r":
            assert stream.getvalue() == piece, "a progress bar's update goes through at once"
    wrapped.release()
    assert stream.getvalue() == "".join(["50%|###  \r", "ok error: not at a line start\n", *pieces])
    long = "error: x: " + " ".join(["word"] * 40) + "\n"
    before = stream.getvalue()
    wrapped.write(long[:30])
    assert stream.getvalue() == before, "an error line is held until it ends"
    wrapped.write(long[30:])
    assert stream.getvalue() == before + wb.wrap_error(long.strip()) + "\n" and "\n    word" in stream.getvalue()


def test_the_setup_cell_on_colab_finds_the_uploaded_folder_installs_it_once_or_says_to_upload_it(tmp_path, monkeypatch):
    """The Colab branch of the setup cell, with /content a temporary folder, Colab faked and pip recorded."""
    import subprocess
    import types

    setup = "".join(make_notebooks.build("part1_ppo_core")["cells"][1]["source"]).replace("/content", str(tmp_path))
    head = setup.split("from workbook import notebook")[0]
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: calls.append(argv) or types.SimpleNamespace(returncode=1))
    with pytest.raises(SystemExit, match="upload the workbook's folder first"):
        exec(head, {})
    assert calls == []
    folder = tmp_path / "workbook" / "ppo-rlhf-workbook-main"  # a zip of the folder itself, unzipped into workbook/
    (folder / "exercises").mkdir(parents=True)
    (folder / "workbook").mkdir()
    (tmp_path / "sample_data").mkdir()
    scope = {}
    exec(head, scope)
    assert scope["root"] == folder and sys.path[0] == str(folder)
    assert calls[-1][-3:] == ["--quiet", "-e", str(folder)], calls
