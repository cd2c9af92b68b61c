"""The client against openapi/openapi.yaml, so that the two cannot drift apart.

Statically: every entry of trainyard.client.OPERATIONS names an operation of the document with
its method and path, and the response members the method reads are in the response's schema;
every operation of the document is either a client method or excluded below with a reason.
Against a real server: every request the client sends while every method runs (with every
option) is one the document describes (path, method, query parameters and their values,
headers, body by its schema), every answer it parses conforms (status, content type, body by
its schema, each event of a stream by its x-trainyard-events schema), and every parameter the
document gives an operation the client uses is one the client can send.
"""

import json
import pathlib
import re
import threading
import time
import urllib.parse

import pytest
import requests
import yaml

import trainyard
from trainyard.client import OPERATIONS

DOC_PATH = pathlib.Path(__file__).resolve().parents[3] / "openapi" / "openapi.yaml"
DOC = yaml.safe_load(DOC_PATH.read_text())
METHODS = ("get", "put", "post", "delete", "patch")

# Operations the client deliberately has no method for.
EXCLUDED = {
    "getHealth": "liveness probe for orchestrators, no token",
    "getReadiness": "readiness probe for orchestrators and load balancers, no token",
    "getMetrics": "Prometheus scrape endpoint",
    "getOpenApi": "the document itself; this test reads it from the tree",
    "getWebPage": "the web page's files, for browsers",
    "getWebScript": "the web page's files, for browsers",
    "getWebStyle": "the web page's files, for browsers",
    "getWebChartLibrary": "the web page's files, for browsers",
    "reportJobMetrics": "only a job's own token may report (trainyard.report() inside the job)",
    "releaseNode": "an operator's action on a quarantined Kubernetes node (the CLI has it)",
    "listTokens": "token administration stays with the CLI and curl (secrets on screen)",
    "createToken": "token administration stays with the CLI and curl (secrets on screen)",
    "revokeToken": "token administration stays with the CLI and curl",
    "listWebhooks": "webhook administration (CI integrations), admin only",
    "createWebhook": "webhook administration (CI integrations), admin only",
    "deleteWebhook": "webhook administration (CI integrations), admin only",
    "listNotifications": "notification administration (outgoing webhooks), admin only",
    "createNotification": "notification administration (outgoing webhooks), admin only",
    "deleteNotification": "notification administration (outgoing webhooks), admin only",
    "listNotificationDeliveries": "notification administration, admin only",
    "deliverWebhook": "called by CI systems with a signed payload, not by users",
}

# Parameters of covered operations the client never sends, with the reason.
PARAM_EXCLUDED = {
    ("getJobEvents", "after"): "the client resumes with Last-Event-ID, which wins over it",
    ("followEvents", "after"): "the client resumes with Last-Event-ID, which wins over it",
}

# Request headers that every HTTP request may carry without the document naming them.
TRANSPORT_HEADERS = {"authorization", "content-type", "content-length", "accept",
                     "accept-encoding", "user-agent", "connection"}


# ---- the document ------------------------------------------------------------------------------

def resolve(node):
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), ref
        node = DOC
        for part in ref[2:].split("/"):
            node = node[part]
    return node


def operations():
    """operationId -> (method, path, parameters by (in, name), the operation)."""
    out = {}
    for path, item in DOC["paths"].items():
        shared = [resolve(p) for p in item.get("parameters", [])]
        for method, op in item.items():
            if method not in METHODS:
                continue
            params = {(p["in"], p["name"].lower() if p["in"] == "header" else p["name"]): p
                      for p in shared + [resolve(p) for p in op.get("parameters", [])]}
            out[op["operationId"]] = (method.upper(), path, params, op)
    return out


OPS = operations()


def path_regex(template):
    parts = re.split(r"(\{[^}]+\})", template)
    return re.compile("^" + "".join("([^/:]+)" if p.startswith("{") else re.escape(p)
                                    for p in parts) + "$")


def match_operation(method, path):
    for op_id, (m, template, _, _) in OPS.items():
        if m == method and path_regex(template).match(path):
            return op_id
    return None


def schema_properties(schema):
    """The property names a schema (with its allOf/anyOf branches) may have."""
    schema = resolve(schema)
    names = set(schema.get("properties", {}))
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(key, []):
            names |= schema_properties(sub)
    return names


# ---- a JSON Schema validator for the OpenAPI 3.0 subset the document uses ------------------------

