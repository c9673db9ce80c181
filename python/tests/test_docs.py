"""docs/python.md's example runs as written."""

import os
import re

from conftest import REPO


def test_python_md_example_runs():
    text = open(os.path.join(REPO, "docs", "python.md")).read()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "docs/python.md has no python block"
    for b in blocks:
        exec(compile(b, "docs/python.md", "exec"), {})
