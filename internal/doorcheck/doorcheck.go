// Package doorcheck is a go/analysis analyzer that keeps dlbundle's file
// work on behalf of others behind one door.
//
// Every path dlbundle opens, creates, lists, links, renames or removes for a
// user other than the caller, or in a directory other users can write (stage
// dirs, records, notes, locks, auto and gather dirs, images staged for a
// job), must be reached through internal/trustpath's walker (the one rule)
// or internal/outfile (outputs, which walks with it). New code tends to open
// paths its own way; this analyzer makes `make check` refuse that.
//
// It reports a call of a path-taking function of os, io/ioutil, syscall or
// golang.org/x/sys/unix (Open, Create, ReadFile, WriteFile, Mkdir, Remove,
// Rename, Link, Symlink, ReadDir, ...) whose path is not a constant, in the
// non-test files of the module's cmd/, node/, report/ and loader/ trees. An
// *at call (unix.Openat, unix.Unlinkat, ...) is fd-relative, the door's own
// technique, and is reported only when its directory is AT_FDCWD.
//
// A function that must keep such a call (the caller reading its own named
// input, say) is listed in allow.go with the reason; nothing else is
// exempt, so the list is the whole of the exceptions to review.
package doorcheck

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"path/filepath"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
)

// Module is the module whose trees are checked.
const Module = "github.com/dlbundle/dlbundle"

// Checked are the trees (module-relative import path prefixes) held to the
// rule: the code that runs for others (root's Prolog, a job's user) and
// touches their files.
var Checked = []string{"cmd/", "node", "report", "loader"}

// Analyzer reports direct file calls on non-constant paths.
var Analyzer = &analysis.Analyzer{
	Name:     "doorcheck",
	Doc:      "report direct os/syscall/unix file calls on non-constant paths outside dlbundle's trust door (internal/trustpath, internal/outfile)",
	Requires: []*analysis.Analyzer{inspect.Analyzer},
	Run:      run,
}

// kind says which door replaces a call.
type kind int

const (
	read   kind = iota // open or read a file
	list               // read a directory
	write              // create or write a file
	mkdir              // make a directory
	change             // remove, rename, link, chmod, chown
)

var door = map[kind]string{
	read:   "trustpath.(*Walker).OpenFile (or node.OpenStageDirFor for a stage dir), which opens by descriptor what the rule accepted",
	list:   "trustpath.(*Walker).WalkDir and read the held descriptor",
	write:  "outfile.Create for an output, or an *at call on a trustpath.Dir's descriptor",
	mkdir:  "trustpath.Walker{Create: true}.WalkDir, which makes each directory in one it has checked",
	change: "an *at call (unix.Unlinkat, unix.Renameat, ...) on a descriptor from trustpath.(*Walker).Walk or WalkDir",
}

// call describes a checked function: which arguments are paths (indexes)
// and, for an *at call, which argument is the directory descriptor (-1: none).
type call struct {
	paths []int
	dirfd []int // the descriptor of each path in paths, -1 for none
	kind  kind
}

func p(k kind, idx ...int) call {
	d := make([]int, len(idx))
	for i := range d {
		d[i] = -1
	}
	return call{paths: idx, dirfd: d, kind: k}
}

// at: paths at the odd positions given, each after its directory descriptor.
func at(k kind, pairs ...int) call {
	c := call{kind: k}
	for i := 0; i+1 < len(pairs); i += 2 {
		c.dirfd = append(c.dirfd, pairs[i])
		c.paths = append(c.paths, pairs[i+1])
	}
	return c
}

var osFuncs = map[string]call{
	"Open": p(read, 0), "OpenFile": p(read, 0), "ReadFile": p(read, 0), "OpenRoot": p(read, 0), "OpenInRoot": p(read, 0, 1),
	"DirFS": p(read, 0), "CopyFS": p(write, 0),
	"Create": p(write, 0), "WriteFile": p(write, 0), "CreateTemp": p(write, 0), "Truncate": p(write, 0),
	"ReadDir": p(list, 0),
	"Mkdir":   p(mkdir, 0), "MkdirAll": p(mkdir, 0), "MkdirTemp": p(mkdir, 0),
	"Remove": p(change, 0), "RemoveAll": p(change, 0), "Rename": p(change, 0, 1),
	"Link": p(change, 0, 1), "Symlink": p(change, 1), "Chmod": p(change, 0), "Chown": p(change, 0),
	"Lchown": p(change, 0), "Chtimes": p(change, 0), "Mkfifo": p(change, 0),
}

var ioutilFuncs = map[string]call{
	"ReadFile": p(read, 0), "WriteFile": p(write, 0), "ReadDir": p(list, 0), "TempFile": p(write, 0), "TempDir": p(mkdir, 0),
}

