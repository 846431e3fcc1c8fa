package cluster

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Packages are the Debian packages a cluster needs.
const Packages = "slurm-wlm munge openmpi-bin libpmix-bin"

// Options say what cluster to start.
type Options struct {
	Nodes int // fake nodes (default 3)
	CPUs  int // CPUs per node as Slurm sees them (default 8; not checked against the hardware)
	// Prolog, Epilog, TaskProlog are slurm.conf's scripts ("" for none).
	Prolog, Epilog, TaskProlog string
	// Conf lines appended to slurm.conf.
	Conf []string
	// MountShared, if set, mounts src (Dir/shared.src) at mnt (Shared) before
	// the nodes start (their mount namespaces copy the host's mounts when
	// created: a later mount would not reach them), e.g. slowfs to count
	// what the jobs do on the shared file system. Stop calls the returned
	// unmount after the daemons have ended.
	MountShared func(src, mnt string) (unmount func() error, err error)
}

// Cluster is a running cluster.
type Cluster struct {
	Dir     string   // everything of this cluster
	Shared  string   // Dir/shared: the "parallel file system" every node sees
	Conf    string   // slurm.conf
	Nodes   []string // node names: node1 ... nodeK
	procs   []*proc
	nodePID map[string]int
	nodeNS  map[string]string // node -> its mount namespace ("mnt:[4026532...]")
	unmount func() error
}

// proc is a daemon Start started; done is closed when it has exited.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// Check returns an error naming the install command if something the
// cluster needs is missing.
func Check() error {
	if os.Geteuid() != 0 {
		return errors.New("the fake Slurm cluster needs root (slurmd, mount namespaces); run the tests as root")
	}
	var missing []string
	for _, p := range []string{"munged", "munge", "slurmctld", "slurmd", "slurmstepd", "srun", "sbatch", "sinfo", "sbcast", "mpirun", "unshare", "nsenter", "setpriv", "runuser"} {
		if _, err := exec.LookPath(p); err != nil {
			if _, err := os.Stat("/usr/sbin/" + p); err != nil {
				missing = append(missing, p)
			}
		}
	}
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix.so"); err != nil && len(missing) == 0 {
		missing = append(missing, "slurm's mpi_pmix plugin")
	}
	if _, err := user.Lookup("munge"); err != nil {
		missing = append(missing, "the munge user")
	}
	if len(missing) > 0 {
		return fmt.Errorf("fake Slurm cluster: %s missing; install: apt-get install %s (or make deps)",
			strings.Join(missing, ", "), Packages)
	}
	return nil
}

// Start starts munged, slurmctld and the nodes, and waits until every node
// is idle. On error, whatever was started is stopped.
func Start(opt Options) (c *Cluster, err error) {
	if err := Check(); err != nil {
		return nil, err
	}
	if opt.Nodes == 0 {
		opt.Nodes = 3
	}
	if opt.CPUs == 0 {
		opt.CPUs = 8
	}
	// Not under /tmp: every node mounts its own tmpfs there.
	dir, err := os.MkdirTemp("/var/tmp", "dlbundle-cluster-")
	if err != nil {
		return nil, err
	}
	c = &Cluster{Dir: dir, Shared: filepath.Join(dir, "shared"), Conf: filepath.Join(dir, "slurm.conf"), nodePID: map[string]int{}, nodeNS: map[string]string{}}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, c.Logs())
			c.Stop()
			c = nil
		}
	}()
	for _, d := range []string{dir, c.Shared} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return c, err
		}
		os.Chmod(d, 0o755) // munge must reach its socket, jobs their files
	}
	if opt.MountShared != nil {
		src := filepath.Join(dir, "shared.src")
		if err := os.Mkdir(src, 0o755); err != nil {
			return c, err
		}
		if c.unmount, err = opt.MountShared(src, c.Shared); err != nil {
			return c, err
		}
	}
	sock, err := c.startMunge()
	if err != nil {
		return c, err
	}
	ports, err := freePorts(opt.Nodes + 1)
	if err != nil {
		return c, err
	}
	if err := c.writeConf(opt, sock, ports); err != nil {
		return c, err
	}
	ctld := exec.Command("slurmctld", "-D", "-f", c.Conf)
	if err := c.start(ctld, "slurmctld.out"); err != nil {
		return c, err
	}
	for _, n := range c.Nodes {
		os.MkdirAll(filepath.Join(dir, "spool", n), 0o755)
		// A private /dev/shm and /tmp per node: the node's stage dir is its own.
		cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c",
			`mount -t tmpfs -o mode=1777 tmpfs /dev/shm && mount -t tmpfs -o mode=1777 tmpfs /tmp && exec slurmd -D -N "$0" -f "$1"`,
			n, c.Conf)
		if err := c.start(cmd, n+".out"); err != nil {
			return c, err
		}
		c.nodePID[n] = cmd.Process.Pid
	}
	return c, c.waitIdle(30 * time.Second)
}

