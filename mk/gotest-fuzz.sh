#!/usr/bin/env bash
# gotest-fuzz.sh GO test ARGS... -fuzz '^Target$' ... ./pkg/
#
# Runs one `go test -fuzz` and passes its output and status on, with one
# exception: Go 1.26's fuzz coordinator can report its own -fuzztime deadline
# as a failure ("context deadline exceeded", go.dev/issue/75804, fixed in Go
# 1.27) although no input failed. Such a run wrote no new input under
# ./pkg/testdata/fuzz/Target; it is said so and run once more. A failure that
# wrote an input, or any other failure, is passed on as it is.
set -u
pkg="${!#}"
target=""
prev=""
for a in "$@"; do
	[ "$prev" = "-fuzz" ] && target="${a#^}" && target="${target%\$}"
	prev="$a"
done
corpus="${pkg%/}/testdata/fuzz/$target"
before=$(ls "$corpus" 2>/dev/null | sort)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$@" >"$out" 2>&1
status=$?
after=$(ls "$corpus" 2>/dev/null | sort)
if [ "$status" -ne 0 ] && [ -n "$target" ] && [ "$before" = "$after" ] &&
	grep -q '^    context deadline exceeded$' "$out" && ! grep -q 'Failing input written' "$out"; then
	echo "fuzz $target: Go's fuzz coordinator reported its own -fuzztime deadline as a failure and wrote no input (go.dev/issue/75804); running it once more"
	exec "$@"
fi
cat "$out"
exit "$status"
