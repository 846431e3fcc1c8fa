package units

import "testing"

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB",
		10 << 20: "10.0 MiB", 3 << 30: "3.0 GiB",
	} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestCount(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0", 7: "7", 999: "999", 1000: "1,000", 3421: "3,421", 1234567: "1,234,567",
		-1000: "-1,000", -999: "-999", -9223372036854775808: "-9,223,372,036,854,775,808",
	} {
		if got := Count(n); got != want {
			t.Errorf("Count(%d) = %q, want %q", n, got, want)
		}
	}
	if got := Count(int(12345)); got != "12,345" {
		t.Errorf("Count(int 12345) = %q", got)
	}
}
