// Package binrec writes and reads fixed-size little-endian records field by
// field, in the order of the record's Go struct: the struct declares the
// layout (as debug/elf's Header64 does), and no call site names a byte
// offset. A record type's put and get methods call W and R once per field;
// its tests check them against encoding/binary's reflective encoding of the
// same struct (see CheckLayout), which also proves the struct has no padding
// that the byte layout lacks.
//
// Writer and Reader are values on the caller's stack: nothing is allocated,
// and each call is a bounds-checked little-endian store or load, as the
// offset-literal code they replace.
package binrec

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"reflect"
	"unsafe"
)

var le = binary.LittleEndian

// W writes a record's fields in order into B from offset 0.
type W struct {
	B   []byte
	off int
}

func (w *W) U8(v uint8)   { w.B[w.off] = v; w.off++ }
func (w *W) U16(v uint16) { le.PutUint16(w.B[w.off:], v); w.off += 2 }
func (w *W) U32(v uint32) { le.PutUint32(w.B[w.off:], v); w.off += 4 }
func (w *W) U64(v uint64) { le.PutUint64(w.B[w.off:], v); w.off += 8 }

// Bytes writes a fixed-size byte field (magic, digest, NUL-padded name).
func (w *W) Bytes(v []byte) { copy(w.B[w.off:w.off+len(v)], v); w.off += len(v) }

// Len is how many bytes the fields written so far take.
func (w *W) Len() int { return w.off }

// R reads a record's fields in order from B from offset 0.
type R struct {
	B   []byte
	off int
}

func (r *R) U8() uint8   { v := r.B[r.off]; r.off++; return v }
func (r *R) U16() uint16 { v := le.Uint16(r.B[r.off:]); r.off += 2; return v }
func (r *R) U32() uint32 { v := le.Uint32(r.B[r.off:]); r.off += 4; return v }
func (r *R) U64() uint64 { v := le.Uint64(r.B[r.off:]); r.off += 8; return v }

// Bytes fills a fixed-size byte field.
func (r *R) Bytes(v []byte) { copy(v, r.B[r.off:r.off+len(v)]); r.off += len(v) }

// Len is how many bytes the fields read so far took.
func (r *R) Len() int { return r.off }

// CheckLayout is for tests of a record type T whose put writes rec into a
// size-byte buffer with W and whose get reads it back with R: it checks that
// put writes exactly what encoding/binary writes for the struct (the same
// fields in the same order and sizes, little-endian), that the struct has
// no implicit padding (so unsafe.Offsetof of a field is its byte offset),
// that the record is size bytes, and that get gives rec back. rec should
// have a distinct non-zero value in every field.
func CheckLayout[T any](rec T, size int, put func(*T, []byte), get func(*T, []byte)) error {
	var want bytes.Buffer
	if err := binary.Write(&want, le, rec); err != nil {
		return err
	}
	if want.Len() != size || int(unsafe.Sizeof(rec)) != size {
		return fmt.Errorf("%T: encoding/binary size %d, Go size %d (padding?), record size %d", rec, want.Len(), unsafe.Sizeof(rec), size)
	}
	got := make([]byte, size)
	put(&rec, got)
	if !bytes.Equal(got, want.Bytes()) {
		return fmt.Errorf("%T: put wrote\n%x\nencoding/binary writes\n%x\n(a field out of order or of another size)", rec, got, want.Bytes())
	}
	var back T
	get(&back, got)
	if !reflect.DeepEqual(back, rec) {
		return fmt.Errorf("%T: get read %+v back from %+v", rec, back, rec)
	}
	return nil
}

// Fill sets every field of *p (integers and byte arrays, also inside
// arrays) to distinct non-zero values derived from seed, for CheckLayout.
func Fill(p any, seed uint64) {
	n := seed
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Struct:
			for i := 0; i < v.NumField(); i++ {
				fill(v.Field(i))
			}
		case reflect.Array:
			for i := 0; i < v.Len(); i++ {
				fill(v.Index(i))
			}
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			n = n*6364136223846793005 + 1442695040888963407
			v.SetUint(n >> 7)
		case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			n = n*6364136223846793005 + 1442695040888963407
			v.SetInt(int64(n >> 7))
		default:
			panic(fmt.Sprintf("binrec.Fill: field of kind %s", v.Kind()))
		}
	}
	fill(reflect.ValueOf(p).Elem())
}
