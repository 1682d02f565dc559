"""The ``opaque-ops`` command: inspect, run, build and benchmark models with custom ops.

::

    opaque-ops inspect model.tflite [--ops kernels:convolution2d_transpose_bias] [--check]
    opaque-ops doctor model.tflite [--ops LIB] [--json]   (will it run here; if not, what is needed)
    opaque-ops run model.tflite --ops my_ops.c --input x=x.npy --output-dir out/ [--isolate]
    opaque-ops bench model.tflite --ops libmy_ops.so --runs 100 --threads 2 [--xnnpack off]
    opaque-ops build ...            (see ``opaque-ops build --help``)

``--ops`` takes a prebuilt library (``.so``), a C source (``.c``, compiled and
cached) or ``kernels:NAME`` for a kernel or bundle shipped with opaque_ops
(``kernels:mediapipe``, ``kernels:atan``: the names of ``opaque_ops.kernels``).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

from .common import (
    CHECK_OK,
    CHECK_REFUSED,
    CHECK_UNSAFE,
    PROG,
    CliError,
    load_libs,
    read_model_file,
    regular_file,
    shown,
    terminal_safe,
)

# --------------------------------------------------------------- helpers --


def _describe_options(raw: bytes | None) -> str:
    """Custom options as text: a flexbuffer map decoded, otherwise raw bytes (and int32s)."""
    if not raw:
        return "no options"
    from ..model import decode_flex_options

    try:
        decoded = decode_flex_options(raw)
        if isinstance(decoded, dict):
            return "{" + ", ".join(f"{shown(k)}={_short(v)}" for k, v in decoded.items()) + "}"
    except Exception:  # noqa: BLE001 - not a flexbuffer: show it raw
        pass
    text = f"raw {len(raw)} bytes"
    if len(raw) % 4 == 0 and len(raw) <= 64:
        ints = [int.from_bytes(raw[i : i + 4], "little", signed=True) for i in range(0, len(raw), 4)]
        text += f" (int32 {ints})"
    else:
        text += f" ({raw[:16].hex()}{'...' if len(raw) > 16 else ''})"
    return text


def _short(v) -> str:
    if isinstance(v, (bytes, bytearray)):
        return f"<{len(v)} bytes>"
    if isinstance(v, str):
        return repr(v)
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _dtype_name(t) -> str:
    return t.dtype.name if t.dtype is not None else t.type_name


def _shape(t) -> str:
    shape = list(t.shape_signature) if t.shape_signature else list(t.shape)
    return "[" + ", ".join(str(d) for d in shape) + "]"


# -------------------------------------------------------------- commands --


def cmd_inspect(args) -> int:
    path, info = read_model_file(args.model)
    libs = load_libs(args.ops)
    from .doctor import NOBODY, RUNTIME, resolve_custom_ops

    sg = info.subgraphs[0]
    out = []
    out.append(
        f"model: {shown(path)} ({path.stat().st_size} bytes, schema v{info.version}, {len(info.subgraphs)} subgraph(s))"
    )
    if info.description:
        out.append(f"description: {shown(info.description)}")
    for title, idxs in (("inputs", sg.inputs), ("outputs", sg.outputs)):
        out.append(f"{title}:")
        for i in idxs:
            t = sg.tensors[i]
            out.append(f"  {shown(t.name)}  {_shape(t)}  {_dtype_name(t)}  (tensor {i})")
    counts: dict[str, int] = {}
    for g in info.subgraphs:
        for op in g.operators:
            label = f"{shown(op.op_name)} v{op.version}" if op.is_custom else op.op_name
            counts[label] = counts.get(label, 0) + 1
    total = sum(counts.values())
    out.append(f"operators: {total}")
    for label, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        out.append(f"  {n:4d} x {label}")
    custom = info.custom_ops()
    out.append(f"custom ops: {len(custom)}" + ("" if libs else " (no --ops given)"))
    missing = 0
    # The same answer as doctor's: who provides each op.
    resolved = resolve_custom_ops(custom, list(zip(args.ops, libs)))
    for name, version in custom:
        r = resolved[(name, version)]
        if r["provider"] == RUNTIME:
            status = "provided by the TFLite runtime"
        elif r["provider"] != NOBODY:
            status = "resolved"
        else:
            missing += 1
            others = r["other_versions"]
            status = "MISSING" + (f" (libraries have it as v{', v'.join(map(str, others))})" if others else "")
        opts = sorted(
            {
                _describe_options(op.custom_options)
                for g in info.subgraphs
                for op in g.operators
                if op.is_custom and op.op_name == name and op.version == version
            }
        )
        n_uses = sum(
            1
            for g in info.subgraphs
            for op in g.operators
            if op.is_custom and op.op_name == name and op.version == version
        )
        out.append(f"  {shown(name)} v{version}  x{n_uses}  {status}")
        for o in opts[:4]:
            out.append(f"      options: {o}")
        if len(opts) > 4:
            out.append(f"      ... and {len(opts) - 4} more option sets")
    if info.signatures:
        out.append("signatures:")
        for s in info.signatures:
            out.append(f"  {shown(s.key)}: inputs {sorted(s.inputs)} -> outputs {sorted(s.outputs)}")
    else:
        out.append("signatures: none")
    if custom:
        out.append(f"{len(custom) - missing} of {len(custom)} custom ops resolved")
    # (The names are shown(); the rest of a model's strings, such as a nested
    # option's key inside a repr, are already escaped or get escaped here.)
    print(terminal_safe("\n".join(out)))
    if args.check:
        return _check_isolated(path, libs, args)
    return 0


# inspect --check exit statuses: ran cleanly / refused with a reason / crashed or hung.


def _check_isolated(path, libs, args) -> int:
    """Run the model once in an isolated worker and say whether loading it in-process is safe."""
    from ..isolate.run import run_model

    sys.stdout.flush()
    outcome = run_model(
        path, custom_ops=libs, timeout=args.timeout, memory_limit=args.memory_limit, num_threads=args.threads
    )
    ms = outcome.seconds * 1e3
    if outcome.status == "ok":
        print(
            f"check: SAFE: created, allocated and invoked once on random inputs in an isolated "
            f"worker ({ms:.0f} ms); it can be loaded in-process"
        )
        return CHECK_OK
    if outcome.status == "rejected":
        from ..errors import UnresolvedOpsError

        # (A missing op: the advice in command-line terms, --ops, as run gives it.)
        reason = (
            f"UnresolvedOpsError: {_unresolved_message(outcome.error)}"
            if isinstance(outcome.error, UnresolvedOpsError)
            else outcome.reason
        )
        # The reason is the runtime's or the checks' message: it can name the model's ops.
        print(
            terminal_safe(
                f"check: REFUSED CLEANLY at {outcome.stage} (no crash; loading it in-process raises the "
                f"same error): {reason}"
            )
        )
        return CHECK_REFUSED
    if outcome.status == "error":
        print(terminal_safe(f"check: ERROR at {outcome.stage}: {outcome.reason}"))
        return CHECK_REFUSED
    what = "CRASHED" if outcome.status == "crash" else "HUNG"
    print(
        f"check: NOT SAFE: the runtime {what} at {outcome.stage} in the isolated worker; loading this "
        "model in-process would take the process down with it."
    )
    print(terminal_safe(str(outcome.error)))
    return CHECK_UNSAFE


def _parse_inputs(items) -> dict[str, str]:
    found = {}
    for item in items or ():
        if "=" not in item:
            raise CliError(f"--input takes NAME=FILE.npy, got {item!r}")
        name, file = item.split("=", 1)
        found[name] = file
    return found


def _make_interpreter(args, **options):
    from ..interpreter.core import Interpreter

    path = regular_file(args.model, "model file")
    extra = {}
    if getattr(args, "isolate", False):
        extra = {"isolate": True, "timeout": args.timeout, "memory_limit": args.memory_limit}
    return Interpreter(
        model_path=str(path),
        custom_ops=load_libs(args.ops),
        num_threads=getattr(args, "threads", None),
        **options,
        **extra,
    )


def _threads(text: str) -> int:
    """``--threads``: an int in the range every entry point takes (Interpreter's num_threads)."""
    from ..interpreter.core import check_num_threads

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    try:
        check_num_threads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _find_input(details, key: str) -> dict:
    for d in details:
        if d["name"] == key:
            return d
    if key.isdigit() and int(key) < len(details):
        return details[int(key)]
    raise CliError(f"the model has no input {key!r}; inputs: {', '.join(shown(d['name']) for d in details)}")


def _load_npy(file: str):
    """The array in ``file``, a ``.npy`` file; CliError if it is anything else."""
    import numpy as np

    save = "save each input with numpy.save(path, array)"
    try:
        with open(file, "rb") as f:
            magic = f.read(6)
    except OSError as exc:
        raise CliError(f"cannot read {file}: {exc.strerror or exc}") from None
    if magic[:4] == b"PK\x03\x04":  # a zip: numpy's .npz
        with np.load(file, allow_pickle=False) as archive:
            names = ", ".join(archive.files) or "none"
        raise CliError(f"{file} is an .npz archive (arrays: {names}); --input takes one .npy file per input: {save}")
    if magic != b"\x93NUMPY":
        # (numpy's own message would guess pickled data, and suggest
        # allow_pickle=True, which runs code from the file.)
        raise CliError(f"{file} is not a .npy file (it does not start with numpy's magic string); {save}")
    try:
        return np.load(file, allow_pickle=False)
    except OSError as exc:
        raise CliError(f"cannot read {file}: {exc.strerror or exc}") from None
    except MemoryError:
        raise CliError(f"{file}: the array it declares does not fit in memory") from None
    except (ValueError, EOFError) as exc:
        why = "it holds Python objects" if "allow_pickle" in str(exc) else f"numpy says: {exc}"
        raise CliError(f"{file} cannot be loaded as an array ({why}); {save}") from None


def cmd_run(args) -> int:
    import numpy as np

    from ..errors import OpaqueOpsError, RuntimeCrashError, RuntimeTimeoutError, UnresolvedOpsError

    wanted = _parse_inputs(args.input)
    out_dir = Path(args.output_dir) if args.output_dir else None
    if out_dir is not None:
        # Made before the run, not after: a path that cannot be a directory is
        # said before the model's time is spent.
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise CliError(f"--output-dir {out_dir} exists and is not a directory; name a directory") from None
        except OSError as exc:
            raise CliError(f"cannot create --output-dir {out_dir}: {exc.strerror or exc}") from None
    if not args.isolate and (args.timeout is not None or args.memory_limit is not None):
        raise CliError("--timeout and --memory-limit apply to isolated runs: add --isolate")
    it = _make_interpreter(args)
    details = it.get_input_details()
    arrays = {}
    for key, file in wanted.items():
        d = _find_input(details, key)
        arrays[d["index"]] = (d, _load_npy(file))
    absent = [d["name"] for d in details if d["index"] not in arrays]
    if absent:
        raise CliError(f"no --input for {', '.join(absent)} (give NAME=FILE.npy for every input)")
    resized = []
    try:
        for d, arr in arrays.values():
            if tuple(arr.shape) != tuple(d["shape"]):
                resized.append(f"{d['name']!r} from {[int(n) for n in d['shape']]} to {list(arr.shape)}")
                it.resize_tensor_input(d["index"], arr.shape)
        it.allocate_tensors()
    except (UnresolvedOpsError, RuntimeCrashError, RuntimeTimeoutError):
        raise  # not the shape's doing: main() says these (with --ops advice, exit 3)
    except OpaqueOpsError as exc:
        if not resized:
            raise
        # The user may not know that a file of another shape resizes the
        # input: say so, with the model's own shape.
        raise CliError(
            f"{exc} (run resized input {', '.join(resized)}, the shape of its --input file; "
            "give an array of the model's shape to run it as built)"
        ) from None
    for d, arr in arrays.values():
        it.set_tensor(d["index"], arr)
    it.invoke()
    for d in it.get_output_details():
        value = it.get_tensor(d["index"])
        line = f"{shown(d['name'])}: shape {tuple(value.shape)} {value.dtype.name}"
        if value.size and np.issubdtype(value.dtype, np.number):
            line += f"  min {value.min():.6g} max {value.max():.6g}"
        if out_dir is not None:
            fname = re.sub(r"[^A-Za-z0-9_.-]", "_", d["name"]) or f"output{d['index']}"
            np.save(out_dir / f"{fname}.npy", value)
            line += f"  -> {shown(out_dir / (fname + '.npy'))}"
        print(line)
    return 0


def _random_input(rng, shape, dtype):
    import numpy as np

    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.random(shape, dtype=np.float64).astype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -128), min(info.max, 127) + 1, size=shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind == "c":
        return (rng.random(shape) + 1j * rng.random(shape)).astype(dtype)
    if dtype.kind == "S":
        # A string tensor (its details say np.bytes_): random lowercase words
        # of 1 to 8 letters, as an object array so each keeps its own length.
        words = [
            bytes(rng.integers(97, 123, size=int(rng.integers(1, 9))).astype(np.uint8))
            for _ in range(int(np.prod(shape, dtype=np.int64)))
        ]
        return np.array(words + [None], dtype=object)[:-1].reshape(shape)
    raise CliError(f"bench cannot make random inputs of dtype {dtype}")


