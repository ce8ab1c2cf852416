package bench

import (
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestParseSteal reads the steal field of /proc/stat's first line and
// refuses a line without one, naming the file.
func TestParseSteal(t *testing.T) {
	got, err := parseSteal([]byte("cpu  116978 6650 45414 93578 859 0 628 7750 0 0\ncpu0 58583 2969 22606 47515 223 0 110 3823 0 0\n"))
	if err != nil || got != 7750 {
		t.Errorf("parseSteal = %d, %v; want 7750", got, err)
	}
	for _, bad := range []string{"", "cpu  1 2 3 4 5 6 7\n", "intr 1 2 3 4 5 6 7 8 9\n", "cpu  1 2 3 4 5 6 7 x 9 10\n"} {
		if _, err := parseSteal([]byte(bad)); err == nil || !strings.HasPrefix(err.Error(), "/proc/stat:") {
			t.Errorf("parseSteal(%q): err %v, want one naming /proc/stat", bad, err)
		}
	}
}

// TestStealWatchTellsWhichIntervalsMetSteal: an interval is stolen when
// the counter moved between its mark (or the interval before it) and its
// end, not otherwise; a failed read counts the interval as not stolen and
// is kept for the report; a nil watch answers false.
func TestStealWatchTellsWhichIntervalsMetSteal(t *testing.T) {
	counter := []int64{5, 5, 6, 6, 6, 9}
	fail := errors.New("read failed")
	i := 0
	w := &stealWatch{read: func() (int64, error) {
		if i == len(counter) {
			return 0, fail
		}
		v := counter[i]
		i++
		return v, nil
	}}
	w.mark() // 5
	var got []bool
	for range 5 { // 5, 6, 6, 6→mark, 9
		got = append(got, w.stolen())
		if len(got) == 3 {
			w.mark()
		}
	}
	want := []bool{false, true, false, true}
	if len(got) != 5 || !slices.Equal(got[:4], want) {
		t.Errorf("stolen = %v, want %v then a failed read", got, want)
	}
	if got[4] || !errors.Is(w.err, fail) {
		t.Errorf("after a failed read: stolen %v, err %v; want false and the read's error", got[4], w.err)
	}
	var none *stealWatch
	none.mark()
	if none.stolen() {
		t.Error("a nil watch answered stolen")
	}
}

// TestStealClockReadsThisMachine: on Linux the counter is read, and does
// not go back.
func TestStealClockReadsThisMachine(t *testing.T) {
	read, closeFn, ok := stealClock()
	defer closeFn()
	if runtime.GOOS != "linux" {
		if ok {
			t.Skip("a steal counter outside Linux")
		}
		return
	}
	if !ok {
		t.Fatal("no steal counter on Linux")
	}
	a, err := read()
	if err != nil {
		t.Fatal(err)
	}
	b, err := read()
	if err != nil || b < a {
		t.Errorf("steal read %d then %d (%v)", a, b, err)
	}
}
