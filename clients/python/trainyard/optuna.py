"""trainyard.optuna: an Optuna study whose trials are Trainyard jobs.

Each trial submits one job, made from a template and the trial's parameters, and follows it:

- **Template.** A job spec (a dict, or the path of a YAML file holding one) in which ``${name}``
  inside a string is replaced by the trial's parameter ``name`` (as a sweep's template on the
  server: strings only, so ``args: [--lr, "${lr}"]`` gives ``"0.01"``; a name that is not a
  parameter is an error before anything is submitted). Or a callable ``template(trial) -> spec``
  that suggests its own parameters and returns the spec (for numbers outside strings, say).
- **Parameters.** ``params`` maps each name to an Optuna distribution
  (``optuna.distributions.FloatDistribution(1e-4, 1, log=True)``, ``IntDistribution``,
  ``CategoricalDistribution``), or is a callable ``params(trial) -> dict`` that calls
  ``trial.suggest_*`` itself.
- **Labels.** Every job gets ``optuna-study=<study name>`` and ``optuna-trial=<trial number>``
  (and the template's own labels); the trial keeps its job id in the user attribute
  ``trainyard_job_id`` (and, when it failed, why in ``trainyard_error``).
- **Objective.** The job's last reported value of ``metric`` (the point with the highest step,
  ``GET /v1/jobs/{id}/metrics``) once the job has SUCCEEDED. A job that FAILED, was cancelled by
  someone else, or succeeded without reporting the metric fails the trial (``TrialJobError``).
- **Pruning.** Every point of ``metric`` the job reports while it runs (its event stream) goes to
  ``trial.report(value, step)``; when ``trial.should_prune()`` says so the job is cancelled with
  reason ``Pruned`` (its event says which study, trial and step) and the trial raises
  ``optuna.TrialPruned``.
- **Parallelism.** ``optimize(..., parallelism=N)`` runs N trials at a time, each on a thread of
  Optuna's ``n_jobs`` that drives one job, as a sweep's ``parallelism`` bounds its running trials.

Optuna is imported when a study is run, so ``import trainyard`` works without it.

    import optuna, trainyard, trainyard.optuna
    study = optuna.create_study(direction="minimize", pruner=optuna.pruners.MedianPruner())
    trainyard.optuna.optimize(
        study, "trial.yaml",
        params={"lr": optuna.distributions.FloatDistribution(1e-3, 1.0, log=True)},
        metric="loss", n_trials=20, parallelism=4, client=trainyard.Client())
    print(study.best_params)
"""

import copy
import re

from . import client as _client
from . import errors

__all__ = ["JobObjective", "TrialJobError", "optimize", "fill_template"]

