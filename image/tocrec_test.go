package image

import (
	"testing"

	"github.com/dlbundle/dlbundle/internal/binrec"
)

// Every TOC record (and the footer and skippable frame headers)'s put and get move each field at the offset its struct
// declares (encoding/binary's encoding of the struct, no padding), the
// record is the size docs/SPEC.md gives, and get reads back what put wrote.
func TestTOCRecordLayouts(t *testing.T) {
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Error(err)
		}
	}
	for seed := uint64(1); seed <= 3; seed++ {
		var h tocHeaderRec
		binrec.Fill(&h, seed)
		check(binrec.CheckLayout(h, tocHeaderSize, (*tocHeaderRec).put, (*tocHeaderRec).get))
		var e tocEntryRec
		binrec.Fill(&e, seed)
		check(binrec.CheckLayout(e, entryRecSize, (*tocEntryRec).put, (*tocEntryRec).get))
		var n tocNameRec
		binrec.Fill(&n, seed)
		check(binrec.CheckLayout(n, nameRecSize, (*tocNameRec).put, (*tocNameRec).get))
		var d tocDotsRec
		binrec.Fill(&d, seed)
		check(binrec.CheckLayout(d, dotsRecSize, (*tocDotsRec).put, (*tocDotsRec).get))
		var o tocObjectRec
		binrec.Fill(&o, seed)
		check(binrec.CheckLayout(o, objectRecSize, (*tocObjectRec).put, (*tocObjectRec).get))
		var f tocFrameRec
		binrec.Fill(&f, seed)
		check(binrec.CheckLayout(f, frameRecSize, (*tocFrameRec).put, (*tocFrameRec).get))
		var sk skippableRec
		binrec.Fill(&sk, seed)
		check(binrec.CheckLayout(sk, skippableHeaderSize, (*skippableRec).put, (*skippableRec).get))
		var ft footerRec
		binrec.Fill(&ft, seed)
		check(binrec.CheckLayout(ft, footerSize, (*footerRec).put, (*footerRec).get))
	}
}
