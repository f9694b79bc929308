"""What the benchmark writes besides its tables: the header naming the machine, the library and the date; the
markdown file of --markdown; the README's performance summary (--readme)."""

from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

import onnx_pools
from onnx_pools.bench.engines import openvino_module, torch_module

__all__ = [
    "HEADLINE_CASES",
    "README_BEGIN",
    "README_END",
    "cpu_of_section",
    "environment",
    "header",
    "merge_cpu_sections",
    "readme_summary",
    "rewrite_between",
    "rewrite_readme",
    "write_tables",
]

README_BEGIN = "<!-- perf-summary:begin -->"
README_END = "<!-- perf-summary:end -->"
# --markdown into an existing page (docs/performance.md) rewrites what lies between these; a file without them is
# written whole
TABLES_BEGIN = "<!-- perf-tables:begin -->"
TABLES_END = "<!-- perf-tables:end -->"
# The first line of a run's header (header()): the whole line (model name, logical CPUs, flags, caches) keys the
# page's generated section per CPU. A virtual machine's model name alone ("AMD EPYC") names several generations, with
# and without AVX-512.
_CPU_LINE = re.compile(r"^- CPU: (.+?)$", re.MULTILINE)
# The README's summary: one row per case (its label, without the shape), at 1 thread on the best path measured.
HEADLINE_CASES = (
    "GlobalAveragePool f32",
    "GlobalMaxPool f32",
    "GlobalLpPool p=2 f32",
    "LpPool 3x3 s1 pad1 p=2 f32",
    "LpPool 2x2 s2 p=3 f32",
    "QLinearAveragePool 3x3 pad1 u8 NCHW distinct cip0",
    "QLinearAveragePool 3x3 pad1 u8 NHWC distinct cip0",
    "GlobalAveragePool f16",
    "GlobalMaxPool f64",
    "tiny GlobalAveragePool f32",
)
# CPU flags that select or matter to the library's kernel sets (x86-64: avx2 / avx512 sets, F16C conversions;
# aarch64: NEON and FP16 arithmetic)
RELEVANT_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512dq",
    "avx512_bf16",
    "avx512_fp16",
    "asimd",
    "fphp",
    "asimdhp",
)


def _cpuinfo() -> tuple[str, list[str]]:
    """(CPU model name, its flags among RELEVANT_FLAGS) from /proc/cpuinfo."""
    model, flags = platform.processor() or platform.machine(), list[str]()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "Model", "CPU part") and model in ("", platform.machine(), "x86_64"):
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    present = set(value.split())
                    flags = [f for f in RELEVANT_FLAGS if f in present]
    except OSError:
        pass
    return model, flags


def _cache_sizes() -> dict[str, str]:
    """{"L2": "1024K", "L3": "32768K"} of CPU 0 (sysfs), per level, data/unified caches."""
    sizes = {}
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(base.glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if level in ("2", "3") and kind in ("Unified", "Data"):
            sizes[f"L{level}"] = size
    return sizes


def _git_commit() -> str | None:
    """The checkout's commit when the package runs from a git checkout, else None."""
    root = Path(onnx_pools.__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        r = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    except OSError:
        return None
    if r.returncode != 0:
        return None
    dirty = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], capture_output=True
    )
    return r.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def environment() -> dict[str, Any]:
    """The machine, the library and the engines of this run."""
    import onnxruntime

    cpu, flags = _cpuinfo()
    torch, openvino = torch_module(), openvino_module()
    return {
        "onnx_pools": onnx_pools.__version__,
        "library": onnx_pools.get_library_path(),
        "isa": onnx_pools.active_isa(),
        "onnxruntime": onnxruntime.__version__,
        "torch": getattr(torch, "__version__", None),
        "openvino": getattr(openvino, "__version__", None) if openvino is not None else None,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "cpu": cpu,
        "cpu_flags": flags,
        "caches": _cache_sizes(),
        "cpus": os.cpu_count(),
        "commit": _git_commit(),
        "date": datetime.date.today().isoformat(),
    }


def header(env: dict[str, Any], ceilings: dict[int, dict[str, float]] | None = None) -> str:
    """The markdown header of a run's tables."""
    caches = ", ".join(f"{k} {v}" for k, v in sorted(env["caches"].items())) or "unknown"
    lines = [
        f"- CPU: {env['cpu']} ({env['cpus']} logical CPUs); flags: {' '.join(env['cpu_flags']) or 'none listed'}; "
        f"caches: {caches}",
        f"- onnx-pools {env['onnx_pools']}"
        + (f", commit {env['commit']}" if env.get("commit") else "")
        + f" (default path {env['isa']}; library {env['library']})",
        f"- onnxruntime {env['onnxruntime']}, torch {env['torch'] or 'not installed'}, "
        f"openvino {env['openvino'] or 'not installed'}, numpy {env['numpy']}, Python {env['python']}",
        f"- date: {env['date']}",
    ]
    if env.get("isas_timed"):
        absent = env.get("isas_absent") or []
        lines.append(
            f"- kernel sets timed: {', '.join(env['isas_timed'])}"
            + (f"; not on this CPU: {', '.join(absent)} (no figures here for it)" if absent else "")
        )
    for t, c in sorted((ceilings or {}).items()):
        lines.append(f"- read-bandwidth ceiling at {t} thread(s): {c['ceiling']:.1f} GB/s")
    return "\n".join(lines) + "\n"


