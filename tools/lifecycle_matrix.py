"""The long lifecycle matrix (issue 17): every public object x every lifecycle event, many times.

``tests/lifecycle/test_matrix.py`` runs each (object, event) case once.  This
runs each case ``--repeat`` times with timing variations (a per-repetition
seed shifts when the signals, kills and forks land: the nested timer interval
and the kill delay scale with it) in a random order, ``--jobs`` at a time, and
prints one row per case with the count of each outcome, then the totals::

    python tools/lifecycle_matrix.py                      # 5 repetitions, 2 jobs
    python tools/lifecycle_matrix.py --repeat 20 --jobs 2 --only isolated
    python tools/lifecycle_matrix.py --event fork_after_use --json out.json

Outcomes: ``ok`` (bit-identical to the in-process reference run), ``clean``
(an OpaqueOpsError), and the failures ``CRASH``, ``HANG``, ``WRONG``,
``UNCLEAN`` (an exception class outside OpaqueOpsError).  The exit status is 1
when any case failed at least once.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.helpers import lifecycle_cases as lc  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5, help="runs of each case (default 5)")
    ap.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    ap.add_argument("--only", action="append", default=[], help="object kinds to run (repeatable)")
    ap.add_argument("--event", action="append", default=[], help="events to run (repeatable)")
    ap.add_argument("--seed", type=int, default=0, help="the order and the timing variations")
    ap.add_argument("--timeout", type=float, default=120, help="seconds before a case counts as hung")
    ap.add_argument("--json", help="write every outcome to this file")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.jobs < 1:
        ap.error("--repeat and --jobs must be at least 1")

    selected = [
        c for c in lc.cases() if (not args.only or c.kind in args.only) and (not args.event or c.event in args.event)
    ]
    if not selected:
        ap.error("no case matches --only/--event; kinds and events are listed in tests/helpers/lifecycle_cases.py")
    rng = random.Random(args.seed)
    runs = [(c, r) for c in selected for r in range(args.repeat)]
    rng.shuffle(runs)
    with tempfile.TemporaryDirectory(prefix="oo_lifecycle_") as tmp:
        tmp = Path(tmp)
        print(f"building the shared files in {tmp} ...", file=sys.stderr)
        shared = lc.prepare_shared(tmp / "shared")
        results: dict = collections.defaultdict(list)
        started = time.monotonic()

        def one(item):
            case, rep = item
            seed = rng.randrange(1 << 30) if rep else 0
            out = lc.run_case(case, shared, tmp / f"{case.id}-{rep}", timeout=args.timeout, options={"seed": seed})
            results[case.id].append(out)
            if lc.failed(out):
                print(f"  {case.id} #{rep}: {out[:300]}", file=sys.stderr, flush=True)
            return out

        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(one, runs))
        elapsed = time.monotonic() - started

    width = max(len(c.id) for c in selected)
    kinds = ["ok", "clean", *lc.FAILURES]
    print(f"{'case':<{width}}  " + "  ".join(f"{k:>7}" for k in kinds) + "  example")
    totals: collections.Counter = collections.Counter()
    failing = 0
    for c in selected:
        outs = results[c.id]
        counts = collections.Counter(o.split(" ", 1)[0] for o in outs)
        totals.update(counts)
        bad = [o for o in outs if lc.failed(o)]
        failing += bool(bad)
        example = (bad or [o for o in outs if o.startswith("clean")] or outs)[0]
        print(f"{c.id:<{width}}  " + "  ".join(f"{counts.get(k, 0):>7}" for k in kinds) + f"  {example[:110]}")
    print(f"{'total':<{width}}  " + "  ".join(f"{totals.get(k, 0):>7}" for k in kinds))
    print(
        f"{len(selected)} cases x {args.repeat} = {len(runs)} runs in {elapsed:.0f} s; "
        f"{failing} cases failed at least once"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
