// The status bar item: the daemon's state at a glance; a click shows the log.

import * as vscode from "vscode";
import type { DaemonStatus } from "./daemon";

export interface View {
  enabled: boolean;
  /** The language server could not be found or started. */
  serverProblem?: string;
  /** The language server is starting. */
  starting: boolean;
  daemon: DaemonStatus;
}

const ICONS: Record<string, string> = {
  disabled: "$(circle-slash)",
  error: "$(error)",
  starting: "$(loading~spin)",
  ready: "$(check)",
  busy: "$(sync~spin)",
  unreachable: "$(debug-disconnect)",
  failed: "$(error)",
};

export class StatusItem implements vscode.Disposable {
  private readonly item = vscode.window.createStatusBarItem(
    "ling-local.status",
    vscode.StatusBarAlignment.Right,
    100,
  );

  constructor() {
    this.item.name = "ling-local";
    this.item.command = "ling-local.showLog";
    this.item.show();
  }

  show(view: View): void {
    const { daemon } = view;
    let state: string;
    let detail: string;
    if (view.serverProblem) {
      state = "error";
      detail = view.serverProblem;
    } else if (!view.enabled) {
      state = "disabled";
      detail = "completions are off (ling-local: Enable Completions turns them on)";
    } else if (view.starting) {
      state = "starting";
      detail = "the language server is starting";
    } else {
      state = daemon.state;
      detail = describe(daemon);
    }
    this.item.text = `${ICONS[state]} ling-local`;
    this.item.tooltip = `ling-local: ${state}. ${detail}\n\nClick to show the log.`;
    this.item.accessibilityInformation = { label: `ling-local: ${state}` };
    this.item.backgroundColor =
      state === "error" || state === "failed"
        ? new vscode.ThemeColor("statusBarItem.errorBackground")
        : undefined;
  }

  dispose(): void {
    this.item.dispose();
  }
}

function describe(d: DaemonStatus): string {
  const where = d.url ? ` at ${d.url}` : "";
  const model = d.model ? ` ${d.model}${d.profile ? ` (profile ${d.profile})` : ""}` : "";
  switch (d.state) {
    case "ready":
      return `The daemon${where} serves${model}.`;
    case "busy":
      return `The daemon${where} is generating${model ? ` with${model}` : ""}.`;
    case "starting":
      return `The daemon${where} is loading${model}.`;
    case "failed":
      return `The daemon's engine failed${d.detail ? `: ${d.detail}` : ""}; \`ling-local doctor\` says why.`;
    default:
      return `No daemon answers${where}${d.detail ? ` (${d.detail})` : ""}; the language server starts one unless ling-local.daemon.autoStart is off.`;
  }
}
