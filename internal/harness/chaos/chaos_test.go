//go:build unix

package chaos

import (
	"fmt"
	"math/rand/v2"
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

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
	"github.com/fairrelay/fairrelay/internal/pgtest"
)

// The environment variables that steer a run (see the package doc).
const (
	seedEnv     = "FAIRRELAY_CHAOS_SEED"
	durationEnv = "FAIRRELAY_CHAOS_DURATION"
	logsEnv     = "FAIRRELAY_CHAOS_LOGS"
)

// The relays' times: a short lease, so that a stopped relay's leases run out
// within the stop, and short backoffs, so retries come quickly. The budget
// is far beyond the schedule's longest outage (about 5 s: a stop of the
// receiver): a head retried every backoff cap (500 ms) spends 100 claims in
// no less than 50 s, so a budget_exhausted quarantine here is a fault.
var relayTimes = []string{"--lease", lease.String(), "--timeout", "1s", "--lease-margin", "500ms",
	"--backoff-base", "20ms", "--backoff-cap", "500ms", "--budget", strconv.Itoa(budget), "--shutdown-timeout", "2s"}

const (
	budget    = 100
	lease     = 3 * time.Second
	relays    = 2
	minKills  = 50
	drainTime = 3 * time.Minute // generous: a drain after the chaos takes seconds
)

// TestChaos runs the chaos of the package doc on SQLite and on PostgreSQL,
// side by side.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos test takes about two minutes: skipped under -short")
	}
	seed := chaosSeed(t)
	dur := 75 * time.Second
	if s := os.Getenv(durationEnv); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration such as 75s", durationEnv, s)
		}
		dur = d
	}
	t.Logf("seed %d; replay with %s=%d go test ./internal/harness/chaos -run 'TestChaos/sqlite' -v (or /postgres)", seed, seedEnv, seed)
	bin := buildCLI(t)
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		runChaos(t, bin, seed, dur, filepath.Join(dir, "queue.db"), filepath.Join(dir, "inbox.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		// A dozen connections, and two processes' CPU: never beside the
		// stress suite.
		pgtest.Exclusive(t, "pgstress")
		runChaos(t, bin, seed, dur, pgtest.Schema(t, "frchaos_q"), pgtest.Schema(t, "frchaos_i"))
	})
}

// chaosSeed is FAIRRELAY_CHAOS_SEED, or a new random seed.
func chaosSeed(t *testing.T) uint64 {
	s := os.Getenv(seedEnv)
	if s == "" {
		return rand.Uint64()
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: want an unsigned integer", seedEnv, s)
	}
	return seed
}

// buildCLI builds the fairrelay command into a temporary directory, once
// for both backends.
func buildCLI(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "fairrelay")
	// go test puts its own go first on PATH.
	out, err := exec.Command("go", "build", "-o", bin, "github.com/fairrelay/fairrelay/cmd/fairrelay").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// runChaos runs one backend's chaos on the queue store qdsn and the inbox
