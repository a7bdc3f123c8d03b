import * as assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { Get, serverCommand, serverSettings } from "../server";

function getter(values: Record<string, unknown>): Get {
  return <T>(key: string) => values[key] as T | undefined;
}

function fakeProgram(dir: string): string {
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, "ling-local");
  fs.writeFileSync(file, "#!/bin/sh\n", { mode: 0o755 });
  return file;
}

test("the project's venv comes before PATH; profile and autoStart become arguments", () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "ling-vscode-"));
  const onPath = fakeProgram(path.join(root, "usr-bin"));
  const env = { PATH: path.join(root, "usr-bin") };
  const get = getter({ "server.args": ["lsp"], "daemon.profile": "local", "daemon.autoStart": false });
  assert.equal(serverCommand(get, [path.join(root, "project")], env)?.command, onPath);
  const inVenv = fakeProgram(path.join(root, "project", ".venv", "bin"));
  const cmd = serverCommand(get, [path.join(root, "project")], env);
  assert.equal(cmd?.command, inVenv);
  assert.deepEqual(cmd?.args, ["lsp", "--profile", "local", "--no-start-daemon"]);
  assert.equal(serverCommand(get, [], { PATH: "" }), undefined);
});

test("daemon.url reaches the server as LING_LOCAL_URL", () => {
  const get = getter({ "server.path": "/opt/ling-local", "daemon.url": "unix:/tmp/s" });
  const cmd = serverCommand(get, [], {});
  assert.equal(cmd?.command, "/opt/ling-local");
  assert.equal(cmd?.env.LING_LOCAL_URL, "unix:/tmp/s");
});

test("only the language server's own settings are sent to it", () => {
  const get = getter({ maxLines: 4, context: { workspace: false }, "server.path": "x", temperature: null });
  assert.deepEqual(serverSettings(get), { maxLines: 4, context: { workspace: false }, temperature: null });
});
