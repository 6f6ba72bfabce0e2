-- The REPL driven through a pseudo-terminal (tmux), the way a person types:
-- expressions, multi-line statements, errors, completion, Ctrl-C on a line
-- and on a running loop, history, Ctrl-D.
local H = require "helpers"

local has_tmux = os.execute("command -v tmux >/dev/null 2>&1") == 0

describe("vsalab repl", function()
  if not has_tmux then
    it("needs tmux (scripts/setup.sh installs it)", function() error("tmux not installed") end)
    return
  end
  local dir = H.tmpdir()
  local sock = dir .. "/tmux.sock"
  local function tmux(args) return H.sh("tmux -S " .. sock .. " " .. args) end
  -- Helpers take the tmux session name (default "r").
  local function screen(ses)
    local _, out = tmux("capture-pane -t " .. (ses or "r") .. " -p")
    return out
  end
  -- Wait until the screen shows pattern (plain text), up to 30 s (CI runs
  -- this under ASan on a loaded host).
  local function wait_for(text, ses)
    for _ = 1, 300 do
      if screen(ses):find(text, 1, true) then return true end
      os.execute("sleep 0.1")
    end
    error("the REPL never showed " .. text .. "; screen:\n" .. screen(ses))
  end
  -- Ctrl-C at the prompt, then wait for the fresh empty prompt: keys sent
  -- before it could be read into the line the signal then drops (the
  -- signal overtakes them when the REPL waits for the CPU).
  local function drop_line(ses)
    tmux("send-keys -t " .. (ses or "r") .. " C-c")
    for _ = 1, 300 do
      if screen(ses):gsub("%s+$", ""):match("\n>$") then return true end
      os.execute("sleep 0.1")
    end
    error("the REPL never showed an empty prompt after Ctrl-C; screen:\n" .. screen(ses))
  end
  local function type_line(s, ses)
    tmux("send-keys -t " .. (ses or "r") .. " -l " .. string.format("%q", s))
    tmux("send-keys -t " .. (ses or "r") .. " Enter")
  end
  -- A session that outlives the tests: when the last session ends, the
  -- server exits, and a new-session that meets it exiting (a loaded host)
  -- fails with "server exited unexpectedly" and the test waits in vain.
  assert.equal(0, (tmux("new-session -d -s keep 'sleep 100000'")))
  teardown(function()
    tmux("kill-server")
    os.execute("rm -rf " .. dir)
  end)

  it("evaluates, continues, completes, interrupts and keeps history", function()
    assert.equal(0, (tmux(string.format("new-session -d -s r -x 120 -y 50 'HOME=%s %s repl --db %s/r.db'",
      dir, H.exe, dir))))
    wait_for("Ctrl-D leaves")
    type_line("1 + 2")
    wait_for("\n3\n")
    type_line("t = vsalab.from_table({{1, 2}, {3, 0/0}})")
    type_line("t")
    wait_for("Tensor[2,2] f32 cpu {1, 2, 3,")
    wait_for("nonfinite=1")
    type_line("for i = 1, 2 do")
    wait_for("\n>>")
    type_line("  print('line ' .. i)")
    type_line("end")
    wait_for("line 2")
    type_line("40 +")
    type_line("2")
    wait_for("\n42\n")
    type_line("local x = nil + 1")
    wait_for("attempt to perform arithmetic")
    tmux("send-keys -t r -l 'vsalab.invert_i'")
    tmux("send-keys -t r Tab")
    wait_for("vsalab.invert_indices")
    drop_line()
    -- Lazily loaded fields and tensor properties complete too.
    tmux("send-keys -t r -l 'vsalab.cas'")
    tmux("send-keys -t r Tab")
    wait_for("vsalab.cases")
    drop_line()
    -- A property completes without a call's '(' (the marker typed after
    -- the Tab shows the Tab was read), a method after ':' with it; after
    -- '.' a tensor offers its properties, not its methods.
    tmux("send-keys -t r -l 't.sha'")
    tmux("send-keys -t r Tab")
    tmux("send-keys -t r -l ' -- read'")
    wait_for("t.shape -- read")
    drop_line()
    tmux("send-keys -t r -l 't:num'")
    tmux("send-keys -t r Tab")
    wait_for("t:numel(")
    drop_line()
    tmux("send-keys -t r -l 't.fil'")
    tmux("send-keys -t r Tab")
    tmux("send-keys -t r -l ' -- read'")
    wait_for("t.fil -- read")
    drop_line()
    -- help says what the prompt offers; a table prints one level deep.
    type_line("help")
    wait_for("vsalab REPL: LuaJIT with the `vsalab` module loaded")
    assert.falsy(screen():find("\nnil\n", 1, true), screen())
    type_line("{1, 'two', x = {3, 4}, y = 5}")
    wait_for('{1, "two", x = {...2}, y = 5}')
    assert.falsy(screen():find("table: 0x", 1, true), screen())
    -- After ':' only methods: t:fi completes, t:sha does not (t:shape is
    -- no call). The marker typed after the Tab shows the Tab was read.
    tmux("send-keys -t r -l 't:fi'")
    tmux("send-keys -t r Tab")
    wait_for("t:fill")
    drop_line()
    tmux("send-keys -t r -l 't:sha'")
    tmux("send-keys -t r Tab")
    tmux("send-keys -t r -l ' -- read'")
    wait_for("t:sha -- read")
    assert.falsy(screen():find("t:shape", 1, true), screen())
    drop_line()
    -- Ctrl-C only once the loop runs (a signal overtakes queued input).
    type_line("print('loop' .. 'ing') while true do end")
    wait_for("\nlooping")
    tmux("send-keys -t r C-c")
    wait_for("interrupted!")
    type_line("'alive ' .. 42")
    wait_for("alive 42")
    tmux("send-keys -t r C-d")
    -- The history is written as the REPL leaves (30 s: ASan, loaded host).
    local left = false
    for _ = 1, 300 do
      if tmux("has-session -t r") ~= 0 then left = true; break end
      os.execute("sleep 0.1")
    end
    assert(left, "the REPL did not leave at Ctrl-D; screen:\n" .. screen())
    local hist = H.read(dir .. "/.vsalab_history")
    assert.truthy(hist, "no history file")
    assert.truthy(hist:find("alive", 1, true))
  end)

  it("runs a script first with -i and keeps its globals", function()
    H.write(dir .. "/init.lua", "answer = 6 * 7\n")
    tmux(string.format("new-session -d -s r -x 120 -y 20 'HOME=%s %s repl -i %s/init.lua'", dir, H.exe, dir))
    wait_for("Ctrl-D leaves")
    type_line("answer")
    wait_for("\n42\n")
    tmux("send-keys -t r C-d")
  end)

  it("says what an unfinished chunk lacked when the input ends inside it", function()
    -- Piped input ending in `for ... do` was dropped without a word.
    local rc, out, err = H.sh(string.format("printf 'x = 1\\nfor i = 1, 2 do\\n' | HOME=%s %s repl", dir, H.exe))
    assert.equal(0, rc, err)
    assert.truthy(out:find("Lua with the vsalab module", 1, true), out)
    -- Piped input has no Tab to press: the banner does not offer it.
    assert.falsy(out:find("Tab completes", 1, true), out)
    assert.truthy(err:find("'end' expected", 1, true), err)
    assert.truthy(err:find("(unfinished chunk dropped)", 1, true), err)
  end)

  it("says how to get a results DB when db is used without one", function()
    -- It said "cannot open read-only: No such file or directory" from the
    -- lazy db's opener.
    local rc, _, err = H.sh(string.format(
      "printf 'db:q(\"SELECT 1\")\n' | HOME=%s %s repl --db %s/missing.db", dir, H.exe, dir))
    assert.equal(0, rc, err)
    assert.truthy(err:find("stdin:1: no results DB at " .. dir .. "/missing.db", 1, true), err)
    assert.truthy(err:find("vsalab run experiments/smoke.lua", 1, true), err)
  end)

  it("keeps an error's position at the prompt, and every value an expression returns", function()
    -- `error("boom")` compiled as `return error("boom")` is a tail call:
    -- it lost "stdin:1:". Multiple values and a trailing comment still work.
    local rc, out, err = H.sh(string.format(
      "printf 'error(\"boom\")\n1, 2, 3 -- three\nselect(\"#\", nil, nil)\nx = 5;\nx;\n' | HOME=%s %s repl",
      dir, H.exe))
    assert.equal(0, rc, err)
    assert.truthy(err:find("stdin:1: boom", 1, true), err)
    assert.truthy(out:find("\n1\n2\n3\n2\n5\n", 1, true), out)
  end)

  it("prints db:q results as a table in SELECT order", function()
    local db = dir .. "/q.db"
    H.db_with_run(db)
    tmux(string.format("new-session -d -s q -x 120 -y 20 'HOME=%s %s repl --db %s'", dir, H.exe, db))
    wait_for("Ctrl-D leaves", "q")
    type_line("db:q('SELECT status, id FROM run')", "q")
    wait_for("status    id", "q")
    wait_for("finished  1", "q")
    tmux("send-keys -t q C-d")
  end)

  it("survives Tab on a table whose __index raises (it was a LuaJIT panic)", function()
    tmux(string.format("new-session -d -s x -x 120 -y 20 'HOME=%s %s repl'", dir, H.exe))
    wait_for("Ctrl-D leaves", "x")
    type_line("t = setmetatable({}, {__index = function() error('boom') end})", "x")
    tmux("send-keys -t x -l 't.foo.b'")
    tmux("send-keys -t x Tab")
    -- Enter, not Ctrl-C: the terminal delivers Ctrl-C as a signal at once,
    -- ahead of the Tab still queued as input on a loaded host, and the Tab
    -- then lands in the next line. Keys are read in order.
    tmux("send-keys -t x Enter")
    wait_for(":1: boom", "x")
    type_line("'still ' .. 'here'", "x")
    wait_for("still here", "x")
    assert.falsy(screen("x"):find("PANIC", 1, true), screen("x"))
    tmux("send-keys -t x C-d")
  end)

  it("stops printing a value at Ctrl-C and keeps the prompt (it died of SIGINT, its run left 'running')", function()
    local db = dir .. "/p.db"
    tmux(string.format("new-session -d -s p -x 120 -y 20 'HOME=%s %s repl --db %s'", dir, H.exe, db))
    wait_for("Ctrl-D leaves", "p")
    type_line("vsalab.log{experiment = 'x', kernel = 'k'}", "p")
    wait_for("\n1\n", "p")
    -- A __tostring that never returns: the printing, not the statement, loops.
    type_line("setmetatable({}, {__tostring = function() io.write('print' .. 'ing\\n') io.flush() while true do end end})", "p")
    wait_for("\nprinting", "p")
    tmux("send-keys -t p C-c")
    wait_for("interrupted!", "p")
    type_line("'alive ' .. 43", "p")
    wait_for("alive 43", "p")
    tmux("send-keys -t p C-d")
    local left = false
    for _ = 1, 300 do
      if tmux("has-session -t p") ~= 0 then left = true; break end
      os.execute("sleep 0.1")
    end
    assert(left, "the REPL did not leave at Ctrl-D; screen:\n" .. screen("p"))
    local d = vsalab.db_open(db, {readonly = true})
    local status = d:q("SELECT status FROM run")[1].status
    d:close()
    assert.equal("finished", status)
  end)

  it("stops a Tab lookup that loops at Ctrl-C without leaving its frames behind", function()
    -- The prompt's Ctrl-C jumped out of the lookup's Lua call: every such
    -- jump left a dead call on the Lua stack (and a C frame pointer into
    -- the abandoned C stack) under every later statement.
    tmux(string.format("new-session -d -s t -x 160 -y 30 'HOME=%s %s repl'", dir, H.exe))
    wait_for("Ctrl-D leaves", "t")
    type_line("depth = function() local n = 0 while debug.getinfo(n + 1) do n = n + 1 end return 'depth ' .. n end", "t")
    type_line("'before ' .. depth()", "t")
    wait_for("before depth", "t")
    local before = screen("t"):match("before (depth %d+)")
    type_line("t = setmetatable({}, {__index = function() n = (n or 0) + 1 io.write('look' .. 'ing ' .. n .. '\\n') io.flush() while true do end end})", "t")
    for i = 1, 2 do
      tmux("send-keys -t t -l 't.foo.b'")
      tmux("send-keys -t t Tab")
      wait_for("looking " .. i, "t")
      tmux("send-keys -t t C-c")
      drop_line("t")
    end
    type_line("'after ' .. depth()", "t")
    wait_for("after depth", "t")
    assert.equal(before, screen("t"):match("after (depth %d+)"))
    tmux("send-keys -t t C-d")
  end)
end)

