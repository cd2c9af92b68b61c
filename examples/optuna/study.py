#!/usr/bin/python3
"""An Optuna study whose trials are Trainyard jobs: the optimizer and learning rate of
trainyard-worker on Fashion-MNIST, the final training loss minimized, bad trials pruned.

    /usr/bin/python3 examples/optuna/study.py --trials 10 --parallelism 2

The server and token come from --server/--token, else TRAINYARD_SERVER/TRAINYARD_TOKEN, else
the CLI's config (`trainyard login`). Run from a source checkout, put clients/python on
PYTHONPATH (the python3-trainyard package puts it where python3 finds it).
"""

import argparse
import pathlib

import optuna

import trainyard
import trainyard.optuna

HERE = pathlib.Path(__file__).resolve().parent


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server")
    ap.add_argument("--token")
    ap.add_argument("--template", default=str(HERE / "trial.yaml"))
    ap.add_argument("--study", default="fmnist-lr")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--parallelism", type=int, default=2, help="trials (jobs) at a time")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    study = optuna.create_study(
        study_name=a.study, direction="minimize",
        sampler=optuna.samplers.TPESampler(seed=a.seed, n_startup_trials=4),
        # Median rule: from step 20 on (of about 70), a trial whose loss is worse than the median
        # of the finished trials' at the same step is pruned (its job cancelled, reason Pruned).
        pruner=optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=20))
    params = {
        "optimizer": optuna.distributions.CategoricalDistribution(["sgd", "adamw"]),
        "lr": optuna.distributions.FloatDistribution(1e-4, 1.0, log=True),
    }
    client = trainyard.Client(a.server, a.token)
    trainyard.optuna.optimize(study, a.template, metric="loss", params=params,
                              n_trials=a.trials, parallelism=a.parallelism, client=client)

    for t in study.trials:
        value = f"{t.value:.4f}" if t.state == optuna.trial.TrialState.COMPLETE else "-"
        print(f"trial {t.number:3d} {t.state.name:8s} job {t.user_attrs.get('trainyard_job_id')}"
              f"  loss {value}  {t.params}")
    print(f"best: trial {study.best_trial.number} {study.best_params} loss {study.best_value:.4f}")


if __name__ == "__main__":
    main()