// sysFuncs are syscall's and unix's (the same names where both have them).
var sysFuncs = map[string]call{
	"Open": p(read, 0), "Creat": p(write, 0), "Truncate": p(write, 0),
	"Mkdir": p(mkdir, 0), "Mknod": p(change, 0), "Mkfifo": p(change, 0),
	"Unlink": p(change, 0), "Rmdir": p(change, 0), "Rename": p(change, 0, 1),
	"Link": p(change, 0, 1), "Symlink": p(change, 1), "Chmod": p(change, 0), "Chown": p(change, 0),
	"Lchown": p(change, 0), "Utimes": p(change, 0), "UtimesNano": p(change, 0),

	"Openat": at(read, 0, 1), "Openat2": at(read, 0, 1),
	"Mkdirat": at(mkdir, 0, 1), "Mknodat": at(change, 0, 1), "Mkfifoat": at(change, 0, 1),
	"Unlinkat": at(change, 0, 1), "Renameat": at(change, 0, 1, 2, 3), "Renameat2": at(change, 0, 1, 2, 3),
	"Linkat": at(change, 0, 1, 2, 3), "Symlinkat": at(change, 1, 2), "Fchmodat": at(change, 0, 1),
	"Fchownat": at(change, 0, 1), "UtimesNanoAt": at(change, 0, 1),
}

func funcsOf(pkg string) map[string]call {
	switch pkg {
	case "os":
		return osFuncs
	case "io/ioutil":
		return ioutilFuncs
	case "syscall", "golang.org/x/sys/unix":
		return sysFuncs
	}
	return nil
}

// checkedPackage reports whether the package at path is held to the rule.
func checkedPackage(path string) bool {
	rel, ok := strings.CutPrefix(path, Module+"/")
	if !ok {
		return false
	}
	for _, c := range Checked {
		if strings.HasSuffix(c, "/") && strings.HasPrefix(rel, c) {
			return true
		}
		if rel == c || strings.HasPrefix(rel, c+"/") {
			return true
		}
	}
	return false
}

func run(pass *analysis.Pass) (any, error) {
	pkgPath := strings.TrimSuffix(pass.Pkg.Path(), "_test")
	if !checkedPackage(pkgPath) {
		return nil, nil
	}
	ins := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	ins.WithStack([]ast.Node{(*ast.CallExpr)(nil)}, func(n ast.Node, push bool, stack []ast.Node) bool {
		if !push {
			return true
		}
		ce := n.(*ast.CallExpr)
		pos := pass.Fset.Position(ce.Pos())
		if strings.HasSuffix(pos.Filename, "_test.go") {
			return true
		}
		fn := callee(pass.TypesInfo, ce)
		if fn == nil || fn.Pkg() == nil {
			return true
		}
		if sig, ok := fn.Type().(*types.Signature); ok && sig.Recv() != nil {
			return true // methods act on a descriptor already open
		}
		c, ok := funcsOf(fn.Pkg().Path())[fn.Name()]
		if !ok {
			return true
		}
		if !offends(pass.TypesInfo, ce, c) {
			return true
		}
		encl := enclosing(pass, stack)
		if _, ok := Allowed[encl]; ok {
			return true
		}
		pkgName := fn.Pkg().Name()
		pass.Report(analysis.Diagnostic{
			Pos: ce.Pos(),
			Message: fmt.Sprintf("%s:%d: %s.%s of a non-constant path in %s, outside the trust door: use %s; or, if no other user can have a say in this path, add %q to internal/doorcheck/allow.go with the reason",
				filepath.Base(pos.Filename), pos.Line, pkgName, fn.Name(), encl, door[c.kind], encl),
		})
		return true
	})
	return nil, nil
}

// offends: some path argument is not a constant and (for an *at call) its
// directory is AT_FDCWD.
func offends(info *types.Info, ce *ast.CallExpr, c call) bool {
	for i, pi := range c.paths {
		if pi >= len(ce.Args) {
			continue
		}
		if tv, ok := info.Types[ce.Args[pi]]; ok && tv.Value != nil && tv.Value.Kind() == constant.String {
			continue
		}
		if d := c.dirfd[i]; d >= 0 && d < len(ce.Args) {
			if !isATFDCWD(info, ce.Args[d]) {
				continue
			}
		}
		return true
	}
	return false
}

// isATFDCWD: the argument is the constant AT_FDCWD (-100), whatever name
// it goes by (trustpath.AtRoot is one).
func isATFDCWD(info *types.Info, e ast.Expr) bool {
	tv, ok := info.Types[e]
	if !ok || tv.Value == nil {
		return false
	}
	v, ok := constant.Int64Val(constant.ToInt(tv.Value))
	return ok && v == -100
}

func callee(info *types.Info, ce *ast.CallExpr) *types.Func {
	var id *ast.Ident
	switch f := ast.Unparen(ce.Fun).(type) {
	case *ast.Ident:
		id = f
	case *ast.SelectorExpr:
		id = f.Sel
	default:
		return nil
	}
	fn, _ := info.Uses[id].(*types.Func)
	return fn
}

// enclosing names the function declaration holding the call as allow.go
// spells it: "<import path>.<Func>" or "<import path>.<Type>.<Method>", the
// path relative to the module ("node.removeConsumed",
// "cmd/dlbundle.runReport"). A call in a function literal belongs to the
// declaration around it; one outside any function to "<path>.init".
func enclosing(pass *analysis.Pass, stack []ast.Node) string {
	rel := strings.TrimPrefix(strings.TrimSuffix(pass.Pkg.Path(), "_test"), Module+"/")
	for i := len(stack) - 1; i >= 0; i-- {
		fd, ok := stack[i].(*ast.FuncDecl)
		if !ok {
			continue
		}
		name := fd.Name.Name
		if fd.Recv != nil && len(fd.Recv.List) == 1 {
			name = recvName(fd.Recv.List[0].Type) + "." + name
		}
		return rel + "." + name
	}
	return rel + ".init"
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

var _ = token.NoPos
