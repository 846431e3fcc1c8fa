package trace

import (
	"fmt"
	"testing"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
)

// TestFilterMatchesGoSeccompBPF: the filter assembled with x/net/bpf is the
// program go-seccomp-bpf (linked into the tests only) assembles for the same
// policy: trace the calls of syscallTable and contextCalls, the fstat forms
// of newfstatat/statx (AT_EMPTY_PATH) excepted, allow everything else.
func TestFilterMatchesGoSeccompBPF(t *testing.T) {
	got, err := filterProgram()
	if err != nil {
		t.Fatal(err)
	}
	native, err := arch.GetInfo("") // go-seccomp-bpf assembles for this machine
	if err != nil {
		t.Fatal(err)
	}
	group := seccomp.SyscallGroup{Action: seccomp.ActionTrace}
	for _, c := range filterCalls() {
		name, ok := native.SyscallNumbers[int(c.nr)]
		if !ok {
			t.Fatalf("go-seccomp-bpf has no %s call %d", native.Name, c.nr)
		}
		if c.emptyPath < 0 {
			group.Names = append(group.Names, name)
			continue
		}
		group.NamesWithCondtions = append(group.NamesWithCondtions, seccomp.NameWithConditions{
			Name: name,
			Conditions: seccomp.ArgumentConditions{
				{Argument: uint32(c.emptyPath), Operation: seccomp.BitsNotSet, Value: atEmptyPath},
			},
		})
	}
	if n := len(group.Names) + len(group.NamesWithCondtions); n != len(syscallTable)+len(contextCalls) || len(group.NamesWithCondtions) != 2 {
		t.Fatalf("%d calls in the policy (%d conditional), want %d (2)", n, len(group.NamesWithCondtions), len(syscallTable)+len(contextCalls))
	}
	policy := seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: []seccomp.SyscallGroup{group}}
	insts, err := policy.Assemble()
	if err != nil {
		t.Fatal(err)
	}
	want, err := bpf.Assemble(insts)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d instructions, go-seccomp-bpf assembles %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Code != w.Op || g.Jt != w.Jt || g.Jf != w.Jf || g.K != w.K {
			t.Errorf("instruction %d: %s, go-seccomp-bpf: %s", i, fmtInst(bpf.RawInstruction{Op: g.Code, Jt: g.Jt, Jf: g.Jf, K: g.K}), fmtInst(w))
		}
	}
}

func fmtInst(r bpf.RawInstruction) string { return fmt.Sprintf("%v %+v", r.Disassemble(), r) }
