package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/alecthomas/kong"
)

// CompletionCmd prints a shell completion script made from the CLI's own
// model, so that a new verb or flag completes without anyone editing it.
type CompletionCmd struct {
	Shell string `arg:"" enum:"bash" help:"The shell: bash."`
}

// Help is shown by 'dlbundle completion --help'.
func (c *CompletionCmd) Help() string {
	return `Completes verbs, their flags, and file names elsewhere (after exec IMAGE --,
the app's own arguments complete as files).

  source <(dlbundle completion bash)                      # this shell
  dlbundle completion bash > ~/.local/share/bash-completion/completions/dlbundle`
}

// Run prints the script.
func (c *CompletionCmd) Run() error {
	parser, err := newParser(nil)
	if err != nil {
		return err
	}
	return writeBashCompletion(os.Stdout, parser.Model)
}

// writeBashCompletion writes a bash completion function for app: the verbs
// at the first word, the verb's flags at a word starting with "-" (until
// "--", after which the app's command line is the user's), files otherwise.
func writeBashCompletion(w io.Writer, app *kong.Application) error {
	var verbs []string
	flags := map[string][]string{}
	for _, n := range app.Children {
		if n.Type != kong.CommandNode || n.Hidden {
			continue
		}
		verbs = append(verbs, n.Name)
		var fs []string
		for _, group := range n.AllFlags(true) {
			for _, f := range group {
				fs = append(fs, "--"+f.Name)
				if f.Short != 0 {
					fs = append(fs, "-"+string(f.Short))
				}
			}
		}
		sort.Strings(fs)
		flags[n.Name] = fs
	}
	var b strings.Builder
	fmt.Fprintf(&b, `# bash completion for dlbundle (dlbundle completion bash)
_dlbundle() {
	local cur=${COMP_WORDS[COMP_CWORD]} verb="" i
	for ((i = 1; i < COMP_CWORD; i++)); do
		[[ ${COMP_WORDS[i]} == -- ]] && { COMPREPLY=($(compgen -f -- "$cur")); return; }
		[[ -z $verb && ${COMP_WORDS[i]} != -* ]] && verb=${COMP_WORDS[i]}
	done
	if [[ -z $verb ]]; then
		COMPREPLY=($(compgen -W "%s --help --version" -- "$cur"))
		return
	fi
	local flags=""
	case $verb in
`, strings.Join(verbs, " "))
	for _, v := range verbs {
		fmt.Fprintf(&b, "\t%s) flags=%q ;;\n", v, strings.Join(flags[v], " "))
	}
	fmt.Fprintf(&b, `	esac
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$flags" -- "$cur"))
	elif [[ $verb == help ]]; then
		COMPREPLY=($(compgen -W "%s" -- "$cur"))
	else
		COMPREPLY=($(compgen -f -- "$cur"))
	fi
}
complete -o filenames -F _dlbundle dlbundle
`, strings.Join(verbs, " "))
	_, err := io.WriteString(w, b.String())
	return err
}
