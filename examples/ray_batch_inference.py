"""Batch inference with onnx-pools on many processes (or machines) through Ray Data, with no scheduler of our own.

    pip install 'onnx-pools[ray]'        # ray[data]
    python examples/ray_batch_inference.py [--rows 64] [--workers 2] [--model models/cnn_gap_f32.onnx]

Starts a local Ray cluster (`ray.init(num_cpus=workers + 1)`; on a real cluster, `ray.init(address="auto")`), makes a
dataset of random inputs and runs a bundled model over it with `Dataset.map_batches` on a pool of `workers`
actors. Each actor is a separate worker process: it registers the library into its own SessionOptions
(onnx_pools.session_options(model=...)) and creates its own session once, then serves batches. Each output row
carries the worker's process id and that process's library call counter (onnx_pools.call_counts()).

Checked at the end (exit status 1 otherwise): every output equals stock ONNX Runtime's for the same row (computed
here in the driver, without the library), the rows were served by `workers` distinct worker processes (not the
driver), and each worker's call counter equals the number of rows it ran, so every row ran on the library's kernel.
"""

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np


def default_model():
    here = Path(__file__).resolve().parent.parent / "models" / "cnn_gap_f32.onnx"
    if here.exists():
        return str(here)
    import onnx_pools

    return str(Path(onnx_pools.__file__).resolve().parent / "models" / "cnn_gap_f32.onnx")


class StartBarrier:
    """A Ray actor the workers report to once their session is ready: each waits for all, so every worker is up
    before the first batch is handed out and the rows spread over all of them (only for this demonstration)."""

    def __init__(self):
        self.ready = set()

    def arrive(self, pid):
        self.ready.add(pid)
        return len(self.ready)


class PoolingModel:
    """One per Ray actor (worker process): the library registered and the session created once."""

    def __init__(self, model_path, op, workers):
        import onnxruntime as ort
        import ray

        import onnx_pools

        so = onnx_pools.session_options(model=model_path)  # registers libonnx_pools.so in this process
        so.intra_op_num_threads = 1
        self.session = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
        self.input = self.session.get_inputs()[0].name
        self.op = op
        self.pid = os.getpid()
        barrier = ray.get_actor("onnx_pools_start_barrier")
        deadline = time.monotonic() + 300
        while ray.get(barrier.arrive.remote(self.pid)) < workers and time.monotonic() < deadline:
            time.sleep(0.2)

    def __call__(self, batch):
        import onnx_pools

        x = batch["x"]
        ys = [self.session.run(None, {self.input: x[i : i + 1]})[0] for i in range(len(x))]  # the model's batch is 1
        calls = onnx_pools.call_counts()[self.op]  # this process's counter, after this batch
        return {
            "row": batch["row"],
            "y": np.concatenate(ys).reshape(len(x), -1),
            "pid": np.full(len(x), self.pid),
            "calls": np.full(len(x), calls, dtype=np.int64),
        }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--model", default=None, help="a model with one float input (default: models/cnn_gap_f32.onnx)")
    ap.add_argument("--op", default="GlobalAveragePool", help="the pooling op of the model whose counter is checked")
    args = ap.parse_args(argv)
    model = args.model or default_model()

    import onnxruntime as ort
    import ray

    stock = ort.InferenceSession(model, providers=["CPUExecutionProvider"])  # the reference: no library
    meta = stock.get_inputs()[0]
    shape = [d if isinstance(d, int) else 1 for d in meta.shape]
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((args.rows, *shape[1:])).astype(np.float32)

    t0 = time.monotonic()
    # one CPU per worker actor, plus one so that Ray Data's own tasks are never starved by the actors
    ray.init(num_cpus=args.workers + 1, include_dashboard=False, log_to_driver=False)
    try:
        barrier = ray.remote(num_cpus=0)(StartBarrier).options(name="onnx_pools_start_barrier").remote()
        ds = ray.data.from_items(
            [{"row": i, "x": xs[i]} for i in range(args.rows)], override_num_blocks=args.workers * 4
        )
        out = ds.map_batches(
            PoolingModel,
            fn_constructor_args=(model, args.op, args.workers),
            batch_size=args.batch_size,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=args.workers),
            num_cpus=1,
        )
        rows = out.take_all()
        del barrier
    finally:
        ray.shutdown()
    seconds = time.monotonic() - t0

    problems = []
    if sorted(r["row"] for r in rows) != list(range(args.rows)):
        problems.append(f"rows missing or repeated: got {len(rows)} of {args.rows}")
    worst = 0.0
    for r in rows:
        expected = stock.run(None, {meta.name: xs[r["row"]][None]})[0].reshape(-1)
        worst = max(worst, float(np.max(np.abs(r["y"] - expected)) / max(1.0, float(np.max(np.abs(expected))))))
    if worst > 1e-5:
        problems.append(f"outputs differ from stock ONNX Runtime by {worst:.3g} (relative)")
    per_worker = {}
    for r in rows:
        w = per_worker.setdefault(int(r["pid"]), {"rows": 0, "calls": 0})
        w["rows"] += 1
        w["calls"] = max(w["calls"], int(r["calls"]))
    if os.getpid() in per_worker:
        problems.append("rows were run in the driver process, not in Ray workers")
    if len(per_worker) != args.workers:
        problems.append(f"{len(per_worker)} worker processes served rows, expected {args.workers}")
    for pid, w in sorted(per_worker.items()):
        print(f"worker pid {pid}: {w['rows']} rows, library {args.op} kernel runs {w['calls']}")
        if w["calls"] != w["rows"]:
            problems.append(f"worker {pid}: {w['calls']} library kernel runs for {w['rows']} rows")
    print(
        f"{args.rows} rows, {len(per_worker)} worker process(es) of {args.workers}, "
        f"max relative difference vs stock ORT {worst:.2g}, {seconds:.1f} s (with Ray start-up)"
    )
    for p in problems:
        print(f"FAILED: {p}", file=sys.stderr)
    if not problems:
        print("ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
