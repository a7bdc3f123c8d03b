"""Safe by default: token, Host and Origin checks, loopback-only bind, token file mode."""

from __future__ import annotations

import stat
import subprocess
import sys

import httpx
import pytest

from tests.support import REPO, DaemonProcess, child_env


def test_health_needs_no_token(daemon: DaemonProcess) -> None:
    r = httpx.get(daemon.url + "/health", trust_env=False)
    assert r.status_code == 200
    assert r.json()["state"] == "ready"


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}]
)
@pytest.mark.parametrize("path", ["/v1/models", "/metrics"])
def test_token_required(daemon: DaemonProcess, headers: dict, path: str) -> None:
    r = httpx.get(daemon.url + path, headers=headers, trust_env=False)
    assert r.status_code == 401
    assert r.json()["error"]["type"] == "authentication_error"


def test_completion_without_token_is_401(daemon: DaemonProcess) -> None:
    r = httpx.post(daemon.url + "/v1/completions", json={"prompt": "x"}, trust_env=False)
    assert r.status_code == 401


def test_right_token_is_accepted(daemon: DaemonProcess) -> None:
    with daemon.http() as http:
        assert http.get("/v1/models").status_code == 200


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:8741",
        "127.0.0.1.nip.io",
        "192.168.1.10",
        "localhost.evil.example",
    ],
)
def test_foreign_host_header_is_403(daemon: DaemonProcess, host: str) -> None:
    with daemon.http() as http:
        r = http.get("/v1/models", headers={"Host": host})
    assert r.status_code == 403
    assert r.json()["error"]["type"] == "forbidden_host"


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1:1234", "[::1]:80", "LOCALHOST"])
def test_loopback_host_names_pass(daemon: DaemonProcess, host: str) -> None:
    with daemon.http() as http:
        assert http.get("/v1/models", headers={"Host": host}).status_code == 200


def test_foreign_origin_is_403_even_with_token(daemon: DaemonProcess) -> None:
    with daemon.http() as http:
        r = http.post(
            "/v1/completions",
            json={"prompt": "x", "max_tokens": 1},
            headers={"Origin": "https://evil.example"},
        )
    assert r.status_code == 403
    assert r.json()["error"]["type"] == "forbidden_origin"


def test_dns_rebinding_cannot_read_health(daemon: DaemonProcess) -> None:
    r = httpx.get(daemon.url + "/health", headers={"Host": "attacker.example"}, trust_env=False)
    assert r.status_code == 403


def test_allowed_origin_passes(profile_path, tmp_path) -> None:
    from starlette.testclient import TestClient

    from ling_local.config import load_profile
    from ling_local.server.app import create_app

    app = create_app(
        load_profile(str(profile_path)),
        token="t",
        allowed_origins=["http://localhost:3000"],
        wait_for_engine=True,
    )
    with TestClient(app, base_url="http://localhost:8741") as c:
        ok = c.get(
            "/v1/models", headers={"Authorization": "Bearer t", "Origin": "http://localhost:3000"}
        )
        bad = c.get(
            "/v1/models", headers={"Authorization": "Bearer t", "Origin": "http://localhost:3001"}
        )
    assert ok.status_code == 200
    assert bad.status_code == 403


def test_token_file_is_private(daemon: DaemonProcess) -> None:
    token_file = daemon.home / "config" / "token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(token_file.parent.stat().st_mode) & 0o077 == 0
    assert len(token_file.read_text().strip()) >= 32


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10"])
def test_non_loopback_bind_is_refused_without_flag(profile_path, tmp_path, host: str) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ling_local",
            "serve",
            "--profile",
            str(profile_path),
            "--host",
            host,
            "--port",
            "0",
        ],
        env=child_env(tmp_path),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "refusing to listen" in proc.stderr
    assert "--allow-remote" in proc.stderr


def test_runtime_file_points_at_the_daemon(daemon: DaemonProcess) -> None:
    import json

    info = json.loads((daemon.home / "run" / "daemon.json").read_text())
    assert info["url"] == daemon.url
    assert info["pid"] == daemon.process.pid
