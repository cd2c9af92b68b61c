"""The fixture's server answers with its first-start admin token and makes team tokens."""


def test_server_is_ready_and_admin_token_works(server):
    assert server.request("GET", "/readyz").status_code == 200
    teams = server.request("GET", "/v1/teams").json()["teams"]
    assert "default" in [t["name"] for t in teams]


def test_team_token_sees_its_team_only(server):
    token = server.make_token("vision")
    r = server.request("GET", "/v1/teams", token=token)
    assert r.status_code == 200
    assert [t["name"] for t in r.json()["teams"]] == ["vision"]


def test_restart_keeps_the_port_and_the_data(server):
    port = server.port
    server.stop()
    server.start()
    assert server.port == port
    assert server.request("GET", "/readyz").status_code == 200
