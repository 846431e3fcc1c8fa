-- dlbundle: flux run -o dlbundle=IMAGE ./app
--
-- Every task of the job starts from this node's stage of IMAGE, with no
-- launcher process between the job shell and the app. Once per job shell
-- (one per node and job), in shell.init, this plugin runs
-- `dlbundle env --format=env0 IMAGE` as the job's user (the shell's own
-- user) with the job's environment; dlbundle stages the image or finds its
-- stage exactly as `dlbundle exec` would, and the variables it prints go
-- into the job environment that every task inherits. The staging protocol
-- is dlbundle's alone: this file only runs it.
--
-- Install: copy into the job shell's lua.d (e.g.
-- /opt/flux/etc/flux/shell/lua.d/dlbundle.lua) for every job, or per job
-- with -o userrc=/path/to/dlbundle.lua. Options:
--   -o dlbundle=IMAGE          a .dlimg file or oci://REF ("none": off)
--   -o dlbundle-fallback       a failed stage runs the tasks natively
--                              (else the job ends with dlbundle's message)
-- dlbundle is found in the job's PATH, or set DLBUNDLE in the job's
-- environment to its path; DLBUNDLE_STAGE_DIR is honoured as by exec.

local image = shell.options.dlbundle
if image == nil or image == "none" then return end
if type(image) ~= "string" or image == "" then
    shell.die("dlbundle: -o dlbundle needs an image: -o dlbundle=app.dlimg or -o dlbundle=oci://REGISTRY/REPO:TAG")
    return
end

-- quote makes s one word for sh: single quotes, a quote inside closed,
-- escaped and reopened.
local function quote(s)
    return "'" .. string.gsub(s, "'", "'\\''") .. "'"
end

-- command is the sh command line that runs dlbundle env with the job's
-- environment (env -i: nothing of the shell's own), in the job's
-- directory (a relative image is the user's), stderr to errfile.
local function command(errfile)
    local words = {}
    local env = shell.getenv()
    -- The job id names the alias (the job's later steps on this node find
    -- the stage without the image); the shell sets FLUX_JOB_ID only in the
    -- tasks.
    if env.FLUX_JOB_ID == nil and shell.info and shell.info.jobid then
        env.FLUX_JOB_ID = tostring(shell.info.jobid)
    end
    for k, v in pairs(env) do
        if string.match(k, "^[%w_]+$") then
            table.insert(words, quote(k .. "=" .. v))
        end
    end
    local bin = env.DLBUNDLE or "dlbundle"
    local cd = ""
    if env.PWD then cd = "cd " .. quote(env.PWD) .. " 2>/dev/null; " end
    return cd .. "exec /usr/bin/env -i " .. table.concat(words, " ") .. " " .. quote(bin) ..
        " env --format=env0 -- " .. quote(image) .. " 2>" .. quote(errfile)
end

local function readfile(path)
    local f = io.open(path, "r")
    if not f then return "" end
    local s = f:read("*a") or ""
    f:close()
    return s
end

local function stage()
    local errfile = os.tmpname()
    -- The exit status: Lua 5.1's popen cannot return it, so the command
    -- line appends it after the output, behind a NUL that env0 never
    -- leaves unterminated.
    local p = io.popen("(" .. command(errfile) .. "); printf '\\000rc=%d' $?", "r")
    local out = p:read("*a") or ""
    p:close()
    local msg = string.gsub(readfile(errfile), "%s+$", "")
    os.remove(errfile)
    local body, rc = string.match(out, "^(.*)%z?rc=(%d+)$")
    if body == nil then body, rc = "", "1" end
    if rc ~= "0" then
        msg = string.gsub(msg, "\n%(use %-%-fallback.*$", "") -- env's own hint; ours follows
        if msg == "" then msg = "dlbundle env failed (exit " .. rc .. ")" end
        if shell.options["dlbundle-fallback"] then
            shell.log_error("dlbundle: warning: " .. msg .. "; running the tasks natively (-o dlbundle-fallback)")
            return
        end
        shell.die("dlbundle: " .. msg .. " (-o dlbundle-fallback runs the tasks natively instead)")
        return
    end
    for entry in string.gmatch(body, "([^%z]*)%z") do
        local k, v = string.match(entry, "^([^=]+)=(.*)$")
        if k then
            shell.setenv(k, v, 1)
        elseif entry ~= "" then
            shell.unsetenv(entry)
        end
    end
end

plugin.register {
    name = "dlbundle",
    handlers = {
        { topic = "shell.init", fn = stage },
    }
}
