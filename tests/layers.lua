-- The rooms of src/ stay layered, and no two files need each other.
--   vsalab run tests/layers.lua ROOT [OBJECT.o ...]
-- ROOT: the source tree; the objects: vsa_core's (ctest passes them).
-- Rooms, lowest first: core (tensors, device, references, oracle, checks),
-- storage (the results DB), bindings (the Lua bindings), cli (the program).
-- A file may use its own room and the rooms below it, never one above:
-- checked on its #include lines, and on the calls its object makes (nm: a
-- symbol it needs, defined in another object). A module is a file's stem
-- (l_args.c with l_args.h); no module may reach itself again through the
-- calls or the includes of others (l_args.c <-> l_tensor.c once did: the
-- argument checks made tensors, and making a tensor reclaimed scratch
-- memory kept with the argument checks). include/ (the plug-in ABI) is
-- usable from every room. Exits 1 listing every violation.
local root = assert(arg[1], "usage: vsalab run tests/layers.lua ROOT [OBJECT.o ...]")
-- ctest gives $<TARGET_OBJECTS> as one argument, its paths joined by ';'.
local objects = {}
for i = 2, #arg do
  for o in arg[i]:gmatch("[^;]+") do objects[#objects + 1] = o end
end
local rank = {core = 1, storage = 2, bindings = 3, cli = 4}
local problems = {}
local function problem(fmt, ...) problems[#problems + 1] = string.format(fmt, ...) end

local function lines_of(cmd)
  local p = assert(io.popen(cmd))
  local out = {}
  for l in p:lines() do out[#out + 1] = l end
  p:close()
  return out
end

-- Every src/ROOM/FILE, by file name (names are unique across rooms).
local room_of, files = {}, {}
for _, path in ipairs(lines_of("cd '" .. root .. "' && ls src/*/*.c src/*/*.h")) do
  local room, name = path:match("^src/([^/]+)/([^/]+)$")
  if not rank[room] then problem("%s: not in a known room (core, storage, bindings, cli)", path) end
  if room_of[name] then problem("%s: its name is taken in src/%s too", path, room_of[name]) end
  room_of[name] = room
  files[#files + 1] = {path = path, room = room, name = name}
end
local function module_of(name) return room_of[name] .. "/" .. name:gsub("%.[ch]$", "") end

-- Edges between modules: edges[a][b] = why (the first include or symbol).
local edges = {}
local function edge(a, b, why)
  if a == b then return end
  edges[a] = edges[a] or {}
  edges[a][b] = edges[a][b] or why
end

-- Includes.
for _, f in ipairs(files) do
  local h = assert(io.open(root .. "/" .. f.path))
  for l in h:lines() do
    local inc = l:match('^%s*#%s*include%s+"([^"]+)"')
    local to = inc and room_of[inc]
    if to then
      if rank[to] and rank[f.room] and rank[to] > rank[f.room] then
        problem("%s includes %s: src/%s sits above src/%s", f.path, inc, to, f.room)
      end
      edge(module_of(f.name), module_of(inc), "#include \"" .. inc .. "\"")
    end
  end
  h:close()
end

-- Calls: which object defines each symbol another one needs.
local defined, needs = {}, {}
for _, o in ipairs(objects) do
  local room, stem = o:match("/src/([^/]+)/([^/]+)%.c%.o$")
  if room then
    local m = room .. "/" .. stem
    needs[m] = {}
    for _, l in ipairs(lines_of("nm '" .. o .. "'")) do
      local kind, sym = l:match("^%x*%s+(%a)%s+(%S+)$")
      if kind == "U" then needs[m][#needs[m] + 1] = sym
      elseif kind and kind:match("[TDBRC]") then defined[sym] = m end
    end
  end
end
local calls = 0
for m, syms in pairs(needs) do
  for _, sym in ipairs(syms) do
    local d = defined[sym]
    if d and d ~= m then
      calls = calls + 1
      local from, to = m:match("^[^/]+"), d:match("^[^/]+")
      if rank[to] > rank[from] then problem("src/%s.c uses %s from src/%s.c: src/%s sits above src/%s", m, sym, d, to, from) end
      edge(m, d, sym)
    end
  end
end
if #objects > 0 and calls == 0 then problem("no call between the objects given: are they vsa_core's?") end

-- Cycles (depth-first, each reported once by its lowest-named module).
local names = {}
for m in pairs(edges) do names[#names + 1] = m end
table.sort(names)
local state, reported = {}, {}
local function visit(m, stack)
  state[m] = "open"
  stack[#stack + 1] = m
  local out = {}
  for to in pairs(edges[m] or {}) do out[#out + 1] = to end
  table.sort(out)
  for _, to in ipairs(out) do
    if state[to] == "open" then
      local k
      for i = #stack, 1, -1 do if stack[i] == to then k = i end end
      local ring, parts = {}, {}
      for i = k, #stack do ring[#ring + 1] = stack[i] end
      local key = table.concat(ring, " ")
      if not reported[key] then
        reported[key] = true
        for i, a in ipairs(ring) do
          local b = ring[i + 1] or ring[1]
          parts[#parts + 1] = string.format("%s -> %s (%s)", a, b, edges[a][b])
        end
        problem("a cycle: %s", table.concat(parts, ", "))
      end
    elseif not state[to] then
      visit(to, stack)
    end
  end
  stack[#stack] = nil
  state[m] = "done"
end
for _, m in ipairs(names) do if not state[m] then visit(m, {}) end end

if #problems > 0 then
  for _, p in ipairs(problems) do io.stderr:write("layers: ", p, "\n") end
  os.exit(1)
end
local rooms = {}
for _, f in ipairs(files) do rooms[f.room] = true end
local nrooms = 0
for _ in pairs(rooms) do nrooms = nrooms + 1 end
print(string.format("layers: %d files in %d rooms, %d cross-file calls from %d objects: layered, no cycle",
  #files, nrooms, calls, #objects))
