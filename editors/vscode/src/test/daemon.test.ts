import * as assert from "node:assert/strict";
import * as fs from "node:fs";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { checkHealth, discoverUrl, runtimeFile, stateOf } from "../daemon";

test("the runtime file is where ling_local/paths.py puts it", () => {
  assert.equal(runtimeFile({ LING_LOCAL_HOME: "/h" }, "/home/u"), "/h/run/daemon.json");
  assert.equal(
    runtimeFile({ XDG_RUNTIME_DIR: "/run/user/1" }, "/home/u"),
    "/run/user/1/ling-local/daemon.json",
  );
  assert.equal(runtimeFile({}, "/home/u"), "/home/u/.local/state/ling-local/run/daemon.json");
});

test("discovery: the setting, then LING_LOCAL_URL, then a live daemon's runtime file", () => {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), "ling-vscode-"));
  const env = { LING_LOCAL_HOME: home };
  assert.equal(discoverUrl("", env), undefined);
  fs.mkdirSync(path.join(home, "run"));
  const info = { url: "http://127.0.0.1:9", pid: process.pid, profile: "tiny" };
  fs.writeFileSync(path.join(home, "run", "daemon.json"), JSON.stringify(info));
  assert.equal(discoverUrl("", env), "http://127.0.0.1:9");
  assert.equal(discoverUrl("", { ...env, LING_LOCAL_URL: "unix:/s" }), "unix:/s");
  assert.equal(discoverUrl("http://127.0.0.1:7", env), "http://127.0.0.1:7");
  // A daemon that died without removing its file is not there.
  fs.writeFileSync(path.join(home, "run", "daemon.json"), JSON.stringify({ ...info, pid: 2 ** 22 + 7 }));
  assert.equal(discoverUrl("", env), undefined);
});

test("health states", () => {
  assert.equal(stateOf({ state: "ready", running: 0, queued: 0 }).state, "ready");
  assert.equal(stateOf({ state: "ready", running: 1, queued: 0 }).state, "busy");
  assert.equal(stateOf({ state: "starting" }).state, "starting");
  assert.equal(stateOf({ state: "failed", detail: "no model" }).detail, "no model");
});

test("checkHealth reads a 503 body and reports a closed port as unreachable", async () => {
  const server = http.createServer((req, res) => {
    assert.equal(req.url, "/health");
    res.writeHead(503, { "content-type": "application/json" });
    res.end(JSON.stringify({ state: "starting", model: "m", profile: "tiny" }));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    const status = await checkHealth(url);
    assert.deepEqual(status, { state: "starting", url, model: "m", profile: "tiny", detail: undefined });
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
  assert.equal((await checkHealth(url)).state, "unreachable");
  assert.equal((await checkHealth(undefined)).state, "unreachable");
});