class _Progress:
    """A one-line progress display on stderr (only when useful)."""

    def __init__(self, total: int, enabled: bool):
        self.total = total
        self.enabled = enabled
        self.last = 0.0

    def update(self, done: int, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self.last < 0.2):
            return
        self.last = now
        width = 30
        fill = int(width * done / max(self.total, 1))
        sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{self.total} runs")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            self.update(self.total, force=True)
            sys.stderr.write("\n")
            sys.stderr.flush()


def _fmt_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e3:.3f} ms"


def cmd_bench(args) -> int:
    import numpy as np

    if args.runs < 1:
        raise CliError("--runs must be at least 1")
    if args.warmup < 0:
        raise CliError("--warmup must be >= 0")
    it = _make_interpreter(args, use_xnnpack=_XNNPACK_CHOICES[args.xnnpack])
    it.allocate_tensors()
    rng = np.random.default_rng(args.seed)
    for d in it.get_input_details():
        it.set_tensor(d["index"], _random_input(rng, tuple(d["shape"]), d["dtype"]))
    for _ in range(args.warmup):
        it.invoke()
    # Time one run to decide whether a progress line is worth showing.
    t0 = time.perf_counter()
    it.invoke()
    first = time.perf_counter() - t0
    progress = _Progress(args.runs, enabled=sys.stderr.isatty() or first * args.runs > 2.0)
    times = np.empty(args.runs)
    times[0] = first
    progress.update(1)
    for i in range(1, args.runs):
        t0 = time.perf_counter()
        it.invoke()
        times[i] = time.perf_counter() - t0
        progress.update(i + 1)
    progress.close()
    from ..build.cpu import cpu_summary

    threads = args.threads if args.threads is not None else "default"
    print(f"model: {args.model}  runs: {args.runs}  warmup: {args.warmup}  threads: {threads}")
    print(
        f"xnnpack: {'used' if it.xnnpack else 'not used'} (--xnnpack {args.xnnpack}: {_XNNPACK_MEANING[args.xnnpack]})"
    )
    ops = sorted({f"{shown(n)} v{v}" for lib in it._libs for n, v in lib.ops})
    if ops:
        print(f"registered kernels (they run their ops' nodes): {', '.join(ops)}")
    provided = {op for lib in it._libs for op in lib.ops}
    others = sorted(f"{shown(n)} v{v}" for n, v in it._info.custom_ops() if (n, v) not in provided)
    if others:
        print(
            f"custom ops run by the runtime itself ({'XNNPACK or ' if it.xnnpack else ''}"
            f"TFLite's builtin custom ops): {', '.join(others)}"
        )
    print(f"cpu: {cpu_summary()}")
    print(
        f"invoke: median {_fmt_time(np.median(times))}  p90 {_fmt_time(np.percentile(times, 90))}  "
        f"min {_fmt_time(times.min())}"
    )
    return 0


