"""examples/pytorch-ddp end to end: the job of examples/pytorch-ddp/job.yaml with 2 ranks in the
local backend's sandbox on a subset of Fashion-MNIST; one rank is killed mid-way; the gang
restarts, resumes from its checkpoint, succeeds, and its loss series is in the metrics API.

The sandbox shows a rank /usr (Debian's python3-torch and the data set), the directory of the
server's binaries, data/datasets and the job's own directory, not this source tree: the test
places train.py and the trainyard package in data/datasets (read-only in every sandbox), as an
operator would place code the jobs share, and points the job's command and PYTHONPATH there.
"""

import os
import pathlib
import shutil
import signal
import sys
import time

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "clients" / "python" / "tests"))
from conftest import start_server  # noqa: E402,F401 - the fixture: a real trainyard serve

EXAMPLE = ROOT / "examples" / "pytorch-ddp"
WAIT_S = 600               # a bound on each wait, not a timing assertion
CKPT_EVERY = 40


def wait_for(what, check, timeout=WAIT_S, every=0.05):
    end = time.monotonic() + timeout
    while True:
        v = check()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every)


def rank_pids(job, rank):
    """Live processes of the job's rank running train.py (by their environment and command)."""
    want = {f"TRAINYARD_JOB_ID={job}".encode(), f"RANK={rank}".encode()}
    found = []
    for d in pathlib.Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = set((d / "environ").read_bytes().split(b"\0"))
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if want <= env and b"train.py" in cmd:
            found.append(int(d.name))
    return found


