"""trainyard.optuna against a real server: an Optuna study whose trials are jobs of a fake
trainer (tests/optuna_trainer.py, loss_t = (lr - 0.1)^2 + c/t) finds the best learning rate,
prunes the bad trials (their jobs cancelled with reason Pruned) and fails the trial whose job
failed."""

import math
import pathlib
import sys

import pytest

import trainyard
import trainyard.optuna as tyo

optuna = pytest.importorskip("optuna")

TESTS = pathlib.Path(__file__).resolve().parent
PACKAGE_DIR = TESTS.parent
STEPS = 10
C = 1.0


def template(extra_args=()):
    return {
        "name": "optuna-trial",
        "labels": {"team": "search"},
        "command": [sys.executable, str(TESTS / "optuna_trainer.py")],
        "args": ["--lr", "${lr}", "--c", str(C), "--steps", str(STEPS), "--step-seconds", "0.3",
                 *extra_args],
        "env": {"PYTHONPATH": str(PACKAGE_DIR)},
        "workers": {"count": 1},
        "timeout_seconds": 120,
    }


def loss(lr, t=STEPS):
    return (lr - 0.1) ** 2 + C / t


def test_fill_template():
    spec = tyo.fill_template({"name": "x", "args": ["--lr", "${lr}", "a${opt}b", 3],
                              "env": {"N": "${n}"}, "workers": {"count": 1}},
                             {"lr": 0.01, "opt": "sgd", "n": 4})
    assert spec["args"] == ["--lr", "0.01", "asgdb", 3]
    assert spec["env"] == {"N": "4"}
    with pytest.raises(KeyError, match=r"\$\{momentum\}"):
        tyo.fill_template({"args": ["${momentum}"]}, {"lr": 0.1})


def test_study_finds_best_region_and_prunes(server):
    token = server.make_token()
    client = trainyard.Client(server.url, token)
    study = optuna.create_study(
        study_name="lr search", direction="minimize",
        sampler=optuna.samplers.RandomSampler(seed=7),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=2))
    # Two trials a little off the best (the pruner's median, done before any other starts with
    # parallelism 2), two in the best region, two far off (pruned), one that crashes.
    for lr in (0.3, 0.0, 0.1, 2.0, 0.12, 3.0, -1.0):
        study.enqueue_trial({"lr": lr})
    params = {"lr": optuna.distributions.FloatDistribution(-1.0, 3.0)}
    tyo.optimize(study, template(), metric="loss", params=params, n_trials=7, parallelism=2,
                 client=client)

    trials = {t.params["lr"]: t for t in study.trials}
    assert len(trials) == 7
    S = optuna.trial.TrialState
    assert study.best_params["lr"] == pytest.approx(0.1)
    assert study.best_value == pytest.approx(loss(0.1))
    for lr in (0.3, 0.0, 0.1, 0.12):
        t = trials[lr]
        assert t.state == S.COMPLETE, (lr, t.state)
        # The objective is the last reported value, and every step was seen by the pruner.
        assert t.value == pytest.approx(loss(lr))
        assert sorted(t.intermediate_values) == list(range(1, STEPS + 1))
        job = client.get(t.user_attrs["trainyard_job_id"])
        assert job["state"] == "SUCCEEDED"
        labels = job["spec"]["labels"]
        assert labels["optuna-study"] == "lr-search"
        assert labels["optuna-trial"] == str(t.number)
        assert labels["team"] == "search"
        assert job["spec"]["args"][:2] == ["--lr", repr(lr)]

    for lr in (2.0, 3.0):
        t = trials[lr]
        assert t.state == S.PRUNED, (lr, t.state)
        pruned_at = max(t.intermediate_values)
        assert pruned_at < STEPS
        job_id = t.user_attrs["trainyard_job_id"]
        assert client.get(job_id)["state"] == "CANCELLED"
        pruned = [e for e in client.events(job_id) if e["reason"] == "Pruned"]
        assert len(pruned) == 1, client.events(job_id)
        assert pruned[0]["to"] in ("CANCELLING", "CANCELLED")
        assert (f"optuna study lr search trial {t.number} pruned at step {pruned_at}"
                in pruned[0]["message"])

    crashed = trials[-1.0]
    assert crashed.state == S.FAIL
    job = client.get(crashed.user_attrs["trainyard_job_id"])
    assert job["state"] == "FAILED"
    assert "exited with code 3" in crashed.user_attrs["trainyard_error"]

    # Every job of the study carries its label, one per trial.
    jobs = list(client.list(labels={"optuna-study": "lr-search"}))
    assert sorted(int(j["spec"]["labels"]["optuna-trial"]) for j in jobs) == list(range(7))


def test_callable_template_and_no_metric(server):
    """A template(trial) suggests its own parameters; a job that never reports the metric
    fails its trial instead of giving a value."""
    client = trainyard.Client(server.url, server.make_token())
    study = optuna.create_study(direction="minimize")

    def make(trial):
        spec = template(["--steps", "2"])
        spec["args"][1] = str(trial.suggest_float("lr", 0.05, 0.15))
        return spec

    tyo.optimize(study, make, metric="accuracy", n_trials=1, client=client)
    (t,) = study.trials
    assert t.state == optuna.trial.TrialState.FAIL
    assert "without reporting accuracy" in t.user_attrs["trainyard_error"]
    assert client.get(t.user_attrs["trainyard_job_id"])["state"] == "SUCCEEDED"

    study = optuna.create_study(direction="minimize")
    tyo.optimize(study, make, metric="loss", n_trials=1, client=client)
    assert math.isclose(study.best_value, loss(study.best_params["lr"], 2), rel_tol=1e-9)
