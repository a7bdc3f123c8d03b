-- Drives ling-local's language server from a real Neovim (0.12, headless): attach, ask for
-- an inline completion directly, then let Neovim's own vim.lsp.inline_completion show the
-- ghost text in insert mode and accept it. Writes what happened as JSON to $NVIM_TEST_OUT.
local out = {}
local function finish(ok, msg)
  out.ok, out.msg = ok, msg
  local f = assert(io.open(vim.env.NVIM_TEST_OUT, 'w'))
  f:write(vim.json.encode(out))
  f:close()
  vim.cmd('qa!')
end

local ws = vim.env.NVIM_TEST_WS
vim.lsp.config('ling', {
  cmd = { vim.env.NVIM_TEST_PYTHON, '-m', 'ling_local', 'lsp',
          '--profile', vim.env.NVIM_TEST_PROFILE, '--no-start-daemon' },
  filetypes = { 'python' },
  root_dir = ws,
  init_options = vim.json.decode(vim.env.NVIM_TEST_SETTINGS),
})
vim.lsp.enable('ling')
vim.cmd('edit ' .. ws .. '/main.py')
local buf = vim.api.nvim_get_current_buf()
local attached = vim.wait(30000, function()
  return #vim.lsp.get_clients({ bufnr = buf, name = 'ling' }) > 0
end, 50)
if not attached then
  return finish(false, 'the language server did not attach')
end
local client = vim.lsp.get_clients({ bufnr = buf, name = 'ling' })[1]
out.inline_provider = client.server_capabilities.inlineCompletionProvider ~= nil

-- 1. An explicit request, as a plugin would make it.
local res = client:request_sync('textDocument/inlineCompletion', {
  textDocument = { uri = vim.uri_from_bufnr(buf) },
  position = { line = 9, character = 4 },
  context = { triggerKind = 1 },
}, 60000, buf)
out.sync = res and res.result
out.sync_err = res and res.err

-- 2. The built-in ghost text: insert mode on the empty function body line.
vim.lsp.inline_completion.enable(true)
vim.api.nvim_win_set_cursor(0, { 10, 4 })
vim.cmd('startinsert!')
local ns = vim.api.nvim_create_namespace('nvim.lsp.inline_completion')
local deadline = vim.uv.now() + 60000
local function poll()
  local marks = vim.api.nvim_buf_get_extmarks(buf, ns, 0, -1, { details = true })
  if #marks > 0 then
    out.mode = vim.api.nvim_get_mode().mode
    out.ghost = marks[1][4].virt_text
    out.accepted = vim.lsp.inline_completion.get() -- what <Tab> would do
    vim.defer_fn(function()
      out.line = vim.api.nvim_buf_get_lines(buf, 9, 10, false)[1]
      local st = client:request_sync('workspace/executeCommand',
        { command = 'ling-local.stats' }, 10000, buf)
      out.stats = st and st.result
      finish(true, 'ghost text shown')
    end, 500)
    return
  end
  if vim.uv.now() > deadline then
    return finish(false, 'no ghost text appeared (mode ' .. vim.api.nvim_get_mode().mode .. ')')
  end
  vim.defer_fn(poll, 50)
end
vim.defer_fn(poll, 50)
