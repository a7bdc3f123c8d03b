"""The language server editors start with `ling-local lsp` (pygls, stdio).

server      state and start-up (`create_server`, `main`)   handlers    the LSP surface
completer   cursor -> ghost text                           trigger     gate, debounce, cache
inflight    one daemon stream, shared by requests          bridge      the daemon, via the SDK
context     prompt windows and budgets                     similar     open-document snippets
retrieval   workspace BM25 index (llama-index)             postprocess model text -> ghost text
files       workspace files by .gitignore, running nothing
tokens      token budgets without the model                settings    editor settings
telemetry   local counters and shown/accepted log

It talks to the daemon only through `ling_local.client`; it never loads a model.
"""
