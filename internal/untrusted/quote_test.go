package untrusted

import "testing"

func TestQuote(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"},
		{"/tmp/with space/é.py", "/tmp/with space/é.py"},
		{"", ""},
		{"/a\nfake line", `"/a\nfake line"`},
		{"/a\rb", `"/a\rb"`},
		{"\x1b]0;title\x07", `"\x1b]0;title\a"`},
		{"/a\tb", `"/a\tb"`},
		{"/x\x7f", `"/x\x7f"`},
		{"/bad\xffutf8", `"/bad\xffutf8"`},
		{"/rtl\u202eexe.so", `"/rtl\u202eexe.so"`},
		{"/ls\u2028sep", `"/ls\u2028sep"`},
		{`"quoted"`, `"\"quoted\""`},
		{`/a"b\c`, `/a"b\c`},
	} {
		if got := Quote(c.in); got != c.want {
			t.Errorf("Quote(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}

func FuzzQuote(f *testing.F) {
	f.Add("/usr/lib/a\nb")
	f.Fuzz(func(t *testing.T, s string) {
		q := Quote(s)
		for i := 0; i < len(q); i++ {
			if c := q[i]; c < ' ' || c == 0x7f {
				t.Fatalf("Quote(%q) = %q holds control byte %#x", s, q, c)
			}
		}
	})
}
