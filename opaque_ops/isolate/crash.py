"""Turning a dead worker into a :class:`RuntimeCrashError` the caller can act on."""

from __future__ import annotations

import re
import shutil
import signal as _signal
import subprocess

from ..errors import RuntimeCrashError

_SIGNAL_MEANING = {
    "SIGSEGV": "invalid memory access",
    "SIGBUS": "bus error: misaligned or truncated memory",
    "SIGFPE": "arithmetic error, e.g. an integer division by zero",
    "SIGILL": "illegal instruction",
    "SIGABRT": "abort() was called, e.g. by a failed assertion or an uncaught C++ exception",
    "SIGTRAP": "trap instruction",
    "SIGKILL": "killed from outside the process, or by the kernel's out-of-memory killer",
    "SIGTERM": "terminated from outside the process",
}

# "path(symbol+0x1f)[0x7f...]" or "path(+0x1139)[0x7f...]", as backtrace_symbols_fd prints them.
_FRAME = re.compile(r"^(?P<obj>[^\s(]+)\((?P<sym>[^)+]*)\+(?P<off>0x[0-9a-fA-F]+)\)\s*\[(?P<pc>0x[0-9a-fA-F]+)\]\s*$")
_BT_START = "C backtrace (most recent call first):"
_BT_END = "end of C backtrace"


def signal_name(signum: int) -> str:
    try:
        return _signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def extract_backtrace(stderr: str, last: bool = False) -> list[str]:
    """The frames of the first (or ``last``) C backtrace in ``stderr``, down to the call
    from Python (cffi, or the fast calls module's invoke); static functions are named through ``addr2line`` when it is installed."""
    lines = [l.strip() for l in stderr.splitlines()]
    starts = [i for i, l in enumerate(lines) if l == _BT_START]
    if not starts:
        return []
    frames = []
    for line in lines[(starts[-1] if last else starts[0]) + 1 :]:
        if line == _BT_END:
            break
        # The call from Python: through cffi, or the fast calls module's
        # invoke (c/src/sigint_guard.c), which runs every guarded invoke.
        if "_cffi_backend" in line or "(opaque_ops_guarded_invoke+" in line:
            frames.append("... (called from Python: see the Python traceback)")
            break
        frames.append(line)
    return _symbolize(frames)


def _symbolize(frames: list[str]) -> list[str]:
    parsed = [_FRAME.match(f) for f in frames]
    wanted: dict[str, list[str]] = {}
    for m in parsed:
        if m and not m.group("sym"):
            wanted.setdefault(m.group("obj"), []).append(m.group("off"))
    names: dict[tuple[str, str], str] = {}
    tool = shutil.which("addr2line")
    if tool:
        for obj, offs in wanted.items():
            if not _has_symtab(obj):  # stripped: addr2line would name a wrong neighbour
                continue
            try:
                out = subprocess.run(
                    [tool, "-f", "-C", "-e", obj, *offs], capture_output=True, text=True, timeout=10
                ).stdout.splitlines()
            except (OSError, subprocess.SubprocessError):
                continue
            for off, fn in zip(offs, out[0::2]):
                if fn and fn != "??":
                    names[(obj, off)] = fn
    demangled = _demangle([m.group("sym") for m in parsed if m and m.group("sym").startswith("_Z")])
    result = []
    for f, m in zip(frames, parsed):
        if not m:
            result.append(f)
            continue
        obj, sym, off = m.group("obj"), m.group("sym"), m.group("off")
        base = obj.rsplit("/", 1)[-1]
        if sym:
            result.append(f"{demangled.get(sym, sym)}+{off}  ({base})")
        else:
            result.append(f"{names.get((obj, off), '??')}  ({base}+{off})")
    return result


def _demangle(symbols: list[str]) -> dict[str, str]:
    """C++ names as written (``tflite::Subgraph::Invoke()``), through binutils' c++filt if installed."""
    tool = shutil.which("c++filt")
    if not symbols or tool is None:
        return {}
    try:
        out = subprocess.run([tool, *symbols], capture_output=True, text=True, timeout=10).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(zip(symbols, out)) if len(out) == len(symbols) else {}


def _has_symtab(path: str) -> bool:
    """True if the ELF file at ``path`` has a static symbol table (is not stripped)."""
    import struct

    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit ELF only
                return False
            end = "<" if head[5] == 1 else ">"
            (shoff,) = struct.unpack_from(end + "Q", head, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", head, 0x3A)
            f.seek(shoff)
            table = f.read(shentsize * shnum)
            types = [struct.unpack_from(end + "I", table, i * shentsize + 4)[0] for i in range(shnum)]
            return 2 in types  # SHT_SYMTAB
    except (OSError, struct.error):
        return False


def crash_error(
    *,
    returncode: int | None,
    record: dict,
    stage: str | None,
    stderr: str,
    pid: int | None,
    helper_path: str | None,
    helper_missing: str | None,
    memory_limit: int | None,
) -> RuntimeCrashError:
    """Build the error for a worker that died (``returncode`` from ``Popen``)."""
    signum = record.get("signo") or (-returncode if returncode is not None and returncode < 0 else None)
    name = signal_name(signum) if signum else None
    stage = record.get("stage") if record.get("stage") not in (None, "idle") else stage
    node, op = record.get("node"), record.get("op")
    if name:
        what = f"{name} ({_SIGNAL_MEANING.get(name, 'fatal signal')})"
        if name in ("SIGSEGV", "SIGBUS") and record.get("signo"):
            what += f" at address {record.get('addr', 0):#x}"
    else:
        what = f"the worker exited with status {returncode}"
    where = f" during {stage}" if stage else ""
    if node is not None:
        where += f", in node {node}" + (f" ({op})" if op else "")
    backtrace = extract_backtrace(stderr)
    parts = [
        f"the TFLite runtime crashed in the isolated worker (pid {pid}): {what}{where}. "
        "The interpreter is closed; create a new one to continue."
    ]
    # A malloc that failed under the cap returns NULL, and TFLite writes near
    # it; C++ allocations abort.
    near_null = name == "SIGSEGV" and record.get("signo") and record.get("addr", 1 << 62) < (1 << 20)
    if memory_limit is not None and (name in ("SIGABRT", "SIGKILL") or near_null):
        parts.append(
            f"The worker runs with memory_limit={memory_limit} bytes: if the model needs more, TFLite's "
            "unchecked allocations fail like this (raise the limit to tell)."
        )
    if backtrace:
        parts.append(
            "C backtrace (most recent call first):\n" + "\n".join(f"  #{i} {f}" for i, f in enumerate(backtrace[:30]))
        )
    elif helper_missing:
        parts.append(f"(no C backtrace: the crash helper could not be built: {helper_missing})")
    tail = _tail_without_backtrace(stderr)
    if tail:
        parts.append("worker stderr (last lines):\n" + tail)
    return RuntimeCrashError(
        "\n".join(parts),
        signal=name,
        signum=signum,
        exitcode=returncode if not signum else None,
        stage=stage,
        node=node,
        op=op,
        backtrace=backtrace,
        stderr=stderr,
        pid=pid,
    )


def _tail_without_backtrace(stderr: str, n: int = 40) -> str:
    out, skipping = [], False
    for line in stderr.splitlines():
        if line.strip() == _BT_START:
            skipping = True
            continue
        if skipping:
            skipping = line.strip() != _BT_END
            continue
        if line.strip():
            out.append("  " + line)
    return "\n".join(out[-n:])
