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
--   -o dlbundle-bcast          read the image once per job (the first node)
--                              and spread it with flux archive; every node
--                              stages its copy and removes it
-- dlbundle is found in the job's PATH, or set DLBUNDLE in the job's
-- environment to its path; DLBUNDLE_STAGE_DIR is honoured as by exec.
--
-- On a node whose glibc is not the image's, the tasks must start under
-- the image's own ld.so, which takes a change of the task's command that
-- Lua cannot make: the C plugin dlbundle_ldso.so (ldso/dlbundle_ldso.c) does it.
-- It is loaded from beside this file (make install puts it there), or from
-- DLBUNDLE_FLUX_LDSO in the job's environment; without it such a node runs
-- the tasks under its own ld.so and libc (docs/exec.md, "Images and nodes").

local image = shell.options.dlbundle
if image == nil or image == "none" then return end
if type(image) ~= "string" or image == "" then
    shell.die("dlbundle: -o dlbundle needs an image: -o dlbundle=app.dlimg or -o dlbundle=oci://REGISTRY/REPO:TAG")
    return
end

if shell.options["dlbundle-bcast"] and string.match(image, "^oci://") then
    shell.die("dlbundle: -o dlbundle-bcast needs an image file (" .. image .. " is a registry's: each node pulls it; drop -o dlbundle-bcast)")
    return
end

-- The C half (see above), loaded once per job shell; its task.init acts
-- only where the stage this plugin finds holds an ldso record.
do
    local so = shell.getenv("DLBUNDLE_FLUX_LDSO")
    if so == nil and debug and debug.getinfo then
        local dir = string.match(debug.getinfo(1, "S").source or "", "^@(.*)/[^/]*$")
        if dir then so = dir .. "/dlbundle_ldso.so" end
    end
    local f = so and io.open(so, "r")
    if f then
        f:close()
        local ok, err = pcall(plugin.load, { file = so, conf = {} })
        if not ok then
            shell.log("dlbundle: warning: cannot load " .. so .. " (" .. tostring(err) ..
                "): on a node of another glibc than the image's the tasks run under the node's ld.so")
        end
    end
end

-- quote makes s one word for sh: single quotes, a quote inside closed,
-- escaped and reopened.
local function quote(s)
    return "'" .. string.gsub(s, "'", "'\\''") .. "'"
end

-- jobenv is "env -i NAME=VALUE...": the job's environment (nothing of the
-- shell's own), for the commands below.
local function jobenv()
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
    local cd = ""
    if env.PWD then cd = "cd " .. quote(env.PWD) .. " 2>/dev/null; " end
    return cd .. "exec /usr/bin/env -i " .. table.concat(words, " "), env.DLBUNDLE or "dlbundle"
end

-- bcastScript: with -o dlbundle-bcast, the image is read once per job, by
-- the first job shell, into a Flux file archive in the job's own KVS
-- namespace (FLUX_KVS_NAMESPACE: only the job's user and the instance owner
-- reach it), which the brokers' tree spreads; every job shell extracts it
-- into a new directory only this user can write (mktemp -d: 0700, a name no
-- one can guess, as the sbcast recipe does), runs env on that copy (opened
-- under the trust rule like any image; staged as usual, its digest checked)
-- and removes the copy: the node keeps one copy, the stage. Not stage
-- --consume: its record serves later launches that name the same path, and
-- this path is the job shell's alone; and env run by a job shell is no rank
-- of a launch, so it looks at the file itself, which --consume removed.
-- $1 image, $2 its name, $3 1 in the first shell, $4 dlbundle, $5 the
-- shell's own PATH (where flux is, if the job's PATH lacks it).
local bcastScript = [[
set -e
PATH=$PATH:$5
if [ "$3" = 1 ]; then
    case $1 in */*) dir=${1%/*} ;; *) dir=. ;; esac
    flux archive create --no-force-primary --overwrite -n dlbundle -C "${dir:-/}" "$2" ||
        { echo "flux archive create of $1 failed (-o dlbundle-bcast)" >&2; exit 1; }
fi
d=$(mktemp -d "/tmp/dlbundle-bcast.XXXXXXXXXX")
trap 'rm -rf "$d"' EXIT
# Until the first shell has created it (extract --waitcreate fails at once
# while the job's namespace has no archive directory yet).
i=0
until flux archive list --no-force-primary -n dlbundle >/dev/null 2>&1; do
    i=$((i + 1))
    [ $i -lt 6000 ] || { echo "no flux archive of $1 after 10 minutes (-o dlbundle-bcast)" >&2; exit 1; }
    sleep 0.1
done
flux archive extract --no-force-primary -n dlbundle -C "$d" "$2" >&2 ||
    { echo "flux archive extract of $2 failed (-o dlbundle-bcast)" >&2; exit 1; }
"$4" env --format=env0 -- "$d/$2"
]]

-- command is the sh command line that runs dlbundle env with the job's
-- environment in the job's directory (a relative image is the user's),
-- stderr to errfile.
local function command(errfile)
    local prefix, bin = jobenv()
    if shell.options["dlbundle-bcast"] then
        local name = string.match(image, "([^/]+)$")
        local first = "0"
        if shell.info and shell.info.rank == 0 then first = "1" end
        return prefix .. " /bin/sh -c " .. quote(bcastScript) .. " sh " .. quote(image) .. " " ..
            quote(name) .. " " .. first .. " " .. quote(bin) .. " " .. quote(os.getenv("PATH") or "") ..
            " 2>" .. quote(errfile)
    end
    return prefix .. " " .. quote(bin) .. " env --format=env0 -- " .. quote(image) .. " 2>" .. quote(errfile)
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
            -- A warning, not an error: the job runs as asked. The shell's
            -- Lua API has log (info), log_error and die; log is shown by
            -- default, without the ERROR label log_error adds.
            shell.log("dlbundle: warning: " .. msg .. "; running the tasks natively (-o dlbundle-fallback)")
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

-- The archive is the job's copy of the image in Flux's content store: once
-- every shell has passed shell.init (the shells' barrier before the tasks
-- start), each has its stage, and the first removes the archive.
local function unarchive()
    if not (shell.options["dlbundle-bcast"] and shell.info and shell.info.rank == 0) then return end
    local prefix = jobenv()
    os.execute(prefix .. " /bin/sh -c 'PATH=$PATH:$1; flux archive remove --no-force-primary -f -n dlbundle' sh " ..
        quote(os.getenv("PATH") or "") .. " >/dev/null 2>&1")
end

plugin.register {
    name = "dlbundle",
    handlers = {
        { topic = "shell.init", fn = stage },
        { topic = "shell.start", fn = unarchive },
    }
}
