-- The sandbox of one hook's Lua state (data_plane/hooks/sandbox.py), run once when the state is
-- made, before any hook source is loaded. It returns:
--   prepare(source, name): the source compiled as text (never bytecode) into a function whose
--     globals are a fresh sandbox table, and that table; or nil and the compiler's message;
--   sethook: debug.sethook, kept here and removed from everything a hook can reach, which Python
--     calls directly (a C function: setting or clearing the hook runs no Lua instruction);
--   trip: the count hook. When the budget runs out it raises, and from then on raises at every
--     instruction, so a hook cannot carry on past its budget whatever it does with the error.
--
-- A hook sees: assert, error, ipairs, next, pairs, select, tonumber, tostring, type, rawequal,
-- rawget, rawlen, rawset, and the math, string and table libraries less what could run
-- unbounded inside one instruction or escape: no os, io, require, load, dofile, debug, package,
-- coroutine (a coroutine would run outside the count hook), collectgarbage, getmetatable or
-- setmetatable (a __gc finaliser could run outside a call), no string patterns (their worst case
-- is polynomial in C, where no count hook fires: string.find is a plain search only), no
-- string.dump and no table.sort. string.find refuses inputs whose search could take long.
local sethook, error, pairs, ipairs = debug.sethook, error, pairs, ipairs

local BUDGET = "instruction budget exceeded"
local function trip()
    sethook(function() error(BUDGET, 0) end, "", 1)
    error(BUDGET, 0)
end

local kept = { byte = true, char = true, format = true, len = true, lower = true, rep = true,
               reverse = true, sub = true, upper = true }
local find, byte = string.find, string.byte
for name in pairs(string) do
    if not kept[name] then string[name] = nil end
end
-- Strings index this table (their metatable's __index), so it is the one a hook reaches.
string.find = function(s, sub, init)
    if #s * #sub > 1000000 then error("string.find: the strings are too long to search", 2) end
    return find(s, sub, init, true)
end
string.byte = function(s, i, j)
    if j ~= nil and i ~= nil and j - i > 255 then error("string.byte: at most 256 at a time", 2) end
    return byte(s, i, j)
end

local function copy(library, without)
    local copied = {}
    for name, value in pairs(library) do
        if name ~= without then copied[name] = value end
    end
    return copied
end

local base = { "assert", "error", "ipairs", "next", "pairs", "select", "tonumber", "tostring",
               "type", "rawequal", "rawget", "rawlen", "rawset" }
local G = _G

local function prepare(source, name)
    local sandbox = { string = string, math = copy(math), table = copy(table, "sort") }
    for _, global in ipairs(base) do sandbox[global] = G[global] end
    local chunk, message = load(source, "=" .. name, "t", sandbox)
    if not chunk then return nil, message end
    return chunk, sandbox
end

return prepare, sethook, trip
