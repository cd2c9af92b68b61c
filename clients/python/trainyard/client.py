"""trainyard.Client: the REST API (openapi/openapi.yaml) as Python calls.

Resources come back as the API's JSON documents (dicts and lists, unchanged); errors as the
exceptions of trainyard.errors. Every request the client can make is named in OPERATIONS, which
tests/test_contract.py checks against openapi/openapi.yaml.
"""

import collections
import json
import os
import pathlib
import stat
import time
import urllib.parse

import requests
import yaml

from . import errors

# Client method -> (operationId, HTTP method, path template, response members the method reads).
# The only routes this module sends requests to; tests/test_contract.py holds it to the contract.
OPERATIONS = {
    "submit": ("submitJob", "POST", "/v1/jobs", ()),
    "submit_batch": ("submitJobs", "POST", "/v1/jobs:batch", ("jobs",)),
    "get": ("getJob", "GET", "/v1/jobs/{id}", ("state",)),
    "list": ("listJobs", "GET", "/v1/jobs", ("jobs", "next_page_token")),
    "cancel": ("cancelJob", "POST", "/v1/jobs/{id}:cancel", ()),
    "events": ("getJobEvents", "GET", "/v1/jobs/{id}/events", ("events",)),
    "attempts": ("getJobAttempts", "GET", "/v1/jobs/{id}/attempts", ("attempts",)),
    "logs": ("getJobLogs", "GET", "/v1/jobs/{id}/logs", ()),
    "metrics": ("getJobMetrics", "GET", "/v1/jobs/{id}/metrics", ("series",)),
    "watch": ("followEvents", "GET", "/v1/events", ()),
    "create_sweep": ("createSweep", "POST", "/v1/sweeps", ()),
    "list_sweeps": ("listSweeps", "GET", "/v1/sweeps", ("sweeps", "next_page_token")),
    "get_sweep": ("getSweep", "GET", "/v1/sweeps/{id}", ()),
    "cancel_sweep": ("cancelSweep", "POST", "/v1/sweeps/{id}:cancel", ()),
    "queue": ("listQueue", "GET", "/v1/queue", ("jobs",)),
    "cluster": ("getCluster", "GET", "/v1/cluster", ()),
    "whoami": ("whoami", "GET", "/v1/whoami", ("scopes",)),
    "teams": ("listTeams", "GET", "/v1/teams", ("teams",)),
    "get_team": ("getTeam", "GET", "/v1/teams/{id}", ()),
    "create_team": ("createTeam", "POST", "/v1/teams", ()),
    "update_team": ("updateTeam", "PUT", "/v1/teams/{id}", ()),
    "delete_team": ("deleteTeam", "DELETE", "/v1/teams/{id}", ()),
}

TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})

# A followed stream: the server sends ": ping" after 15 s without an event, so a read that
# waits longer than this has lost its connection.
STREAM_READ_TIMEOUT = 40.0
# Consecutive cuts of a followed stream, each resumed from its last id, before giving up.
STREAM_RETRIES = 10
# The wait for a place when the server refuses a stream (429 too-many-streams) without
# Retry-After.
STREAM_PLACE_WAIT = 5.0

# One event of a followed stream: event is its type ("job", "metrics"), id its `id:` (what
# Last-Event-ID resumes after), data its JSON document.
StreamEvent = collections.namedtuple("StreamEvent", "event id data")


def config_path():
    """The CLI's config file: $XDG_CONFIG_HOME/trainyard/config (an absolute XDG_CONFIG_HOME),
    else ~/.config/trainyard/config; None when neither variable is set."""
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    if xdg.startswith("/"):
        return pathlib.Path(xdg, "trainyard", "config")
    home = os.environ.get("HOME", "")
    return pathlib.Path(home, ".config", "trainyard", "config") if home else None


