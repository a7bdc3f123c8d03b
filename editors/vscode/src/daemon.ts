// Where the daemon is and how it is doing, for the status bar. No `vscode` import: plain
// Node, so `npm test` runs it without an editor.
//
// Discovery mirrors ling_local/paths.py and ling_local/discovery.py: LING_LOCAL_URL, else
// the runtime file `daemon.json` that `ling-local serve` writes (under LING_LOCAL_HOME/run,
// $XDG_RUNTIME_DIR/ling-local or $XDG_STATE_HOME/ling-local/run).

import * as fs from "node:fs";
import * as http from "node:http";
import * as https from "node:https";
import * as os from "node:os";
import * as path from "node:path";

export type DaemonState = "starting" | "ready" | "busy" | "unreachable" | "failed";

export interface DaemonStatus {
  state: DaemonState;
  url?: string;
  model?: string;
  profile?: string;
  detail?: string;
}

type Env = NodeJS.ProcessEnv;

export function runtimeFile(env: Env = process.env, home: string = os.homedir()): string {
  if (env.LING_LOCAL_HOME) {
    return path.join(expandHome(env.LING_LOCAL_HOME, home), "run", "daemon.json");
  }
  if (env.XDG_RUNTIME_DIR) {
    return path.join(env.XDG_RUNTIME_DIR, "ling-local", "daemon.json");
  }
  const state = env.XDG_STATE_HOME || path.join(home, ".local", "state");
  return path.join(state, "ling-local", "run", "daemon.json");
}

/** The daemon's URL: the configured one, LING_LOCAL_URL, or a live daemon's runtime file. */
export function discoverUrl(configured: string, env: Env = process.env): string | undefined {
  if (configured) {
    return configured;
  }
  if (env.LING_LOCAL_URL) {
    return env.LING_LOCAL_URL;
  }
  try {
    const info = JSON.parse(fs.readFileSync(runtimeFile(env), "utf8"));
    if (typeof info.url === "string" && typeof info.pid === "number" && alive(info.pid)) {
      return info.url;
    }
  } catch {
    // no daemon has run yet, or it is being rewritten: unreachable for now
  }
  return undefined;
}

/** What `GET /health` (no token needed) says, as one of the status bar's states. */
export function stateOf(body: unknown): DaemonStatus {
  const h = (body ?? {}) as Record<string, unknown>;
  const engine = typeof h.state === "string" ? h.state : "failed";
  const working = Number(h.running ?? 0) > 0 || Number(h.queued ?? 0) > 0;
  let state: DaemonState;
  if (engine === "ready") {
    state = working ? "busy" : "ready";
  } else if (engine === "starting") {
    state = "starting";
  } else {
    state = "failed";
  }
  return {
    state,
    model: typeof h.model === "string" ? h.model : undefined,
    profile: typeof h.profile === "string" ? h.profile : undefined,
    detail: typeof h.detail === "string" && h.detail ? h.detail : undefined,
  };
}

export async function checkHealth(url: string | undefined, timeoutMs = 2000): Promise<DaemonStatus> {
  if (!url) {
    return { state: "unreachable", detail: "no daemon is running" };
  }
  try {
    const body = await getJson(url, "/health", timeoutMs);
    return { ...stateOf(body), url };
  } catch (err) {
    return { state: "unreachable", url, detail: (err as Error).message };
  }
}

function getJson(url: string, route: string, timeoutMs: number): Promise<unknown> {
  let options: http.RequestOptions;
  let get: typeof http.get = http.get;
  if (url.startsWith("unix:")) {
    // The daemon checks the Host header: a unix socket still needs a loopback name.
    options = { socketPath: url.slice(5), path: route, headers: { Host: "localhost" } };
  } else {
    const base = new URL(url);
    options = {
      hostname: base.hostname,
      port: base.port,
      path: base.pathname.replace(/\/$/, "") + route,
    };
    if (base.protocol === "https:") {
      get = https.get;
    }
  }
  return new Promise((resolve, reject) => {
    // /health answers 503 while the engine starts or after it failed, with the same body.
    const req = get({ ...options, timeout: timeoutMs }, (res) => {
      let data = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => (data += chunk));
      res.on("end", () => {
        try {
          resolve(JSON.parse(data));
        } catch {
          reject(new Error(`not a ling-local daemon (HTTP ${res.statusCode})`));
        }
      });
    });
    req.on("timeout", () => req.destroy(new Error(`no answer in ${timeoutMs} ms`)));
    req.on("error", reject);
  });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

function expandHome(p: string, home: string): string {
  return p === "~" || p.startsWith("~/") ? path.join(home, p.slice(1)) : p;
}
