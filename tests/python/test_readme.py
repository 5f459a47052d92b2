"""The README's Python example runs as written, from the repository root."""
import os
import re
import subprocess
import sys

from conftest import ROOT


def test_readme_python_example_runs():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Python"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len(code.strip().splitlines()) <= 10
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert re.match(r"0 length [1-9]\d* 32 ", lines[0]) and re.match(r"1 length 0 \d+ ", lines[1]), lines
    assert lines[2].endswith("]")
