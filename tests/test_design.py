"""The library's two tables (element types, ops) against the tests and the documents, so the recipes for adding a
type or an op (docs/design.md) cannot go stale: the types the library exports are the types the tests cover, every op
row x version x type is registered and runs (against the float64 reference, call counter moving), the versions are
ONNX's, the README's Supported ops table is the library's op table, and docs/design.md names the files and names that
exist, and every source file, in the layers it describes. The documents' links resolve, the repository paths they
name exist, and they narrate no work history."""

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto

import onnx_pools
import reference as R
from helpers import ONNX_TYPES, counts_one_run, make_session, pool_model, qlinear_model, run_session
from reference_qlinear import QRANGE, near_tie, qlinear_average_pool

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DESIGN = ROOT / "docs" / "design.md"
# The user-facing documents: the README, the changelog and the reference pages.
DOCUMENTS = [README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
needs_checkout = pytest.mark.skipif(
    not (README.exists() and DESIGN.exists() and (ROOT / "csrc").is_dir()),
    reason="README.md, docs/ and csrc/ ship with the source checkout only",
)
# Where a backquoted token in the documents is a path in the repository.
REPO_PATHS = ("csrc/", "onnx_pools/", "tests/", "cmake/", "examples/", "scripts/", "models/", "docs/", ".ci/")
REPO_FILES = ("README.md", "CHANGELOG.md", "CMakeLists.txt", "pyproject.toml", "MANIFEST.in", "setup.py")

# The tests' own lists of the types they check: the float types of the reference and the quantized ones of
# QLinearAveragePool's reference, named as ONNX names the element types (TensorProto.FLOAT -> "float").
FLOAT_TYPES = {TensorProto.DataType.Name(t).lower(): dtype for dtype, t in ONNX_TYPES.items()}
QUANT_TYPES = {np.dtype(d).name: np.dtype(d) for d in QRANGE}


def test_library_types_are_the_types_the_tests_cover():
    assert set(onnx_pools.TYPES) == set(FLOAT_TYPES) | set(QUANT_TYPES)
    assert len(onnx_pools.TYPES) == len(set(onnx_pools.TYPES))
    for name, domain, _, types in onnx_pools._op_table():
        assert set(types) == (set(QUANT_TYPES) if domain == "com.microsoft" else set(FLOAT_TYPES)), name
    assert dict(onnx_pools.OPS) == {name: domain for name, domain, _, _ in onnx_pools._op_table()}
    assert set(onnx_pools.call_counts()) == set(onnx_pools.OPS)


def test_versions_are_the_onnx_schema_versions():
    """A standard-domain row lists every version ONNX defines for the op (a new opset version of an op is a change
    to review, not something to pick up silently)."""
    history = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain == "":
            history.setdefault(schema.name, set()).add(schema.since_version)
    for name, domain, versions, _ in onnx_pools._op_table():
        if domain == "":
            assert set(versions) == history[name], name


def _float_case(op, version, type_name):
    dtype = FLOAT_TYPES[type_name]
    x = R.to_dtype(np.random.default_rng(version).uniform(-4, 4, [2, 3, 5, 4]), dtype)
    xr = R.to_f64(x)
    p = 2.0 if version == 1 else 2  # p is a FLOAT in version 1 of the Lp ops, an INT later
    if op == "GlobalAveragePool":
        return x, {}, R.global_average_pool(xr)
    if op == "GlobalMaxPool":
        return x, {}, R.global_max_pool(xr)
    if op == "GlobalLpPool":
        return x, {"p": p}, R.global_lp_pool(xr, 2)
    assert op == "LpPool", f"no test case for the op {op}: add one here"
    attrs = {"kernel_shape": [2, 3], "strides": [1, 2], "p": p}
    return x, attrs, R.lp_pool(xr, [2, 3], strides=[1, 2], p=2)


def _qlinear(type_name):
    dtype = QUANT_TYPES[type_name]
    lo, hi = QRANGE[dtype]
    x = np.random.default_rng(5).integers(lo, hi + 1, [1, 2, 6, 5]).astype(dtype)
    q = {"xs": 0.05, "xz": 3, "ys": 0.03, "yz": -2 if lo < 0 else 7}
    attrs = {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1]}
    model, feeds = qlinear_model(dtype, list(x.shape), attrs, q["xs"], q["xz"], q["ys"], q["yz"])
    want, pre = qlinear_average_pool(x, q["xs"], q["xz"], q["ys"], q["yz"], **attrs)
    return model, dict(feeds, X=x), want, near_tie(pre)


