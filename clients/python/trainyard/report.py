"""``trainyard.report(step, **values)``: a running job's metrics, sent to the server that started it.

Inside a job (``TRAINYARD_SERVER``, ``TRAINYARD_TOKEN`` and ``TRAINYARD_JOB_ID`` set, as both
backends set them in every rank) each call appends one point to a bounded buffer and returns; a
daemon thread posts the buffer in batches to ``POST /v1/jobs/<id>/metrics`` every
``TRAINYARD_REPORT_INTERVAL`` seconds (default 5), sooner when a full batch is waiting. Outside a
job it does nothing. It is the Python twin of trainyard-worker's reporter (runtime/report.c): the
same route, body, interval and answers:

- 200: the batch is stored.
- no answer, 408, 429, 5xx: the batch stays buffered and is tried again at the next interval.
- 401, 403, 404, 409 (the token or the job is gone): everything buffered is dropped and the
  reporter stops; later points are dropped.
- any other answer (400, 413 ``metrics-cap``, 422 ``invalid-metrics``): that batch is dropped,
  as sending it again cannot change the answer.

Training is never held up or interrupted: a call takes a lock for an append only, never raises,
and when the buffer is full (the server is down or slow) the point is dropped and counted. At exit
what is buffered is sent within a short bound (5 s), and one line on stderr says how many points
were sent and dropped. Only the standard library and python3-requests are used.
"""

import atexit
import collections
import datetime
import math
import os
import re
import sys
import threading
import time

__all__ = ["report"]

CAPACITY = 8192            # points buffered, as trainyard-worker's reporter
MAX_BATCH = 2000           # points in one POST (the API takes 5000, bodies 1 MiB)
MAX_VALUES = 64            # named values in one point
INTERVAL_S = 5.0
MIN_INTERVAL_S, MAX_INTERVAL_S = 0.01, 3600.0
REQUEST_TIMEOUT_S = 10.0
FINAL_TIMEOUT_S = 5.0
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/-]{0,63}\Z")
_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")

# What one POST's answer means for its batch.
_OK, _RETRY, _DROP, _DISABLE = "ok", "retry", "drop", "disable"


def _classify(status):
    if status == 200:
        return _OK
    if status in (408, 429) or status >= 500:
        return _RETRY
    if status in (401, 403, 404, 409):
        return _DISABLE
    return _DROP


