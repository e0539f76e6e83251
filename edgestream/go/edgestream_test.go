package edgestream

// Tests of the binding. The configuration tests need nothing; the tunnel tests need the
// project's build tree in $ST_BIN_DIR (stream-certs mints the certificates, a real cloudstream
// is the cloud) and are skipped without it. test/integration/go_test.sh runs them all.

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// knownLeak: TestTunnel__two_in_one_process ran, which leaks by lws's doing; it checks for leaks
// before it starts instead.
var knownLeak bool

func TestMain(m *testing.M) {
	code := m.Run()
	// With -tags lsan (an ASan build): every C allocation of the tests must be freed by now.
	if code == 0 && !knownLeak && leakCheck() {
		fmt.Fprintln(os.Stderr, "FAIL: LeakSanitizer found leaks (above)")
		code = 1
	}
	os.Exit(code)
}

func newConfig(t *testing.T) *Config {
	t.Helper()
	cfg, err := NewConfig()
	if err != nil {
		t.Fatalf("NewConfig: %v", err)
	}
	t.Cleanup(func() { cfg.Close() })
	return cfg
}

// ---- configuration --------------------------------------------------------------------------

func TestConfigSet__unknown_option(t *testing.T) {
	err := newConfig(t).Set("no-such-option", "1")
	var ee *Error
	if !errors.As(err, &ee) || ee.Errno != syscall.ENOENT {
		t.Fatalf("want *Error ENOENT, got %#v", err)
	}
	if !errors.Is(err, syscall.ENOENT) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("errors.Is does not see ENOENT: %v", err)
	}
	if want := "edgestream: config set no-such-option: unknown option --no-such-option"; err.Error() != want {
		t.Fatalf("message %q, want %q", err.Error(), want)
	}
}

func TestConfigSet__bad_value(t *testing.T) {
	err := newConfig(t).Set("ping-interval", "soon")
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("want EINVAL, got %v", err)
	}
	if !strings.Contains(err.Error(), "not a duration") {
		t.Fatalf("the library's reason is missing: %q", err.Error())
	}
}

