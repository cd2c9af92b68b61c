"""trainyard.report() in a process that runs like a job's rank: against a real server, against a
server that is down, and outside a job."""

import os
import pathlib
import socket
import subprocess
import sys
import textwrap

PKG = str(pathlib.Path(__file__).resolve().parents[1])

# A "training loop": reports a point per step and prints what it computed, then exits 0.
TRAIN = textwrap.dedent("""
    import sys, threading, trainyard
    steps = int(sys.argv[1])
    acc = 0.0
    for step in range(steps):
        acc += step * 0.5                       # the step's work
        trainyard.report(step, loss=1.0 / (step + 1), lr=0.01)
    trainyard.report(steps, accuracy=0.875)
    print("trained", steps, acc, "threads", threading.active_count(), flush=True)
""")


def run_job(env, steps, timeout=120):
    """Runs TRAIN as a job's rank would (env: the TRAINYARD_* the backend sets); the finished
    process."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("TRAINYARD_")}
    full.update(env)
    full["PYTHONPATH"] = PKG
    return subprocess.run([sys.executable, "-c", TRAIN, str(steps)], env=full, timeout=timeout,
                          capture_output=True, text=True)


def paused_server(start_server):
    """A server that admits nothing (queue limit 0): its jobs stay PENDING and may report."""
    return start_server(args=("--local-sandbox=off", "--queue-limit", "0"))


def submit(server):
    r = server.request("POST", "/v1/jobs", json={"name": "report", "command": ["true"],
                                                 "workers": {"count": 1}})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def series(server, job, name):
    r = server.request("GET", f"/v1/jobs/{job}/metrics", params={"name": name,
                                                                 "max_points": 10000})
    assert r.status_code == 200, r.text
    (s,) = [s for s in r.json()["series"] if s["name"] == name]
    return s


def closed_port():
    """A loopback port nothing listens on, and a socket that keeps it so: bound, never listening
    (a connection to it is refused), so that no server started meanwhile by a test running beside
    this one can take the port. Close the socket when done."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s, s.getsockname()[1]


def test_points_arrive_and_are_listed(start_server):
    server = paused_server(start_server)
    job = submit(server)
    p = run_job({"TRAINYARD_SERVER": server.url, "TRAINYARD_TOKEN": server.admin_token,
                 "TRAINYARD_JOB_ID": job, "TRAINYARD_REPORT_INTERVAL": "0.05"}, 300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("trained 300 22425.0"), p.stdout
    assert "trainyard.report: 301 points sent, 0 dropped" in p.stderr, p.stderr

    loss = series(server, job, "loss")
    assert loss["total_points"] == 300
    steps = [pt["step"] for pt in loss["points"]]
    assert steps == list(range(300))
    assert loss["points"][3]["value"] == 0.25
    acc = series(server, job, "accuracy")
    assert [(pt["step"], pt["value"]) for pt in acc["points"]] == [(300, 0.875)]


def test_batches_larger_than_one_post(start_server):
    """More points than one POST carries (2,000): sent in several, none lost."""
    server = paused_server(start_server)
    job = submit(server)
    p = run_job({"TRAINYARD_SERVER": server.url, "TRAINYARD_TOKEN": server.admin_token,
                 "TRAINYARD_JOB_ID": job, "TRAINYARD_REPORT_INTERVAL": "0.05"}, 5000)
    assert p.returncode == 0, p.stderr
    assert "trainyard.report: 5001 points sent, 0 dropped" in p.stderr, p.stderr
    assert series(server, job, "loss")["total_points"] == 5000


def test_server_down_training_unaffected_and_drops_counted():
    held, port = closed_port()
    with held:
        p = run_job({"TRAINYARD_SERVER": f"http://127.0.0.1:{port}", "TRAINYARD_TOKEN": "t0ken",
                     "TRAINYARD_JOB_ID": "job-1", "TRAINYARD_REPORT_INTERVAL": "0.05"}, 20000)
    assert p.returncode == 0, p.stderr
    # The loop ran to its end and computed what it computes without a reporter.
    assert p.stdout.startswith("trained 20000 99995000.0"), p.stdout
    # Nothing was sent; every point (20,000 steps and the accuracy) is counted as dropped,
    # those past the buffer's 8,192 at once, the rest at exit.
    assert "trainyard.report: 0 points sent, 20001 dropped (last failure: ConnectionError)" \
        in p.stderr, p.stderr


def test_finished_job_stops_reporting(start_server):
    """A 404 (no such job for the token) drops what is buffered and what follows."""
    server = paused_server(start_server)
    p = run_job({"TRAINYARD_SERVER": server.url, "TRAINYARD_TOKEN": server.admin_token,
                 "TRAINYARD_JOB_ID": "no-such-job", "TRAINYARD_REPORT_INTERVAL": "0.05"}, 100)
    assert p.returncode == 0, p.stderr
    assert "trainyard.report: 0 points sent, 101 dropped (last failure: HTTP 404)" in p.stderr


def test_no_op_outside_a_job():
    p = run_job({}, 1000)
    assert p.returncode == 0, p.stderr
    # No thread was started and nothing is said.
    assert p.stdout.strip() == "trained 1000 249750.0 threads 1", p.stdout
    assert p.stderr == ""


def test_bad_points_never_raise(start_server):
    server = paused_server(start_server)
    job = submit(server)
    code = textwrap.dedent("""
        import trainyard
        trainyard.report(-1, loss=1.0)                 # negative step: dropped
        trainyard.report("x", loss=1.0)                # not a step: dropped
        trainyard.report(1, loss=float("nan"))         # no finite value: dropped
        trainyard.report(2, loss="high")               # not a number: dropped
        trainyard.report(3, **{"bad name": 1.0, "loss": 0.5})   # the bad name is left out
        trainyard.report(4, loss=0.25, inf=float("inf"))        # inf is left out
        print(trainyard.report.flush(10), trainyard.report.stats())
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINYARD_")}
    env.update({"PYTHONPATH": PKG, "TRAINYARD_SERVER": server.url,
                "TRAINYARD_TOKEN": server.admin_token, "TRAINYARD_JOB_ID": job})
    p = subprocess.run([sys.executable, "-c", code], env=env, timeout=60, capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("True {'pushed': 6, 'sent': 2, 'dropped': 4, 'buffered': 0"), \
        p.stdout
    assert "'bad name' is not a metric name" in p.stderr
    assert "trainyard.report: 2 points sent, 4 dropped" in p.stderr
    loss = series(server, job, "loss")
    assert [(pt["step"], pt["value"]) for pt in loss["points"]] == [(3, 0.5), (4, 0.25)]


def test_server_that_never_answers_does_not_hold_the_exit():
    """A server that takes the connection and never answers: training ends, the exit's flush
    gives up at its bound, and the points are counted as dropped."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)               # connections complete in the backlog; nothing reads them
    try:
        p = run_job({"TRAINYARD_SERVER": f"http://127.0.0.1:{s.getsockname()[1]}",
                     "TRAINYARD_TOKEN": "t0ken", "TRAINYARD_JOB_ID": "job-1",
                     "TRAINYARD_REPORT_INTERVAL": "0.05"}, 100, timeout=60)
    finally:
        s.close()
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("trained 100 2475.0"), p.stdout
    assert "trainyard.report: 0 points sent, 101 dropped" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