def readme_summary(env: dict[str, Any], results: list[dict[str, Any]]) -> str:
    """The README's performance summary (at most len(HEADLINE_CASES) rows) from the default table's results: each
    headline case at 1 thread on the first (best) path measured, the library's time and its speed-up over stock
    ONNX Runtime and PyTorch."""
    isa = results[0]["isa"] if results else env["isa"]
    rows = []
    for label in HEADLINE_CASES:
        r = next(
            (r for r in results if r["case"].rsplit(" ", 1)[0] == label and r["threads"] == 1 and r["isa"] == isa),
            None,
        )
        if r is None:
            continue
        stock = f"{r['speedup_vs_stock']:.2f}x" if r.get("speedup_vs_stock") else "no stock kernel"
        torch = f"{r['speedup_vs_torch']:.2f}x" if r.get("speedup_vs_torch") else "-"
        rows.append(f"| {r['case']} | {r['lib_ms']:.3f} | {stock} | {torch} |")
    return "\n".join(
        [
            f"Measured on {env['cpu']}, 1 thread, {isa} path; onnx-pools {env['onnx_pools']}, "
            f"onnxruntime {env['onnxruntime']}, "
            f"torch {env['torch'] or 'not installed'}; {env['date']}. Speed-up = the other's time / the library's "
            "(> 1: the library is faster). Written by `onnx-pools bench --readme README.md`; full tables: "
            "docs/performance.md.",
            "",
            "| case | library ms | vs stock ONNX Runtime | vs PyTorch |",
            "|---|---|---|---|",
            *rows,
        ]
    )


def rewrite_between(path: str, begin: str, end: str, text: str, dry_run: bool = False) -> None:
    """Replaces what lies between the markers `begin` and `end` in the file at `path` with `text` (dry_run: only
    checks that it could); ValueError when the markers are missing, repeated or out of order."""
    content = Path(path).read_text()
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if len(pattern.findall(content)) != 1 or content.count(begin) != 1 or content.count(end) != 1:
        raise ValueError(f"{path}: expected one {begin} ... {end} section")
    if dry_run:
        return
    Path(path).write_text(pattern.sub(lambda _: f"{begin}\n{text.strip()}\n{end}", content))


def rewrite_readme(path: str, summary: str, dry_run: bool = False) -> None:
    """The README's performance summary (between README_BEGIN and README_END) replaced with `summary`."""
    rewrite_between(path, README_BEGIN, README_END, summary, dry_run)


def cpu_of_section(text: str) -> str | None:
    """The CPU a run's tables were measured on: the "- CPU: " line its header starts with (model name, logical
    CPUs, flags, caches)."""
    m = _CPU_LINE.search(text)
    return m.group(1) if m else None


def merge_cpu_sections(generated: str, section: str) -> str:
    """The generated part of a page (one section per CPU, each starting with its header's "- CPU: " line) with
    `section` (a run's header and tables) in place of the section of the same CPU (cpu_of_section), or after the
    others when that CPU has none: a run on one machine keeps every other machine's tables. Text before the first
    CPU line belongs to no CPU's section and is dropped."""
    starts = [m.start() for m in _CPU_LINE.finditer(generated)]
    parts = [generated[a:b].strip() for a, b in zip(starts, [*starts[1:], len(generated)])]
    cpu, section = cpu_of_section(section), section.strip()
    replaced = [section if cpu_of_section(part) == cpu else part for part in parts]
    if section not in replaced:
        replaced.append(section)
    return "\n\n".join(replaced) + "\n"


def write_tables(path: str, text: str) -> None:
    """--markdown: `text` (a run's header and tables) into the file at `path`: where it has TABLES_BEGIN and
    TABLES_END (a page such as docs/performance.md), between them in place of the section of the same CPU model,
    the other CPUs' sections kept (merge_cpu_sections); else as the whole file, under a title."""
    p = Path(path)
    content = p.read_text() if p.exists() else ""
    if TABLES_BEGIN in content and TABLES_END in content:
        generated = content[content.find(TABLES_BEGIN) + len(TABLES_BEGIN) : content.find(TABLES_END)]
        rewrite_between(path, TABLES_BEGIN, TABLES_END, merge_cpu_sections(generated, text))
    else:
        p.write_text(f"# onnx-pools benchmark\n\n{text}")
