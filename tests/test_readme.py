"""The README's example runs as written and recovers the decay rate."""

import subprocess
import sys
from pathlib import Path

import pytest


README = Path(__file__).resolve().parents[1] / "README.md"


def readme_example() -> str:
    text = README.read_text()
    start = text.index("```python", text.index("## Example")) + len("```python")
    return text[start : text.index("```", start)]


@pytest.mark.slow
def test_readme_example_samples_and_recovers_the_rate(tmp_path):
    check = """
import numpy as np
early = idata.posterior["knots"].values[..., :2]
assert idata.posterior.sizes["chain"] == 2, idata.posterior.sizes
assert abs(early.mean() - 0.8) < 0.15, early.mean()
print("ok")
"""
    script = tmp_path / "readme_example.py"
    script.write_text(readme_example() + check)
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
