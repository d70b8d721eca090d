#!/usr/bin/env python3
"""stale_sim.py: the numbers behind docs/training.md's "Staleness shrinks the stable learning
rate", without ringcomm: the largest eigenvalue of the house regression's Hessian, the stable
range of gradient descent with delayed gradients, and minibatch SGD on house-like data with the
delays of W round-robin workers or with a delay pattern read off a ddp_train --ps-trace.

    python3 train/stale_sim.py [--pattern 1,1,4]

Pure Python (no numpy), seeded: the same output on every run.
"""
import argparse
import math
import random

# The house data set of train/data.c: bedrooms uniform 1..6, bathrooms 1..4, price =
# 0.8 bed + 0.5 bath + 1.2 + N(0, 0.1). The model is y = w1 bed + w2 bath + b with MSE.
W_TRUE = (0.8, 0.5, 1.2)


def hessian_lambda_max():
    """Largest eigenvalue of 2 E[x x^T], x = (bed, bath, 1), by power iteration."""
    e_bed = sum(range(1, 7)) / 6
    e_bath = sum(range(1, 5)) / 4
    e_bed2 = sum(b * b for b in range(1, 7)) / 6
    e_bath2 = sum(b * b for b in range(1, 5)) / 4
    m = [[e_bed2, e_bed * e_bath, e_bed], [e_bed * e_bath, e_bath2, e_bath], [e_bed, e_bath, 1.0]]
    v = [1.0, 1.0, 1.0]
    for _ in range(500):
        w = [sum(m[i][j] * v[j] for j in range(3)) for i in range(3)]
        n = math.sqrt(sum(x * x for x in w))
        v = [x / n for x in w]
    lam = sum(v[i] * sum(m[i][j] * v[j] for j in range(3)) for i in range(3))
    return 2 * lam


def recurrence_stable(a, delays, steps=20000):
    """w(t+1) = w(t) - a w(t - d(t)), d cycling through delays: does it decay?"""
    depth = max(delays) + 1
    w = [1.0] * depth
    for t in range(steps):
        d = delays[t % len(delays)]
        w.append(w[-1] - a * w[-1 - d])
        if abs(w[-1]) > 1e12:
            return False
        if len(w) > 4 * depth:
            w = w[-depth:]
    return abs(w[-1]) < 1.0


def largest_stable(delays):
    lo, hi = 0.0, 2.0
    for _ in range(50):
        mid = (lo + hi) / 2
        if recurrence_stable(mid, delays):
            lo = mid
        else:
            hi = mid
    return lo


def make_data(n, rng):
    xs, ys = [], []
    for _ in range(n):
        bed, bath = rng.randint(1, 6), rng.randint(1, 4)
        xs.append((bed, bath))
        ys.append(W_TRUE[0] * bed + W_TRUE[1] * bath + W_TRUE[2] + rng.gauss(0, 0.1))
    return xs, ys


def sgd_with_delays(lr, delays, xs, ys, rng, updates=3000, batch=32):
    """Minibatch SGD where update t uses the gradient at the weights of update t - delays[t]."""
    history = [[0.1, -0.2, 0.3]]
    for t in range(updates):
        d = delays[t % len(delays)]
        w_old = history[max(0, len(history) - 1 - d)]
        g = [0.0, 0.0, 0.0]
        for _ in range(batch):
            i = rng.randrange(len(xs))
            e = 2 * (w_old[0] * xs[i][0] + w_old[1] * xs[i][1] + w_old[2] - ys[i]) / batch
            g[0] += e * xs[i][0]
            g[1] += e * xs[i][1]
            g[2] += e
        w = [history[-1][k] - lr * g[k] for k in range(3)]
        if abs(w[0]) > 1e6:
            return float("inf")
        history.append(w)
        history = history[-16:]
    w = history[-1]
    return sum((w[0] * x[0] + w[1] * x[1] + w[2] - y) ** 2 for x, y in zip(xs, ys)) / len(xs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pattern", default="1,1,4", help="delays of successive updates, repeated (from --ps-trace)")
    args = ap.parse_args()
    pattern = [int(x) for x in args.pattern.split(",")]

    lam = hessian_lambda_max()
    print(f"lambda_max of the Hessian 2 E[x x^T]: {lam:.2f}")
    cases = [("1 worker, delay 0", [0]), ("2 workers round-robin, delay 1", [1]),
             ("3 workers round-robin, delay 2", [2]), (f"pattern {args.pattern}", pattern)]
    print("largest stable lr of w(t+1) = w(t) - lr*lambda*w(t-d(t)):")
    for name, delays in cases:
        print(f"  {name:32s} lr*lambda < {largest_stable(delays):.4f}  ->  lr < {largest_stable(delays) / lam:.4f}")

    rng = random.Random(1)
    xs, ys = make_data(4096, rng)
    lrs = [0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05]
    print("minibatch SGD (batch 32, 3000 updates), final loss (noise floor 0.01; inf = diverged):")
    print("  " + " " * 32 + "".join(f"{lr:>9}" for lr in lrs))
    for name, delays in cases:
        row = "".join(f"{sgd_with_delays(lr, delays, xs, ys, random.Random(2)):>9.4g}" for lr in lrs)
        print(f"  {name:32s}{row}")


if __name__ == "__main__":
    main()
