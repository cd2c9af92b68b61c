"""Fixtures: a real ``trainyard serve`` on loopback with a temporary SQLite file.

The binaries come from TRAINYARD_BIN_DIR (CTest sets it to the build's bin directory; default
build/bin of the source tree). The server runs with an environment without any TRAINYARD_*
variable of the caller, its stderr (JSON log lines) in a file of its temporary directory, and
no TRAINYARD_ADMIN_TOKEN: it writes its first-start admin token to admin.token beside the
database, which the fixture reads like a user would.
"""

import json
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time
import uuid

import pytest
import requests

ROOT = pathlib.Path(__file__).resolve().parents[3]
BIN_DIR = pathlib.Path(os.environ.get("TRAINYARD_BIN_DIR", ROOT / "build" / "bin"))
START_TIMEOUT = 30.0


class Server:
    """One `trainyard serve` process on 127.0.0.1 with its own data directory."""

    def __init__(self, args=(), env=None):
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="trainyard-py-"))
        self.data = self.root / "data"
        self.db = self.data / "trainyard.db"
        self.log_path = self.root / "server.log"
        self.args = list(args)
        self.env = dict(env or {})
        self.proc = None
        self.port = 0
        self.url = None
        self.admin_token = None

    @property
    def binary(self):
        return str(BIN_DIR / "trainyard")

    def start(self, port=None):
        """Starts (or restarts) the server; port=None keeps the previous port when there is one,
        0 picks a free one."""
        if port is None:
            port = self.port
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINYARD_")}
        env.update(self.env)
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, "serve", "--listen", f"127.0.0.1:{port}", "--db", str(self.db),
                 *self.args],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=env,
                cwd=self.root)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            listening = self._listening(offset)
            if listening:
                self.port = listening
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"trainyard serve exited {self.proc.returncode}: {self.log()[-1500:]}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"trainyard serve did not listen: {self.log()[-1500:]}")
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{self.port}"
        while True:
            try:
                if requests.get(self.url + "/readyz", timeout=5).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"trainyard serve not ready: {self.log()[-1500:]}")
            time.sleep(0.02)
        self.admin_token = (self.data / "admin.token").read_text().split()[0]
        return self

    def _listening(self, offset):
        """The port of the "listening" line logged since offset, or None."""
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            for line in f.read().decode(errors="replace").splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.get("msg") == "listening" and "addr" in entry:
                    return int(entry["addr"].rsplit(":", 1)[1])
        return None

    def log(self):
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout=30):
        """SIGTERM and wait; the server finishes the requests in flight and exits 0."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def close(self):
        self.kill()
        if os.environ.get("TY_IT_KEEP") != "1":
            shutil.rmtree(self.root, ignore_errors=True)

    def request(self, method, path, token=None, **kw):
        """A raw HTTP request with the admin token (or token); for setting up tests."""
        headers = {"Authorization": f"Bearer {token or self.admin_token}"}
        return requests.request(method, self.url + path, headers=headers, timeout=30, **kw)

    def make_team(self, name=None, **fields):
        """Creates a team (admin token); returns its name."""
        name = name or "t" + uuid.uuid4().hex[:10]
        r = self.request("POST", "/v1/teams", json={"name": name, **fields})
        assert r.status_code == 201, r.text
        return name

    def make_token(self, team="default", scopes=("read", "submit"), name=None):
        """Creates a token of team (created first unless it exists); returns the secret."""
        if team != "default" and self.request("GET", f"/v1/teams/{team}").status_code == 404:
            self.make_team(team)
        body = {"name": name or "py-" + uuid.uuid4().hex[:10], "scopes": list(scopes), "team": team}
        r = self.request("POST", "/v1/tokens", json=body)
        assert r.status_code == 201, r.text
        return r.json()["token"]


@pytest.fixture
def start_server():
    """A factory: start_server(args=(...), env={...}) starts another server, stopped at the end."""
    servers = []

    def start(args=("--local-sandbox=off",), env=None):
        s = Server(args, env)
        servers.append(s)
        return s.start(port=0)

    yield start
    for s in servers:
        s.close()


@pytest.fixture
def server(start_server):
    """A running server whose jobs run as plain local processes (no sandbox)."""
    return start_server()


@pytest.fixture
def no_client_config(monkeypatch, tmp_path):
    """An environment with no TRAINYARD_* variable and an empty home (no CLI config file)."""
    for k in list(os.environ):
        if k.startswith("TRAINYARD_") and k != "TRAINYARD_BIN_DIR":
            monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return tmp_path
