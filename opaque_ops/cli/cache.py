"""``opaque-ops cache``: what the compile and verdict caches hold; ``opaque-ops cache clear`` empties them."""

from __future__ import annotations

import argparse

from .. import caches

_KINDS = ("library", "note", "record", "temporary")


def _bytes(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def _summary(entries) -> str:
    counts = {k: sum(1 for e in entries if e.kind == k) for k in _KINDS}
    words = [
        f"{n} {k}{'' if n == 1 else 's'}" if k != "library" else f"{n} librar{'y' if n == 1 else 'ies'}"
        for k, n in counts.items()
        if n
    ]
    return (", ".join(words) or "empty") + f" ({_bytes(sum(e.size for e in entries))})"


def cmd_cache(args) -> int:
    """Print each cache's directory and contents, or (``clear``) remove them and say what went."""
    if args.action == "clear":
        removed = caches.clear(args.cache_dir, older_than_days=args.older_than, dry_run=args.dry_run)
        verb = "would remove" if args.dry_run else "removed"
        for e in removed if args.verbose else ():
            print(f"{verb} {e.path}")
        print(f"{verb}: {_summary(removed)}")
        return 0
    for area in caches.areas(args.cache_dir):
        print(f"{area.name}: {area.directory}")
        print(f"  {_summary(area.entries)}")
    return 0


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
    p.add_argument("--cache-dir", metavar="DIR", help="the compile cache (default: $OPAQUE_OPS_CACHE_DIR or ~/.cache)")
    p.add_argument(
        "--older-than",
        type=_days,
        metavar="DAYS",
        help="clear: only entries last written more than DAYS days ago",
    )
    p.add_argument("--dry-run", action="store_true", help="clear: list what would go, remove nothing")
    p.add_argument("-v", "--verbose", action="store_true", help="clear: name each entry removed")
    p.set_defaults(func=cmd_cache)