// idsn, then checks both stores.
func runChaos(t *testing.T, bin string, seed uint64, dur time.Duration, qdsn, idsn string) {
	ctx := t.Context()
	// Before any cleanup that stops a process: the logs outlive them.
	logs := t.TempDir()
	keepLogs(t, logs)
	if out, err := exec.Command(bin, "migrate", "--queue", qdsn, "--inbox", idsn).CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	q, err := fairrelay.Open(ctx, qdsn, fairrelay.Config{MustExist: true, AdoptStoredEntry: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })

	addr := receiverAddr(t)
	secret := "chaos-" + strconv.FormatUint(seed, 36)
	sup := newSupervisor(t, bin, logs)
	for i := range relays {
		sup.add(fmt.Sprintf("relay-%d", i), append([]string{"relay", "--queue", qdsn, "--sink", "http://" + addr + "/",
			"--secret", secret, "--workers", "4"}, relayTimes...)...)
	}
	sup.add("receiver", "receive", "--inbox", idsn, "--addr", addr, "--secret", secret)
	for _, d := range sup.daemons {
		sup.start(d)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the processes' last log lines:\n%s", sup.logTails(15))
		}
	})

	cfg := planConfig{Relays: relays, Duration: dur, MinKills: minKills, Lease: lease}
	pl := makePlan(seed, cfg)
	prod := newProducer(bin, qdsn, logs, seed)
	prod.start(t, time.Now().Add(pl.End+drainTime))
	t.Logf("chaos for %v: %d relay kills, %d receiver kills, %d producer kills; %d relay stops, %d receiver stops (longest time away %v)",
		pl.End.Round(time.Second), pl.RelayKills, pl.ReceiverKills, pl.ProducerKills, pl.RelayStops, pl.ReceiverStops, pl.Longest.Round(time.Millisecond))

	begin := time.Now()
	for _, o := range pl.Ops {
		sup.until(begin.Add(o.At))
		if o.Target == cfg.producer() {
			prod.kill()
			continue
		}
		d := sup.daemons[o.Target]
		switch o.Kind {
		case opKill:
			sup.signal(d, syscall.SIGKILL)
		case opStart:
			sup.start(d)
		case opStop:
			sup.signal(d, syscall.SIGSTOP)
		case opCont:
			sup.signal(d, syscall.SIGCONT)
		}
	}
	chaos := time.Since(begin)
	events := prod.finish(t)
	flows := map[string]bool{}
	for _, e := range events {
		flows[e.Flow] = true
	}
	t.Logf("chaos over after %v: the producer stored %d events on %d flows (%d processes)",
		chaos.Round(time.Millisecond), len(events), len(flows), prod.starts)

	drain(t, q, sup, len(events))
	sup.stopAll()

	qs, err := q.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in, err := inbox.Open(ctx, idsn, inbox.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	is, err := in.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkStores(t, events, qs, is)

	var claims, reclaimed, most int64
	for _, e := range qs.Events {
		claims += e.LifetimeAttempts
		if e.LifetimeAttempts > 1 {
			reclaimed++
		}
		most = max(most, e.LifetimeAttempts)
	}
	t.Logf("%d claims for %d events: %d events claimed more than once, at most %d times (budget %d)", claims, len(qs.Events), reclaimed, most, budget)
}

// drain polls the queue until all n events are acked, handling the
// daemons' exits meanwhile. It gives up, failing the test, when an event is
// quarantined (it would never be acked) or after drainTime.
func drain(t *testing.T, q *fairrelay.Queue, sup *supervisor, n int) {
	start := time.Now()
	for {
		snap, err := q.Snapshot(t.Context())
		if err != nil {
			t.Logf("drain: snapshot: %v", err)
		} else {
			acked, quarantined := 0, 0
			for _, e := range snap.Events {
				switch e.State {
				case fairrelay.StateAcked:
					acked++
				case fairrelay.StateQuarantined:
					quarantined++
				}
			}
			if acked == n && len(snap.Events) == n {
				t.Logf("drained in %v", time.Since(start).Round(time.Millisecond))
				return
			}
			if quarantined > 0 {
				t.Errorf("drain: %d events quarantined; %d of %d acked", quarantined, acked, n)
				return
			}
			if time.Since(start) > drainTime {
				t.Errorf("drain: %d of %d events acked after %v", acked, n, drainTime)
				return
			}
		}
		if time.Since(start) > drainTime {
			t.Errorf("drain: no snapshot for %v", drainTime)
			return
		}
		sup.until(time.Now().Add(500 * time.Millisecond))
	}
}

// keepLogs copies the processes' logs (the directory logs) to
// $FAIRRELAY_CHAOS_LOGS/<backend> when the test ends, if that is set.
func keepLogs(t *testing.T, logs string) {
	dir := os.Getenv(logsEnv)
	if dir == "" {
		return
	}
	dst := filepath.Join(dir, filepath.Base(t.Name()))
	t.Cleanup(func() {
		if err := os.CopyFS(dst, os.DirFS(logs)); err != nil {
			t.Errorf("%s: %v", logsEnv, err)
			return
		}
		t.Logf("the processes' logs are in %s", dst)
	})
}

// The receiver's port is chosen below the ephemeral range, so that no
// outgoing connection takes it while the receiver is down and it can be
// listened on again at each restart; usedPorts keeps the two backends'
// receivers apart.
var (
	portMu    sync.Mutex
	usedPorts = map[int]bool{}
)

func receiverAddr(t *testing.T) string {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	lo := max(1024, low-12000)
	portMu.Lock()
	defer portMu.Unlock()
	for range 200 {
		port := lo + rand.IntN(low-lo)
		if usedPorts[port] {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		ln.Close()
		usedPorts[port] = true
		return addr
	}
	t.Fatal("no free port below the ephemeral range")
	return ""
}
