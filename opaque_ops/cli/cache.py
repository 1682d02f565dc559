"""``opaque-ops cache``: what the compile and verdict caches hold; ``opaque-ops cache clear`` empties them."""

from __future__ import annotations

import argparse

from .. import caches
from ..errors import CacheError

_KINDS = (
    ("library", "library", "libraries"),
    ("note", "note", "notes"),
    ("record", "record", "records"),
    ("temporary", "temporary file", "temporary files"),
    ("build directory", "build directory", "build directories"),
)


def _bytes(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{int(n)} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def _summary(entries) -> str:
    words = []
    for kind, one, many in _KINDS:
        n = sum(1 for e in entries if e.kind == kind)
        if n:
            words.append(f"{n} {one if n == 1 else many}")
    return (", ".join(words) or "empty") + f" ({_bytes(sum(e.size for e in entries))})"


def cmd_cache(args) -> int:
    """Print each cache's directory and contents, or (``clear``) remove them and say what went."""
    if args.action == "clear":
        verb = "would remove" if args.dry_run else "removed"
        try:
            removed, problem = caches.clear(args.cache_dir, older_than_days=args.older_than, dry_run=args.dry_run), None
        except CacheError as exc:
            removed, problem = getattr(exc, "removed", []), exc
        for e in removed if args.verbose else ():
            print(f"{verb} {e.path}")
        print(f"{verb}: {_summary(removed)}")
        if problem is not None:
            raise problem
        return 0
    status = 0
    for area in caches.areas(args.cache_dir):
        print(f"{area.name}: {area.directory}")
        if area.error is not None:
            print(f"  not read: {area.error}")
            status = 1
        else:
            print(f"  {_summary(area.entries)}")
    return status


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of days: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more days: {text!r}")
    return value


def add_parser(sub) -> None:
    """Register ``cache`` on the ``opaque-ops`` subcommand parser."""
    p = sub.add_parser(
        "cache",
        help="show what the compile and verdict caches hold; `cache clear` empties them "
        "(anything removed is built, which needs the C compiler, or checked again when next needed)",
    )
    p.add_argument("action", nargs="?", choices=["show", "clear"], default="show")
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="the compile cache (default: $OPAQUE_OPS_CACHE_DIR, or opaque_ops in $XDG_CACHE_HOME or ~/.cache)",
    )
    p.add_argument(
        "--older-than",
        type=_days,
        metavar="DAYS",
        help="clear: only entries last written more than DAYS days ago",
    )
    p.add_argument("--dry-run", action="store_true", help="clear: list what would go, remove nothing")
    p.add_argument("-v", "--verbose", action="store_true", help="clear: name each entry removed")
    p.set_defaults(func=cmd_cache)
