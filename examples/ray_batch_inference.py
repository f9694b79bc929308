"""Batch inference with onnx-pools on many processes (or machines) through Ray Data, with no scheduler of our own.

    pip install 'onnx-pools[ray]'        # ray[data]
    python examples/ray_batch_inference.py [--rows 64] [--workers 2] [--model models/lpnet_lppool_f32.onnx]

Starts a local Ray cluster (`ray.init(num_cpus=workers + 1)`; on a real cluster, `ray.init(address="auto")`), makes a
dataset of random images and runs a bundled classifier over it with `Dataset.map_batches` on a pool of `workers`
actors, one session run per batch. Each actor is a separate worker process: it registers the library into its own
SessionOptions (onnx_pools.session_options(model=...)) and creates its own session once, then serves batches,
reading its process's library call counter (onnx_pools.call_counts()) around every run.

The default model, lpnet_lppool_f32 (Conv, LpPool, Conv, LpPool, Conv, GlobalAveragePool, Gemm; any batch size), is
one whose pooling the library is there for: its two LpPool nodes run on the library's kernels (`--op LpPool`, the
counter checked). session_options(model=...) leaves its GlobalAveragePool to ORT, as it does for any float32
GlobalAveragePool / GlobalMaxPool fed by a Conv: ORT pools those in its blocked NCHWc layout, faster than a custom
kernel that makes it convert the pool's input back first. To run those on the library as well, pass
ort_layout=False to session_options.

Checked at the end (exit status 1 otherwise): every output equals stock ONNX Runtime's for the same row (computed
here in the driver, without the library), the rows were served by `workers` distinct worker processes (not the
driver), and in each worker every session run ran the library's `--op` kernel, as often in every run, so every row
went through the library's kernels (tests/test_ray_example.py checks that number against the model's LpPool nodes).
"""

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

DEFAULT_MODEL = "lpnet_lppool_f32.onnx"


def default_model():
    here = Path(__file__).resolve().parent.parent / "models" / DEFAULT_MODEL
    if here.exists():
        return str(here)
    import onnx_pools

    return str(Path(onnx_pools.__file__).resolve().parent / "models" / DEFAULT_MODEL)


class FirstBatchBarrier:
    """A Ray actor the workers report to with their first batch: each waits for all (at most a minute) before it
    runs that batch. A waiting worker takes no other batch (one batch in flight per actor), so the next ones go to
    the others and every worker serves rows (only for this demonstration, which checks that they all did)."""

    def __init__(self):
        self.arrived = set()

    def arrive(self, pid):
        self.arrived.add(pid)
        return len(self.arrived)


class PoolingModel:
    """One per Ray actor (worker process): the library registered and the session created once."""

    def __init__(self, model_path, op, workers):
        import onnxruntime as ort

        import onnx_pools

        so = onnx_pools.session_options(model=model_path)  # registers libonnx_pools.so in this process
        so.intra_op_num_threads = 1
        self.session = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
        meta = self.session.get_inputs()[0]
        self.input = meta.name
        self.batched = not isinstance(meta.shape[0], int)  # a symbolic batch dimension: a whole batch per run
        self.op = op
        self.pid = os.getpid()
        self.workers = workers
        self.runs = 0

    def wait_for_the_other_workers(self):
        import ray

        barrier = ray.get_actor("onnx_pools_first_batch_barrier")
        deadline = time.monotonic() + 60
        while ray.get(barrier.arrive.remote(self.pid)) < self.workers and time.monotonic() < deadline:
            time.sleep(0.1)

    def run(self, x):
        """One session run, and how often the library's kernel for `op` ran in it (this process's counter)."""
        import onnx_pools

        before = onnx_pools.call_counts()[self.op]
        (y,) = self.session.run(None, {self.input: x})
        self.runs += 1
        return y, onnx_pools.call_counts()[self.op] - before

    def __call__(self, batch):
        if self.runs == 0:
            self.wait_for_the_other_workers()
        x = batch["x"]
        pieces = [x] if self.batched else [x[i : i + 1] for i in range(len(x))]
        ys, kernel_runs = [], []
        for piece in pieces:
            y, calls = self.run(piece)
            ys.append(y.reshape(len(piece), -1))
            kernel_runs += [calls] * len(piece)
        return {
            "row": batch["row"],
            "y": np.concatenate(ys),
            "pid": np.full(len(x), self.pid),
            "kernel_runs": np.array(kernel_runs, dtype=np.int64),  # in the session run that served the row
            "session_runs": np.full(len(x), self.runs, dtype=np.int64),  # in this worker so far
        }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--model", default=None, help=f"a model with one float input (default: models/{DEFAULT_MODEL})")
    ap.add_argument("--op", default="LpPool", help="the pooling op of the model whose library counter is checked")
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
        barrier = ray.remote(num_cpus=0)(FirstBatchBarrier).options(name="onnx_pools_first_batch_barrier").remote()
        ds = ray.data.from_items(
            [{"row": i, "x": xs[i]} for i in range(args.rows)], override_num_blocks=args.workers * 4
        )
        out = ds.map_batches(
            PoolingModel,
            fn_constructor_args=(model, args.op, args.workers),
            batch_size=args.batch_size,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=args.workers, max_tasks_in_flight_per_actor=1),
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
        w = per_worker.setdefault(int(r["pid"]), {"rows": 0, "session_runs": 0, "per_run": set()})
        w["rows"] += 1
        w["session_runs"] = max(w["session_runs"], int(r["session_runs"]))
        w["per_run"].add(int(r["kernel_runs"]))
    if os.getpid() in per_worker:
        problems.append("rows were run in the driver process, not in Ray workers")
    if len(per_worker) != args.workers:
        problems.append(f"{len(per_worker)} worker processes served rows, expected {args.workers}")
    for pid, w in sorted(per_worker.items()):
        per_run = sorted(w["per_run"])
        print(
            f"worker pid {pid}: {w['rows']} rows in {w['session_runs']} session runs, "
            f"library {args.op} kernel runs per session run: {','.join(map(str, per_run))}"
        )
        if per_run[0] == 0:
            problems.append(f"worker {pid}: a session run that did not run the library's {args.op} kernel")
        elif len(per_run) > 1:
            problems.append(f"worker {pid}: session runs ran the library's {args.op} kernel {per_run} times")
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
