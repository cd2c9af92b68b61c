"""A fake trainer for test_optuna.py, run as a job's command: its loss at step t is
(lr - 0.1)^2 + c / t, so the best learning rate is 0.1 whatever c is, and every step is
reported with trainyard.report (and sent at once, so that the study sees it while the job runs).
A negative --lr exits 3, as a crashing trainer would."""

import argparse
import sys
import time

from trainyard.report import flush, report


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--c", type=float, default=1.0)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--step-seconds", type=float, default=0.25)
    a = ap.parse_args()
    if a.lr < 0:
        print(f"--lr {a.lr}: a learning rate cannot be negative", file=sys.stderr)
        return 3
    for t in range(1, a.steps + 1):
        time.sleep(a.step_seconds)
        loss = (a.lr - 0.1) ** 2 + a.c / t
        report(t, loss=loss)
        flush()
        print(f"step {t} loss {loss:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
