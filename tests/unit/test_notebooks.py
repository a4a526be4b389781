"""The example notebooks (docs/examples/) run from top to bottom on the records the tests keep, without root, and are
kept in git with their outputs cleared."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "docs" / "examples").glob("*.ipynb"))

try:
    import nbclient
    import nbformat
except ImportError as exc:  # setup.sh installs Debian's python3-nbclient (and CI runs setup.sh)
    pytest.skip(
        f"needs nbclient to execute the notebooks ({exc}): apt install python3-nbclient", allow_module_level=True
    )


def test_there_is_a_notebook() -> None:
    assert "compare_a_sweep.ipynb" in [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_outputs_are_cleared_in_git(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, f"{path.name}: cells {dirty} hold outputs: clear them before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every cell runs without an error (a failing cell raises CellExecutionError naming it) in a kernel started in
    the notebook's own directory, as Jupyter starts it, with the clone importable."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path))
    monkeypatch.setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # ipykernel's debugger: no warning on frozen modules
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "links.buffer" in text and "200KB" in text  # the tables name the swept key and its values
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the plot