# bench --xnnpack: the value and what Interpreter(use_xnnpack=...) makes of it.
_XNNPACK_CHOICES = {"auto": None, "on": True, "off": False}
_XNNPACK_MEANING = {
    "auto": "the default, use_xnnpack=None: XNNPACK runs the builtins unless the runtime lacks it",
    "on": "use_xnnpack=True: XNNPACK also runs the MediaPipe ops it knows that no kernel was given for",
    "off": "use_xnnpack=False: TFLite's reference kernels run every builtin",
}


def cmd_build(argv) -> int:
    try:
        from ..build import standalone as build
    except ImportError as exc:
        raise CliError(f"the build command is not available in this installation ({exc})") from None
    result = build.main(list(argv), prog=f"{PROG} build")
    return int(result or 0)


# ------------------------------------------------------------------ main --


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Inspect, run and benchmark TFLite models with custom ops.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    ops_help = (
        "op library: a .so, a .c source (compiled, cached) or kernels:NAME, a bundled kernel "
        "or bundle such as kernels:mediapipe (repeatable)"
    )

    pi = sub.add_parser("inspect", help="show a model's inputs, outputs, ops and which custom ops resolve")
    pi.add_argument("model")
    pi.add_argument("--ops", action="append", default=[], metavar="LIB", help=ops_help)
    pi.add_argument(
        "--check",
        action="store_true",
        help="also run the model once in an isolated worker and report whether it is safe to "
        "load in-process (exit status 0: ran, 1: refused with a reason, 3: crashed or hung)",
    )
    pi.add_argument("--threads", type=_threads, default=None, help="threads for builtin kernels (--check)")
    _isolation_args(pi, default_timeout=60.0)
    pi.set_defaults(func=cmd_inspect)

    pr = sub.add_parser("run", help="run a model on .npy inputs")
    pr.add_argument("model")
    pr.add_argument("--ops", action="append", default=[], metavar="LIB", help=ops_help)
    pr.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="an input by tensor name (or position); repeat for each input. An array of "
        "another shape than the model's input resizes that input to it",
    )
    pr.add_argument("--output-dir", metavar="DIR", help="write each output as NAME.npy here")
    pr.add_argument("--threads", type=_threads, default=None, help="threads for builtin kernels")
    pr.add_argument(
        "--isolate", action="store_true", help="run the runtime in a worker process: a crash is reported, not fatal"
    )
    _isolation_args(pr, default_timeout=None)
    pr.set_defaults(func=cmd_run)

    pb = sub.add_parser("bench", help="time invoke() on random inputs")
    pb.add_argument("model")
    pb.add_argument("--ops", action="append", default=[], metavar="LIB", help=ops_help)
    pb.add_argument("--runs", type=int, default=50, help="timed runs (default 50)")
    pb.add_argument("--warmup", type=int, default=5, help="untimed runs first (default 5)")
    pb.add_argument("--threads", type=_threads, default=None, help="threads for builtin kernels")
    pb.add_argument(
        "--xnnpack",
        choices=list(_XNNPACK_CHOICES),
        default="auto",
        help="XNNPACK for the builtins: auto (default), on, off; the output says whether it was used",
    )
    pb.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    pb.set_defaults(func=cmd_bench)

    from .doctor import add_parser as add_doctor

    add_doctor(sub, ops_help)

    from .scaffold import add_parser as add_scaffold

    add_scaffold(sub)

    from .cache import add_parser as add_cache

    add_cache(sub)

    sub.add_parser("build", help="build kernel libraries ahead of time (opaque-ops build --help)", add_help=False)
    return p


