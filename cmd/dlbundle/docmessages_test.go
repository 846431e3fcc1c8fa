package main

import (
	"go/scanner"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDocsQuoteOnlyPrintedMessages: every message the docs quote as the
// binary's ("dlbundle VERB: ..." at the start of an indented or fenced line,
// or in backquotes) is made of texts that the sources print. A quoted
// message is cut into clauses at ": ", "; " and ", "; in each clause, words
// that vary (paths, numbers, "...", NAMES in capitals) split it further, and
// every remaining run of three or more words must occur in one string
// literal of the Go sources, or be an errno text of the C library (what %v
// of a system call's error prints).
func TestDocsQuoteOnlyPrintedMessages(t *testing.T) {
	literals := sourceLiterals(t, "../..")
	for e := unix.Errno(1); e < 134; e++ {
		literals = append(literals, e.Error())
	}
	corpus := strings.Join(literals, "\x00")
	docs, _ := filepath.Glob("../../docs/*.md")
	docs = append(docs, "../../README.md")
	quoted := 0
	for _, doc := range docs {
		for _, m := range quotedMessages(t, doc) {
			quoted++
			for _, run := range constantRuns(m.text) {
				if !strings.Contains(corpus, run) {
					t.Errorf("%s:%d quotes %q, but no source prints %q", doc, m.line, m.text, run)
				}
			}
		}
	}
	if quoted < 3 {
		t.Errorf("only %d quoted messages found in the docs", quoted)
	}
}

type quotedMessage struct {
	line int
	text string
}

var (
	messageStart  = regexp.MustCompile(`^(\s{4,}|\s*(\$ )?)(dlbundle( [a-z][a-z-]*)?: .*)$`)
	inlineMessage = regexp.MustCompile("`(dlbundle( [a-z][a-z-]*)?: [^`]+)`")
	// prose quotes a message without its prefix as "text: ..."
	proseMessage = regexp.MustCompile(`"([a-z][^"]{10,}: \.\.\.)"`)
)

// quotedMessages finds the messages quoted in doc: an indented (or fenced)
// line starting "dlbundle VERB: " and the indented lines that continue it, a
// backquoted one, or one quoted in prose without its prefix ("text: ...").
func quotedMessages(t *testing.T, doc string) []quotedMessage {
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var out []quotedMessage
	fenced := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		indented := strings.HasPrefix(l, "    ") || fenced
		if m := messageStart.FindStringSubmatch(l); m != nil && indented {
			text := m[3]
			for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "    ") && !messageStart.MatchString(lines[i+1]) &&
				strings.TrimSpace(lines[i+1]) != "" {
				i++
				text += " " + strings.TrimSpace(lines[i])
			}
			out = append(out, quotedMessage{i + 1, text})
			continue
		}
		for _, m := range inlineMessage.FindAllStringSubmatch(l, -1) {
			out = append(out, quotedMessage{i + 1, m[1]})
		}
		for _, m := range proseMessage.FindAllStringSubmatch(l, -1) {
			out = append(out, quotedMessage{i + 1, "dlbundle: " + m[1]})
		}
	}
	return out
}

var (
	variableWord = regexp.MustCompile(`[0-9/]|\.\.\.|^\W*[A-Z][A-Z_]+\W*$`)
	clauseCut    = regexp.MustCompile(`[:;,] `)
)

// constantRuns are the runs of three or more words of message m that do not
// vary, without the "dlbundle VERB:" prefix.
func constantRuns(m string) []string {
	_, m, _ = strings.Cut(m, ": ")
	var runs []string
	for _, clause := range clauseCut.Split(m, -1) {
		var run []string
		flush := func() {
			if len(run) >= 3 {
				runs = append(runs, strings.TrimRight(strings.Join(run, " "), ".;:,"))
			}
			run = nil
		}
		for _, w := range strings.Fields(clause) {
			if variableWord.MatchString(w) {
				flush()
				continue
			}
			run = append(run, w)
		}
		flush()
	}
	return runs
}

// sourceLiterals are the string literals of the non-test Go files under root.
func sourceLiterals(t *testing.T, root string) []string {
	var out []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var s scanner.Scanner
		fset := token.NewFileSet()
		s.Init(fset.AddFile(path, -1, len(src)), src, nil, 0)
		for {
			_, tok, lit := s.Scan()
			if tok == token.EOF {
				break
			}
			if tok == token.STRING {
				if v, err := strconv.Unquote(lit); err == nil {
					out = append(out, v)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
