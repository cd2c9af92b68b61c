"""trainyard.Client against a real `trainyard serve`: every call, errors, paging, streams."""

import os
import socket
import threading
import time

import pytest
import requests

import trainyard
from trainyard import client as client_mod


def job(name, script="true", **extra):
    return {"name": name, "command": ["sh", "-c", script], "workers": {"count": 1}, **extra}


def until(predicate, timeout=60, what="the condition"):
    """Polls predicate until it is true (tests assert on what happened, never on how long)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def client(server, no_client_config):
    with trainyard.Client(server.url, server.admin_token) as c:
        yield c


# ---- server and token ------------------------------------------------------------------------

def test_server_and_token_from_the_environment(server, no_client_config, monkeypatch):
    monkeypatch.setenv("TRAINYARD_SERVER", server.url + "/")
    monkeypatch.setenv("TRAINYARD_TOKEN", server.admin_token)
    c = trainyard.Client()
    assert c.server == server.url
    assert any(t["name"] == "default" for t in c.teams())


def test_arguments_beat_the_environment(server, no_client_config, monkeypatch):
    monkeypatch.setenv("TRAINYARD_SERVER", "http://127.0.0.1:1")
    monkeypatch.setenv("TRAINYARD_TOKEN", "ty_wrong")
    c = trainyard.Client(server.url, server.admin_token)
    assert c.teams()


def test_server_and_token_from_the_cli_config_file(server, no_client_config):
    path = no_client_config / ".config" / "trainyard" / "config"
    path.parent.mkdir(parents=True)
    path.write_text(f"server: {server.url}\ntoken: {server.admin_token}\n")
    path.chmod(0o600)
    assert any(t["name"] == "default" for t in trainyard.Client().teams())


def test_the_config_file_written_by_trainyard_login_is_read(server, no_client_config, tmp_path):
    token_file = tmp_path / "admin.token"
    token_file.write_text(server.admin_token + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINYARD_")}
    import subprocess
    subprocess.run([str(server.binary), "login", "--server", server.url, "--token-file",
                    str(token_file)], env=env, check=True, capture_output=True)
    c = trainyard.Client()
    assert c.server == server.url
    assert c.teams()


def test_a_config_file_others_may_read_is_refused(no_client_config, monkeypatch):
    xdg = no_client_config / "xdg"
    path = xdg / "trainyard" / "config"
    path.parent.mkdir(parents=True)
    path.write_text("server: http://127.0.0.1:8080\ntoken: ty_secret\n")
    path.chmod(0o644)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    with pytest.raises(trainyard.ConfigError, match="chmod 600"):
        trainyard.Client()


def test_no_server_is_a_config_error(no_client_config):
    with pytest.raises(trainyard.ConfigError, match="no server"):
        trainyard.Client(token="ty_x")


# ---- jobs ------------------------------------------------------------------------------------

def test_submit_get_wait_logs_events_attempts(client):
    j = client.submit(job("hello", "echo one; echo two; echo three"))
    assert j["state"] == "PENDING" and j["name"] == "hello"
    assert client.get(j["id"])["id"] == j["id"]
    final = client.wait(j["id"])
    assert final["state"] == "SUCCEEDED"
    assert client.logs(j["id"]) == "one\ntwo\nthree\n"
    assert client.logs(j["id"], tail=1) == "three\n"
    assert "".join(client.logs(j["id"], follow=True)) == "one\ntwo\nthree\n"
    events = client.events(j["id"])
    assert events[0]["from"] is None and events[0]["reason"] == "Submitted"
    assert events[-1]["to"] == "SUCCEEDED"
    followed = [e for e in client.events(j["id"], follow=True) if e.event == "job"]
    assert [e.data["to"] for e in followed] == [e["to"] for e in events]
    # Resuming after the second event gives the rest only.
    rest = [e for e in client.events(j["id"], follow=True, last_event_id=followed[1].id)
            if e.event == "job"]
    assert [e.data["to"] for e in rest] == [e["to"] for e in events[2:]]
    attempts = client.attempts(j["id"])
    assert len(attempts) == 1


def test_submit_from_a_yaml_file(client, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: from-yaml\ncommand: [sh, -c, 'exit 3']\nworkers:\n  count: 1\n"
                    "labels:\n  origin: yaml\n")
    j = client.submit(str(path))
    assert j["spec"]["labels"] == {"origin": "yaml"}
    assert client.wait(j["id"])["state"] == "FAILED"


def test_submit_is_idempotent_with_a_key(client):
    a = client.submit(job("idem"), idempotency_key="k-1")
    b = client.submit(job("idem"), idempotency_key="k-1")
    assert a["id"] == b["id"]


def test_submit_batch_and_list_pages_with_filters(client):
    jobs = client.submit_batch([job(f"batch-{i}", labels={"set": "b"}) for i in range(7)])
    assert [j["name"] for j in jobs] == [f"batch-{i}" for i in range(7)]
    client.submit(job("other", labels={"set": "o"}))
    listed = list(client.list(labels={"set": "b"}, page_size=2))
    assert sorted(j["id"] for j in listed) == sorted(j["id"] for j in jobs)
    assert [j["name"] for j in client.list(name_prefix="oth", page_size=1)] == ["other"]
    assert len(list(client.list(page_size=3))) == 8
    for j in jobs:
        client.wait(j["id"])
    assert len(list(client.list(state=["SUCCEEDED"], labels=["set=b"]))) == 7
    assert list(client.list(state="PENDING,RUNNING", labels={"set": "b"})) == []


def test_metrics_reported_by_the_job(client):
    script = ("import os, requests\n"
              "url = os.environ['TRAINYARD_SERVER'] + '/v1/jobs/' + "
              "os.environ['TRAINYARD_JOB_ID'] + '/metrics'\n"
              "pts = [{'step': s, 'loss': 1.0 / (s + 1)} for s in range(10)]\n"
              "r = requests.post(url, json={'points': pts}, headers={'Authorization': "
              "'Bearer ' + os.environ['TRAINYARD_TOKEN']})\n"
              "r.raise_for_status()\n")
    j = client.submit({"name": "reports", "command": ["/usr/bin/python3", "-c", script],
                       "workers": {"count": 1}})
    assert client.wait(j["id"])["state"] == "SUCCEEDED", client.logs(j["id"])
    (loss,) = client.metrics(j["id"], names="loss")
    assert loss["name"] == "loss" and loss["total_points"] == 10
    assert [p["step"] for p in client.metrics(j["id"], since_step=7)[0]["points"]] == [8, 9]
    assert len(client.metrics(j["id"], max_points=4)[0]["points"]) <= 4


def test_cancel_a_running_job_and_a_finished_one(client):
    j = client.submit(job("sleeper", "sleep 600"))
    until(lambda: client.get(j["id"])["state"] == "RUNNING", what="RUNNING")
    assert client.cancel(j["id"])["state"] in ("CANCELLING", "CANCELLED")
    assert client.wait(j["id"])["state"] == "CANCELLED"
    pruned = client.submit(job("pruned", "sleep 600"))
    until(lambda: client.get(pruned["id"])["state"] == "RUNNING", what="RUNNING")
    client.cancel(pruned["id"], reason="Pruned", message="loss 0.9 at step 40")
    assert client.wait(pruned["id"])["state"] == "CANCELLED"
    (ev,) = [e for e in client.events(pruned["id"]) if e["reason"] == "Pruned"]
    assert ev["to"] == "CANCELLING" and ev["message"].startswith("loss 0.9 at step 40")
    with pytest.raises(trainyard.Invalid) as e:
        client.cancel(client.submit(job("p"))["id"], reason="not camel case")
    assert [err["path"] for err in e.value.errors] == ["$.reason"]
    done = client.submit(job("quick"))
    client.wait(done["id"])
    with pytest.raises(trainyard.Conflict) as e:
        client.cancel(done["id"])
    assert e.value.status == 409 and e.value.code == "job-finished"
    assert e.value.problem["state"] == "SUCCEEDED"


def test_logs_follow_streams_while_the_rank_runs(client, tmp_path):
    go = tmp_path / "go"
    j = client.submit(job("chatty", f"echo first; while [ ! -e {go} ]; do sleep 0.05; done; "
                                    "echo second"))
    until(lambda: client.get(j["id"])["state"] == "RUNNING", what="RUNNING")
    stream = client.logs(j["id"], follow=True)
    text = next(stream)
    assert text.startswith("first\n")
    go.touch()
    text += "".join(stream)
    assert text == "first\nsecond\n"


def test_watch_follows_every_job(client):
    stream = client.watch(labels={"w": "1"})
    first = client.submit(job("watched", labels={"w": "1"}))
    client.submit(job("unwatched", labels={"w": "2"}))
    seen = []
    for e in stream:
        assert e.event == "job" and e.data["job_id"] == first["id"]
        seen.append(e.data["to"])
        if e.data["to"] == "SUCCEEDED":
            break
    assert seen[0] == "PENDING" and seen[-1] == "SUCCEEDED"
    stream.close()


# ---- errors ----------------------------------------------------------------------------------

def test_another_teams_job_is_not_found(server, client):
    mine = trainyard.Client(server.url, server.make_token("vision"))
    theirs = trainyard.Client(server.url, server.make_token("nlp"))
    j = theirs.submit(job("secret"))
    with pytest.raises(trainyard.NotFound) as e:
        mine.get(j["id"])
    assert e.value.status == 404 and e.value.title
    with pytest.raises(trainyard.NotFound):
        mine.cancel(j["id"])
    with pytest.raises(trainyard.NotFound):
        list(mine.events(j["id"], follow=True))
    assert [x["id"] for x in mine.list()] == []
    assert client.get(j["id"])["team"] == "nlp"


def test_an_invalid_spec_is_invalid_with_field_errors(client):
    with pytest.raises(trainyard.Invalid) as e:
        client.submit({"name": "Bad Name", "command": [], "workers": {"count": 0}})
    assert e.value.status == 422
    paths = {err["path"] for err in e.value.errors}
    assert {"$.name", "$.workers.count"} <= paths
    with pytest.raises(trainyard.Invalid):
        client.submit_batch([job("fine"), {"name": "x"}])
    assert list(client.list(name_prefix="fine")) == []  # all or nothing


def test_a_bad_token_is_unauthorized_and_a_read_token_cannot_submit(server):
    with pytest.raises(trainyard.Unauthorized) as e:
        trainyard.Client(server.url, "ty_" + "x" * 43).teams()
    assert e.value.status == 401
    reader = trainyard.Client(server.url, server.make_token(scopes=["read"]))
    with pytest.raises(trainyard.Forbidden):
        reader.submit(job("nope"))


def test_a_bad_query_is_a_bad_request(client):
    with pytest.raises(trainyard.BadRequest) as e:
        list(client.list(page_size=5000))
    assert any(err["path"] == "query.limit" for err in e.value.errors)


def test_a_malformed_job_id_is_not_found(client):
    with pytest.raises(trainyard.NotFound):
        client.get("../teams")


# ---- streams across cuts and refusals --------------------------------------------------------

class CuttingProxy:
    """A TCP proxy to the server whose connections the test can cut, recording each request's
    head (to see the Last-Event-ID of a resumed stream)."""

    def __init__(self, port):
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.heads = []
        self.answered = 0  # connections the server has answered on
        self.conns = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(("127.0.0.1", self.target))
            except OSError:  # the server is down: the client sees its connection closed
                down.close()
                continue
            with self.lock:
                self.conns.append((down, up))
            threading.Thread(target=self._pipe, args=(down, up, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(up, down, False), daemon=True).start()

    def _pipe(self, src, dst, request):
        first = True
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with self.lock:
                    if request and first:
                        self.heads.append(data.decode("latin-1"))
                    if not request and first:
                        self.answered += 1
                first = False
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self):
        """Cuts every open connection (both ends see it closed, mid-response)."""
        with self.lock:
            conns, self.conns = self.conns, []
        for pair in conns:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self):
        self.listener.close()
        self.cut()


def wait_through_proxy(server, tmp_path, name):
    """A job that runs until the file go exists, RUNNING, and a thread waiting for it through a
    CuttingProxy, its stream answered: (admin client, job, go, proxy, waiter, result), where
    result["job"] is wait()'s answer once the waiter has ended."""
    go = tmp_path / "go"
    admin = trainyard.Client(server.url, server.admin_token)
    j = admin.submit(job(name, f"while [ ! -e {go} ]; do sleep 0.05; done"))
    until(lambda: admin.get(j["id"])["state"] == "RUNNING", what="RUNNING")
    proxy = CuttingProxy(server.port)
    c = trainyard.Client(proxy.url, server.admin_token)
    result = {}
    waiter = threading.Thread(target=lambda: result.update(job=c.wait(j["id"])))
    waiter.start()
    until(lambda: proxy.answered >= 1, what="the stream to be answered")
    return admin, j, go, proxy, waiter, result


