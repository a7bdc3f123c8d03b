"""Safe by default: token, Host and Origin checks, loopback-only bind, token file mode."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from ling_local.errors import ConfigError
from tests.support import REPO, DaemonProcess, child_env, start_daemon, write_profile


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


# --- holes an outside review found (issue 24) -------------------------------------------
def _serve(
    profile: Path, home: Path, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ling_local", "serve", "--profile", str(profile), *args],
        env=child_env(home),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_an_empty_host_is_every_interface_and_refused_without_flag(profile_path, tmp_path) -> None:
    proc = _serve(profile_path, tmp_path, "--host", "", "--port", "0")
    assert proc.returncode == 2
    assert "refusing to listen on every interface" in proc.stderr
    from ling_local.server.serve import _url_host

    assert _url_host("") == "127.0.0.1" and _url_host("::") == "[::1]"  # the discovery URL


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1:abc", "127.0.0.1:99999", "127.0.0.1:0", "localhost:", "[::1]evil.example", "::1"],
)
def test_malformed_loopback_host_is_403(daemon: DaemonProcess, host: str) -> None:
    with daemon.http() as http:
        r = http.get("/v1/models", headers={"Host": host})
    assert r.status_code == 403
    assert r.json()["error"]["type"] == "forbidden_host"


def _raw_request(url: str, request: bytes) -> bytes:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


def test_two_host_headers_are_refused(daemon: DaemonProcess) -> None:
    for first, second in (("evil.example", "localhost"), ("localhost", "evil.example")):
        reply = _raw_request(
            daemon.url,
            f"GET /v1/models HTTP/1.1\r\nHost: {first}\r\nHost: {second}\r\n"
            f"Authorization: Bearer {daemon.token}\r\nConnection: close\r\n\r\n".encode(),
        )
        assert reply.startswith(b"HTTP/1.1 400"), reply[:200]


def test_a_missing_model_directory_fails_at_once(tmp_path) -> None:
    profile = write_profile(tmp_path / "gone.toml", str(tmp_path / "no-such-model"), name="gone")
    t0 = time.monotonic()
    proc = _serve(profile, tmp_path / "home", "--port", "0", timeout=60)
    assert proc.returncode == 2
    assert f"model directory {tmp_path / 'no-such-model'} not found" in proc.stderr
    assert time.monotonic() - t0 < 30  # it did not load anything first
    assert not (tmp_path / "home" / "run" / "daemon.json").exists()


def test_uds_never_deletes_a_file_that_is_not_its_socket(profile_path, tmp_path) -> None:
    path = tmp_path / "data.txt"
    path.write_text("precious")
    proc = _serve(profile_path, tmp_path / "home", "--uds", str(path))
    assert proc.returncode == 2 and "not a socket" in proc.stderr
    assert path.read_text() == "precious"


def test_uds_socket_is_private_and_only_it_is_removed(profile_path, tmp_path) -> None:
    path = tmp_path / "d.sock"
    d = start_daemon(profile_path, tmp_path / "home", "--uds", str(path), wait_ready=False)
    try:
        assert stat.S_ISSOCK(path.lstat().st_mode)
        assert stat.S_IMODE(path.lstat().st_mode) == 0o600
        with d.http() as http:
            assert http.get("/health").status_code in (200, 503)
        path.unlink()  # replaced while it runs: the new file is not the daemon's to delete
        path.write_text("someone else's")
    finally:
        d.stop()
    assert path.read_text() == "someone else's"


@pytest.mark.parametrize(
    "problem", ["weak", "empty", "loose mode", "symlink", "directory", "other owner"]
)
def test_an_untrustworthy_token_file_is_replaced_and_logged(
    tmp_path, caplog: pytest.LogCaptureFixture, problem: str
) -> None:
    from ling_local import discovery, paths

    token_file = paths.token_file()
    token_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("do not touch")
    good = "A" * 43
    if problem == "weak":
        token_file.write_text("weak\n")
    elif problem == "empty":
        token_file.write_text("")
    elif problem == "loose mode":
        token_file.write_text(good)
        token_file.chmod(0o666)
    elif problem == "symlink":
        token_file.symlink_to(victim)
    elif problem == "directory":
        token_file.mkdir()
    else:
        if os.getuid() != 0:
            pytest.skip("needs root to give the file to another user")
        token_file.write_text(good)
        token_file.chmod(0o600)
        os.chown(token_file, 12345, 12345)
    if problem == "directory":  # not a file to delete: a clear error instead
        with pytest.raises(ConfigError, match=r"token file .* cannot be trusted"):
            discovery.ensure_token()
        return
    with caplog.at_level("WARNING", logger="ling_local.discovery"):
        token = discovery.ensure_token()
    assert len(token) >= 43 and token != good
    assert token_file.read_text().strip() == token
    st = token_file.lstat()
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == os.getuid()
    assert victim.read_text() == "do not touch"
    if problem != "empty":
        assert "replacing the token file" in caplog.text
    assert discovery.ensure_token() == token  # a good file is kept


def test_slow_clients_are_dropped_while_others_are_served(model_dir, tmp_path) -> None:
    profile = write_profile(
        tmp_path / "slow.toml", str(model_dir), limits={"request_read_timeout_s": 1.0}
    )
    d = start_daemon(profile, tmp_path / "home")
    host, port = d.url.removeprefix("http://").rsplit(":", 1)
    slow: list[socket.socket] = []
    try:
        for i in range(100):
            sock = socket.create_connection((host, int(port)), timeout=10)
            if i % 3 == 0:
                sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: local")  # half the headers
            elif i % 3 == 1:
                sock.sendall(
                    b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
                    b"Authorization: Bearer " + d.token.encode() + b"\r\n"
                    b'Content-Length: 100\r\n\r\n{"prompt":'  # half the body
                )
            slow.append(sock)  # the last third sends nothing at all
        with d.http() as http:
            r = http.post("/v1/completions", json={"prompt": "def f():", "max_tokens": 2})
        assert r.status_code == 200
        deadline = time.monotonic() + 10
        for sock in slow:  # each one closed by the daemon, without an answer
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(65536) == b""
        with d.http() as http:
            assert http.get("/v1/models").status_code == 200
    finally:
        for sock in slow:
            sock.close()
        d.stop()


def test_bench_models_live_in_a_private_directory() -> None:
    import tempfile

    from ling_local.bench.engine import bench_model_dir

    path = bench_model_dir("llama-1b")
    assert not str(path).startswith(tempfile.gettempdir() + "/ling-bench")
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.parent.stat().st_uid == os.getuid()


def test_endless_headers_are_cut_off_with_431(daemon: DaemonProcess) -> None:
    host, port = daemon.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n")
        with contextlib.suppress(ConnectionError):
            for i in range(200):  # 200 x 1 KiB of headers, never finished
                sock.sendall(f"X-Filler-{i}: ".encode() + b"a" * 1000 + b"\r\n")
        reply = sock.recv(65536)
    assert reply.startswith(b"HTTP/1.1 431"), reply[:100]
    with daemon.http() as http:  # a request with a big body is not mistaken for one
        r = http.post("/v1/completions", json={"prompt": "x" * 200_000, "max_tokens": 1})
        assert r.status_code == 400 and "context" in r.json()["error"]["message"]
