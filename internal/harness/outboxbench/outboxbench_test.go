package outboxbench

import (
	"strings"
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	var xs []time.Duration
	for i := 1; i <= 200; i++ {
		xs = append(xs, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 100 * time.Millisecond}, {90, 180 * time.Millisecond}, {99, 198 * time.Millisecond}, {100, 200 * time.Millisecond}, {0, time.Millisecond}} {
		if got := Percentile(xs, c.p); got != c.want {
			t.Errorf("p%g of 1..200 ms = %v, want %v", c.p, got, c.want)
		}
	}
	if got := Percentile([]time.Duration{7}, 99); got != 7 {
		t.Errorf("p99 of one sample = %v", got)
	}
}

func TestSentTimeRoundTrip(t *testing.T) {
	at := time.Unix(0, 1764547200123456789)
	got, ok := sentTime(orderBody("L0-1", "customer-1", at))
	if !ok || !got.Equal(at) {
		t.Fatalf("sentTime = %v, %v; want %v", got, ok, at)
	}
	if _, ok := sentTime(orderBody("w1-1", "customer-1", time.Time{})); ok {
		t.Fatal("a body without a stamp has a send time")
	}
}

func TestRecorderKeepsRunsApartAndFirstDeliveries(t *testing.T) {
	r := &recorder{at: map[string]time.Time{}, lat: map[string][]time.Duration{}}
	sent := time.Now()
	body := orderBody("L1-3", "customer-3", sent)
	r.deliver(Delivered{ID: "order-L1-3", Body: body, At: sent.Add(5 * time.Millisecond)})
	r.deliver(Delivered{ID: "order-L1-3", Body: body, At: sent.Add(9 * time.Millisecond)}) // a redelivery
	r.deliver(Delivered{ID: "order-L1w-0", Body: orderBody("L1w-0", "warm-up", sent), At: sent})
	if got := r.take("L1"); len(got) != 1 || got[0] != 5*time.Millisecond {
		t.Fatalf("run L1: %v, want [5ms]", got)
	}
	if r.count("L1w") != 1 {
		t.Fatal("the warm-up run is not kept apart")
	}
	// From the commit: the first delivery counts, ids never delivered
	// are left out.
	committed := map[string]int64{
		"order-L1-3": sent.Add(2 * time.Millisecond).UnixNano(),
		"order-L1-4": sent.UnixNano(),
	}
	if got := r.fromCommit(committed); len(got) != 1 || got[0] != 3*time.Millisecond {
		t.Fatalf("from the commit: %v, want [3ms]", got)
	}
}

func TestReplaceSection(t *testing.T) {
	doc := []byte("# Benchmarks\n\n## Other\n\ntext\n")
	once, err := ReplaceSection(doc, []byte("| a |\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(once), SectionTitle+"\n\n"+beginMarker+"\n\n| a |\n\n"+endMarker+"\n") {
		t.Fatalf("appended section:\n%s", once)
	}
	// Prose around the markers stays; only the generated part changes.
	edited := strings.Replace(string(once), beginMarker, "Prose before.\n\n"+beginMarker, 1) + "\nProse after.\n"
	twice, err := ReplaceSection([]byte(edited), []byte("| b |"))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(edited, "| a |", "| b |", 1)
	if string(twice) != want {
		t.Fatalf("replaced:\n%s\nwant:\n%s", twice, want)
	}
	if _, err := ReplaceSection([]byte(endMarker+"\n"+beginMarker), []byte("x")); err == nil {
		t.Fatal("markers out of order: no error")
	}
}

func TestTargets(t *testing.T) {
	r := Report{
		Txn: []TxnResult{
			{Backend: BackendPostgres, Txns: 32, Flows: FlowsDistinct, WorkMS: 20, Ratio: 0.81},
			{Backend: BackendPostgres, Txns: 32, Flows: FlowsDistinct, WorkMS: 0, Ratio: 0.07},
		},
		Latency: []LatencyResult{
			{Backend: BackendSQLite, RatePerS: 2, Sent: 40, Delivered: 40, P99MS: 12},
			{Backend: BackendSQLite, RatePerS: 500, Sent: 2500, Delivered: 2499, P99MS: 10},
		},
		Idle: []IdleResult{{Backend: BackendPostgres, RelayCPUPercent: 2.5}},
	}
	r.ComputeTargets()
	met := map[string]string{}
	for _, x := range r.Targets {
		met[x.What] = x.Met
	}
	for what, want := range map[string]string{
		"PostgreSQL, 32 txns on distinct flows, 20 ms of work: EnqueueTx ÷ plain insert": "yes",
		"PostgreSQL, 32 txns on distinct flows, 0 ms of work: EnqueueTx ÷ plain insert":  "no",
		"SQLite, latency from another process at 2/s: p99":                               "yes",
		"SQLite, latency from another process at 500/s: p99":                             "no", // one event never came
		"PostgreSQL, latency from another process at 2/s: p99":                           "not measured",
		"PostgreSQL, the idle relay's CPU":                                               "no",
		"SQLite, the idle relay's CPU":                                                   "not measured",
	} {
		if met[what] != want {
			t.Errorf("%s: met %q, want %q", what, met[what], want)
		}
	}
}

// WithParams keeps a space in another parameter as %20, which PostgreSQL
// reads as a space ("+" it keeps as a plus: the server refused
// options=-c+synchronous_commit=off).
func TestWithParamsKeepsSpacesForPostgres(t *testing.T) {
	got, err := WithParams("postgres://127.0.0.1/test?options=-c%20synchronous_commit%3Doff", "schema", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if want := "postgres://127.0.0.1/test?options=-c%20synchronous_commit%3Doff&schema=s1"; got != want {
		t.Errorf("WithParams = %q, want %q", got, want)
	}
}

// A URL WithParams cannot parse is refused without quoting it: url.Parse's
// words quote a piece of the URL, and a password holding '#', '/' or '?'
// was shown by bench timefair --pg (a breaker's report).
func TestWithParamsHidesThePassword(t *testing.T) {
	for _, pw := range []string{"S3CR#b", "S3CR/c", "S3CR?d", "S3CR%zz"} {
		_, err := WithParams("postgres://postgres:"+pw+"@127.0.0.1:1/test", "schema", "s1")
		if err == nil || strings.Contains(err.Error(), "S3CR") {
			t.Errorf("WithParams with the password %q: %v, want an error without it", pw, err)
		}
	}
}
