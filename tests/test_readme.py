"""The README works as written: its commands exist and install what they need,
its example runs as a script and recovers the decay rate, and every figure it
states is rendered from the stored benchmark results."""

import re
import sys
import tomllib
from pathlib import Path

import pytest
from _fresh_process import run_script
from _stated_figures import stated_figures_in_markdown
from packaging.requirements import Requirement


ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
sys.path.append(str(ROOT / "doc" / "_ext"))
import figures  # noqa: E402  (the docs' figures, rendered from benchmarks/results/)


def readme_example() -> str:
    start = README.index("```python", README.index("## Example")) + len("```python")
    return README[start : README.index("```", start)]


def readme_commands() -> list[str]:
    """The ``bash scripts/...`` commands the README tells a new user to run."""
    return re.findall(r"bash (scripts/\w+)", README)


def extras_installed_by(script: str) -> set[str]:
    """The requirement names a ``scripts/`` command installs (its ``EXTRAS``, resolved)."""
    (extras,) = re.findall(r"^EXTRAS=(\w+)", (ROOT / script).read_text(), re.M) or [
        "test"  # _venv.sh's default
    ]
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names, pending = set(), [extras]
    while pending:
        for line in optional[pending.pop()]:
            requirement = Requirement(line)
            if requirement.name == "pytensor-jax-ofg":
                pending.extend(requirement.extras)
            else:
                names.add(requirement.name.lower())
    return names


def test_readme_commands_are_scripts_that_install_what_they_run():
    commands = readme_commands()
    assert {"scripts/example", "scripts/test", "scripts/docs"} <= set(commands)
    for command in commands:
        assert (ROOT / command).is_file(), command
    assert "sphinx" in extras_installed_by("scripts/docs")
    assert {"pytest", "pytest-xdist", "sphinx"} <= extras_installed_by("scripts/test")
    assert {"pymc", "nutpie", "numpyro", "diffrax", "arviz", "matplotlib"} <= (
        extras_installed_by("scripts/example")
    )
    # The docs command builds what tests/test_docs_build.py builds.
    assert " -m sphinx " in (ROOT / "scripts" / "docs").read_text()


@pytest.mark.slow
def test_readme_example_runs_as_a_script_and_recovers_the_rate(tmp_path):
    example = readme_example()
    assert 'if __name__ == "__main__":' in example
    check = """
if __name__ == "__main__":
    assert idata.posterior.attrs["inference_library"] == "nutpie"
    assert idata.posterior.sizes["chain"] >= 2, idata.posterior.sizes
    early = idata.posterior["knots"].values[..., :2]
    assert abs(early.mean() - 0.8) < 0.15, early.mean()
    print("ok")
"""
    result = run_script(example + check, tmp_path, timeout=900)
    assert result.stdout.strip().endswith("ok")
    assert "Traceback" not in result.stderr


def test_readme_figures_are_those_the_stored_results_render():
    """The README's results block is what ``python doc/_ext/figures.py
    --readme`` writes from ``benchmarks/results/`` today."""
    assert "<!-- results:headline -->" in README
    assert figures.readme_rendered(README) == README, (
        "the README's figures differ from the stored results: run "
        "`python doc/_ext/figures.py --readme`"
    )


def test_readme_states_no_figure_by_hand():
    typed = figures.readme_without_blocks(README)
    assert stated_figures_in_markdown(typed, context=30) == []
    # the check finds a typed one
    assert stated_figures_in_markdown("It took 13 s (0.33x Stan's).") == [
        "13 s",
        "0.33x",
    ]