# The interpreter speaks Python; on the command line the same advice is --ops.
_PYTHON_ADVICE = "Pass a library that provides them in custom_ops=[...]."


def _unresolved_message(exc) -> str:
    """An UnresolvedOpsError's message in command-line terms, naming bundled kernels that help."""
    from ..kernels import MEDIAPIPE, provided_ops

    text = str(exc).replace(_PYTHON_ADVICE, "").rstrip()
    bundled = provided_ops()
    files = sorted({bundled[op] for op in exc.missing if op in bundled})
    advice = (
        "Give a library that provides them with --ops: a .so (from opaque-ops build), a .c "
        "source, or a bundled kernel (kernels:NAME)."
    )
    if files:
        advice += " Bundled kernels that do: " + " ".join(f"--ops kernels:{f}" for f in files)
        if all(f in MEDIAPIPE for f in files):
            advice += " (or all of MediaPipe's: --ops kernels:mediapipe)"
        advice += "."
    return f"{text} {advice}"


def _timeout_arg(text: str) -> float:
    """``--timeout``: seconds, checked as the API checks them (a bad value is a usage error, exit 2)."""
    from ..isolate.workers import check_timeout

    try:
        return check_timeout(float(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc) if "timeout=" in str(exc) else f"not a number: {text!r}") from None


