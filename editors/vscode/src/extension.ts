// The VS Code side of ling-local: starts `ling-local lsp` (the language server gives the
// ghost text through LSP 3.18 inline completion, which vscode-languageclient registers by
// itself), keeps its settings in sync, and shows the daemon's state in the status bar.

import * as vscode from "vscode";
import {
  DidChangeConfigurationNotification,
  LanguageClient,
  RevealOutputChannelOn,
  State,
} from "vscode-languageclient/node";
import { checkHealth, DaemonStatus, discoverUrl } from "./daemon";
import { Get, PROCESS_SETTINGS, serverCommand, serverSettings } from "./server";
import { StatusItem } from "./status";

const SECTION = "ling-local";
const POLL_MS = 2000;

function settings(): Get {
  const config = vscode.workspace.getConfiguration(SECTION);
  return <T>(key: string) => config.get<T>(key);
}

function folders(): string[] {
  return (vscode.workspace.workspaceFolders ?? [])
    .filter((f) => f.uri.scheme === "file")
    .map((f) => f.uri.fsPath);
}

class Extension implements vscode.Disposable {
  readonly output = vscode.window.createOutputChannel("ling-local", { log: true });
  readonly status = new StatusItem();
  private client: LanguageClient | undefined;
  private serverProblem: string | undefined;
  private daemon: DaemonStatus = { state: "starting" };
  private timer: NodeJS.Timeout | undefined;
  private polling = false;

  async start(): Promise<void> {
    const get = settings();
    const cmd = serverCommand(get, folders());
    if (!cmd) {
      this.serverProblem =
        "`ling-local` was not found (project .venv, $VIRTUAL_ENV, PATH). Install it " +
        "(pip install ling-local) or set ling-local.server.path.";
      this.output.error(this.serverProblem);
      this.render();
      void vscode.window
        .showErrorMessage(`ling-local: ${this.serverProblem}`, "Open Settings")
        .then((pick) => {
          if (pick) {
            void vscode.commands.executeCommand("workbench.action.openSettings", SECTION);
          }
        });
      return;
    }
    this.output.info(`starting ${cmd.command} ${cmd.args.join(" ")} (found in ${cmd.origin})`);
    const client = new LanguageClient(
      "ling-local",
      "ling-local",
      {
        command: cmd.command,
        args: cmd.args,
        // No `transport`: with one, the client appends `--stdio` to the arguments.
        options: { env: cmd.env, cwd: folders()[0] },
      },
      {
        documentSelector: [{ scheme: "file" }, { scheme: "untitled" }],
        outputChannel: this.output,
        revealOutputChannelOn: RevealOutputChannelOn.Never,
        initializationOptions: serverSettings(get),
        middleware: {
          workspace: {
            // The server pulls the `ling-local` section: answer with its own settings only.
            configuration: async (params, token, next) => {
              const answers = await next(params, token);
              if (!Array.isArray(answers)) {
                return answers;
              }
              return params.items.map((item, i) =>
                item.section === SECTION ? serverSettings(settings()) : answers[i],
              );
            },
          },
        },
      },
    );
    client.onDidChangeState(() => this.render());
    this.client = client;
    this.serverProblem = undefined;
    this.render();
    try {
      await client.start();
    } catch (err) {
      this.serverProblem = `the language server did not start: ${(err as Error).message}`;
      this.output.error(this.serverProblem);
      this.render();
    }
  }

  async restart(): Promise<void> {
    const old = this.client;
    this.client = undefined;
    if (old) {
      try {
        await old.dispose(5000);
      } catch (err) {
        this.output.warn(`stopping the language server: ${(err as Error).message}`);
      }
    }
    await this.start();
    void this.poll();
  }

  /** Settings changed: a new process for server.* / daemon.*, else tell the running one. */
  async configurationChanged(event: vscode.ConfigurationChangeEvent): Promise<void> {
    if (!event.affectsConfiguration(SECTION)) {
      return;
    }
    if (PROCESS_SETTINGS.some((key) => event.affectsConfiguration(`${SECTION}.${key}`))) {
      await this.restart();
      return;
    }
    if (this.client?.isRunning()) {
      await this.client.sendNotification(DidChangeConfigurationNotification.type, {
        settings: serverSettings(settings()),
      });
    }
    this.render();
  }

  async setEnabled(enabled: boolean): Promise<void> {
    const config = vscode.workspace.getConfiguration(SECTION);
    const where = config.inspect<boolean>("enable");
    const target =
      where?.workspaceValue !== undefined
        ? vscode.ConfigurationTarget.Workspace
        : vscode.ConfigurationTarget.Global;
    await config.update("enable", enabled, target);
  }

  startPolling(): void {
    this.timer = setInterval(() => void this.poll(), POLL_MS);
    void this.poll();
  }

  private async poll(): Promise<void> {
    if (this.polling) {
      return;
    }
    this.polling = true;
    try {
      const url = discoverUrl(settings()<string>("daemon.url") ?? "");
      const next = await checkHealth(url);
      if (next.state !== this.daemon.state) {
        this.output.info(`daemon: ${next.state}${next.detail ? ` (${next.detail})` : ""}`);
      }
      this.daemon = next;
      this.render();
    } finally {
      this.polling = false;
    }
  }

  private render(): void {
    const enabled = settings()<boolean>("enable") !== false;
    // Starting until the client runs: also while a restart replaces it.
    const starting = this.client?.state !== State.Running;
    this.status.show({ enabled, serverProblem: this.serverProblem, starting, daemon: this.daemon });
  }

  dispose(): void {
    if (this.timer) {
      clearInterval(this.timer);
    }
    this.status.dispose();
    this.output.dispose();
  }

  async stop(): Promise<void> {
    await this.client?.dispose(5000);
    this.client = undefined;
  }
}

let extension: Extension | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const ext = new Extension();
  extension = ext;
  context.subscriptions.push(
    ext,
    vscode.commands.registerCommand("ling-local.triggerSuggestion", () =>
      vscode.commands.executeCommand("editor.action.inlineSuggest.trigger"),
    ),
    vscode.commands.registerCommand("ling-local.enable", () => ext.setEnabled(true)),
    vscode.commands.registerCommand("ling-local.disable", () => ext.setEnabled(false)),
    vscode.commands.registerCommand("ling-local.showLog", () => ext.output.show(true)),
    vscode.commands.registerCommand("ling-local.restartServer", () => ext.restart()),
    vscode.workspace.onDidChangeConfiguration((e) => ext.configurationChanged(e)),
  );
  ext.startPolling();
  await ext.start();
}

export async function deactivate(): Promise<void> {
  await extension?.stop();
  extension = undefined;
}
