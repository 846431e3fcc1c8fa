package slowfs

import (
	"sync"
	"sync/atomic"
	"time"
)

// server is a single-server FIFO queue, the model of one metadata server (or
// one shared data path): requests are served one after another, each taking
// its service time. It keeps the time at which the server becomes free rather
// than holding a lock while sleeping, so oversleeping by one request does not
// delay the others and concurrent callers still see exact queueing.
type server struct {
	mu     sync.Mutex
	freeAt time.Time
	busy   atomic.Int64 // total service time handed out, ns
}

// serve blocks the caller until its request of length d has been served.
func (s *server) serve(d time.Duration) {
	if d <= 0 {
		return
	}
	s.mu.Lock()
	now := time.Now()
	start := s.freeAt
	if start.Before(now) {
		start = now
	}
	s.freeAt = start.Add(d)
	done := s.freeAt
	s.mu.Unlock()
	s.busy.Add(int64(d))
	time.Sleep(time.Until(done))
}