func TestConfigSet__good_values(t *testing.T) {
	cfg := newConfig(t)
	err := cfg.SetMap(map[string]string{
		"ping-interval": "2s", "local-port": "node-exporter=9100", "admin-listen": "",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Set("local-port", "other=9200"); err != nil { // lists append
		t.Fatal(err)
	}
}

func TestConfigLoadFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	os.WriteFile(good, []byte(`{"ping-interval": "3s", "local-port": ["a=1", "b=2"]}`), 0o600)
	if err := newConfig(t).LoadFile(good); err != nil {
		t.Fatalf("good file: %v", err)
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"ping-interval": "whenever"}`), 0o600)
	err := newConfig(t).LoadFile(bad)
	if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "ping-interval") {
		t.Fatalf("bad file: %v", err)
	}
	err = newConfig(t).LoadFile(filepath.Join(dir, "missing.json"))
	if err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Fatalf("missing file: %v", err)
	}
}

func TestConfigLoadFile__yaml(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("apiVersion: cloudstream.io/v1alpha1\nkind: EdgeStreamConfig\n"+
		"# a comment\nping-interval: 3s\nlocal-port:\n  - a=1\n"), 0o600)
	if err := newConfig(t).LoadFile(good); err != nil {
		t.Fatalf("good file: %v", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("apiVersion: cloudstream.io/v1alpha1\nkind: EdgeStreamConfig\n"+
		"ping-interval: 3s\nping-interval: 4s\n"), 0o600)
	err := newConfig(t).LoadFile(bad)
	if !errors.Is(err, syscall.EINVAL) ||
		!strings.Contains(err.Error(), "bad.yaml:4: key \"ping-interval\" appears more than once") {
		t.Fatalf("bad file: %v", err)
	}
}

func TestConfigCheck(t *testing.T) {
	c := newConfig(t)
	err := c.Check()
	if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "cloud-url is required") {
		t.Fatalf("no cloud-url: %v", err)
	}
}

func TestConfigClose(t *testing.T) {
	cfg, err := NewConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Close()
	cfg.Close() // twice is fine
	if err := cfg.Set("ping-interval", "1s"); err != ErrClosed {
		t.Fatalf("Set after Close: %v", err)
	}
	if _, err := New(cfg, Handlers{}); err != ErrClosed {
		t.Fatalf("New from a closed Config: %v", err)
	}
}

func TestNew__refuses_incomplete_config(t *testing.T) {
	_, err := New(newConfig(t), Handlers{})
	if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "cloud-url is required") {
		t.Fatalf("want EINVAL with the reason, got %v", err)
	}
}

func TestPost__bounded(t *testing.T) {
	tn := &Tunnel{events: make(chan interface{}, eventQueueLen)}
	for i := 0; i < eventQueueLen+3; i++ {
		tn.post(Connected{Node: "n"})
	}
	if len(tn.events) != eventQueueLen || tn.dropped.Load() != 3 {
		t.Fatalf("queued %d dropped %d", len(tn.events), tn.dropped.Load())
	}
}

func TestHandles__never_reused(t *testing.T) {
	a := handles.add(&Tunnel{})
	handles.remove(a)
	b := handles.add(&Tunnel{})
	handles.remove(b)
	if a == b || handles.get(a) != nil {
		t.Fatalf("handle %d reused or kept", a)
	}
}

// ---- tunnels against a real cloudstream -----------------------------------------------------

type lab struct {
	bin, pki string
	tunnel   int // cloudstream's tunnel port
}

func binDir(t *testing.T) string {
	dir := os.Getenv("ST_BIN_DIR")
	if dir == "" {
		t.Skip("ST_BIN_DIR (the project's build tree) not set")
	}
	return dir
}

// newLab mints certificates for edge-1 and edge-2 and starts cloudstream on loopback.
func newLab(t *testing.T) *lab {
	bin := binDir(t)
	dir := t.TempDir()
	l := &lab{bin: bin, pki: filepath.Join(dir, "pki")}
	out, err := exec.Command(filepath.Join(bin, "certs", "stream-certs"), "quick", "--out", l.pki,
		"--node", "edge-1", "--node", "edge-2").CombinedOutput()
	if err != nil {
		t.Fatalf("stream-certs: %v\n%s", err, out)
	}
	ready := filepath.Join(dir, "cloudstream.ready")
	logf, _ := os.Create(filepath.Join(dir, "cloudstream.log"))
	cmd := exec.Command(filepath.Join(bin, "cloudstream", "cloudstream"),
		"--tunnel-listen", "127.0.0.1:0", "--stream-listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0",
		"--tunnel-cert", l.path("cloudstream-tunnel.crt"),
		"--tunnel-key", l.path("cloudstream-tunnel.key"),
		"--tunnel-ca", l.path("tunnel-ca.crt"),
		"--stream-cert", l.path("cloudstream-stream.crt"),
		"--stream-key", l.path("cloudstream-stream.key"),
		"--stream-client-ca", l.path("stream-ca.crt"),
		"--stream-allowed-subjects", "kube-apiserver-kubelet-client", "--ready-file", ready)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		logf.Close()
		if err != nil {
			log, _ := os.ReadFile(logf.Name())
			t.Errorf("cloudstream: %v after SIGTERM\n%s", err, log)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if f, err := os.Open(ready); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "tunnel=") {
					l.tunnel, _ = strconv.Atoi(strings.TrimPrefix(sc.Text(), "tunnel="))
				}
			}
			f.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("cloudstream not ready after 20 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return l
}

func (l *lab) path(name string) string { return filepath.Join(l.pki, name) }

// config for @node against the lab's cloud (or @url), with no admin port and no kubelet.
func (l *lab) config(t *testing.T, node, url string) *Config {
	cfg := newConfig(t)
	if url == "" {
		url = fmt.Sprintf("wss://127.0.0.1:%d/v1/kubeedge/connect", l.tunnel)
	}
	err := cfg.SetMap(map[string]string{
		"cloud-url":         url,
		"cloud-server-name": "localhost",
		"tunnel-cert":       l.path("node-" + node + ".crt"),
		"tunnel-key":        l.path("node-" + node + ".key"),
		"tunnel-ca":         l.path("tunnel-ca.crt"),
		"admin-listen":      "",
		"backoff-initial":   "100ms",
		"backoff-max":       "200ms",
	})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// recorder keeps the events a Tunnel delivers.
type recorder struct {
	mu   sync.Mutex
	evs  []interface{}
	wake chan struct{}
}

func newRecorder() *recorder { return &recorder{wake: make(chan struct{}, 1)} }

func (r *recorder) add(ev interface{}) {
	r.mu.Lock()
	r.evs = append(r.evs, ev)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *recorder) handlers() Handlers {
	add := r.add
	return Handlers{
		Connected:    func(e Connected) { add(e) },
		Disconnected: func(e Disconnected) { add(e) },
	}
}

// wait returns the first event @match accepts, failing after 20 s.
func (r *recorder) wait(t *testing.T, what string, match func(interface{}) bool) interface{} {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		r.mu.Lock()
		for _, ev := range r.evs {
			if match(ev) {
				r.mu.Unlock()
				return ev
			}
		}
		r.mu.Unlock()
		select {
		case <-r.wake:
		case <-deadline:
			t.Fatalf("no %s event in 20 s; events: %+v", what, r.all())
		}
	}
}

func (r *recorder) all() []interface{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]interface{}(nil), r.evs...)
}

func isConnected(ev interface{}) bool { _, ok := ev.(Connected); return ok }

func ctx20(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestTunnel__connects_stops_closes(t *testing.T) {
	l := newLab(t)
	rec := newRecorder()
	tn, err := New(l.config(t, "edge-1", ""), rec.handlers())
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Close()
	if err := tn.Start(); err != nil {
		t.Fatal(err)
	}
	if err := tn.Start(); err != ErrStarted {
		t.Fatalf("second Start: %v", err)
	}
	ev := rec.wait(t, "Connected", isConnected).(Connected)
	if ev.Node != "edge-1" || !ev.Extended {
		t.Fatalf("connected: %+v", ev)
	}
	st := tn.Stats()
	if !st.Connected || !st.Extended || st.ConnectsTotal != 1 || st.DialsTotal < 1 {
		t.Fatalf("stats while up: %+v", st)
	}
	// a good configuration checks clean; a new one is taken while running
	next := l.config(t, "edge-1", "")
	if err := next.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if err := next.Set("backend-dial-timeout", "7s"); err != nil {
		t.Fatal(err)
	}
	// the thread-safe calls from many goroutines at once
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				tn.Stats()
				tn.Reload()
				if err := tn.Reconfigure(next); err != nil {
					t.Errorf("Reconfigure: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if err := tn.Stop(ctx20(t)); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := tn.Stop(ctx20(t)); err != nil { // twice is fine
		t.Fatalf("second Stop: %v", err)
	}
	if err := tn.Close(); err != nil {
		t.Fatal(err)
	}
	tn.Close()
	tn.Reload() // ignored once closed
	if err := tn.Reconfigure(next); err != ErrClosed {
		t.Fatalf("Reconfigure after Close: %v", err)
	}
	final := tn.Stats()
	if final.Connected || final.ConnectsTotal != 1 || final.DisconnectsTotal != 1 {
		t.Fatalf("stats after Close: %+v", final)
	}
	if err := tn.Start(); err != ErrClosed {
		t.Fatalf("Start after Close: %v", err)
	}
	// the tunnel's end was reported (handlers have all returned once Close has)
	last := rec.all()[len(rec.all())-1]
	if d, ok := last.(Disconnected); !ok || d.Err == nil {
		t.Fatalf("last event %+v, want Disconnected", last)
	}
}

// The hooks: the library's log lines reach a Go function, the certificate in use is reported
// when the loop starts (its validity as the file says), a reload of a pair that does not match
// is reported as refused; the Go runtime's SIGPIPE handler is still the process's after
// libwebsockets made its context (it sets SIG_IGN; the library puts the handler back).
func TestTunnel__hooks_and_signals(t *testing.T) {
	l := newLab(t)
	var mu sync.Mutex
	var lines []string
	SetLogHook(func(level LogLevel, line string) {
		mu.Lock()
		lines = append(lines, level.String()+" "+line)
		mu.Unlock()
	})
	defer SetLogHook(nil)
	// the pair the agent owns and rotates
	dir := t.TempDir()
	crt, key := filepath.Join(dir, "edge.crt"), filepath.Join(dir, "edge.key")
	for src, dst := range map[string]string{l.path("node-edge-1.crt"): crt,
		l.path("node-edge-1.key"): key} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := l.config(t, "edge-1", "")
	if err := cfg.SetMap(map[string]string{"tunnel-cert": crt, "tunnel-key": key}); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	h := rec.handlers()
	h.Certificate = func(e Certificate) { rec.add(e) }
	tn, err := New(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Close()
	if d := sigpipeDisposition(); d != 2 {
		t.Fatalf("SIGPIPE disposition %d after New, want the Go runtime's handler (2)", d)
	}
	if err := tn.Start(); err != nil {
		t.Fatal(err)
	}
	isCert := func(ev interface{}) bool { _, ok := ev.(Certificate); return ok }
	first := rec.wait(t, "Certificate", isCert).(Certificate)
	pemBytes, _ := os.ReadFile(crt)
	blk, _ := pem.Decode(pemBytes)
	x, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if first.Err != nil || first.Path != crt || !first.NotAfter.Equal(x.NotAfter) ||
		!first.NotBefore.Equal(x.NotBefore) {
		t.Fatalf("first certificate event %+v, the file says %v .. %v", first, x.NotBefore,
			x.NotAfter)
	}
	rec.wait(t, "Connected", isConnected)
	// a key of another pair: the reload is refused and says why
	other, err := os.ReadFile(l.path("node-edge-2.key"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key+".tmp", other, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(key+".tmp", key); err != nil {
		t.Fatal(err)
	}
	tn.Reload()
	refused := rec.wait(t, "refused Certificate", func(ev interface{}) bool {
		c, ok := ev.(Certificate)
		return ok && c.Err != nil
	}).(Certificate)
	var ee *Error
	if !errors.As(refused.Err, &ee) || ee.Op != "certificate" || ee.Reason == "" ||
		!refused.NotAfter.Equal(x.NotAfter) {
		t.Fatalf("refused reload: %+v (%v)", refused, refused.Err)
	}
	if d := sigpipeDisposition(); d != 2 {
		t.Fatalf("SIGPIPE disposition %d while running", d)
	}
	if err := tn.Close(); err != nil {
		t.Fatal(err)
	}
	SetLogHook(nil) // waits for the lines queued so far
	mu.Lock()
	defer mu.Unlock()
	joined := strings.Join(lines, "\n")
	if !strings.Contains(joined, "info ") || !strings.Contains(joined, "edgestream "+Version+": node edge-1") ||
		!strings.Contains(joined, "do not load yet") {
		t.Fatalf("log hook lines:\n%s", joined)
	}
}

func TestTunnel__run_until_ctx_done(t *testing.T) {
	l := newLab(t)
	rec := newRecorder()
	tn, err := New(l.config(t, "edge-1", ""), rec.handlers())
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tn.Run(ctx) }()
	rec.wait(t, "Connected", isConnected)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return 20 s after its context was cancelled")
	}
	if st := tn.Stats(); st.Connected {
		t.Fatalf("connected after Run returned: %+v", st)
	}
	if err := tn.Run(context.Background()); err != ErrStarted {
		t.Fatalf("second Run: %v", err)
	}
}

func TestTunnel__dial_refused_is_reported_and_retried(t *testing.T) {
	l := newLab(t)
	// a port nothing listens on: bind one, note it, close it
	ln, err := newClosedPort()
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	tn, err := New(l.config(t, "edge-1", fmt.Sprintf("wss://127.0.0.1:%d/v1/kubeedge/connect", ln)),
		rec.handlers())
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Close()
	tn.Start()
	n := 0
	ev := rec.wait(t, "two Disconnected", func(ev interface{}) bool {
		if _, ok := ev.(Disconnected); ok {
			n++
		}
		return n >= 2
	}).(Disconnected)
	if !errors.Is(ev.Err, syscall.ECONNREFUSED) || ev.RetryIn <= 0 || ev.RetryIn > time.Second {
		t.Fatalf("disconnected: %+v (%v)", ev, ev.Err)
	}
	if st := tn.Stats(); st.DialsTotal < 2 || st.Connected {
		t.Fatalf("stats: %+v", st)
	}
	if err := tn.Stop(ctx20(t)); err != nil {
		t.Fatal(err)
	}
}

func TestTunnel__stop_and_close_without_start(t *testing.T) {
	l := newLab(t)
	tn, err := New(l.config(t, "edge-1", ""), Handlers{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tn.Stop(ctx20(t)); err != nil {
		t.Fatal(err)
	}
	if err := tn.Start(); err != ErrStarted {
		t.Fatalf("Start after Stop: %v", err)
	}
	tn.Close()
	if st := tn.Stats(); st.DialsTotal != 0 {
		t.Fatalf("dialled without running: %+v", st)
	}
	tn2, err := New(l.config(t, "edge-1", ""), Handlers{})
	if err != nil {
		t.Fatal(err)
	}
	tn2.Close() // never started, never stopped
}

func TestTunnel__stop_respects_ctx(t *testing.T) {
	l := newLab(t)
	tn, err := New(l.config(t, "edge-1", ""), Handlers{})
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Close()
	tn.Start()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // already done: Stop asks, does not wait
	if err := tn.Stop(ctx); err != nil && err != context.Canceled {
		t.Fatalf("Stop with a done ctx: %v", err)
	}
	if err := tn.Stop(ctx20(t)); err != nil { // and the loop does stop
		t.Fatal(err)
	}
}

// Last in the file on purpose: with libwebsockets 4.1.6 (Debian 12) every lws context re-assigns
// a process-global OpenSSL ex-data index, so an instance freed after another was created leaks
// its client SSL_CTX (about 700 KiB with the system CA bundle). The leak check runs here, before
// that, and not at the end (README.md, "Several tunnels in one process").
func TestTunnel__two_in_one_process(t *testing.T) {
	if leakCheck() {
		t.Fatal("LeakSanitizer found leaks (above) in the tests before this one")
	}
	knownLeak = true
	l := newLab(t)
	var tns []*Tunnel
	var recs []*recorder
	for _, node := range []string{"edge-1", "edge-2"} {
		rec := newRecorder()
		tn, err := New(l.config(t, node, ""), rec.handlers())
		if err != nil {
			t.Fatal(err)
		}
		defer tn.Close()
		tn.Start()
		tns, recs = append(tns, tn), append(recs, rec)
	}
	for i, node := range []string{"edge-1", "edge-2"} {
		ev := recs[i].wait(t, "Connected", isConnected).(Connected)
		if ev.Node != node {
			t.Fatalf("tunnel %d connected as %q", i, ev.Node)
		}
	}
	// stopping one leaves the other up
	if err := tns[0].Stop(ctx20(t)); err != nil {
		t.Fatal(err)
	}
	tns[0].Close()
	if st := tns[1].Stats(); !st.Connected {
		t.Fatalf("edge-2 went down with edge-1: %+v", st)
	}
}

// newClosedPort returns a loopback port nothing listens on (bound, then closed).
func newClosedPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	return port, ln.Close()
}