def test_ddp_gang_restart_resumes_from_checkpoint(start_server):
    server = start_server(args=())           # the local backend with its sandbox
    code = server.data / "datasets" / "code"
    code.mkdir(parents=True)
    shutil.copy(EXAMPLE / "train.py", code / "train.py")
    shutil.copytree(ROOT / "clients" / "python" / "trainyard", code / "trainyard",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for p in [code, *code.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)

    spec = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    assert spec["command"][0] == "/usr/bin/python3"
    spec["command"] = [spec["command"][0], str(code / "train.py")]
    spec["env"] = {"PYTHONPATH": str(code), "PYTHONDONTWRITEBYTECODE": "1"}
    # 12,000 images, 187 steps of 32 per rank per epoch, 2 epochs: 374 steps.
    spec["args"] = ["--subset", "12000", "--test-subset", "2000", "--epochs", "2",
                    "--batch", "32", "--checkpoint-every", str(CKPT_EVERY), "--report-every", "1",
                    "--log-every", "20"]
    spec["restart"] = {"max": 2, "backoff_seconds": 1}
    r = server.request("POST", "/v1/jobs", json=spec)
    assert r.status_code == 201, r.text
    job = r.json()["id"]
    ckpts = server.data / "jobs" / job / "checkpoints"

    def job_now():
        r = server.request("GET", f"/v1/jobs/{job}")
        assert r.status_code == 200, r.text
        j = r.json()
        assert j["state"] not in ("FAILED", "CANCELLED"), j
        return j

    # Mid-way: as soon as the first checkpoint is written, kill rank 1.
    wait_for("the first checkpoint",
             lambda: job_now() and ckpts.is_dir() and any(ckpts.glob("ckpt-*.pt")))
    first = min(int(p.name[5:14]) for p in ckpts.glob("ckpt-*.pt"))
    assert first == CKPT_EVERY
    assert job_now()["attempt"] == 1
    pids = wait_for("rank 1's process", lambda: rank_pids(job, 1))
    for pid in pids:
        os.kill(pid, signal.SIGKILL)

    done = wait_for("the job to end", lambda: (lambda j: j if j["state"] in (
        "SUCCEEDED", "FAILED", "CANCELLED") else None)(
            server.request("GET", f"/v1/jobs/{job}").json()), every=0.5)
    assert done["state"] == "SUCCEEDED", (done, server.log()[-3000:])
    assert done["attempt"] == 2 and done["restarts"] == 1, done

    attempts = server.request("GET", f"/v1/jobs/{job}/attempts").json()["attempts"]
    assert [(a["attempt"], a["state"]) for a in attempts] == [(1, "failed"), (2, "succeeded")], \
        attempts

    def log(attempt, rank):
        r = server.request("GET", f"/v1/jobs/{job}/logs",
                           params={"attempt": attempt, "rank": rank})
        assert r.status_code == 200, r.text
        return r.text

    # Attempt 2 resumed from the newest checkpoint attempt 1 wrote, not from step 0.
    second = log(2, 0)
    line = [ln for ln in second.splitlines() if ln.startswith("resumed from checkpoint step ")]
    assert line, second
    resumed = int(line[0].split()[4])
    assert resumed >= CKPT_EVERY and resumed % CKPT_EVERY == 0, line
    assert f"from step {resumed}" in second
    assert "done: 374 steps, test accuracy" in second, second
    # Its log counts on from there: its first logged step is past the checkpoint.
    logged = [int(ln.split()[1]) for ln in second.splitlines() if ln.startswith("step ")]
    assert logged and logged[0] > resumed and logged[-1] == 360, logged

    # The loss series: one point per step, 1 to 374, across both attempts; the accuracy.
    r = server.request("GET", f"/v1/jobs/{job}/metrics",
                       params={"name": ["loss", "accuracy"], "max_points": 10000})
    assert r.status_code == 200, r.text
    series = {s["name"]: s for s in r.json()["series"]}
    steps = [p["step"] for p in series["loss"]["points"]]
    assert steps[-1] == 374 and set(range(resumed + 1, 375)) <= set(steps), steps
    assert series["loss"]["points"][-1]["value"] < series["loss"]["points"][0]["value"]
    (acc,) = series["accuracy"]["points"]
    assert acc["step"] == 374 and 0.5 < acc["value"] <= 1.0, acc


def test_image_runs_the_job_file_unchanged():
    """deploy/docker/pytorch-ddp.Dockerfile puts train.py where job.yaml's command names it,
    the trainyard package on the path, and runs as the worker image's user."""
    spec = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    docker = (ROOT / "deploy" / "docker" / "pytorch-ddp.Dockerfile").read_text()
    worker = (ROOT / "deploy" / "docker" / "worker.Dockerfile").read_text()
    python, script = spec["command"]
    copies = [ln for ln in docker.replace("\\\n", " ").splitlines() if ln.startswith("COPY ")]
    assert any("examples/pytorch-ddp/train.py" in ln and
               ln.split()[-1].rstrip("/") == os.path.dirname(script) for ln in copies), copies
    assert f'ENTRYPOINT ["{python}", "{script}"]' in docker
    assert "COPY clients/python/trainyard /usr/share/trainyard/python/trainyard" in docker
    assert "ENV PYTHONPATH=/usr/share/trainyard/python " in docker
    user = [ln for ln in docker.splitlines() if ln.startswith("USER ")]
    assert user and user == [ln for ln in worker.splitlines() if ln.startswith("USER ")]
    assert spec["image"].startswith("trainyard-pytorch-ddp:")
    assert "-t trainyard-pytorch-ddp " in docker


def test_sigterm_checkpoints_exits_75_and_the_next_run_resumes(tmp_path):
    """train.py alone (a world of one): a SIGTERM ends it after a step with a checkpoint and exit
    75, and the next run resumes from that step."""
    import subprocess
    ckpts = tmp_path / "checkpoints"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINYARD_")
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(TRAINYARD_CHECKPOINT_DIR=str(ckpts), PYTHONPATH=str(ROOT / "clients" / "python"))
    argv = [sys.executable, str(EXAMPLE / "train.py"), "--subset", "12000", "--test-subset",
            "1000", "--epochs", "1", "--batch", "32", "--checkpoint-every", "20",
            "--log-every", "1000000"]
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    try:
        wait_for("the first checkpoint", lambda: ckpts.is_dir() and any(ckpts.glob("ckpt-*.pt")))
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=WAIT_S)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 75, out
    line = [ln for ln in out.splitlines() if ln.startswith("stopped at step ")]
    assert line and line[0].endswith("checkpoint written, exiting 75"), out
    stopped = int(line[0].split()[3].rstrip(":"))
    assert (ckpts / f"ckpt-{stopped:09d}.pt").exists()
    assert not list(ckpts.glob("*.tmp.*"))

    # 12,000 images, 375 steps; the next run stops at
    # stopped + 5 and says where it began.
    r = subprocess.run(argv + ["--max-steps", str(stopped + 5)], env=env, capture_output=True,
                       text=True, timeout=WAIT_S)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"resumed from checkpoint step {stopped} " in r.stdout, r.stdout
    assert f"done: {stopped + 5} steps" in r.stdout, r.stdout
