"""The onnx-pools benchmark: the library's kernels against stock ONNX Runtime, PyTorch and OpenVINO (where
installed), in several modes (`python -m onnx_pools.bench --help`, or `onnx-pools bench --help`)."""

from __future__ import annotations

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark with command-line arguments `argv` (sys.argv[1:] when None); returns the exit status."""
    from onnx_pools.bench.command import main as command_main

    return command_main(argv)