def validate(value, schema, where="$"):
    """The list of reasons value does not conform to schema (empty: it does)."""
    schema = resolve(schema)
    errs = []
    if value is None and schema.get("nullable"):
        pass
    elif "type" in schema and not type_ok(value, schema["type"]):
        return [f"{where}: {value!r} is not of type {schema['type']}"]
    for sub in schema.get("allOf", []):
        errs += validate(value, sub, where)
    if "anyOf" in schema and not any(not validate(value, s, where) for s in schema["anyOf"]):
        errs.append(f"{where}: matches none of anyOf")
    if "oneOf" in schema and sum(not validate(value, s, where) for s in schema["oneOf"]) != 1:
        errs.append(f"{where}: does not match exactly one of oneOf")
    if "not" in schema and not validate(value, schema["not"], where):
        errs.append(f"{where}: matches its 'not'")
    if "enum" in schema and value not in schema["enum"]:
        errs.append(f"{where}: {value!r} not in {schema['enum']}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", 1e18):
            errs.append(f"{where}: length {len(value)} out of bounds")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errs.append(f"{where}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < schema.get("minimum", -float("inf")) or value > schema.get("maximum", float("inf")):
            errs.append(f"{where}: {value} out of bounds")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", 1e18):
            errs.append(f"{where}: {len(value)} items out of bounds")
        if schema.get("uniqueItems") and len({json.dumps(v, sort_keys=True) for v in value}) != len(value):
            errs.append(f"{where}: items not unique")
        if "items" in schema:
            for i, v in enumerate(value):
                errs += validate(v, schema["items"], f"{where}[{i}]")
    if isinstance(value, dict):
        if len(value) < schema.get("minProperties", 0) or len(value) > schema.get("maxProperties", 1e18):
            errs.append(f"{where}: {len(value)} members out of bounds")
        for name in schema.get("required", []):
            if name not in value:
                errs.append(f"{where}: missing {name}")
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for name, v in value.items():
            if name in props:
                errs += validate(v, props[name], f"{where}.{name}")
            elif extra is False:
                errs.append(f"{where}: unknown member {name}")
            elif isinstance(extra, dict):
                errs += validate(v, extra, f"{where}.{name}")
    return errs


def type_ok(value, t):
    return {"object": isinstance(value, dict), "array": isinstance(value, list),
            "string": isinstance(value, str), "boolean": isinstance(value, bool),
            "integer": isinstance(value, int) and not isinstance(value, bool),
            "number": isinstance(value, (int, float)) and not isinstance(value, bool),
            }[t]


def test_the_validator_refuses_what_the_document_forbids():
    job = resolve({"$ref": "#/components/schemas/JobSpec"})
    assert validate({"name": "ok", "command": ["x"], "workers": {"count": 1}}, job) == []
    assert validate({"name": "ok", "command": ["x"], "workers": {"count": 1}, "bogus": 1}, job)
    assert validate({"name": "Bad Name", "command": ["x"], "workers": {"count": 1}}, job)
    assert validate({"name": "ok", "command": ["x"]}, job)
    assert validate(None, {"$ref": "#/components/schemas/NullValue"}) == []
    assert validate("x", {"$ref": "#/components/schemas/NullValue"})


# ---- the client's table against the document ---------------------------------------------------

def test_every_client_operation_is_in_the_document():
    for name, (op_id, method, path, reads) in OPERATIONS.items():
        assert op_id in OPS, f"{name}: {op_id} is not an operation of openapi.yaml"
        assert (method, path) == OPS[op_id][:2], f"{name}: {op_id} is {OPS[op_id][:2]}"
        assert callable(getattr(trainyard.Client, name)), name
        op = OPS[op_id][3]
        for member in reads:
            ok = [code for code, resp in op["responses"].items() if code.startswith("2") and
                  member in schema_properties(resolve(resp)["content"]["application/json"]["schema"])]
            assert ok, f"{name} reads {member}, which no 2xx answer of {op_id} has"


def test_every_operation_is_a_client_method_or_excluded_with_a_reason():
    covered = {op_id for op_id, _, _, _ in OPERATIONS.values()}
    assert not covered & EXCLUDED.keys()
    missing = OPS.keys() - covered - EXCLUDED.keys()
    assert not missing, f"operations without a client method or a reason: {sorted(missing)}"
    assert not EXCLUDED.keys() - OPS.keys(), "excluded operations that no longer exist"


# ---- requests and answers on the wire ----------------------------------------------------------

class Recorder:
    """A requests.Session hook that checks every request and answer against the document."""

    def __init__(self):
        self.session = requests.Session()
        self.session.hooks["response"].append(self._check)
        self.problems = []
        self.sent = {}  # operationId -> set of (in, name) sent
        self.statuses = {}  # operationId -> set of statuses answered
        self.invalid_input = False  # set while the test hands the client bad values on purpose

    def _check(self, r, *args, **kwargs):
        try:
            self._check_exchange(r)
        except Exception as e:  # noqa: BLE001 (recorded, asserted at the end)
            self.problems.append(f"{r.request.method} {r.request.url}: {e!r}")

    def _check_exchange(self, r):
        req = r.request
        url = urllib.parse.urlsplit(req.url)
        op_id = match_operation(req.method, urllib.parse.unquote(url.path))
        if op_id is None:
            self.problems.append(f"{req.method} {url.path}: no such operation")
            return
        method, template, params, op = OPS[op_id]
        sent = self.sent.setdefault(op_id, set())
        self.statuses.setdefault(op_id, set()).add(r.status_code)
        for name, values in urllib.parse.parse_qs(url.query, keep_blank_values=True).items():
            sent.add(("query", name))
            p = params.get(("query", name))
            if p is None:
                self.problems.append(f"{op_id}: query parameter {name} is not documented")
                continue
            schema = resolve(p["schema"])
            if schema.get("type") == "array":
                items = [convert(v, schema["items"]) for v in values]
                errs = validate(items, schema, f"query.{name}")
            elif len(values) != 1:
                errs = [f"query.{name} repeated"]
            else:
                errs = validate(convert(values[0], schema), schema, f"query.{name}")
            if not self.invalid_input:
                self.problems += [f"{op_id}: {e}" for e in errs]
        for name, value in req.headers.items():
            if name.lower() in TRANSPORT_HEADERS:
                continue
            sent.add(("header", name.lower()))
            p = params.get(("header", name.lower()))
            if p is None:
                self.problems.append(f"{op_id}: header {name} is not documented")
            else:
                self.problems += [f"{op_id}: {e}" for e in validate(value, p["schema"], name)]
        body_schema = op.get("requestBody", {}).get("content", {}).get("application/json", {})
        if req.body:
            if not body_schema:
                self.problems.append(f"{op_id}: sends a body the operation does not take")
            elif not self.invalid_input:
                self.problems += [f"{op_id} request: {e}" for e in
                                  validate(json.loads(req.body), body_schema["schema"])]
        elif resolve(op.get("requestBody", {})).get("required"):
            self.problems.append(f"{op_id}: sends no body, and one is required")
        resp = op["responses"].get(str(r.status_code)) or op["responses"].get("default")
        if resp is None:
            self.problems.append(f"{op_id}: status {r.status_code} is not documented")
            return
        resp = resolve(resp)
        ctype = r.headers.get("Content-Type", "").split(";")[0].strip()
        content = resp.get("content", {})
        if r.status_code == 204 or not content:
            return
        if ctype not in content:
            self.problems.append(f"{op_id}: {r.status_code} {ctype} is not documented")
        elif ctype in ("application/json", "application/problem+json"):
            self.problems += [f"{op_id} {r.status_code}: {e}" for e in
                              validate(r.json(), content[ctype]["schema"])]

    def check_events(self, op_id, events):
        """Each StreamEvent of a followed stream against the operation's event schemas."""
        kinds = OPS[op_id][3]["responses"]["200"]["content"]["text/event-stream"][
            "x-trainyard-events"]
        for ev in events:
            if ev.event not in kinds:
                self.problems.append(f"{op_id}: event type {ev.event} is not documented")
            else:
                self.problems += [f"{op_id} event {ev.event}: {e}" for e in
                                  validate(ev.data, kinds[ev.event])]


def convert(text, schema):
    """A query parameter's text as the value its schema describes."""
    t = resolve(schema).get("type")
    if t == "integer":
        return int(text)
    if t == "number":
        return float(text)
    if t == "boolean":
        return {"true": True, "false": False}.get(text, text)
    return text


def job(name, script="true", **extra):
    return {"name": name, "command": ["sh", "-c", script], "workers": {"count": 1}, **extra}


@pytest.fixture
def recorder():
    return Recorder()


def test_every_request_and_answer_of_the_client_conforms(server, recorder, tmp_path,
                                                         no_client_config):
    c = trainyard.Client(server.url, server.admin_token, session=recorder.session)
    watch = c.watch(state=["PENDING", "succeeded"], queue="default", labels={"c": "1"},
                    last_event_id=None)
    j = c.submit(job("contract", "echo hi", labels={"c": "1"}), idempotency_key="c-1")
    batch = c.submit_batch([job("contract-b", "sleep 600", labels={"c": "2"})] * 3, team="default",
                           idempotency_key="c-2")
    first = next(watch)
    recorder.check_events("followEvents", [first])
    watch.close()
    c.watch(last_event_id=first.id).close()
    events = list(c.events(j["id"], follow=True))
    recorder.check_events("getJobEvents", events)
    c.events(j["id"], follow=True, last_event_id=events[0].id).close()
    assert c.wait(j["id"])["state"] == "SUCCEEDED"
    c.events(j["id"])
    c.attempts(j["id"])
    c.logs(j["id"], rank=0, attempt=1, tail=5)
    "".join(c.logs(j["id"], follow=True))
    c.metrics(j["id"], names=["loss", "accuracy"], max_points=10, since_step=0)
    # The batch's jobs past ADMITTED and STARTING first (PENDING or RUNNING): the list below
    # then has all 3 of them, one a page, so that page_token is sent too.
    deadline = time.monotonic() + 120
    while any(c.get(b["id"])["state"] not in ("PENDING", "RUNNING") for b in batch):
        assert time.monotonic() < deadline, [c.get(b["id"])["state"] for b in batch]
        time.sleep(0.05)
    list(c.list(state=["SUCCEEDED", "PENDING,RUNNING"], queue="default", labels=["c=2"],
                name_prefix="contract", created_after="2000-01-01T00:00:00Z",
                created_before="2100-01-01T00:00:00Z", page_size=1))
    c.cancel(batch[0]["id"])
    for b in batch[1:]:
        c.cancel(b["id"], reason="Pruned", message="loss 0.9 at step 40")
    with pytest.raises(trainyard.Conflict):
        c.cancel(j["id"])
    with pytest.raises(trainyard.NotFound):
        c.get("0" * 26)
    recorder.invalid_input = True  # values the document refuses; the answers are checked
    with pytest.raises(trainyard.Invalid):
        c.submit({"name": "x", "command": [], "workers": {"count": 0}})
    with pytest.raises(trainyard.BadRequest):
        list(c.list(page_size=0))
    recorder.invalid_input = False
    sweep = c.create_sweep({"name": "contract", "algorithm": "random", "trials": 2, "seed": 1,
                            "parameters": {"lr": {"log_uniform": [0.001, 0.1]}},
                            "objective": {"metric": "loss", "goal": "minimize"},
                            "template": job("trial", "echo ${lr}")})
    c.get_sweep(sweep["id"])
    c.create_sweep({"name": "contract-grid", "algorithm": "grid", "parallelism": 1,
                    "parameters": {"lr": [0.1, 0.01]},
                    "objective": {"metric": "loss", "goal": "maximize"},
                    "template": job("trial", "echo ${lr}")})
    assert len(list(c.list_sweeps(page_size=1))) == 2
    c.cancel_sweep(sweep["id"])
    c.queue(team="default", limit=10)
    c.cluster()
    c.whoami()
    c.create_team("contract", quota={"cpu": "8", "memory": "16Gi"}, weight=2,
                  borrowing_limit={"cpu": "2"}, priority_preemption=True)
    c.teams()
    c.get_team("contract")
    c.update_team("contract", weight=5, quota=None)
    c.delete_team("contract")
    with pytest.raises(trainyard.Unauthorized):
        trainyard.Client(server.url, "ty_" + "x" * 43, session=recorder.session).get(j["id"])

    assert not recorder.problems, "\n".join(recorder.problems)
    client_ops = {op_id for op_id, _, _, _ in OPERATIONS.values()}
    assert client_ops <= recorder.sent.keys(), client_ops - recorder.sent.keys()
    unsent = [f"{op_id} {where}.{name}" for op_id in client_ops
              for (where, name) in OPS[op_id][2]
              if where in ("query", "header") and (where, name) not in recorder.sent[op_id]
              and (op_id, name) not in PARAM_EXCLUDED]
    assert not unsent, f"parameters the client cannot send: {unsent}"


def test_a_stream_refused_for_want_of_a_place_conforms(start_server, recorder, tmp_path,
                                                       no_client_config, monkeypatch):
    monkeypatch.setattr(trainyard.client, "STREAM_PLACE_WAIT", 0.1)
    s = start_server(args=("--local-sandbox=off", "--max-streams-per-token", "1"))
    c = trainyard.Client(s.url, s.admin_token, session=recorder.session)
    go = tmp_path / "go"
    j = c.submit(job("held", f"while [ ! -e {go} ]; do sleep 0.05; done"))
    held = c.events(j["id"], follow=True)
    next(held)
    done = threading.Event()
    t = threading.Thread(target=lambda: (c.wait(j["id"]), done.set()))
    t.start()
    deadline = time.monotonic() + 60
    while 429 not in recorder.statuses.get("getJobEvents", set()):
        assert time.monotonic() < deadline, "no 429"
        time.sleep(0.05)
    held.close()
    go.touch()
    t.join(120)
    assert done.is_set()
    assert not recorder.problems, "\n".join(recorder.problems)