describe("the REPL's printing of values", function()
  local repl = require "vsalab.repl"
  -- What repl.print(...) writes, one string a line.
  local function shown(...)
    -- The module's own globals (busted runs a spec in an environment of its own).
    local env = getfenv(repl.print)
    local lines, real = {}, env.print
    env.print = function(...)
      local parts = {}
      for i = 1, select("#", ...) do parts[i] = tostring((select(i, ...))) end
      lines[#lines + 1] = table.concat(parts, "\t")
    end
    local ok, e = pcall(repl.print, ...)
    env.print = real
    assert(ok, e)
    return table.concat(lines, "\n")
  end

  it("shows a value whose __tostring raises, or whose metatable is locked, inside a table too", function()
    -- Either one made the whole line's result 'error printing results'.
    local bad = setmetatable({}, {__tostring = function() error("boom", 0) end})
    local locked = setmetatable({1}, {__metatable = "locked"})
    assert.equal("<table: __tostring raised: boom>", shown(bad))
    assert.equal("{<table: __tostring raised: boom>, 3}", shown({bad, 3}))
    assert.equal("{[<table: __tostring raised: boom>] = 1}", shown({[bad] = 1}))
    assert.equal("{{...1}}", shown({locked}))
    assert.equal("{1}", shown(locked))
    assert.equal("42", shown(setmetatable({}, {__tostring = function() return 42 end})))
    assert.equal("<table: __tostring returned a table>", shown(setmetatable({}, {__tostring = function() return {} end})))
  end)

  it("shows query rows as a table, and any other table with a 'columns' field as a table", function()
    -- {columns = {}, {a = 1}} printed blank lines; a 'columns' list holding
    -- a table raised in table.concat.
    assert.equal("{{...1}, columns = {}}", shown({columns = {}, {a = 1}}))
    assert.equal("{{...1}, columns = {...2}}", shown({columns = {"a", {}}, {a = 1}}))
    assert.equal("{{...1}, columns = {...1}}", shown({columns = {"a"}, {a = {}}}))
    assert.equal("(no rows; columns: a, b)", shown({columns = {"a", "b"}}))
  end)
end)
