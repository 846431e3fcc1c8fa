package trace

import (
	"sort"
	"strconv"
	"unicode/utf8"
)

// The records are written by hand to the bytes encoding/json gives them
// (json.Encoder with SetEscapeHTML(false): the same field order, omitempty
// rules, escapes and trailing newline; TestEncoderMatchesEncodingJSON and
// FuzzEncodeString compare). Reflection-based encoding cost a few
// microseconds per event, in the tracer's path while the tracee waits; and
// for the header it built the whole record in a buffer that grew by doubling,
// ~500 page faults (12 ms) for a command of 100,000 arguments. Here the
// header's command is appended to the output buffer one argument at a time.

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string, escaped as encoding/json does
// without HTML escaping: quote, backslash and control characters; invalid
// UTF-8 becomes U+FFFD; U+2028 and U+2029 are escaped.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendField appends `,"name":` (or `{"name":` for the first field).
func appendField(dst []byte, first bool, name string) []byte {
	if first {
		dst = append(dst, '{', '"')
	} else {
		dst = append(dst, ',', '"')
	}
	dst = append(dst, name...)
	return append(dst, '"', ':')
}

func appendStringField(dst []byte, name, v string, omitEmpty bool) []byte {
	if omitEmpty && v == "" {
		return dst
	}
	return appendJSONString(appendField(dst, false, name), v)
}

func appendIntField(dst []byte, name string, v int64) []byte {
	return strconv.AppendInt(appendField(dst, false, name), v, 10)
}

// appendEvent appends e as one JSON line (the fields of Event, in order).
func appendEvent(dst []byte, e *Event) []byte {
	dst = appendJSONString(appendField(dst, true, "rec"), e.Rec)
	dst = appendIntField(dst, "t", e.T)
	dst = appendIntField(dst, "pid", int64(e.PID))
	dst = appendStringField(dst, "op", string(e.Op), false)
	dst = appendStringField(dst, "sc", e.Syscall, true)
	dst = appendStringField(dst, "path", e.Path, true)
	dst = appendStringField(dst, "path2", e.Path2, true)
	if e.Flags != 0 {
		dst = appendIntField(dst, "flags", int64(e.Flags))
	}
	dst = appendStringField(dst, "err", e.Err, true)
	if e.FD != nil {
		dst = appendIntField(dst, "fd", int64(*e.FD))
	}
	if e.Size != nil {
		dst = appendIntField(dst, "size", *e.Size)
	}
	if e.MtimeNS != nil {
		dst = appendIntField(dst, "mtime_ns", *e.MtimeNS)
	}
	if e.Dir {
		dst = append(appendField(dst, false, "dir"), "true"...)
	}
	if len(e.Entries) > 0 {
		dst = append(appendField(dst, false, "entries"), '[')
		for i, d := range e.Entries {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(appendField(dst, true, "name"), d.Name)
			dst = append(appendStringField(dst, "type", d.Type, false), '}')
		}
		dst = append(dst, ']')
	}
	return append(dst, '}', '\n')
}

// appendEnd appends the end record as one JSON line.
func appendEnd(dst []byte, e *End) []byte {
	dst = appendJSONString(appendField(dst, true, "rec"), e.Rec)
	dst = appendIntField(dst, "exit", int64(e.Exit))
	dst = appendIntField(dst, "events", e.Events)
	dst = appendIntField(dst, "wall_ns", e.WallNS)
	return append(dst, '}', '\n')
}

// writeHeader writes h as one JSON line through w, the command one argument
// at a time (it may hold 100,000 of them).
func writeHeader(w *Writer, h *Header) error {
	b := appendJSONString(appendField(w.buf(), true, "rec"), h.Rec)
	b = appendStringField(b, "format", h.Format, false)
	b = appendIntField(b, "version", int64(h.Version))
	b = appendField(b, false, "command")
	if h.Command == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, a := range h.Command {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, a)
			if len(b) >= 4096 {
				if err := w.write(b); err != nil {
					return err
				}
				b = w.buf()
			}
		}
		b = append(b, ']')
	}
	b = appendStringField(b, "cwd", h.Cwd, false)
	if len(h.Env) > 0 {
		keys := make([]string, 0, len(h.Env))
		for k := range h.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b = append(appendField(b, false, "env"), '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(append(appendJSONString(b, k), ':'), h.Env[k])
		}
		b = append(b, '}')
	}
	b = appendStringField(b, "host", h.Host, true)
	b = appendStringField(b, "kernel", h.Kernel, true)
	b = appendStringField(b, "glibc", h.Glibc, true)
	b = appendStringField(b, "dlbundle", h.Dlbundle, true)
	b = appendStringField(b, "start", h.Start, false)
	b = appendStringField(b, "rank", h.Rank, true)
	return w.write(append(b, '}', '\n'))
}
