// Package edgestream embeds libedgestream, the edge side of the cloudstream/KubeEdge stream
// tunnel, in a Go program such as an edge agent.
//
// A Tunnel dials the cloud's tunnel server (wss + mutual TLS, the cloud's certificate
// verified), keeps the tunnel alive (pings, dead-peer detection, redial with backoff and
// jitter, certificate files re-read when they change) and serves the cloud's requests against
// the local kubelet, the container runtime (CRI) and allow-listed local ports. All of that runs
// in C on one event loop per Tunnel; Go sees configuration, life cycle, events and counters:
//
//	cfg, _ := edgestream.NewConfig()
//	defer cfg.Close()
//	if err := cfg.LoadFile("/etc/agent/edgestream.json"); err != nil { ... }
//	t, err := edgestream.New(cfg, edgestream.Handlers{
//		Connected:    func(e edgestream.Connected) { log.Printf("tunnel up as %s", e.Node) },
//		Disconnected: func(e edgestream.Disconnected) { log.Printf("tunnel down: %v", e.Err) },
//	})
//	if err != nil { ... }          // err names the option or file that is wrong
//	defer t.Close()
//	t.Start()                       // or t.Run(ctx) to block until ctx is done
//	...
//	t.Stop(ctx)                     // close the tunnel, wait for the loop (or ctx)
//
// Threads: each Tunnel owns one OS thread (a goroutine locked to it) that creates the C
// instance, runs its loop and frees it, as libedgestream asks of the thread that drives an
// instance. Stop, Reload and Stats may be called from any goroutine.
//
// Callbacks: the library reports tunnel up/down on its loop thread; the binding queues each
// event (bounded, see Stats.EventsDropped) and calls the Handlers in order on a goroutine of
// the Tunnel's own, so a slow handler never stalls the tunnel and a handler may call any method
// except Close. No Go pointer is kept in C: the C side holds a number that a handle map turns
// back into the Tunnel.
//
// Logging: libedgestream writes its log lines to stderr unless SetLogHook hands them to a Go
// function. Each Tunnel logs at its configuration's log-level and log-format; SetLogLevel and
// SetLogJSON set what applies to lines logged outside any Tunnel.
//
// Certificates: the Certificate handler reports the tunnel certificate in use when the loop
// starts, and after each reload (Reload, or the periodic check) that found the files changed:
// taken (Err nil, the new validity) or refused (Err says why; the previous one stays). An agent
// that rotates the files itself writes them, calls Reload, and waits for that event.
//
// Signals: the library installs no signal handler and leaves the process's SIGPIPE handling
// to the Go runtime (libwebsockets' SIG_IGN is undone); SIGPIPE is blocked only on the threads
// running library code, where a write to a reset connection fails with EPIPE instead.
package edgestream

