#!/usr/bin/python3
"""What trainyard.report() costs a PyTorch training step.

    /usr/bin/python3 bench/bench_report_pytorch.py BUILD_DIR [--steps 200] [--pairs 20]

The step of examples/pytorch-ddp/train.py (its MLP, AdamW, a batch of 64 Fashion-MNIST images,
CPU, one process) runs in alternated runs of --steps steps each (off/on, then on/off, ...), in
one process, so both sides see the same machine, the same warmed-up allocator and threads. Both
sides read the loss (loss.item()) every step; "on" also calls trainyard.report(step, loss=...)
every step, reporting to a real `trainyard serve` of BUILD_DIR on loopback (a temporary
database, admission paused with --queue-limit 0, one job, the admin token) at the default
interval (TRAINYARD_REPORT_INTERVAL, 5 s). Prints each run's median step time, then the median
of the runs of each side and their ratio; the same for the process's CPU time per step (the
training thread and the reporter's thread together: on a shared machine it moves less with the
load than the wall clock); the time of the report() call alone (median and p99); and the
reporter's counts (every point sent, none dropped, or the figure says so).
"""

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def start_server(build, tmp):
    token = "bench-report-%d" % os.getpid()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINYARD_")}
    env["TRAINYARD_ADMIN_TOKEN"] = token
    log = open(os.path.join(tmp, "server.log"), "wb")
    proc = subprocess.Popen([os.path.join(build, "bin", "trainyard"), "serve", "--listen",
                             "127.0.0.1:0", "--db", os.path.join(tmp, "data", "trainyard.db"),
                             "--queue-limit", "0"], env=env, stdout=subprocess.DEVNULL,
                            stderr=log)
    end = time.monotonic() + 30
    while time.monotonic() < end:
        with open(os.path.join(tmp, "server.log")) as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if e.get("msg") == "listening":
                    return proc, "http://" + e["addr"], token
        time.sleep(0.05)
    proc.kill()
    sys.exit("the server did not listen")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="bench-report-")
    os.makedirs(os.path.join(tmp, "data"))
    proc, url, token = start_server(a.build, tmp)
    try:
        import requests
        r = requests.post(url + "/v1/jobs", headers={"Authorization": "Bearer " + token},
                          json={"name": "bench-report", "command": ["true"],
                                "workers": {"count": 1}}, timeout=30)
        r.raise_for_status()
        job = r.json()["id"]
        os.environ.update(TRAINYARD_SERVER=url, TRAINYARD_TOKEN=token, TRAINYARD_JOB_ID=job)

        sys.path.insert(0, str(ROOT / "clients" / "python"))
        sys.path.insert(0, str(ROOT / "examples" / "pytorch-ddp"))
        import torch
        import torch.nn.functional as F
        import trainyard
        import train

        torch.set_num_threads(a.threads)
        torch.manual_seed(1)
        x, y = train.load(train.data_dir(None), "train", 0)
        model = train.MLP(256)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(1)
        step = 0
        calls = []

        def run(on):
            nonlocal step
            times = []
            c0 = time.process_time()
            for _ in range(a.steps):
                idx = torch.randint(0, x.shape[0], (64,), generator=g)
                t0 = time.perf_counter()
                loss = F.cross_entropy(model(x[idx]), y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                v = loss.item()
                step += 1
                if on:
                    t1 = time.perf_counter()
                    trainyard.report(step, loss=v)
                    calls.append(time.perf_counter() - t1)
                times.append(time.perf_counter() - t0)
            return statistics.median(times), (time.process_time() - c0) / a.steps

        run(False)            # warm-up, not counted
        print("# machine: %s, %d cores, load %s" % (
            next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                  if ln.startswith("model name")), "?"), os.cpu_count(),
            " ".join(open("/proc/loadavg").read().split()[:3])))
        print("# torch %s, %d thread(s); %d steps per run, %d pairs, server %s, job %s" % (
            torch.__version__, a.threads, a.steps, a.pairs, url, job))
        side = {False: [], True: []}
        cpu = {False: [], True: []}
        for p in range(a.pairs):
            for on in ((False, True) if p % 2 == 0 else (True, False)):
                m, c = run(on)
                side[on].append(m)
                cpu[on].append(c)
                print("%-3s run %2d: median step %8.1f us, CPU %8.1f us a step" % (
                    "on" if on else "off", p, m * 1e6, c * 1e6))
        off, on = statistics.median(side[False]), statistics.median(side[True])
        coff, con = statistics.median(cpu[False]), statistics.median(cpu[True])
        flushed = trainyard.report.flush(30)
        st = trainyard.report.stats()
        print("off: median step %.1f us; on (a point every step): %.1f us; on/off %.4f "
              "(%+.1f us a step)" % (off * 1e6, on * 1e6, on / off, (on - off) * 1e6))
        print("process CPU a step (training and the reporter's thread): off %.1f us, on %.1f us; "
              "on/off %.4f (%+.1f us)" % (coff * 1e6, con * 1e6, con / coff, (con - coff) * 1e6))
        print("one trainyard.report() call: median %.1f us, p99 %.1f us (%d calls)" % (
            statistics.median(calls) * 1e6,
            statistics.quantiles(calls, n=100)[98] * 1e6, len(calls)))
        print("reporter: %d points, %d sent, %d dropped, %d POSTs%s" % (
            st["pushed"], st["sent"], st["dropped"], st["posts"],
            "" if flushed else " (not all flushed)"))
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
