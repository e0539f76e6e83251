// Command example-agent embeds libedgestream the way an edge agent (an edgecore-style process
// with several modules) would: the stream tunnel is one module, configured from the agent's
// own file, started with the agent, reporting up/down into the agent's log, stopped on SIGTERM.
//
//	example-agent -config /etc/agent/edgestream.yaml [-set NAME=VALUE]... [-stats-every 30s]
//
// -config is a YAML or JSON file of edgestream options (edgestream/FLAGS.md, names without
// "--"); each -set applies one option after it (as a flag would). Signals: SIGTERM/SIGINT close
// the tunnel, print the final counters and exit 0; SIGHUP re-checks the certificate files and
// reads -config and -set again (what can change live does; a file that does not load changes
// nothing).
// Exit status: 0 after a signal, 2 for a configuration the library refuses (the message names
// the option or file, as the daemon's start-up errors), 1 otherwise.
//
// Lines on stdout (stable, for people and tests):
//
//	tunnel up node=NODE protocol=extended|base
//	tunnel down err=ERRNO retry_in=DURATION reason=TEXT
//	stats connected=B connects=N disconnects=N streams=N open=N refused=N to_cloud=N from_cloud=N
//	stopped connects=N streams=N bytes_to_cloud=N bytes_from_cloud=N
//	certificate in_use not_after=RFC3339 path=FILE
//	certificate refused reason=TEXT
//
// libedgestream's own log lines come through the log hook into the agent's log (stderr, each
// prefixed "edgestream: "), as an agent with a logger of its own would take them. The
// certificate handler reports the tunnel certificate in use at start and after each reload
// (SIGHUP, after the agent's own rotation wrote new files), or why changed files were refused.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"cloudstream.local/edgestream"
)

// setFlags collects repeated -set NAME=VALUE.
type setFlags []string

func (s *setFlags) String() string { return strings.Join(*s, ",") }

func (s *setFlags) Set(v string) error {
	if !strings.Contains(v, "=") {
		return fmt.Errorf("expected NAME=VALUE, got %q", v)
	}
	*s = append(*s, v)
	return nil
}

func main() {
	os.Exit(run())
}

// loadConfig makes the tunnel's configuration: the file, then each -set.
func loadConfig(path string, sets setFlags) (*edgestream.Config, error) {
	cfg, err := edgestream.NewConfig()
	if err != nil {
		return nil, err
	}
	if path != "" {
		if err := cfg.LoadFile(path); err != nil {
			cfg.Close()
			return nil, err
		}
	}
	for _, kv := range sets {
		name, value, _ := strings.Cut(kv, "=")
		if err := cfg.Set(name, value); err != nil {
			cfg.Close()
			return nil, err
		}
	}
	return cfg, nil
}

func run() int {
	var sets setFlags
	configPath := flag.String("config", "", "YAML or JSON file of edgestream options")
	statsEvery := flag.Duration("stats-every", 0, "print the counters this often (0: only at exit)")
	stopTimeout := flag.Duration("stop-timeout", 10*time.Second, "how long SIGTERM waits for the tunnel to close")
	flag.Var(&sets, "set", "edgestream option NAME=VALUE, after -config (repeatable)")
	flag.Parse()
	if flag.NArg() != 0 {
		flag.Usage()
		return 2
	}

	cfg, err := loadConfig(*configPath, sets)
	if err != nil {
		fmt.Fprintln(os.Stderr, "example-agent:", err)
		return 2
	}
	defer cfg.Close()

	// Signals first: a SIGTERM that arrives while the tunnel is being set up still stops it
	// cleanly.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)

	// The library's log lines into the agent's log (process-wide: before any Tunnel).
	edgestream.SetLogHook(func(level edgestream.LogLevel, line string) {
		fmt.Fprintln(os.Stderr, "edgestream: "+line)
	})
	defer edgestream.SetLogHook(nil)

	tunnel, err := edgestream.New(cfg, edgestream.Handlers{
		Connected: func(e edgestream.Connected) {
			protocol := "base"
			if e.Extended {
				protocol = "extended"
			}
			fmt.Printf("tunnel up node=%s protocol=%s\n", e.Node, protocol)
		},
		Disconnected: func(e edgestream.Disconnected) {
			var ee *edgestream.Error
			errno, reason := "", e.Err.Error()
			if errors.As(e.Err, &ee) {
				errno, reason = ee.Errno.Error(), ee.Reason
			}
			fmt.Printf("tunnel down err=%q retry_in=%s reason=%s\n", errno, e.RetryIn, reason)
		},
		Certificate: func(e edgestream.Certificate) {
			if e.Err != nil {
				var ee *edgestream.Error
				reason := e.Err.Error()
				if errors.As(e.Err, &ee) {
					reason = ee.Reason
				}
				fmt.Printf("certificate refused reason=%s\n", reason)
				return
			}
			fmt.Printf("certificate in_use not_after=%s path=%s\n",
				e.NotAfter.UTC().Format(time.RFC3339), e.Path)
		},
	})
	if err != nil {
		// the configuration or a file it names, with the library's reason: exit 2, as the
		// daemon does
		fmt.Fprintln(os.Stderr, "example-agent:", err)
		return 2
	}
	defer tunnel.Close()
	cfg.Close() // the tunnel has its own copy

	if err := tunnel.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "example-agent:", err)
		return 1
	}

	// The agent's main loop: other modules would be started and watched here.
	var tick <-chan time.Time
	if *statsEvery > 0 {
		t := time.NewTicker(*statsEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-tick:
			printStats("stats", tunnel.Stats())
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				fmt.Println("reload: checking the certificate files")
				tunnel.Reload()
				next, err := loadConfig(*configPath, sets)
				if err == nil {
					err = tunnel.Reconfigure(next)
					next.Close()
				}
				if err != nil {
					fmt.Println("reload: configuration kept:", err)
				}
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), *stopTimeout)
			err := tunnel.Stop(ctx)
			cancel()
			if err != nil {
				fmt.Fprintln(os.Stderr, "example-agent: stop:", err)
			}
			if err := tunnel.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "example-agent: close:", err)
			}
			st := tunnel.Stats()
			fmt.Printf("stopped connects=%d streams=%d bytes_to_cloud=%d bytes_from_cloud=%d\n",
				st.ConnectsTotal, st.StreamsTotal, st.BytesToCloud, st.BytesFromCloud)
			if err != nil {
				return 1
			}
			return 0
		}
	}
}

func printStats(what string, st edgestream.Stats) {
	fmt.Printf("%s connected=%t connects=%d disconnects=%d streams=%d open=%d refused=%d "+
		"to_cloud=%d from_cloud=%d\n", what, st.Connected, st.ConnectsTotal,
		st.DisconnectsTotal, st.StreamsTotal, st.StreamsOpen, st.StreamsRefused,
		st.BytesToCloud, st.BytesFromCloud)
}
