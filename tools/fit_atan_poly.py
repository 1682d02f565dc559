"""Fit the polynomial of the Atan kernel (c/kernels/atan.c) and print it as C.

The kernel reduces |x| to t in [0, 1] and computes atan(t) = t + t*s*P(s)
with s = t*t.  P approximates f(s) = (atan(sqrt s)/sqrt s - 1)/s.  The fit
minimises the largest error relative to atan(t), which is what the float
result's ulp measures, by Lawson's iteratively reweighted least squares on
a dense grid (a minimax fit without the Remez exchange bookkeeping).  The
coefficients are then rounded to float32, as the kernel stores them.

    python tools/fit_atan_poly.py [--terms 9]

The printed "relative error" is the polynomial's alone, in units of 2^-24;
the kernel's end-to-end error (rounding of every step included) is measured
by tests/kernels/test_atan_accuracy.py.
"""

from __future__ import annotations

import argparse

import numpy as np


def target(s: np.ndarray) -> np.ndarray:
    """(atan(sqrt s)/sqrt s - 1)/s, by its Taylor series near 0 where the quotient cancels."""
    out = np.empty_like(s)
    near = s < 1e-4
    sn = s[near]
    out[near] = -1 / 3 + sn / 5 - sn**2 / 7 + sn**3 / 9 - sn**4 / 11
    t = np.sqrt(s[~near])
    out[~near] = (np.arctan(t) / t - 1) / s[~near]
    return out


def fit(terms: int, points: int = 200_001, rounds: int = 200) -> tuple[np.ndarray, float, float]:
    """Return (float32 coefficients, max relative error before and after rounding them)."""
    s = np.linspace(0.0, 1.0, points)
    t = np.sqrt(s)
    # d atan / atan for an error d in P: t*s*dP / atan(t).
    weight = np.where(s > 0, s * t / np.where(t > 0, np.arctan(t), 1.0), 0.0)
    f = target(s)
    v = np.vander(s, terms, increasing=True)
    lawson = np.ones_like(s)
    for _ in range(rounds):
        w = weight * lawson
        coef, *_ = np.linalg.lstsq(v * w[:, None], f * w, rcond=None)
        err = np.abs((v @ coef - f) * weight)
        lawson = lawson * (err / err.max()) ** 0.3 + 1e-12
        lawson /= lawson.max()
    c32 = coef.astype(np.float32)
    err32 = np.abs((v @ c32.astype(np.float64) - f) * weight).max()
    return c32, float(err.max()), float(err32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--terms", type=int, default=9, help="number of coefficients of P")
    args = ap.parse_args()
    c32, err, err32 = fit(args.terms)
    print(
        f"/* relative error of the fit: {err / 2**-24:.3f} x 2^-24 (double coefficients), "
        f"{err32 / 2**-24:.3f} x 2^-24 (float32) */"
    )
    print("static const float kAtanPoly[%d] = {" % len(c32))
    for c in c32:
        print(f"    {float(c):.9e}f,")
    print("};")


if __name__ == "__main__":
    main()