def _memory_arg(text: str) -> int:
    """``--memory-limit``: a size, checked as the API checks it (a bad value is a usage error, exit 2)."""
    from ..isolate.workers import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _isolation_args(p, default_timeout) -> None:
    p.add_argument(
        "--timeout",
        type=_timeout_arg,
        default=default_timeout,
        metavar="S",
        help="isolated: seconds a call may take before the worker is stopped"
        + (f" (default {default_timeout:g})" if default_timeout else ""),
    )
    p.add_argument(
        "--memory-limit",
        type=_memory_arg,
        default=None,
        metavar="SIZE",
        help="isolated: memory the model may use in the worker, e.g. 512M or 2G",
    )


def _error(message: str) -> int:
    # (Messages can name a model's ops and tensors: escaped like the reports.)
    line = terminal_safe(" ".join(str(message).split()))
    sys.stderr.write(f"{PROG}: error: {line}\n")
    return 1


def main(argv=None) -> int:
    """Entry point of the ``opaque-ops`` console script.

    Parameters
    ----------
    argv : list of str, optional
        Arguments (default ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0 on success, 1 on an error, 2 on a usage error,
        3 when an isolated run crashed or hung (and ``inspect --check`` found
        the model unsafe).
    """
    from ..errors import OpaqueOpsError, RuntimeCrashError, RuntimeTimeoutError, UnresolvedOpsError

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "build":
            return cmd_build(argv[1:])
        if argv[:2] == ["bench", "--suite"]:
            from .bench import run_suite

            return run_suite(argv[2:])
        args = _parser().parse_args(argv)
        return args.func(args)
    except (RuntimeCrashError, RuntimeTimeoutError) as exc:
        # Multi-line on purpose: the C backtrace and the worker's stderr.
        sys.stderr.write(terminal_safe(f"{PROG}: error: {exc}") + "\n")
        return CHECK_UNSAFE
    except UnresolvedOpsError as exc:
        return _error(_unresolved_message(exc))
    except BrokenPipeError:
        # The reader of our output went away (``opaque-ops doctor x --json |
        # head``): not an error to report.  stdout goes to /dev/null, or
        # Python's flush at exit would fail on the closed pipe once more.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 1
    except (CliError, OpaqueOpsError, OSError, ValueError) as exc:
        return _error(str(exc) or type(exc).__name__)
    except KeyboardInterrupt:
        return _error("interrupted")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
