package slowfs

import (
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// server is a single-server FIFO queue, the model of one metadata server (or
// one shared data path): requests are served one after another, each taking
// its service time. It keeps the time at which the server becomes free, so
// waking a request late does not delay the next one: throughput is exact and
// only latency gets the wake-up jitter.
//
// Waiting requests do not sleep themselves: time.Sleep wakes up to a
// millisecond late in an otherwise idle Go process, far more than a 10–200 µs
// service time, and a blocking nanosleep per request would hold every Go
// processor (P) on a 2-core machine. One waker goroutine waits on a timerfd
// (an exact kernel timer, delivered through Go's netpoller) for the request at
// the head of the queue and releases every request that is due.
type server struct {
	mu      sync.Mutex
	freeAt  int64    // CLOCK_MONOTONIC ns
	waiting []waiter // in deadline order, since deadlines only grow
	stopped bool
	kick    chan struct{} // the queue went from empty to non-empty
	timer   *os.File
	once    sync.Once
	busy    atomic.Int64 // total service time handed out, ns
}

type waiter struct {
	deadline int64
	done     chan struct{}
}

// serve blocks the caller until its request of length d has been served.
func (s *server) serve(d time.Duration) {
	if d <= 0 {
		return
	}
	s.once.Do(s.start)
	w := waiter{done: make(chan struct{})}
	s.mu.Lock()
	if s.stopped || s.timer == nil {
		s.mu.Unlock()
		return
	}
	w.deadline = max(s.freeAt, monotonicNow()) + int64(d)
	s.freeAt = w.deadline
	s.waiting = append(s.waiting, w)
	if len(s.waiting) == 1 {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
	s.busy.Add(int64(d))
	<-w.done
}

func (s *server) start() {
	s.kick = make(chan struct{}, 1)
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return // no timer: requests are not delayed (serve checks s.timer)
	}
	s.timer = os.NewFile(uintptr(fd), "slowfs-timer") // non-blocking: reads park in the netpoller
	go s.wake()
}

// wake releases due requests until stop.
func (s *server) wake() {
	buf := make([]byte, 8)
	for {
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			return
		}
		if len(s.waiting) == 0 {
			s.mu.Unlock()
			<-s.kick
			continue
		}
		head := s.waiting[0].deadline
		s.mu.Unlock()
		if head > monotonicNow() {
			spec := unix.ItimerSpec{Value: unix.NsecToTimespec(head)}
			if err := unix.TimerfdSettime(int(s.timer.Fd()), unix.TFD_TIMER_ABSTIME, &spec, nil); err == nil {
				if _, err := s.timer.Read(buf); err != nil && s.isStopped() {
					return
				}
			}
		}
		s.mu.Lock()
		now := monotonicNow()
		i := 0
		for ; i < len(s.waiting) && s.waiting[i].deadline <= now; i++ {
			close(s.waiting[i].done)
		}
		s.waiting = s.waiting[i:]
		s.mu.Unlock()
	}
}

func (s *server) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// stop releases every waiting request and ends the waker.
func (s *server) stop() {
	s.once.Do(func() {}) // a server never used has nothing to stop
	s.mu.Lock()
	s.stopped = true
	for _, w := range s.waiting {
		close(w.done)
	}
	s.waiting = nil
	if s.kick != nil {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
	if s.timer != nil {
		s.timer.Close() // unblocks a pending Read
	}
}

func monotonicNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
