package sqlfile

import (
	"errors"
	"testing"
)

// newer names the newest migration a store records and this build lacks,
// and how many there are, the same every time (it named whichever a map
// yielded first).
func TestNewerNamesTheNewestUnknownMigration(t *testing.T) {
	migs := []Migration{{Version: 1}, {Version: 2}, {Version: 3}}
	have := map[int]bool{1: true, 2: true, 3: true, 4: true, 5: true, 6: true, 7: true}
	want := "the database was migrated by a newer fairrelay: it records 4 migrations this build lacks, up to migration 7, and this build knows migrations up to 3; run a fairrelay at least as new as the one that migrated it"
	for range 20 {
		err := newer(have, migs)
		if !errors.Is(err, ErrNewerSchema) || err.Error() != want {
			t.Fatalf("newer: %v\nwant %s", err, want)
		}
	}
	one := map[int]bool{1: true, 4: true}
	if err := newer(one, migs); err == nil || err.Error() != "the database was migrated by a newer fairrelay: it records migration 4, and this build knows migrations up to 3; run a fairrelay at least as new as the one that migrated it" {
		t.Fatalf("one unknown migration: %v", err)
	}
	if err := newer(map[int]bool{1: true, 2: true}, migs); err != nil {
		t.Fatalf("an older store: %v", err)
	}
}