def read_config(path=None):
    """The config file's {"server": ..., "token": ...} (either may be absent); {} when there is
    no file. A file that its group or others may read or write holds a token for anyone to
    take: it is refused (ConfigError), not read, as the CLI does."""
    path = pathlib.Path(path) if path else config_path()
    if path is None:
        return {}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise errors.ConfigError(f"{path}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise errors.ConfigError(f"{path}: not a regular file")
        if st.st_mode & 0o077:
            raise errors.ConfigError(
                f"{path} holds a token and may be read by others (mode "
                f"{st.st_mode & 0o777:03o}); run: chmod 600 {path}")
        try:
            doc = yaml.safe_load(f.read())
        except yaml.YAMLError as e:
            raise errors.ConfigError(f"{path}: not YAML: {e}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise errors.ConfigError(f"{path}: not a mapping with server and token")
    return {k: str(doc[k]) for k in ("server", "token") if doc.get(k)}


def load_spec(spec):
    """A job or sweep spec: a dict as is, else the path of a YAML (or JSON) file holding one."""
    if isinstance(spec, dict):
        return spec
    with open(spec, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    if not isinstance(doc, dict):
        raise ValueError(f"{spec}: not a mapping")
    return doc


def _csv(value):
    """A str, or an iterable of str, as the API's repeated query parameter."""
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)


def _labels(labels):
    """{"k": "v"} or ["k=v", ...] as repeated label=k=v parameters."""
    if labels is None:
        return None
    if isinstance(labels, dict):
        return [f"{k}={v}" for k, v in labels.items()]
    return _csv(labels)


def _query(**params):
    """The query parameters that are set, booleans as the API spells them."""
    out = {}
    for k, v in params.items():
        if v is None:
            continue
        out[k] = ("true" if v else "false") if isinstance(v, bool) else v
    return out


class Client:
    """A client of one Trainyard server with one token.

    server: the server's URL (e.g. http://127.0.0.1:8080), else $TRAINYARD_SERVER, else the
    CLI's config file (`trainyard login` writes it). token: likewise from $TRAINYARD_TOKEN or
    the file. timeout: seconds for each request that is not a followed stream. session: a
    requests.Session to send with (default a new one)."""

    def __init__(self, server=None, token=None, timeout=30.0, session=None):
        server = server or os.environ.get("TRAINYARD_SERVER") or None
        token = token or os.environ.get("TRAINYARD_TOKEN") or None
        if not server or not token:
            conf = read_config()
            server = server or conf.get("server")
            token = token or conf.get("token")
        if not server:
            raise errors.ConfigError("no server: pass server=, set TRAINYARD_SERVER or run "
                                     "trainyard login")
        if not token:
            raise errors.ConfigError("no token: pass token=, set TRAINYARD_TOKEN or run "
                                     "trainyard login")
        self.server = server.rstrip("/")
        self.timeout = timeout
        self._session = session or requests.Session()
        self._auth = {"Authorization": f"Bearer {token}"}

    def __repr__(self):
        return f"trainyard.Client({self.server!r})"

    def close(self):
        self._session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- requests ------------------------------------------------------------------------

    def _url(self, op, ident=None):
        path = OPERATIONS[op][2]
        if ident is not None:
            path = path.replace("{id}", urllib.parse.quote(str(ident), safe=""))
        return self.server + path

    def _send(self, op, ident=None, params=None, body=None, headers=None, stream=False,
              timeout=None):
        """Sends the operation's request; returns the requests.Response of a 2xx answer, raises
        the APIError of any other."""
        method = OPERATIONS[op][1]
        h = dict(self._auth)
        if headers:
            h.update({k: v for k, v in headers.items() if v is not None})
        r = self._session.request(method, self._url(op, ident), params=params, json=body,
                                  headers=h, stream=stream, timeout=timeout or self.timeout)
        if r.status_code >= 400:
            try:
                raise errors.error_from_response(r)
            finally:
                r.close()
        return r

    def _json(self, op, ident=None, **kw):
        r = self._send(op, ident, **kw)
        return r.json() if r.status_code != 204 else None

    def _pages(self, op, key, params):
        """Every item of a paged list, following next_page_token until it is absent."""
        params = dict(params)
        while True:
            doc = self._json(op, params=params)
            yield from doc[key]
            token = doc.get("next_page_token")
            if not token:
                return
            params["page_token"] = token

    # ---- jobs ----------------------------------------------------------------------------

    def submit(self, spec, idempotency_key=None):
        """Submits one job (a JobSpec dict, or the path of a YAML file holding one); returns
        the Job. With the same idempotency_key again, the first submission's job."""
        return self._json("submit", body=load_spec(spec),
                          headers={"Idempotency-Key": idempotency_key})

    def submit_batch(self, specs, team=None, idempotency_key=None):
        """Submits 1 to 1000 jobs in one transaction (all or none); returns their Jobs in order."""
        body = {"jobs": [load_spec(s) for s in specs]}
        if team is not None:
            body["team"] = team
        return self._json("submit_batch", body=body,
                          headers={"Idempotency-Key": idempotency_key})["jobs"]

    def get(self, job_id):
        """The Job."""
        return self._json("get", job_id)

    def list(self, state=None, queue=None, labels=None, name_prefix=None, created_after=None,
             created_before=None, page_size=None):
        """Every job that matches, newest first, fetched page by page as the iterator goes.
        state: a state or a list of states (any matches); labels: {"k": "v"} or ["k=v"] (all
        must match); created_after/created_before: RFC 3339 strings."""
        return self._pages("list", "jobs", _query(
            state=_csv(state), queue=queue, label=_labels(labels), name_prefix=name_prefix,
            created_after=created_after, created_before=created_before, limit=page_size))

    def cancel(self, job_id, reason=None, message=None):
        """Cancels the job; returns it (CANCELLED, or CANCELLING while its ranks stop). reason
        (a CamelCase word, e.g. "Pruned") and message are what the cancel's event says instead
        of "Cancelled" and "cancelled by <token name>". A finished job is a Conflict (code
        job-finished)."""
        body = {k: v for k, v in (("reason", reason), ("message", message)) if v is not None}
        return self._json("cancel", job_id, body=body or None)

    def attempts(self, job_id):
        """The job's attempts, oldest first."""
        return self._json("attempts", job_id)["attempts"]

    def events(self, job_id, follow=False, last_event_id=None):
        """The job's state transitions. Without follow, the list of Events. With follow, an
        iterator of StreamEvents: every event of the job (after last_event_id, an id of an
        earlier stream), then new ones and the metric points it reports ("metrics") as they
        come, until the job ends; a cut connection is resumed from the last id."""
        if not follow:
            return self._json("events", job_id)["events"]
        return self._follow("events", job_id, {"follow": "true"}, last_event_id, job=True)

    def wait(self, job_id, timeout=None):
        """Follows the job's event stream until the job reaches SUCCEEDED, FAILED or CANCELLED
        (resuming after cuts, e.g. a server restart) and returns the final Job. timeout:
        seconds, after which TimeoutError."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for _ in self._follow("events", job_id, {"follow": "true"}, None, job=True,
                              deadline=deadline):
            pass
        return self.get(job_id)

    def logs(self, job_id, rank=0, attempt=None, tail=None, follow=False):
        """What one rank wrote (stdout and stderr). Without follow, the text so far (the last
        tail lines when tail is set). With follow, an iterator of text chunks as the rank
        writes them, ending when the rank ends."""
        params = _query(rank=rank, attempt=attempt, tail=tail, follow=follow or None)
        if not follow:
            r = self._send("logs", job_id, params=params)
            return r.content.decode("utf-8", errors="replace")
        return self._follow_logs(job_id, params)

    def metrics(self, job_id, names=None, max_points=None, since_step=None):
        """The job's metric series ({"name", "total_points", "points": [{"step", "value",
        ...}]}), each downsampled to at most max_points; names: a name or a list (default
        every series); since_step: only the steps above it."""
        return self._json("metrics", job_id, params=_query(
            name=_csv(names), max_points=max_points, since_step=since_step))["series"]

    def watch(self, state=None, queue=None, labels=None, last_event_id=None):
        """Every job's state changes, live (GET /v1/events): an endless iterator of
        StreamEvents, from now on or after last_event_id; filters as list(). A cut connection
        (a server restart) is resumed from the last id."""
        params = _query(follow=True, state=_csv(state), queue=queue, label=_labels(labels))
        return self._follow("watch", None, params, last_event_id, job=False)

    # ---- sweeps ----------------------------------------------------------------------------

    def create_sweep(self, spec):
        """Creates a sweep and its trials (a SweepRequest dict, or a YAML file); the Sweep."""
        return self._json("create_sweep", body=load_spec(spec))

    def get_sweep(self, sweep_id):
        return self._json("get_sweep", sweep_id)

    def list_sweeps(self, page_size=None):
        """Every sweep, newest first, page by page as the iterator goes."""
        return self._pages("list_sweeps", "sweeps", _query(limit=page_size))

    def cancel_sweep(self, sweep_id):
        """Cancels the sweep and its trials that have not ended; the Sweep."""
        return self._json("cancel_sweep", sweep_id)

    # ---- teams, queue, cluster -------------------------------------------------------------

    def queue(self, team=None, limit=None):
        """The PENDING jobs in the order admission would take them, each with where it stands."""
        return self._json("queue", params=_query(team=team, limit=limit))["jobs"]

    def cluster(self):
        """The cluster: per zone and GPU type its nodes and their GPUs (free, in use)."""
        return self._json("cluster")

    def whoami(self):
        """The calling token: its name, scopes and team."""
        return self._json("whoami")

    def teams(self):
        """Every team with its usage (a team's token: its own)."""
        return self._json("teams")["teams"]

    def get_team(self, name):
        return self._json("get_team", name)

    def create_team(self, name, **fields):
        """Creates a team (admin); fields: quota, borrowing_limit, weight, priority_preemption."""
        return self._json("create_team", body={"name": name, **fields})

    def update_team(self, name, **fields):
        """Replaces the team's quota, borrowing_limit, weight and priority_preemption (admin);
        those not given go back to their defaults."""
        return self._json("update_team", name, body=fields)

    def delete_team(self, name):
        """Deletes a team without jobs or tokens (admin)."""
        self._json("delete_team", name)

    # ---- followed streams ------------------------------------------------------------------

    def _open_stream(self, op, ident, params, last_id):
        """The response of a followed stream, waiting while the server has no place for it."""
        while True:
            try:
                return self._send(op, ident, params=params,
                                  headers={"Last-Event-ID": last_id},
                                  stream=True, timeout=(self.timeout, STREAM_READ_TIMEOUT))
            except errors.TooManyRequests as e:
                time.sleep(e.retry_after if e.retry_after is not None else STREAM_PLACE_WAIT)

    def _follow(self, op, ident, params, last_id, job, deadline=None):
        """Server-Sent Events as an iterator of StreamEvents. The stream is opened before this
        returns (so its errors are raised here, and nothing after the call is missed). A
        transfer cut midway, a connection that cannot be made once the stream was answered, or
        (job streams) an end before the job's terminal state is resumed with Last-Event-ID, up
        to STREAM_RETRIES times in a row without an event."""
        first = self._open_stream(op, ident, params, last_id)
        return self._resume(first, op, ident, params, last_id, job, deadline)

    def _resume(self, r, op, ident, params, last_id, job, deadline):
        failures = 0
        while True:
            progressed, ended = False, False
            try:
                if r is None:
                    r = self._open_stream(op, ident, params, last_id)
                with r:
                    for ev in _sse(r, deadline):
                        if ev.id:
                            last_id = ev.id
                        progressed = True
                        if ev.event == "job" and job and ev.data.get("to") in TERMINAL_STATES:
                            ended = True
                        yield ev
                if job and ended:
                    return
            except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError,
                    requests.Timeout, errors.ServiceUnavailable):
                pass
            r = None
            failures = 0 if progressed else failures + 1
            if failures >= STREAM_RETRIES:
                raise errors.TrainyardError(f"the stream was cut off {failures} times in a row")
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("the job did not end in time")
            time.sleep(1.0)  # a restarting server gets a moment before the next try

    def _follow_logs(self, job_id, params):
        r = self._open_stream("logs", job_id, params, None)
        return self._log_chunks(r)

    @staticmethod
    def _log_chunks(r):
        with r:
            for chunk in r.iter_content(chunk_size=None):
                yield chunk.decode("utf-8", errors="replace")


def _sse(response, deadline=None):
    """The events of a text/event-stream response as StreamEvents (comments skipped)."""
    buf = b""
    event, ident, data = "message", None, []
    for chunk in response.iter_content(chunk_size=None):
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError("the job did not end in time")
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for raw in lines:
            line = raw.rstrip(b"\r").decode("utf-8")
            if not line:
                if data:
                    yield StreamEvent(event, ident, json.loads("\n".join(data)))
                event, data = "message", []
                continue
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                event = value
            elif field == "data":
                data.append(value)
            elif field == "id":
                ident = value