// startMunge starts munged as the munge user with its own key and socket.
func (c *Cluster) startMunge() (string, error) {
	md := filepath.Join(c.Dir, "munge")
	u, err := user.Lookup("munge")
	if err != nil {
		return "", err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Mkdir(md, 0o700); err != nil {
		return "", err
	}
	key := make([]byte, 1024)
	rand.Read(key)
	keyFile := filepath.Join(md, "munge.key")
	if err := os.WriteFile(keyFile, key, 0o400); err != nil {
		return "", err
	}
	for _, p := range []string{md, keyFile} {
		if err := os.Chown(p, uid, gid); err != nil {
			return "", err
		}
	}
	sock := filepath.Join(md, "munge.socket")
	// -f: munged refuses a socket under a world-writable parent (/var/tmp,
	// sticky); this key and socket are private to the tests anyway.
	cmd := exec.Command("munged", "-F", "-f", "--key-file="+keyFile, "-S", sock,
		"--pid-file="+filepath.Join(md, "munged.pid"), "--seed-file="+filepath.Join(md, "munged.seed"),
		"--log-file="+filepath.Join(md, "munged.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	if err := c.start(cmd, "munged.out"); err != nil {
		return "", err
	}
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(sock); err == nil {
			return sock, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "", errors.New("munged did not create its socket within 5 s")
}

func (c *Cluster) writeConf(opt Options, sock string, ports []int) error {
	d := c.Dir
	var b strings.Builder
	fmt.Fprintf(&b, `ClusterName=dlbtest
SlurmctldHost=%[1]s(127.0.0.1)
SlurmctldPort=%[2]d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=%[3]s
StateSaveLocation=%[4]s/ctld
SlurmdSpoolDir=%[4]s/spool/%%n
SlurmctldPidFile=%[4]s/ctld/slurmctld.pid
SlurmdPidFile=%[4]s/spool/%%n.pid
SlurmctldLogFile=%[4]s/ctld/slurmctld.log
SlurmdLogFile=%[4]s/spool/%%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
MinJobAge=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=2
MaxArraySize=100
MailProg=/bin/true
`, hostname(), ports[0], sock, d)
	os.MkdirAll(filepath.Join(d, "ctld"), 0o755)
	for kind, script := range map[string]string{"Prolog": opt.Prolog, "Epilog": opt.Epilog, "TaskProlog": opt.TaskProlog} {
		if script != "" {
			fmt.Fprintf(&b, "%s=%s\n", kind, script)
		}
	}
	for _, l := range opt.Conf {
		b.WriteString(l + "\n")
	}
	for i := 1; i <= opt.Nodes; i++ {
		n := "node" + strconv.Itoa(i)
		c.Nodes = append(c.Nodes, n)
		fmt.Fprintf(&b, "NodeName=%s NodeHostname=%s NodeAddr=127.0.0.1 Port=%d CPUs=%d State=UNKNOWN\n", n, hostname(), ports[i], opt.CPUs)
	}
	fmt.Fprintf(&b, "PartitionName=test Nodes=node[1-%d] Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES\n", opt.Nodes)
	return os.WriteFile(c.Conf, []byte(b.String()), 0o644)
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "localhost"
	}
	return h
}

// freePorts asks the kernel for n free TCP ports (listening on all of them
// at once so they differ; closed before slurm binds them).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// start starts a daemon with its output in Dir/out and records it for Stop.
func (c *Cluster) start(cmd *exec.Cmd, out string) error {
	f, err := os.Create(filepath.Join(c.Dir, out))
	if err != nil {
		return err
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = c.Env(os.Environ())
	// In the cluster's directory, not the caller's: slurmstepd returns to
	// its slurmd's working directory, and a checkout under /tmp does not
	// exist inside a node (its /tmp is private).
	cmd.Dir = c.Dir
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM // a killed test leaves no daemons
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	c.procs = append(c.procs, p)
	return nil
}

// waitIdle waits until every node is up and idle.
func (c *Cluster) waitIdle(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		for _, p := range c.procs {
			select {
			case <-p.done:
				return fmt.Errorf("%s exited: %v", p.cmd.Path, p.cmd.ProcessState)
			default:
			}
		}
		out, _ := c.Command("sinfo", "-h", "-N", "-o", "%N %t").Output()
		last = string(out)
		idle := 0
		for _, l := range strings.Split(strings.TrimSpace(last), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[1] == "idle" {
				idle++
			}
		}
		if idle == len(c.Nodes) {
			// The nodes have unshared by now: remember their namespaces,
			// so that Stop can end what runs in them and only that.
			for n, pid := range c.nodePID {
				if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil {
					c.nodeNS[n] = ns
				}
			}
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("nodes not idle within %v; sinfo: %s", timeout, last)
}

// Env returns env with what Slurm's clients need to reach this cluster.
func (c *Cluster) Env(env []string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "SLURM_") {
			out = append(out, kv)
		}
	}
	return append(out, "SLURM_CONF="+c.Conf)
}

// Command returns a command (srun, sbatch, ...) that talks to this cluster.
func (c *Cluster) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = c.Env(os.Environ())
	// Not Shared: when this process serves Shared (MountShared: FUSE), a
	// child that enters it between fork and exec deadlocks with the server
	// (Go's fork holds syscall.ForkLock until the child has exec'd).
	cmd.Dir = c.Dir
	return cmd
}

// OnNode returns a command that runs inside node's mount namespace (to look
// at its private /dev/shm), outside any job, with the node's root directory
// and working directory. The root matters when the tests run in a chroot
// (make fresh): entering a mount namespace (setns) moves a process to the
// namespace's own root, which is then the host's /, whose /dev/shm is not
// the node's; --root keeps the slurmd's root, the chroot, as a job sees it.
func (c *Cluster) OnNode(node string, name string, args ...string) *exec.Cmd {
	pid, ok := c.nodePID[node]
	if !ok {
		panic("no node " + node)
	}
	return exec.Command("nsenter", append([]string{"-t", strconv.Itoa(pid), "-m", "--root", "--wd", "--", name}, args...)...)
}

// Logs returns the tail of every daemon's log, for a failure message.
func (c *Cluster) Logs() string {
	var b bytes.Buffer
	files, _ := filepath.Glob(filepath.Join(c.Dir, "*.out"))
	more, _ := filepath.Glob(filepath.Join(c.Dir, "spool", "*.log"))
	files = append(files, more...)
	files = append(files, filepath.Join(c.Dir, "ctld", "slurmctld.log"), filepath.Join(c.Dir, "munge", "munged.log"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil || len(data) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", f, strings.Join(lines, "\n"))
	}
	return b.String()
}

// Stop cancels the cluster's jobs, ends the daemons Start started (TERM,
// then KILL after 5 s) and whatever still runs in the nodes' mount
// namespaces (job processes left behind: they would keep a copy of the
// shared mount alive), and only those; then it unmounts Shared and removes
// Dir.
func (c *Cluster) Stop() {
	if len(c.procs) > 0 {
		// Every job of this cluster (SLURM_CONF is ours) belongs to us.
		if u, err := user.Current(); err == nil {
			c.Command("scancel", "--full", "--quiet", "--user", u.Username).Run()
		}
		for i := 0; i < 50; i++ {
			out, err := c.Command("squeue", "-h").Output()
			if err != nil || strings.TrimSpace(string(out)) == "" {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	}
	c.killInNodeNamespaces()
	if c.unmount != nil {
		done := make(chan error, 1)
		go func() { done <- c.unmount() }()
		select {
		case err := <-done:
			if err != nil {
				fmt.Fprintf(os.Stderr, "cluster: unmount %s: %v (left in place; %s not removed)\n", c.Shared, err, c.Dir)
				return
			}
		case <-time.After(15 * time.Second):
			fmt.Fprintf(os.Stderr, "cluster: unmount %s did not finish within 15 s (a process still uses it); %s not removed\n", c.Shared, c.Dir)
			return
		}
	}
	os.RemoveAll(c.Dir)
}

// killInNodeNamespaces SIGKILLs every process in a mount namespace of one of
// this cluster's nodes: they were all started by its slurmd.
func (c *Cluster) killInNodeNamespaces() {
	if len(c.nodeNS) == 0 {
		return
	}
	ours := map[string]bool{}
	for _, ns := range c.nodeNS {
		ours[ns] = true
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if ns, err := os.Readlink("/proc/" + p.Name() + "/ns/mnt"); err == nil && ours[ns] {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