/*
#cgo pkg-config: edgestream
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Version is the libedgestream version this package was compiled against.
const Version = C.EDGESTREAM_VERSION

// eventQueueLen bounds the events waiting for the handlers. Tunnel events come at most at the
// redial rate (backoff-initial, 1 s by default), so 64 is a minute of a flapping tunnel.
const eventQueueLen = 64

// Connected is the event of a tunnel that came up.
type Connected struct {
	Node     string // the node name the tunnel is registered as
	Extended bool   // our extensions were agreed; false: the base protocol of a KubeEdge cloud
}

// Disconnected is the event of a tunnel that went down or a dial that failed. A redial is
// scheduled after RetryIn unless the Tunnel is stopping.
type Disconnected struct {
	Err     error // an *Error: Op "tunnel", the errno and the reason
	RetryIn time.Duration
}

// Certificate is the event of the tunnel certificate: the one in use when the loop started,
// or a reload of changed files, taken (Err nil) or refused (Err: an *Error, Op "certificate",
// with the reason; the previous certificate stays in use and the check is retried).
type Certificate struct {
	Err       error
	Path      string    // the tunnel-cert file
	NotBefore time.Time // the certificate in use now; zero when unknown
	NotAfter  time.Time
}

// Handlers are called in order on one goroutine of the Tunnel; any may be nil. A handler may
// call Stop, Reload and Stats; it must not call Close (Close waits for the handlers).
type Handlers struct {
	Connected    func(Connected)
	Disconnected func(Disconnected)
	Certificate  func(Certificate)
}

// Stats is a snapshot of the counters (edgestream.h struct edgestream_stats) plus the
// binding's own.
type Stats struct {
	Connected                bool   // the tunnel is up now
	Extended                 bool   // with our extensions (else KubeEdge's base protocol)
	DialsTotal               uint64 // attempts to reach the cloud
	ConnectsTotal            uint64 // tunnels that came up
	DisconnectsTotal         uint64 // tunnels that went down
	StreamsOpen              uint64 // streams open now
	StreamsTotal             uint64 // streams ever
	StreamsRefused           uint64 // outside the allow-list, bad requests, limits
	BackendFailures          uint64 // unreachable, timed out, TLS refused
	BytesToCloud             uint64 // stream bytes toward the cloud
	BytesFromCloud           uint64 // stream bytes from the cloud
	CertReloads              uint64 // certificate files re-read after a change
	TunnelPauses             uint64 // base protocol: tunnel reading paused for a slow backend
	RemovesAnswered          uint64 // base protocol stream endings, see edgestream.h
	RemovesCrossed           uint64
	RemovesRepeated          uint64
	StallCuts                uint64 // base protocol: streams cut for keeping the tunnel paused
	KubeletResumptionRefused uint64 // kubelet handshakes redone without session resumption
	ReconnectsAsked          uint64 // a draining cloud replica asked the edge to move (RECONNECT)
	TunnelsRetired           uint64 // tunnels closed after their successor was up
	EventsDropped            uint64 // binding: events not delivered, the handler queue was full
}

type state int

const (
	stateNew     state = iota // made, loop not started
	stateRunning              // the owner thread is in edgestream_run
	stateStopped              // the loop has returned (or was stopped before it ran)
	stateClosed               // the C instance is freed
)

type command int

const (
	cmdRun  command = iota // run the loop until stopped
	cmdFree                // free the instance and end the owner thread
)

// Tunnel is one libedgestream instance: one event loop and one tunnel to the cloud.
type Tunnel struct {
	handle   uintptr
	handlers Handlers

	mu    sync.RWMutex // guards es and st; held (read) across the thread-safe C calls
	es    *C.struct_edgestream
	st    state
	final Stats // the counters at Close, for Stats afterwards

	cmds      chan command  // to the owner thread
	loopDone  chan struct{} // closed when the loop has returned (or will never run)
	ownerDone chan struct{} // closed when the instance is freed
	events    chan interface{}
	eventsEnd chan struct{} // closed when the last handler has returned
	dropped   atomic.Uint64 // events the queue had no room for (aligned on 32-bit too)
	stopOnce  sync.Once
}

// New checks the configuration and certificate files and sets up the loop; the tunnel is
// dialled once the loop runs (Start or Run). The configuration is copied. Errors are *Error
// with the library's message (which option, which file, why).
func New(cfg *Config, h Handlers) (*Tunnel, error) {
	t := &Tunnel{
		handlers:  h,
		cmds:      make(chan command, 1),
		loopDone:  make(chan struct{}),
		ownerDone: make(chan struct{}),
		events:    make(chan interface{}, eventQueueLen),
		eventsEnd: make(chan struct{}),
	}
	t.handle = handles.add(t)
	made := make(chan error, 1)
	cfg.mu.Lock() // held until the C instance has copied it
	if cfg.c == nil {
		cfg.mu.Unlock()
		handles.remove(t.handle)
		return nil, ErrClosed
	}
	go t.owner(cfg.c, made)
	err := <-made
	cfg.mu.Unlock()
	if err != nil {
		handles.remove(t.handle)
		return nil, err
	}
	go t.dispatch()
	return t, nil
}

// owner is the Tunnel's OS thread: edgestream_new, edgestream_run and edgestream_free all run
// here, the one thread libedgestream asks to drive an instance. The thread stays locked until
// the goroutine ends, so Go retires it instead of reusing it.
func (t *Tunnel) owner(cfg *C.struct_edgestream_config, made chan<- error) {
	runtime.LockOSThread()
	defer close(t.ownerDone)
	var es *C.struct_edgestream
	var msg [errBytes]C.char
	rc := int(C.es_go_new(&es, cfg, C.uintptr_t(t.handle), &msg[0], C.size_t(len(msg))))
	if rc < 0 {
		made <- cError("new", rc, C.GoString(&msg[0]))
		return
	}
	t.es = es // before New returns: no other goroutine sees t yet
	made <- nil
	for cmd := range t.cmds {
		switch cmd {
		case cmdRun:
			C.edgestream_run(es)
			t.mu.Lock()
			if t.st == stateRunning {
				t.st = stateStopped
			}
			t.mu.Unlock()
			t.closeLoopDone()
		case cmdFree:
			// No handler queue send can race with the close below: callbacks only come
			// from this thread, inside edgestream_run or edgestream_free.
			C.edgestream_free(es)
			handles.remove(t.handle)
			close(t.events)
			return
		}
	}
}

func (t *Tunnel) closeLoopDone() {
	t.stopOnce.Do(func() { close(t.loopDone) })
}

// dispatch calls the handlers, in order, until the instance is freed.
func (t *Tunnel) dispatch() {
	defer close(t.eventsEnd)
	for ev := range t.events {
		switch e := ev.(type) {
		case Connected:
			if t.handlers.Connected != nil {
				t.handlers.Connected(e)
			}
		case Disconnected:
			if t.handlers.Disconnected != nil {
				t.handlers.Disconnected(e)
			}
		case Certificate:
			if t.handlers.Certificate != nil {
				t.handlers.Certificate(e)
			}
		}
	}
}

// post queues an event from the loop thread; it never blocks the loop.
func (t *Tunnel) post(ev interface{}) {
	select {
	case t.events <- ev:
	default:
		t.dropped.Add(1)
	}
}

// Start runs the loop on the Tunnel's own thread and returns at once. An instance runs once:
// ErrStarted after Start, Run or Stop; ErrClosed after Close.
func (t *Tunnel) Start() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch t.st {
	case stateClosed:
		return ErrClosed
	case stateNew:
		t.st = stateRunning
		t.cmds <- cmdRun // room for one: the owner reads commands in order
		return nil
	default:
		return ErrStarted
	}
}

// Run starts the loop (as Start) and blocks until it has stopped: after Stop, or once ctx is
// done (then Run stops it and waits). It returns nil then, or the error of Start.
func (t *Tunnel) Run(ctx context.Context) error {
	if err := t.Start(); err != nil {
		return err
	}
	select {
	case <-t.loopDone:
		return nil
	case <-ctx.Done():
		return t.Stop(context.Background())
	}
}

// Stop asks the loop to close the tunnel and return, and waits until it has or ctx is done
// (then ctx.Err(); the loop still stops, and Close waits for it). Stopping a Tunnel that never
// ran, or stopping twice, is fine.
func (t *Tunnel) Stop(ctx context.Context) error {
	t.mu.Lock()
	switch t.st {
	case stateNew:
		t.st = stateStopped
		t.closeLoopDone()
	case stateRunning:
		C.edgestream_stop(t.es) // any thread; wakes the loop
	}
	t.mu.Unlock()
	select {
	case <-t.loopDone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Reload asks the loop to check the certificate files for changes now (as SIGHUP does for the
// daemon). Any goroutine; it does not wait. A closed Tunnel ignores it.
func (t *Tunnel) Reload() {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.st != stateClosed {
		C.edgestream_reload(t.es)
	}
}

// Reconfigure hands the loop a new configuration (copied: the caller keeps cfg), as SIGHUP
// does for the daemon: the options ../FLAGS.md marks "SIGHUP | a new value is applied" take
// their new values, every other change is logged as "needs a restart: NAME" and keeps its
// running value. Any goroutine; it does not wait. A closed Tunnel returns ErrClosed.
func (t *Tunnel) Reconfigure(cfg *Config) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.st == stateClosed {
		return ErrClosed
	}
	cfg.mu.Lock()
	defer cfg.mu.Unlock()
	if cfg.c == nil {
		return ErrClosed
	}
	return cError("reconfigure", int(C.edgestream_reconfigure(t.es, cfg.c)), "")
}

// Stats returns a snapshot of the counters; after Close, the last ones.
func (t *Tunnel) Stats() Stats {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.st == stateClosed {
		return t.final
	}
	return t.snapshot()
}

// snapshot reads the counters; t.mu held.
func (t *Tunnel) snapshot() Stats {
	var c C.struct_edgestream_stats
	// versioned by size: the library fills what this binding was compiled to know
	C.edgestream_get_stats_sized(t.es, &c, C.size_t(unsafe.Sizeof(c)))
	return Stats{
		Connected:                bool(c.connected),
		Extended:                 bool(c.extended),
		DialsTotal:               uint64(c.dials_total),
		ConnectsTotal:            uint64(c.connects_total),
		DisconnectsTotal:         uint64(c.disconnects_total),
		StreamsOpen:              uint64(c.streams_open),
		StreamsTotal:             uint64(c.streams_total),
		StreamsRefused:           uint64(c.streams_refused),
		BackendFailures:          uint64(c.backend_failures),
		BytesToCloud:             uint64(c.bytes_to_cloud),
		BytesFromCloud:           uint64(c.bytes_from_cloud),
		CertReloads:              uint64(c.cert_reloads),
		TunnelPauses:             uint64(c.tunnel_pauses),
		RemovesAnswered:          uint64(c.removes_answered),
		RemovesCrossed:           uint64(c.removes_crossed),
		RemovesRepeated:          uint64(c.removes_repeated),
		StallCuts:                uint64(c.stall_cuts),
		KubeletResumptionRefused: uint64(c.kubelet_resumption_refused),
		ReconnectsAsked:          uint64(c.reconnects_asked),
		TunnelsRetired:           uint64(c.tunnels_retired),
		EventsDropped:            t.dropped.Load(),
	}
}

// Close stops the loop (waiting for it), frees the instance (edgestream_free), and waits until
// the last handler has returned. Closing twice is fine. Must not be called from a handler.
func (t *Tunnel) Close() error {
	t.mu.Lock()
	if t.st == stateClosed {
		t.mu.Unlock()
		return nil
	}
	running := t.st == stateRunning
	if running {
		C.edgestream_stop(t.es)
	}
	t.mu.Unlock()
	if running {
		<-t.loopDone
	}
	t.mu.Lock()
	t.final = t.snapshot()
	t.st = stateClosed
	t.es = nil
	t.mu.Unlock()
	t.closeLoopDone()
	t.cmds <- cmdFree
	<-t.ownerDone
	<-t.eventsEnd
	return nil
}

// ---- the handle map: what C holds instead of a Go pointer ---------------------------------

// handleMap gives each Tunnel a number that is never reused, so a late callback for a Tunnel
// that is gone finds nothing instead of another Tunnel.
type handleMap struct {
	mu   sync.Mutex
	next uintptr
	m    map[uintptr]*Tunnel
}

var handles = handleMap{m: make(map[uintptr]*Tunnel)}

func (h *handleMap) add(t *Tunnel) uintptr {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	h.m[h.next] = t
	return h.next
}

func (h *handleMap) get(id uintptr) *Tunnel {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[id]
}

func (h *handleMap) remove(id uintptr) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, id)
}

// tunnelError makes the Err of a Disconnected event.
func tunnelError(rc int, reason string) error {
	if rc >= 0 {
		rc = -int(syscall.ECONNRESET) // the library always gives a code; be safe
	}
	return cError("tunnel", rc, reason)
}

// ---- logging: process-wide ----------------------------------------------------------------

// LogLevel is the severity of a library log line (edgestream.h enum edgestream_log_level).
type LogLevel int

// The levels, most severe first; SetLogLevel drops the ones after it.
const (
	LogError LogLevel = iota
	LogWarn
	LogInfo
	LogDebug
)

func (l LogLevel) String() string {
	switch l {
	case LogError:
		return "error"
	case LogWarn:
		return "warn"
	case LogInfo:
		return "info"
	case LogDebug:
		return "debug"
	}
	return "unknown"
}

// logQueueLen bounds the lines waiting for the log hook; past it lines are counted in
// LogLinesDropped, so a slow hook never stalls the tunnel.
const logQueueLen = 1024

type logLine struct {
	level LogLevel
	line  string
}

type logHook struct {
	mu      sync.Mutex
	fn      func(LogLevel, string)
	q       chan logLine
	done    chan struct{}
	dropped atomic.Uint64
}

var logs logHook

// post queues a line from any thread; it never blocks (the send is non-blocking, so holding
// the lock across it is cheap, and SetLogHook cannot close the queue under it).
func (h *logHook) post(level LogLevel, line string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.q == nil {
		return
	}
	select {
	case h.q <- logLine{level, line}:
	default:
		h.dropped.Add(1)
	}
}

// SetLogHook sends libedgestream's log lines (text or JSON per SetLogJSON, with node= and
// stream= where they apply, no trailing newline) to fn, called in order on one goroutine;
// nil puts them back on stderr. Process-wide: set it before making Tunnels or while none runs.
// Lines that come faster than fn takes them are dropped and counted (LogLinesDropped).
func SetLogHook(fn func(level LogLevel, line string)) {
	var q chan logLine
	var done chan struct{}
	if fn != nil {
		q, done = make(chan logLine, logQueueLen), make(chan struct{})
		go func() {
			defer close(done)
			for l := range q {
				fn(l.level, l.line)
			}
		}()
	}
	logs.mu.Lock()
	old, oldDone := logs.q, logs.done
	logs.q, logs.done, logs.fn = q, done, fn
	if old != nil {
		close(old) // under the lock: no post is sending to it
	}
	logs.mu.Unlock()
	if fn != nil {
		C.es_go_set_log_hook(1)
	} else {
		C.es_go_set_log_hook(0)
	}
	if oldDone != nil {
		<-oldDone // the old goroutine delivered what it had
	}
}

// LogLinesDropped is how many log lines the hook's queue had no room for.
func LogLinesDropped() uint64 { return logs.dropped.Load() }

// SetLogLevel sets the level of lines logged outside any Tunnel (default LogInfo); a Tunnel's
// is its configuration's log-level.
func SetLogLevel(level LogLevel) { C.edgestream_set_log_level(C.enum_edgestream_log_level(level)) }

// SetLogJSON makes the lines logged outside any Tunnel JSON objects (true) or text (false, the
// default); a Tunnel's format is its configuration's log-format.
func SetLogJSON(json bool) { C.edgestream_set_log_json(C.bool(json)) }

// sigpipeDisposition is SIGPIPE's disposition now, for the tests (cgo is not allowed in
// _test.go files): 0 SIG_DFL, 1 SIG_IGN, 2 a handler.
func sigpipeDisposition() int { return int(C.es_go_sigpipe_disposition()) }