def _iso(t):
    d = datetime.datetime.fromtimestamp(t, datetime.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (d.microsecond // 1000)


class Reporter:
    """One job's reporter: the buffer, its sending thread and its counts."""

    def __init__(self, server, token, job_id, interval_s=INTERVAL_S, capacity=CAPACITY,
                 request_timeout_s=REQUEST_TIMEOUT_S, final_timeout_s=FINAL_TIMEOUT_S):
        self.url = "%s/v1/jobs/%s/metrics" % (server.rstrip("/"), job_id)
        self._headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
        self.interval_s = interval_s
        self.capacity = capacity
        self.request_timeout_s = request_timeout_s
        self.final_timeout_s = final_timeout_s
        self._cond = threading.Condition(threading.Lock())
        self._buf = collections.deque()
        self._wake_at = max(1, min(capacity // 2, MAX_BATCH))
        self._wake = self._stopping = self._disabled = self._closed = False
        self._deadline = 0.0
        self.pushed = self.sent = self.dropped = self.posts = self.failed = 0
        self.last_error = ""
        self._session = None
        self._thread = threading.Thread(target=self._run, name="trainyard-report", daemon=True)
        self._thread.start()

    # -- the training side -------------------------------------------------------------------

    def push(self, step, values):
        """Appends a point (values already checked), or drops and counts it; never blocks
        on anything but the buffer's lock, held for an append."""
        point = (step, time.time(), values)
        with self._cond:
            self.pushed += 1
            if self._disabled or self._stopping or len(self._buf) >= self.capacity:
                self.dropped += 1
                return
            self._buf.append(point)
            if len(self._buf) == self._wake_at:
                self._wake = True
                self._cond.notify()

    def drop(self):
        """Counts a point refused before it reached the buffer (a bad step or value)."""
        with self._cond:
            self.pushed += 1
            self.dropped += 1

    def stats(self):
        with self._cond:
            return {"pushed": self.pushed, "sent": self.sent, "dropped": self.dropped,
                    "buffered": len(self._buf), "posts": self.posts, "failed": self.failed}

    def close(self, log=None):
        """Sends what is buffered within final_timeout_s, stops the thread, drops the rest and
        writes the closing line to log; the counts. Idempotent."""
        with self._cond:
            if not self._stopping:
                self._stopping = True
                self._deadline = time.monotonic() + self.final_timeout_s
                self._cond.notify()
        # The thread gives up at the deadline; the margin covers a POST cut short.
        self._thread.join(self.final_timeout_s + 1.0)
        with self._cond:
            self.dropped += len(self._buf)
            self._buf.clear()
            self._disabled = self._closed = True
            st = {"pushed": self.pushed, "sent": self.sent, "dropped": self.dropped,
                  "buffered": 0, "posts": self.posts, "failed": self.failed}
            last = self.last_error
        if log is not None and st["pushed"]:
            line = "trainyard.report: %d points sent, %d dropped" % (st["sent"], st["dropped"])
            if last and st["dropped"]:
                line += " (last failure: %s)" % last
            try:
                print(line, file=log, flush=True)
            except Exception:
                pass
        return st

    # -- the sending thread ------------------------------------------------------------------

    def _post(self, batch):
        """(result, why) for one POST of batch."""
        try:
            import requests
        except ImportError:
            return _DISABLE, "python3-requests is not installed"
        body = {"points": []}
        for step, t, values in batch:
            p = {"step": step, "time": _iso(t)}
            p.update(values)
            body["points"].append(p)
        timeout = self.request_timeout_s
        with self._cond:
            if self._stopping:
                timeout = min(timeout, self._deadline - time.monotonic())
        if timeout <= 0.001:
            return _RETRY, "no time left to send"
        try:
            if self._session is None:
                self._session = requests.Session()
                self._session.trust_env = False      # no proxies, no .netrc: the job's server
            r = self._session.post(self.url, json=body, headers=self._headers,
                                   timeout=timeout, allow_redirects=False)
            status = r.status_code
            r.close()
        except Exception as e:    # noqa: BLE001 - any failure to send is a retry, never a raise
            self._session = None
            return _RETRY, type(e).__name__
        res = _classify(status)
        return res, "" if res == _OK else "HTTP %d" % status

    def _send_batch(self):
        """Posts the oldest batch; called and returns with the lock held, released for the POST.
        Only this thread removes points, so the batch stays at the head while it is sent."""
        n = min(len(self._buf), MAX_BATCH)
        batch = [self._buf[i] for i in range(n)]
        self._cond.release()
        try:
            res, why = self._post(batch)
        finally:
            self._cond.acquire()
        if self._closed:
            # close() gave up waiting and has counted the buffer as dropped.
            return _DISABLE
        self.posts += 1
        if res != _OK:
            self.failed += 1
            self.last_error = why
        if res in (_OK, _DROP):
            for _ in range(n):
                self._buf.popleft()
            if res == _OK:
                self.sent += n
            else:
                self.dropped += n
        elif res == _DISABLE:
            self.dropped += len(self._buf)
            self._buf.clear()
            self._disabled = True
        return res

    def _run(self):
        nxt = time.monotonic() + self.interval_s
        with self._cond:
            while True:
                while not self._stopping and not self._wake:
                    left = nxt - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._stopping:
                    break
                self._wake = False
                nxt = time.monotonic() + self.interval_s
                while self._buf and not self._stopping and self._send_batch() == _OK:
                    pass
            # The final flush: bounded by the deadline, given up at the first failure.
            while (self._buf and not self._disabled and time.monotonic() < self._deadline
                   and self._send_batch() == _OK):
                pass


_lock = threading.Lock()
_reporter = None
_state = None          # None: not looked at yet; "off": not in a job; "on": _reporter runs
_warned = set()


def _warn(key, msg):
    if key not in _warned:
        _warned.add(key)
        try:
            print("trainyard.report: " + msg, file=sys.stderr, flush=True)
        except Exception:
            pass


def _open():
    """The reporter for this process's job, started on first use; None outside a job."""
    global _reporter, _state
    with _lock:
        if _state is None:
            _state = "off"
            server = os.environ.get("TRAINYARD_SERVER", "")
            token = os.environ.get("TRAINYARD_TOKEN", "")
            job = os.environ.get("TRAINYARD_JOB_ID", "")
            if server and token and job:
                interval = os.environ.get("TRAINYARD_REPORT_INTERVAL", "")
                try:
                    iv = float(interval) if interval else INTERVAL_S
                except ValueError:
                    iv = None
                if not server.startswith(("http://", "https://")):
                    _warn("cfg", "reporting off: TRAINYARD_SERVER: not an http:// or https:// URL")
                elif not _JOB_ID.match(job):
                    _warn("cfg", "reporting off: TRAINYARD_JOB_ID: not a job id")
                elif "\r" in token or "\n" in token:
                    _warn("cfg", "reporting off: TRAINYARD_TOKEN: not one line")
                elif iv is None or not MIN_INTERVAL_S <= iv <= MAX_INTERVAL_S:
                    _warn("cfg", "reporting off: TRAINYARD_REPORT_INTERVAL: \"%s\" is not a number "
                          "of seconds from %g to %g" % (interval, MIN_INTERVAL_S, MAX_INTERVAL_S))
                else:
                    try:
                        _reporter = Reporter(server, token, job, interval_s=iv)
                        _state = "on"
                    except Exception as e:  # noqa: BLE001 - e.g. no thread can be started
                        _warn("cfg", "reporting off: %s" % e)
        return _reporter


def _clean(step, values):
    """(step, {name: float}) for a point the API takes, or None."""
    if isinstance(step, bool):
        return None
    try:
        step = int(step)
    except Exception:
        return None
    if step < 0 or step > 9007199254740991:
        return None
    out = {}
    for name, v in values.items():
        if name in ("step", "time") or not _NAME.match(name):
            _warn("name:" + name, "%r is not a metric name ([A-Za-z_][A-Za-z0-9_.:/-]{0,63}); "
                  "the value is left out" % name)
            continue
        try:
            f = float(v)
        except Exception:
            continue
        if math.isfinite(f) and abs(f) < 1e308:
            out[name] = f
        if len(out) == MAX_VALUES:
            break
    return (step, out) if out else None


def report(step, **values):
    """Reports the named values (numbers: float, int, 0-d tensors) of a training step.

    ``trainyard.report(step, loss=0.53, accuracy=0.91)``. Never raises and never waits for the
    network; outside a job it does nothing. A point without a finite value, or with a negative
    step, is dropped and counted; a value that is not finite (NaN, inf) is left out of its point.
    """
    try:
        r = _reporter if _state == "on" else (None if _state == "off" else _open())
        if r is None:
            return
        point = _clean(step, values)
        if point is None:
            r.drop()
        else:
            r.push(point[0], point[1])
    except Exception:   # noqa: BLE001 - reporting never stops training
        pass


def stats():
    """The counts of this process's reporter ({} outside a job): pushed, sent, dropped, buffered,
    posts, failed."""
    r = _reporter
    return r.stats() if r is not None else {}


def flush(timeout=FINAL_TIMEOUT_S):
    """Waits up to timeout seconds for the buffer to empty (sent or dropped); True when it did.
    Wakes the sending thread rather than wait for the interval."""
    r = _reporter
    if r is None:
        return True
    end = time.monotonic() + timeout
    with r._cond:
        r._wake = True
        r._cond.notify()
    while time.monotonic() < end:
        with r._cond:
            if not r._buf or r._disabled or r._stopping:
                return not r._buf
            if not r._wake:
                r._wake = True
                r._cond.notify()
        time.sleep(0.01)
    return False


def _at_exit():
    r = _reporter
    if r is not None:
        r.close(sys.stderr)


def _after_fork_in_child():
    # The sending thread does not exist in a forked child (a DataLoader worker, say): the child
    # starts its own reporter if it reports.
    global _reporter, _state, _lock
    _lock = threading.Lock()
    _reporter = None
    _state = None


atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

report.stats = stats
report.flush = flush
