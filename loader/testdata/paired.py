"""paired.py — warm-start timing of several commands, interleaved: each round
runs every command once (in rotating order), so that load on a shared machine
hits all of them alike. Prints a markdown table: median and min wall time, and
the median over rounds of each command's ratio to the first command's time in
the same round. Usage: paired.py ROUNDS NAME=JSON ... where JSON is
{"path": file to run, "argv": [...], "env": ["K=V", ...]} (argv[0] may
differ from the file, as under dlbundle exec)."""
import json
import os
import statistics
import sys
import time


def run(cmd):
    env = dict(kv.split("=", 1) for kv in cmd["env"])
    t = time.perf_counter_ns()
    pid = os.posix_spawn(cmd["path"], cmd["argv"], env)
    _, status, ru = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("command failed: %r" % cmd)
    # wall time, and CPU time (user + system: less sensitive to other load)
    return (time.perf_counter_ns() - t) / 1e6, (ru.ru_utime + ru.ru_stime) * 1e3


rounds = int(sys.argv[1])
cmds = [(a.split("=", 1)[0], json.loads(a.split("=", 1)[1])) for a in sys.argv[2:]]
null = os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 1)  # the commands' output; the table goes to stderr's copy below
out = os.fdopen(os.dup(2), "w")
for _ in range(5):  # warm-up
    for _, argv in cmds:
        run(argv)
times = {name: [] for name, _ in cmds}
ratios = {name: [] for name, _ in cmds}
cpus = {name: [] for name, _ in cmds}
cpu_ratios = {name: [] for name, _ in cmds}
first = cmds[0][0]
for r in range(rounds):
    order = cmds[r % len(cmds):] + cmds[:r % len(cmds)]
    got = {name: run(argv) for name, argv in order}
    for name, _ in cmds:
        times[name].append(got[name][0])
        ratios[name].append(got[name][0] / got[first][0])
        cpus[name].append(got[name][1])
        cpu_ratios[name].append(got[name][1] / max(got[first][1], 1e-3))
print("| command | wall median [ms] | wall min [ms] | wall ratio to %s | CPU median [ms] | CPU ratio to %s |"
      % (first, first), file=out)
print("|---|---:|---:|---:|---:|---:|", file=out)
for name, _ in cmds:
    print("| %s | %.1f | %.1f | %.3f | %.1f | %.3f |" % (
        name, statistics.median(times[name]), min(times[name]), statistics.median(ratios[name]),
        statistics.median(cpus[name]), statistics.median(cpu_ratios[name])), file=out)
