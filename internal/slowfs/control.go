package slowfs

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// The control socket lets another process read or reset the counts of a
// mounted slowfs: connect, send one line "stats" or "reset", read one line of
// JSON (Stats; for "reset", the counts just before they were zeroed).

// ServeControl listens on the Unix socket at path until the listener is closed.
func (f *FS) ServeControl(path string) (net.Listener, error) {
	_ = os.Remove(path) // a socket left by an earlier run
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("slowfs: control socket %s: %w", path, err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go f.answer(c)
		}
	}()
	return l, nil
}

func (f *FS) answer(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return
	}
	s := f.Stats()
	switch strings.TrimSpace(line) {
	case "stats":
	case "reset":
		f.Reset()
	default:
		fmt.Fprintf(c, "{\"error\":%q}\n", "unknown command "+strings.TrimSpace(line)+"; use stats or reset")
		return
	}
	_ = json.NewEncoder(c).Encode(s)
}

// QueryControl sends command ("stats" or "reset") to the control socket at path.
func QueryControl(path, command string) (Stats, error) {
	var s Stats
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return s, fmt.Errorf("slowfs: control socket %s: %w (is slowfs mounted with --control %s?)", path, err, path)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintln(c, command); err != nil {
		return s, err
	}
	var reply struct {
		Stats
		Error string `json:"error"`
	}
	if err := json.NewDecoder(c).Decode(&reply); err != nil {
		return s, fmt.Errorf("slowfs: reading reply from %s: %w", path, err)
	}
	if reply.Error != "" {
		return s, fmt.Errorf("slowfs: %s", reply.Error)
	}
	return reply.Stats, nil
}