@pytest.mark.parametrize(
    "op,version,type_name",
    [(name, v, t) for name, _, versions, types in onnx_pools._op_table() for v in versions for t in types],
)
def test_every_row_version_and_type_runs(op, version, type_name):
    if op == "QLinearAveragePool":
        model, feeds, want, tie = _qlinear(type_name)
        sess = make_session(model, ops="all")
        with counts_one_run(op):
            (y,) = run_session(sess, feeds)
        assert y.dtype == want.dtype and y.shape == want.shape
        diff = np.abs(y.astype(np.int32) - want.astype(np.int32))
        assert diff.max() <= 1 and not diff[~tie].any()  # one step only where float order decides a tie
        return
    x, attrs, want = _float_case(op, version, type_name)
    dtype = FLOAT_TYPES[type_name]
    sess = make_session(pool_model(op, version, dtype, list(x.shape), attrs))
    with counts_one_run(op):
        (y,) = run_session(sess, {"X": x})
    assert y.dtype == R.DTYPES[dtype] and y.shape == want.shape
    R.assert_close(y, want, dtype, R.input_scale(x), f"{op}-{version} {type_name}")


def _section(text, heading):
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end >= 0 else len(text)]


@needs_checkout
def test_readme_supported_ops_is_the_op_table():
    rows = {}
    for line in _section(README.read_text(), "## Supported ops").splitlines()[4:]:
        if not line.startswith("| "):
            break
        name, domain, versions, types = [c.strip() for c in line.strip("|").split("|")][:4]
        versions = tuple(int(v) for v in re.findall(r"\d+", re.sub(r"\(.*?\)", "", versions)))
        rows[name] = (domain.strip("`").replace('""', ""), versions, {t.strip() for t in types.split(",")})
    table = {name: (domain, versions, set(types)) for name, domain, versions, types in onnx_pools._op_table()}
    assert rows == table


def _expand(path):
    """`csrc/kernels_{a,b}.cc` -> the paths it stands for."""
    m = re.search(r"\{([^}]*)\}", path)
    if not m:
        return [path]
    return [p for alt in m.group(1).split(",") for p in _expand(path[: m.start()] + alt + path[m.end() :])]


def _repo_paths(tokens):
    """The repository paths among backquoted tokens, braces expanded; built files (the library) left out."""
    return [
        p
        for t in tokens
        if (t.startswith(REPO_PATHS) or t in REPO_FILES) and not re.search(r"[\s<>*]", t)
        for p in _expand(t)
        if not p.endswith(".so")
    ]


def _table_rows(text):
    return [line for line in text.splitlines() if line.startswith("| ")]


@needs_checkout
def test_design_page_names_files_and_names_that_exist():
    """Every repository path in docs/design.md's tables exists, and every code name in a table row occurs in one of
    the files that row names."""
    checked = 0
    for line in _table_rows(DESIGN.read_text()):
        tokens = re.findall(r"`([^`]+)`", line)
        files = _repo_paths(tokens)
        for f in files:
            assert (ROOT / f).exists(), f"docs/design.md names {f}, which does not exist"
        sources = "".join((ROOT / f).read_text() for f in files if (ROOT / f).is_file())
        for t in tokens:
            name = re.sub(r"<.*>$", "", t)
            if sources and re.fullmatch(r"[A-Za-z_]\w*", name) and t not in files:
                assert re.search(rf"\b{name}\b", sources), f"docs/design.md names {name}, not found in {files}"
                checked += 1
    assert checked >= 20  # the tables were found and read


@needs_checkout
def test_design_page_maps_every_source_file():
    """Every file under csrc/ is in docs/design.md's file table, by name or under a folder the table names, so the
    map of the layers covers the code."""
    named = {p for line in _table_rows(DESIGN.read_text()) for p in _repo_paths(re.findall(r"`([^`]+)`", line))}
    folders = tuple(p for p in named if p.endswith("/"))
    sources = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "csrc").rglob("*") if p.is_file())
    unmapped = [f for f in sources if f not in named and not f.startswith(folders)]
    assert not unmapped, f"source files docs/design.md does not place in a layer: {unmapped}"


@needs_checkout
def test_layers_depend_one_way():
    """The layering docs/design.md describes: only csrc/ort/ includes ONNX Runtime's headers or csrc/ort/ itself,
    csrc/kernels/common/ includes nothing of the op families or the per-ISA units, the geometry nothing of the kernels
    above common/, and the platform shims nothing of the library. Each include is resolved to the file it reaches
    (next to the includer, under csrc/, or by its unique file name), so the spelling of the path does not matter."""
    csrc = ROOT / "csrc"
    by_name = {}
    for p in csrc.rglob("*"):
        by_name.setdefault(p.name, []).append(p)
    include = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)

    def reached(header, includer):
        for candidate in (includer.parent / header, csrc / header):
            if candidate.is_file():
                return candidate.resolve().relative_to(csrc.resolve()).as_posix()
        found = by_name.get(Path(header).name, [])
        return found[0].relative_to(csrc).as_posix() if len(found) == 1 else None  # None: a system header

    families = ("kernels/global/", "kernels/lp/", "kernels/qlinear/", "kernels/isa/")
    layers = {  # folder under csrc/ -> the library files it must not reach (besides csrc/ort/)
        "geometry": ("kernels/kernels.h", *families),
        "kernels": (),
        "kernels/common": ("kernels/kernels.h", *families),
        "platform": ("geometry/", "kernels/"),
    }
    for layer, forbidden in layers.items():
        folder = csrc / layer
        assert folder.is_dir(), f"docs/design.md describes csrc/{layer}/, which does not exist"
        for path in sorted(p for p in folder.rglob("*") if p.suffix in (".h", ".cc")):
            for header in include.findall(path.read_text()):
                where = f"{path.relative_to(ROOT)} includes {header}"
                assert not header.startswith("onnxruntime"), where
                target = reached(header, path)
                assert target is None or not target.startswith(("ort/", *forbidden)), f"{where} ({target})"


