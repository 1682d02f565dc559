"""What an isolated worker may leave behind: child processes, /dev/shm entries, shared mappings, descriptors."""

from __future__ import annotations

import os


def _children() -> set[int]:
    """Processes whose parent is this one (zombies included)."""
    me = str(os.getpid())
    out = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
        if stat[stat.rindex(")") + 2 :].split()[1] == me:
            out.add(int(d))
    return out


def _shm_entries() -> int:
    return len(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else 0


def _our_mappings() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if "opaque_ops-isolate" in line)


def _our_fds() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "opaque_ops-isolate" in target or target.startswith("anon_inode:[pidfd]"):
            n += 1
    return n


def resources() -> dict:
    return {
        "children": _children(),
        "/dev/shm entries": _shm_entries(),
        "shared mappings": _our_mappings(),
        "memfd and pidfd descriptors": _our_fds(),
    }