def test_wait_resumes_after_the_stream_is_cut(server, tmp_path, no_client_config):
    admin, j, go, proxy, waiter, result = wait_through_proxy(server, tmp_path, "long")
    proxy.cut()
    until(lambda: len(proxy.heads) >= 2, what="the stream to be resumed")
    go.touch()
    waiter.join(120)
    assert result["job"]["state"] == "SUCCEEDED"
    resumed = proxy.heads[1].lower()
    assert "last-event-id:" in resumed
    proxy.close()


def test_wait_resumes_across_a_server_restart(server, tmp_path, no_client_config):
    admin, j, go, proxy, waiter, result = wait_through_proxy(server, tmp_path, "survivor")
    server.stop()
    server.start()
    go.touch()
    waiter.join(180)
    assert result["job"]["state"] in trainyard.TERMINAL_STATES
    assert result["job"]["state"] == admin.get(j["id"])["state"]
    assert len(proxy.heads) >= 2
    proxy.close()


def test_streams_wait_for_a_place_when_the_server_has_none(start_server, tmp_path,
                                                           no_client_config, monkeypatch):
    monkeypatch.setattr(client_mod, "STREAM_PLACE_WAIT", 0.2)
    s = start_server(args=("--local-sandbox=off", "--max-streams-per-token", "1"))
    session = requests.Session()
    statuses = []
    session.hooks["response"].append(lambda r, *a, **k: statuses.append(r.status_code))
    c = trainyard.Client(s.url, s.admin_token, session=session)
    go = tmp_path / "go"
    j = c.submit(job("held", f"while [ ! -e {go} ]; do sleep 0.05; done"))
    held = c.events(j["id"], follow=True)  # the token's one stream
    result = {}
    waiter = threading.Thread(target=lambda: result.update(job=c.wait(j["id"])))
    waiter.start()
    until(lambda: 429 in statuses, what="a refused stream")
    held.close()
    go.touch()
    waiter.join(120)
    assert result["job"]["state"] == "SUCCEEDED"


