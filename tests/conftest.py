"""pytest's hooks for the onnx-pools tests: command-line options, opt-in and mode markers, the end-of-run summary
(generated cases run, and the random order's seed). The tests' helpers are in helpers.py."""

import os
import re

import pytest

from helpers import CASE_COUNTS, OPTIONS, configure, selected

# The markers are registered in pyproject.toml ([tool.pytest.ini_options]).
# Opt-in markers: their tests are skipped unless the marker is named in -m (`pytest -m huge`), so a plain
# `pytest tests` reports them as skipped. wheel and matrix are also switched on by the variables that
# scripts/wheel_check.sh and scripts/ort_matrix.py read (and clear for the suites they run).
OPT_IN = {
    "huge": ("more than 2^31 elements, ~7 GB of memory, minutes", None),
    "wheel": ("builds the wheel and runs the suite from it in a fresh venv", "ONNX_POOLS_WHEEL_CHECK"),
    "matrix": ("runs the suite against several onnxruntime releases in fresh venvs", "ONNX_POOLS_ORT_MATRIX"),
}
# Mode markers: their tests run by default; naming the marker in -m selects them and switches them to a deeper mode.
MODES = ("deep",)
# test_packaging.py's slow checks, which carry no marker of their own: test name -> marker
PACKAGING_MARKERS = {"test_wheel_check_script": "wheel", "test_ort_matrix": "matrix"}


def pytest_addoption(parser):
    group = parser.getgroup("onnx-pools")
    for name, (kind, default, text) in OPTIONS.items():
        group.addoption("--" + name.replace("_", "-"), dest=name, type=kind, default=default, help=text)


def pytest_configure(config):
    registered = {line.split(":")[0].strip() for line in config.getini("markers")}
    for name in [*OPT_IN, *MODES, "fuzz", "isa_rerun"]:
        if name not in registered:  # a copy of tests/ run without pyproject.toml (scripts/wheel_check.sh)
            config.addinivalue_line("markers", f"{name}: see pyproject.toml and the README's Developers section")
    expr = config.getoption("markexpr", "") or ""
    chosen = set()
    for name in list(OPT_IN) + list(MODES):
        if re.search(rf"(?<!not )\b{name}\b", expr):  # named, and not as "not NAME"
            chosen.add(name)
    for name, (_, variable) in OPT_IN.items():
        if variable and os.environ.get(variable):
            chosen.add(name)
        elif variable and name in chosen:
            os.environ[variable] = "1"  # read by test_packaging.py when it is imported
    configure(config, chosen)


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection, which must see the markers added here
def pytest_collection_modifyitems(config, items):
    for item in items:
        marker = PACKAGING_MARKERS.get(item.originalname)
        if marker and item.path.name == "test_packaging.py" and not item.get_closest_marker(marker):
            item.add_marker(marker)
        for name, (why, variable) in OPT_IN.items():
            if item.get_closest_marker(name) and not selected(name):
                how = f"-m {name}" + (f" (or {variable}=1)" if variable else "")
                item.add_marker(pytest.mark.skip(reason=f"{why}: select with {how}"))


def pytest_terminal_summary(terminalreporter, config):
    if CASE_COUNTS:
        terminalreporter.write_sep("-", "onnx-pools generated cases run")
        for k in sorted(CASE_COUNTS):
            terminalreporter.write_line(f"{k}: {CASE_COUNTS[k]}")
    # pytest-randomly (the test extra) shuffles the order; its header line is hidden by -q, so the seed is said here
    seed = getattr(config.option, "randomly_seed", None)
    if isinstance(seed, int) and config.pluginmanager.hasplugin("randomly"):
        order = "random" if config.getoption("randomly_reorganize", True) else "file"
        terminalreporter.write_line(
            f"test order: {order}, seed {seed} (again with: -p randomly --randomly-seed={seed})"
        )
