#!/usr/bin/python3
"""The Python client's submission rate through POST /v1/jobs:batch, beside baselines.

Starts `trainyard serve --queue-limit 0` (admission paused: the figures are the API's and the
store's, not the scheduler's) on a temporary database, then alternates, round after round:

  client         trainyard.Client.submit_batch(specs) with a list of job dicts, one thread
  requests json  what a script does by hand with requests: the same dicts posted with json=,
                 the answer's jobs parsed (the client's own cost is the difference)
  requests       requests.Session.post of the same batch serialized before the timing, the
                 answer not parsed: Python's floor, without building, serializing or parsing
  curl           build/bench/bench_submit --batch N --concurrency 1 (C, libcurl), when built

and prints, per mode, the median over the rounds of jobs/s and of the Python process's CPU per
job, and the client's ratio to each baseline measured in the same run. The same for single
jobs (POST /v1/jobs) with --single.

    /usr/bin/python3 bench/bench_pyclient.py [--bin build/bin] [--batch 1000] [--rounds 5]
"""

import argparse
import importlib.util
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "clients" / "python"))
import trainyard  # noqa: E402


def load_server_class(bin_dir):
    """The test suite's Server (clients/python/tests/conftest.py): one way to start a server."""
    os.environ["TRAINYARD_BIN_DIR"] = str(bin_dir)
    spec = importlib.util.spec_from_file_location(
        "ty_conftest", ROOT / "clients" / "python" / "tests" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.Server


def spec(i):
    return {"name": f"bench-{i}", "command": ["true"], "workers": {"count": 1},
            "labels": {"bench": "pyclient", "shard": f"s{i % 10}"}}


def timed(fn, jobs):
    """(jobs/s, Python CPU µs per job) of fn() submitting `jobs` jobs."""
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    t1, c1 = time.perf_counter(), time.process_time()
    return jobs / (t1 - t0), (c1 - c0) * 1e6 / jobs


def run_client(client, batch, requests_per_run, seq):
    def go():
        for r in range(requests_per_run):
            jobs = client.submit_batch([spec(seq + r * batch + i) for i in range(batch)])
            assert len(jobs) == batch
    return timed(go, batch * requests_per_run)


def run_requests(session, url, token, batch, requests_per_run, seq):
    bodies = [json.dumps({"jobs": [spec(seq + r * batch + i) for i in range(batch)]}).encode()
              for r in range(requests_per_run)]
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def go():
        for body in bodies:
            r = session.post(url, data=body, headers=headers, timeout=60)
            assert r.status_code == 201, r.text
    return timed(go, batch * requests_per_run)


def run_requests_json(session, url, token, batch, requests_per_run, seq):
    headers = {"Authorization": f"Bearer {token}"}

    def go():
        for r in range(requests_per_run):
            body = {"jobs": [spec(seq + r * batch + i) for i in range(batch)]}
            resp = session.post(url, json=body, headers=headers, timeout=60)
            assert resp.status_code == 201 and len(resp.json()["jobs"]) == batch
    return timed(go, batch * requests_per_run)


def run_single_client(client, n, seq):
    return timed(lambda: [client.submit(spec(seq + i)) for i in range(n)], n)


def run_single_requests(session, url, token, n, seq):
    bodies = [json.dumps(spec(seq + i)).encode() for i in range(n)]
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def go():
        for body in bodies:
            assert session.post(url, data=body, headers=headers, timeout=60).status_code == 201
    return timed(go, n)


def run_curl(bench_submit, url, token, batch, jobs):
    out = subprocess.run([str(bench_submit), "submit", "--url", url, "--token", token,
                          "--concurrency", "1", "--batch", str(batch), "--jobs", str(jobs)],
                         capture_output=True, text=True, check=True).stdout
    fields = dict(kv.split("=", 1) for kv in out.split())
    return float(fields["jobs_per_s"]), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=str(ROOT / "build" / "bin"))
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=10, help="batches per run")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--single", type=int, default=500, help="single submissions per run (0: none)")
    args = ap.parse_args()
    bin_dir = pathlib.Path(args.bin).resolve()
    bench_submit = bin_dir.parent / "bench" / "bench_submit"

    server = load_server_class(bin_dir)(args=("--queue-limit", "0", "--local-sandbox=off"))
    server.start(port=0)
    try:
        url = server.url
        client = trainyard.Client(url, server.admin_token)
        session = requests.Session()
        batch_url = url + "/v1/jobs:batch"
        results = {"client": [], "requests json": [], "requests": [], "curl": [],
                   "single client": [], "single requests": []}
        seq = 0
        # Warm-up: connections, the database's first pages.
        run_client(client, args.batch, 2, seq)
        seq += 2 * args.batch
        for _ in range(args.rounds):
            n = args.batch * args.requests
            results["client"].append(run_client(client, args.batch, args.requests, seq))
            seq += n
            results["requests json"].append(run_requests_json(
                session, batch_url, server.admin_token, args.batch, args.requests, seq))
            seq += n
            results["requests"].append(
                run_requests(session, batch_url, server.admin_token, args.batch, args.requests, seq))
            seq += n
            if bench_submit.exists():
                results["curl"].append(run_curl(bench_submit, url, server.admin_token, args.batch, n))
            if args.single:
                results["single client"].append(run_single_client(client, args.single, seq))
                seq += args.single
                results["single requests"].append(
                    run_single_requests(session, url + "/v1/jobs", server.admin_token,
                                        args.single, seq))
                seq += args.single
    finally:
        server.close()

    load = os.getloadavg()[0]
    print(f"bench_pyclient: batch={args.batch} requests_per_run={args.requests} "
          f"rounds={args.rounds} single={args.single} loadavg={load:.2f}")
    med = {}
    for mode, runs in results.items():
        if not runs:
            continue
        rate = statistics.median(r[0] for r in runs)
        cpus = [r[1] for r in runs if r[1] is not None]
        med[mode] = rate
        cpu = f" python_cpu_us_per_job={statistics.median(cpus):.1f}" if cpus else ""
        print(f"mode={mode.replace(' ', '_')} jobs_per_s={rate:.0f}{cpu} "
              f"runs={','.join(f'{r[0]:.0f}' for r in runs)}")
    print(f"ratio client/requests_json={med['client'] / med['requests json']:.2f} "
          f"client/requests={med['client'] / med['requests']:.2f}", end="")
    if "curl" in med:
        print(f" client/curl={med['client'] / med['curl']:.2f}", end="")
    if "single client" in med:
        print(f" single_client/single_requests="
              f"{med['single client'] / med['single requests']:.2f}", end="")
    print()


if __name__ == "__main__":
    main()