def _anchor(heading):
    """The anchor GitHub gives a markdown heading."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@needs_checkout
def test_document_links_and_paths_resolve():
    """Every relative link in the documents reaches a file (and a heading of it, when it names one), and every
    repository path the README and docs/ name in backquotes exists."""
    checked = 0
    for doc in DOCUMENTS:
        text = doc.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            assert file.exists(), f"{doc.relative_to(ROOT)} links to {target}, which does not exist"
            if anchor:
                headings = re.findall(r"^#+ (.+)$", file.read_text(), re.M)
                assert anchor in {_anchor(h) for h in headings}, f"{doc.relative_to(ROOT)}: no heading for #{anchor}"
            checked += 1
        if doc.name == "CHANGELOG.md":
            continue  # history: it may name files that are gone
        for path in _repo_paths(re.findall(r"`([^`\n]+)`", text)):
            assert (ROOT / path).exists(), f"{doc.relative_to(ROOT)} names {path}, which does not exist"
    assert checked >= 10  # the links were found


@needs_checkout
def test_documents_narrate_no_history():
    """The documents describe what is, not how it came to be: no sessions of work, no commit hashes (commit messages
    are the history). The benchmark's generated tables are exempt from the hash rule: their header names the commit
    and the versions they measured."""
    generated = re.compile(r"<!-- perf-(tables|summary):begin -->.*?<!-- perf-\1:end -->", re.S)
    for doc in DOCUMENTS:
        text = doc.read_text()
        where = doc.relative_to(ROOT)
        assert not re.search(r"\b(this|last|previous|next|earlier) session\b", text, re.I), f"{where} narrates work"
        written = generated.sub("", text)
        hashes = [
            h for h in re.findall(r"\b[0-9a-f]{7,40}\b", written) if re.search(r"\d", h) and re.search("[a-f]", h)
        ]
        assert not hashes, f"{where} names commits {hashes}"


@needs_checkout
def test_readme_is_short_with_a_generated_performance_block():
    """The README stays a user's first page (at most 200 lines); its performance summary sits between the markers
    `onnx-pools bench --readme README.md` writes between, and docs/performance.md has its generated section."""
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    performance = _section(text, "## Performance")
    begin, end = "<!-- perf-summary:begin -->", "<!-- perf-summary:end -->"
    assert text.count(begin) == text.count(end) == 1
    assert performance.index(begin) < performance.index(end)
    tables = (ROOT / "docs" / "performance.md").read_text()
    begin, end = "<!-- perf-tables:begin -->", "<!-- perf-tables:end -->"
    assert tables.count(begin) == tables.count(end) == 1 and tables.index(begin) < tables.index(end)


@needs_checkout
def test_readme_python_examples_run(tmp_path, monkeypatch):
    """The README's Python blocks, in order, on a GlobalAveragePool model of the shape they feed: each session they
    make runs the library's kernel and gives the mean. The plugin-EP block needs onnxruntime >= 1.24; below that,
    ep_session_options must refuse it."""
    from onnx_pools.ep import ep_route_available

    blocks = re.findall(r"```python\n(.*?)```", _section(README.read_text(), "## Usage from Python"), re.S)
    assert len(blocks) == 2 and "ep_session_options" in blocks[0] and "session_options(model=" in blocks[1]
    onnx.save(pool_model("GlobalAveragePool", 22, "float32", [1, 64, 56, 56]), str(tmp_path / "model.onnx"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("builtins.print", lambda *args, **kwargs: None)
    x = np.random.default_rng(0).random((1, 64, 56, 56), dtype=np.float32)
    expected = x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    namespace: dict = {}
    ep_available = ep_route_available()
    for block in blocks:
        if "ep_session_options" in block and not ep_available:
            with pytest.raises(RuntimeError, match="1.24"):
                exec(block, namespace)
            exec(block.split("so = ")[0], namespace)  # the imports
            continue
        exec(block, namespace)
        before = onnx_pools.call_counts()["GlobalAveragePool"]
        (y,) = namespace["sess"].run(None, {"X": x})
        assert onnx_pools.call_counts()["GlobalAveragePool"] == before + 1
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