# ---- sweeps, teams, queue, cluster -----------------------------------------------------------

def test_sweeps(client):
    sweep = client.create_sweep({
        "name": "grid", "algorithm": "grid", "parameters": {"lr": [0.1, 0.01]},
        "objective": {"metric": "loss", "goal": "minimize"},
        "template": job("trial", "echo ${lr}")})
    assert client.get_sweep(sweep["id"])["id"] == sweep["id"]
    assert [s["id"] for s in client.list_sweeps(page_size=1)] == [sweep["id"]]
    trials = list(client.list(labels={"trainyard.io/sweep": sweep["id"]}))
    assert len(trials) == 2
    assert client.cancel_sweep(sweep["id"])["id"] == sweep["id"]


def test_teams(client):
    t = client.create_team("vision", weight=2, quota={"cpu": "4"})
    assert t["name"] == "vision" and t["weight"] == 2
    assert client.get_team("vision")["quota"]["cpu"] == "4"
    assert client.update_team("vision", weight=3)["quota"] is None
    assert {"default", "vision"} <= {x["name"] for x in client.teams()}
    with pytest.raises(trainyard.Conflict):
        client.create_team("vision")
    client.delete_team("vision")
    with pytest.raises(trainyard.NotFound):
        client.get_team("vision")


def test_queue_lists_the_waiting_jobs(start_server, no_client_config):
    s = start_server(args=("--local-sandbox=off", "--queue-limit", "paused=0"))
    c = trainyard.Client(s.url, s.admin_token)
    j = c.submit(job("waiting", queue="paused"))
    entries = until(lambda: c.queue(), what="a queue entry")
    assert [e["id"] for e in entries] == [j["id"]]
    assert c.queue(team="default", limit=1)[0]["id"] == j["id"]


def test_cluster(client, server):
    assert client.cluster() == server.request("GET", "/v1/cluster").json()


def test_whoami(client):
    me = client.whoami()
    assert me["scopes"] == ["admin"] and me["team"] == "default"
