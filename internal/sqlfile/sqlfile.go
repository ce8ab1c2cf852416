// Package sqlfile loads the embedded SQL of the backends: named queries from
// a .sql file of "-- name: X" blocks, and numbered migrations from a folder
// of NNN_title.sql files.
package sqlfile

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Queries splits src into its "-- name: X" blocks, keyed by name. Comment
// lines inside a block are dropped. It panics on a repeated name: the files
// are embedded, so that is a build-time mistake.
func Queries(src string) map[string]string {
	out := map[string]string{}
	var name string
	var b strings.Builder
	flush := func() {
		if name != "" {
			if _, dup := out[name]; dup {
				panic("sqlfile: query " + name + " defined twice")
			}
			out[name] = strings.TrimSpace(b.String())
		}
		b.Reset()
	}
	for _, line := range strings.Split(src, "\n") {
		if rest, ok := strings.CutPrefix(line, "-- name: "); ok {
			flush()
			name = strings.TrimSpace(rest)
			continue
		}
		if name != "" && !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	flush()
	return out
}

// Migration is one numbered migration.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations reads dir of fsys: every NNN_title.sql file, sorted by version.
// Errors: a file name without a number, two files with one version.
func Migrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var out []Migration
	seen := map[int]string{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		v, err := strconv.Atoi(strings.SplitN(e.Name(), "_", 2)[0])
		if err != nil {
			return nil, fmt.Errorf("migration %s: name must start with a number", e.Name())
		}
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %s and %s share version %d", other, e.Name(), v)
		}
		seen[v] = e.Name()
		body, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: e.Name(), SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Apply runs, in order, each migration whose version is not yet recorded in
// the table fairrelay_migration, each in its own transaction together with
// its record, and returns the versions it applied. lock, when not empty, is
// a statement run first in every transaction to serialise concurrent
// migrators (PostgreSQL: an advisory lock; SQLite needs none, its
// transactions are IMMEDIATE). Placeholders are $n, which SQLite and
// PostgreSQL both accept.
func Apply(ctx context.Context, db *sql.DB, migs []Migration, lock string) ([]int, error) {
	return ApplyNamed(ctx, db, "fairrelay_migration", migs, lock)
}

// ErrNewerSchema is returned (wrapped) by Apply and ApplyNamed when the
// database records a migration this build does not have: a newer fairrelay
// migrated it, and this one would misread what that one writes (migration
// 004 of the PostgreSQL store, for one, moves a head's state onto its flow
// row). Nothing is changed.
var ErrNewerSchema = errors.New("the database was migrated by a newer fairrelay")

// ApplyNamed is Apply with the record kept in table (a fixed identifier from
// the caller's code, never user input). When every migration is already
// recorded it takes no write lock: a read-only command on a busy store does
// not wait for the writer. Errors: ErrNewerSchema (wrapped) when table
// records a version migs lacks; the database's errors.
func ApplyNamed(ctx context.Context, db *sql.DB, table string, migs []Migration, lock string) ([]int, error) {
	if have, ok := recorded(ctx, db, table); ok {
		if err := newer(have, migs); err != nil {
			return nil, err
		}
		if len(have) == len(migs) {
			return nil, nil
		}
	}
	var applied []int
	for _, m := range migs {
		done, err := applyOne(ctx, db, table, m, lock)
		if err != nil {
			return applied, fmt.Errorf("migration %s: %w", m.Name, err)
		}
		if done {
			applied = append(applied, m.Version)
		}
	}
	return applied, nil
}

// newer is ErrNewerSchema (wrapped, naming the newest version and how many
// there are) when have records migrations migs lacks. The same store gives
// the same message every time: it named whichever unknown version a map
// yielded first (a fresh user's report: 32, 34, 32, 31 in five runs).
func newer(have map[int]bool, migs []Migration) error {
	known := map[int]bool{}
	last := 0
	for _, m := range migs {
		known[m.Version] = true
		last = max(last, m.Version)
	}
	unknown, newest := 0, 0
	for v := range have {
		if !known[v] {
			unknown++
			newest = max(newest, v)
		}
	}
	switch {
	case unknown == 1:
		return fmt.Errorf("%w: it records migration %d, and this build knows migrations up to %d; run a fairrelay at least as new as the one that migrated it", ErrNewerSchema, newest, last)
	case unknown > 1:
		return fmt.Errorf("%w: it records %d migrations this build lacks, up to migration %d, and this build knows migrations up to %d; run a fairrelay at least as new as the one that migrated it", ErrNewerSchema, unknown, newest, last)
	}
	return nil
}

// ErrOlderSchema is returned (wrapped) by Check when the database lacks
// migrations this build has: an older fairrelay made it, and a read-only
// open refuses to migrate it.
var ErrOlderSchema = errors.New("the store is older than this fairrelay")

// Check reads, without writing or locking, the migrations table records
// against migs. Errors: ErrNewerSchema (wrapped) when it records one migs
// lacks; ErrOlderSchema (wrapped, naming the versions missing) when it
// lacks some; the database's errors, a missing table included (check the
// store exists first).
func Check(ctx context.Context, db *sql.DB, table string, migs []Migration) error {
	rows, err := db.QueryContext(ctx, `SELECT version FROM `+table)
	if err != nil {
		return err
	}
	defer rows.Close()
	have := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return err
		}
		have[v] = true
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if err := newer(have, migs); err != nil {
		return err
	}
	var missing []string
	for _, m := range migs {
		if !have[m.Version] {
			missing = append(missing, strconv.Itoa(m.Version))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: it lacks migration %s (of %d); run fairrelay migrate on it first (this command writes nothing)", ErrOlderSchema, strings.Join(missing, ", "), len(migs))
	}
	return nil
}

// recorded returns the versions table records, reading without a
// transaction; ok is false on any error (no table yet).
func recorded(ctx context.Context, db *sql.DB, table string) (have map[int]bool, ok bool) {
	rows, err := db.QueryContext(ctx, `SELECT version FROM `+table)
	if err != nil {
		return nil, false
	}
	defer rows.Close()
	have = map[int]bool{}
	for rows.Next() {
		var v int
		if rows.Scan(&v) != nil {
			return nil, false
		}
		have[v] = true
	}
	if rows.Err() != nil {
		return nil, false
	}
	return have, true
}

func applyOne(ctx context.Context, db *sql.DB, table string, m Migration, lock string) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	if lock != "" {
		if _, err := tx.ExecContext(ctx, lock); err != nil {
			return false, err
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)`); err != nil {
		return false, err
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+table+` WHERE version = $1`, m.Version).Scan(&n); err != nil {
		return false, err
	}
	if n > 0 {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+table+` (version, applied_at) VALUES ($1, $2)`, m.Version, time.Now().UTC().Format(time.RFC3339)); err != nil {
		return false, err
	}
	return true, tx.Commit()
}
