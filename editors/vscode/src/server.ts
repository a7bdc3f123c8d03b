// How the extension starts `ling-local lsp` and what settings it sends. No `vscode` import:
// the editor's configuration comes in as a plain `get(key)` function.

import * as fs from "node:fs";
import * as path from "node:path";

export type Get = <T>(key: string) => T | undefined;

/** The settings the language server reads (lsp/settings.py), under the `ling-local` section.
 * The other keys of that section (server.*, daemon.*) are the extension's own. */
export const SERVER_SETTINGS = [
  "enable",
  "debounceMs",
  "debounceMinMs",
  "debounceMaxMs",
  "maxLines",
  "maxTokens",
  "firstLinesMs",
  "temperature",
  "seed",
  "context",
  "contextBudgetMs",
  "completionFallback",
  "telemetry",
  "speculative",
] as const;

/** Changing one of these means a new server process. */
export const PROCESS_SETTINGS = ["server", "daemon"] as const;

export function serverSettings(get: Get): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of SERVER_SETTINGS) {
    const value = get(key);
    if (value !== undefined) {
      out[key] = value;
    }
  }
  return out;
}

export interface ServerCommand {
  command: string;
  args: string[];
  env: NodeJS.ProcessEnv;
  /** Where the command was found, for the log. */
  origin: string;
}

const EXE = process.platform === "win32" ? ["Scripts", "ling-local.exe"] : ["bin", "ling-local"];

/** `ling-local lsp` as configured: the program (configured path, a project venv, the active
 * venv, PATH) and its arguments; undefined when no `ling-local` is found. */
export function serverCommand(
  get: Get,
  folders: string[],
  env: NodeJS.ProcessEnv = process.env,
): ServerCommand | undefined {
  const found = findProgram(get<string>("server.path") ?? "", folders, env);
  if (!found) {
    return undefined;
  }
  const args = [...(get<string[]>("server.args") ?? ["lsp"])];
  const profile = get<string>("daemon.profile");
  if (profile) {
    args.push("--profile", profile);
  }
  if (get<boolean>("daemon.autoStart") === false) {
    args.push("--no-start-daemon");
  }
  const childEnv = { ...env };
  const url = get<string>("daemon.url");
  if (url) {
    childEnv.LING_LOCAL_URL = url;
  }
  return { command: found.command, args, env: childEnv, origin: found.origin };
}

function findProgram(
  configured: string,
  folders: string[],
  env: NodeJS.ProcessEnv,
): { command: string; origin: string } | undefined {
  if (configured) {
    const resolved = folders.length ? configured.replace("${workspaceFolder}", folders[0]) : configured;
    return { command: resolved, origin: "setting ling-local.server.path" };
  }
  for (const folder of folders) {
    for (const venv of [".venv", "venv"]) {
      const candidate = path.join(folder, venv, ...EXE);
      if (isExecutable(candidate)) {
        return { command: candidate, origin: `the project's ${venv}` };
      }
    }
  }
  if (env.VIRTUAL_ENV) {
    const candidate = path.join(env.VIRTUAL_ENV, ...EXE);
    if (isExecutable(candidate)) {
      return { command: candidate, origin: "$VIRTUAL_ENV" };
    }
  }
  for (const dir of (env.PATH ?? "").split(path.delimiter)) {
    const candidate = path.join(dir, EXE[1]);
    if (dir && isExecutable(candidate)) {
      return { command: candidate, origin: "PATH" };
    }
  }
  return undefined;
}

function isExecutable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}
