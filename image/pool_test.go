package image

import "testing"

func mapped(t *testing.T, n int) []byte {
	b, err := mmapAnon(n, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMappedPool: a given-back mapping is reused by the next take that it
// fits (the smallest that fits), and no more than decodeBudget is kept.
func TestMappedPool(t *testing.T) {
	var p mappedPool
	p.give(mapped(t, 1<<20))
	p.give(mapped(t, 64<<10))
	if got := p.take(32 << 10); len(got) != 64<<10 {
		t.Fatalf("take(32 KiB) = %d bytes, want the 64 KiB mapping", len(got))
	}
	if got := p.take(512 << 10); len(got) != 1<<20 {
		t.Fatalf("take(512 KiB) = %d bytes, want the 1 MiB mapping", len(got))
	}
	if got := p.take(1); got != nil {
		t.Fatalf("take from an empty pool = %d bytes", len(got))
	}
	p.give(mapped(t, decodeBudget))
	p.give(mapped(t, 4096)) // over the budget: unmapped, not kept
	if p.bytes != decodeBudget || len(p.free) != 1 {
		t.Fatalf("pool keeps %d bytes in %d mappings, want %d in 1", p.bytes, len(p.free), decodeBudget)
	}
	munmap(p.take(decodeBudget))
}
