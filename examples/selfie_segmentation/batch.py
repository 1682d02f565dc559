"""Segment a folder of photos on several processes: Dask distributed, a process pool, or one process.

    python batch.py PHOTOS_DIR OUT_DIR [--engine dask|processes|serial] [--workers N]
                    [--ops LIB.so]... [--model-size] [--landscape | --model FILE.tflite]

Writes OUT_DIR/<photo>_mask.png for every photo (PNG/JPEG through Pillow, or
.npy H x W x 3 uint8 arrays) and OUT_DIR/summary.json, and prints the
throughput.  A progress bar shows on long runs (tqdm, if installed).

How the work reaches the workers: the interpreter is created once, here, and
pickled to each worker, which re-creates it from the model bytes and its op
libraries (bundled kernels by name, prebuilt libraries by path; see
opaque_ops/ops/pickling.py).  No worker reads the model file or needs this
process's objects.

- ``--engine dask`` (needs ``pip install distributed``): a Dask
  ``LocalCluster`` of N single-threaded worker processes.  The interpreter
  is scattered once to every worker; ``selfie.py`` is shipped with
  ``Client.upload_file``, so a remote cluster works the same way: give
  ``--scheduler tcp://HOST:8786`` instead of starting a local one.
- ``--engine processes``: ``concurrent.futures.ProcessPoolExecutor``; the
  interpreter is given once to each worker by its initializer.
- ``--engine serial``: one process, the baseline.

Each worker uses one thread for the model (``num_threads=1``): the
parallelism is across photos.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import selfie

import opaque_ops as oo


def progress(total: int, what: str):
    """A progress bar: tqdm if it is installed, otherwise a line on stderr."""
    try:
        from tqdm import tqdm

        return tqdm(total=total, unit="photo", desc=what, file=sys.stderr)
    except ImportError:
        return _Line(total, what)


class _Line:
    def __init__(self, total, what):
        self.total, self.done, self.what = total, 0, what

    def update(self, n=1):
        self.done += n
        sys.stderr.write(f"\r{self.what}: {self.done}/{self.total} photos")
        sys.stderr.flush()

    def close(self):
        sys.stderr.write("\n")


# ------------------------------------------------------------ process pool
_pool_interpreter = None


def _pool_init(interpreter):
    global _pool_interpreter
    _pool_interpreter = interpreter  # unpickled once per worker process


def _pool_task(path, out_dir, photo_size):
    return selfie.segment_file(_pool_interpreter, path, out_dir, photo_size)


# -------------------------------------------------------------------- dask
def _dask_task(interpreter, path, out_dir, photo_size):
    # One interpreter per worker (scattered); Dask runs one task at a time
    # per single-threaded worker, and the interpreter serializes calls anyway.
    return selfie.segment_file(interpreter, path, out_dir, photo_size)


def run_dask(it, photos, out_dir, photo_size, workers, scheduler=None):
    from distributed import Client, LocalCluster, as_completed

    cluster = None
    if scheduler is None:
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
    with Client(cluster or scheduler) as client:
        client.upload_file(selfie.__file__)  # the workers import selfie.py
        shared = client.scatter(it, broadcast=True)  # pickled once per worker
        futures = client.map(
            _dask_task, [shared] * len(photos), photos, out_dir=out_dir, photo_size=photo_size, pure=False
        )
        bar, rows = progress(len(photos), "dask"), []
        for fut in as_completed(futures):
            rows.append(fut.result())
            bar.update(1)
        bar.close()
    if cluster is not None:
        cluster.close()
    return rows


def run_processes(it, photos, out_dir, photo_size, workers):
    ctx = mp.get_context("spawn")  # a clean interpreter per worker; never fork a threaded parent
    rows = []
    with cf.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_pool_init, initargs=(it,)) as ex:
        futures = [ex.submit(_pool_task, p, out_dir, photo_size) for p in photos]
        bar = progress(len(photos), "processes")
        for fut in cf.as_completed(futures):
            rows.append(fut.result())
            bar.update(1)
        bar.close()
    return rows


def run_serial(it, photos, out_dir, photo_size):
    bar, rows = progress(len(photos), "serial"), []
    for p in photos:
        rows.append(selfie.segment_file(it, p, out_dir, photo_size))
        bar.update(1)
    bar.close()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("photos", help="a folder of photos")
    ap.add_argument("out", help="where the masks go")
    ap.add_argument("--engine", choices=["dask", "processes", "serial"], default="dask")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--scheduler", help="with --engine dask: an existing scheduler's address")
    ap.add_argument(
        "--ops",
        action="append",
        default=[],
        metavar="LIB.so",
        help="a prebuilt kernel library instead of opaque_ops.kernels (repeatable)",
    )
    ap.add_argument("--model-size", action="store_true", help="keep the masks at the model's resolution")
    ap.add_argument("--landscape", action="store_true", help="use the 144x256 model")
    ap.add_argument(
        "--model",
        metavar="FILE.tflite",
        help="a selfie segmentation model file (default: the one in the installed mediapipe 0.10.14 wheel)",
    )
    args = ap.parse_args(argv)

    photos = sorted(str(p) for p in Path(args.photos).iterdir() if p.suffix.lower() in selfie.IMAGE_SUFFIXES)
    if not photos:
        ap.error(f"no photos ({', '.join(sorted(selfie.IMAGE_SUFFIXES))}) in {args.photos}")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    it = oo.Interpreter(
        model_path=args.model or selfie.model_path(args.landscape),
        custom_ops=args.ops or [oo.kernels.mediapipe()],
        num_threads=1,
    )
    it.allocate_tensors()
    photo_size = not args.model_size

    t = time.perf_counter()
    if args.engine == "dask":
        rows = run_dask(it, photos, str(out_dir), photo_size, args.workers, args.scheduler)
    elif args.engine == "processes":
        rows = run_processes(it, photos, str(out_dir), photo_size, args.workers)
    else:
        rows = run_serial(it, photos, str(out_dir), photo_size)
    seconds = time.perf_counter() - t
    rows.sort(key=lambda r: r["image"])
    (out_dir / "summary.json").write_text(json.dumps(rows, indent=1))
    workers = 1 if args.engine == "serial" else args.workers
    print(
        f"{len(rows)} photos in {seconds:.2f} s ({len(rows) / seconds:.1f} photos/s, engine {args.engine}, "
        f"{workers} worker(s), start-up included); masks and summary.json in {out_dir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