LABEL_STUDY = "optuna-study"
LABEL_TRIAL = "optuna-trial"
PRUNED_REASON = "Pruned"

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_LABEL_BAD = re.compile(r"[^A-Za-z0-9_.-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class TrialJobError(errors.TrainyardError):
    """A trial's job did not give a value: it failed, was cancelled by someone else, or ended
    without reporting the metric. job is the Job as it ended."""

    def __init__(self, message, job=None):
        super().__init__(message)
        self.job = job


def _text(value):
    """A parameter's value as the text put into a template's string."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def fill_template(template, params):
    """A copy of template (a dict, or a YAML file's path) with every ``${name}`` inside a string
    replaced by params[name]. KeyError names the first placeholder that is not a parameter."""
    spec = copy.deepcopy(_client.load_spec(template))

    def sub(match):
        name = match.group(1)
        if name not in params:
            raise KeyError(f"the template names ${{{name}}}, which is not a parameter "
                           f"(parameters: {', '.join(sorted(params)) or 'none'})")
        return _text(params[name])

    def walk(v):
        if isinstance(v, str):
            return _PLACEHOLDER.sub(sub, v)
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return v

    return walk(spec)


def _label_value(text):
    """text as a Kubernetes label value: at most 63 of [A-Za-z0-9_.-], alphanumeric at both ends."""
    v = _LABEL_BAD.sub("-", str(text))[:63].strip("-_.")
    return v or "study"


def _suggest(trial, params):
    """The trial's parameters: params(trial) when it is callable, else one suggestion per
    distribution."""
    if callable(params):
        values = params(trial)
        if not isinstance(values, dict):
            raise TypeError("params(trial) must return a dict of parameter values")
        return values
    import optuna
    d = optuna.distributions
    values = {}
    for name, dist in (params or {}).items():
        if isinstance(dist, d.FloatDistribution):
            values[name] = trial.suggest_float(name, dist.low, dist.high, log=dist.log,
                                               step=dist.step)
        elif isinstance(dist, d.IntDistribution):
            values[name] = trial.suggest_int(name, dist.low, dist.high, log=dist.log,
                                             step=dist.step)
        elif isinstance(dist, d.CategoricalDistribution):
            values[name] = trial.suggest_categorical(name, dist.choices)
        else:
            raise TypeError(f"parameter {name}: not a FloatDistribution, IntDistribution or "
                            f"CategoricalDistribution: {dist!r}")
    return values


class JobObjective:
    """An Optuna objective (``study.optimize(JobObjective(...), n_jobs=N)``) that runs each trial
    as a Trainyard job; see the module's description. Pass ``catch=(TrialJobError,)`` to
    ``study.optimize`` so that a failed job fails its trial without ending the study
    (``optimize()`` below does).

    client: a trainyard.Client (default: Client() from the environment or the CLI's config).
    template: a spec dict, a YAML file's path, or a callable template(trial) -> spec.
    params: a dict of Optuna distributions, or a callable params(trial) -> dict (ignored when
    template is callable). metric: the reported series that is the objective. A trial's time is
    bounded by its spec's timeout_seconds (the server fails the job after it)."""

    def __init__(self, template, metric, params=None, client=None):
        self.template = template if callable(template) else _client.load_spec(template)
        self.params = params
        self.metric = metric
        self.client = client if client is not None else _client.Client()

    def spec(self, trial):
        """The trial's job spec, labelled with its study and number."""
        if callable(self.template):
            spec = copy.deepcopy(self.template(trial))
        else:
            spec = fill_template(self.template, _suggest(trial, self.params))
        labels = dict(spec.get("labels") or {})
        labels[LABEL_STUDY] = _label_value(trial.study.study_name)
        labels[LABEL_TRIAL] = str(trial.number)
        spec["labels"] = labels
        return spec

    def __call__(self, trial):
        import optuna
        job = self.client.submit(self.spec(trial))
        job_id = job["id"]
        trial.set_user_attr("trainyard_job_id", job_id)
        try:
            pruned_at = self._follow(trial, job_id)
        except BaseException:
            # The study is stopping (Ctrl-C, an error here): the job must not run on.
            try:
                self._cancel(job_id, "Cancelled", f"optuna trial {trial.number} stopped")
            except Exception:  # noqa: BLE001 - the first error is the one to raise
                pass
            raise
        job = self.client.get(job_id)
        if pruned_at is not None:
            raise optuna.TrialPruned(f"pruned at step {pruned_at}; job {job_id} cancelled")
        state = job["state"]
        if state != "SUCCEEDED":
            events = self.client.events(job_id)
            why = f": {events[-1]['message']}" if events and events[-1].get("message") else ""
            self._fail(trial, f"job {job_id} ended {state}{why}", job)
        series = self.client.metrics(job_id, names=self.metric, max_points=2)
        points = series[0]["points"] if series else []
        if not points:
            self._fail(trial, f"job {job_id} succeeded without reporting {self.metric}", job)
        return float(points[-1]["value"])

    @staticmethod
    def _fail(trial, message, job):
        """Fails the trial, keeping why in its user attribute trainyard_error."""
        trial.set_user_attr("trainyard_error", message)
        raise TrialJobError(message, job)

    def _follow(self, trial, job_id):
        """Reads the job's event stream until the job ends, reporting the metric's points to
        the trial; returns the step at which the trial was pruned (its job cancelled), else
        None."""
        pruned_at = None
        last_step = -1
        for ev in self.client.events(job_id, follow=True):
            if ev.event != "metrics" or pruned_at is not None:
                continue
            for p in ev.data.get("points", []):
                value, step = p.get(self.metric), p.get("step")
                if value is None or step is None or step <= last_step:
                    continue
                last_step = step
                trial.report(float(value), step)
                if trial.should_prune():
                    pruned_at = step
                    self._cancel(job_id, PRUNED_REASON,
                                 f"optuna study {trial.study.study_name[:80]} trial "
                                 f"{trial.number} pruned at step {step}")
                    break
        return pruned_at

    def _cancel(self, job_id, reason, message):
        """Cancels the job with the reason and message of its event; a job that has already
        finished is left as it is."""
        text = _CONTROL.sub(" ", message)[:200]
        try:
            self.client.cancel(job_id, reason=reason, message=text)
        except errors.Conflict:
            pass


def optimize(study, template, metric, params=None, n_trials=None, parallelism=1, client=None,
             timeout=None, callbacks=None):
    """Runs the study's trials as Trainyard jobs, parallelism of them at a time, until n_trials
    trials have run (or timeout seconds have passed); a trial whose job failed is recorded as
    failed and the study goes on. Returns the study (study.best_params, study.trials, ...)."""
    if parallelism < 1:
        raise ValueError("parallelism must be at least 1")
    objective = JobObjective(template, metric, params=params, client=client)
    study.optimize(objective, n_trials=n_trials, timeout=timeout, n_jobs=parallelism,
                   catch=(TrialJobError,), callbacks=callbacks)
    return study
