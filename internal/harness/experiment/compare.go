package experiment

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// Diff is one value that differs between the frozen document and a run.
// Path locates it inside the scenario's record ("facts.order[3]"); Frozen
// and Got are compact JSON, "" when the value is absent on that side.
type Diff struct {
	Scenario string
	Path     string
	Frozen   string
	Got      string
}

func (d Diff) String() string {
	show := func(v string) string {
		if v == "" {
			return "(absent)"
		}
		return v
	}
	switch {
	case d.Path == "" && d.Got == "":
		return d.Scenario + ": frozen, but the run has no such scenario"
	case d.Path == "" && d.Frozen == "":
		return d.Scenario + ": in the run, but not frozen"
	}
	return fmt.Sprintf("%s: %s: frozen %s, got %s", d.Scenario, d.Path, show(d.Frozen), show(d.Got))
}

// Subset keeps the scenarios named in names, in d's order.
func (d Document) Subset(names []string) Document {
	out := Document{}
	for _, r := range d.Scenarios {
		if slices.Contains(names, r.Name) {
			out.Scenarios = append(out.Scenarios, r)
		}
	}
	return out
}

// Compare lists every value that differs between frozen and got, scenario
// by scenario (a scenario present on one side only is one Diff with an empty
// Path), in frozen's order then got's extra scenarios. Equal documents give
// nil. Numbers compare as written, so 1 and 1.0 differ.
func Compare(frozen, got Document) []Diff {
	gotBy := map[string]Record{}
	for _, r := range got.Scenarios {
		gotBy[r.Name] = r
	}
	var out []Diff
	seen := map[string]bool{}
	for _, f := range frozen.Scenarios {
		seen[f.Name] = true
		g, ok := gotBy[f.Name]
		if !ok {
			out = append(out, Diff{Scenario: f.Name, Frozen: "frozen", Got: ""})
			continue
		}
		out = append(out, compareRecords(f, g)...)
	}
	for _, g := range got.Scenarios {
		if !seen[g.Name] {
			out = append(out, Diff{Scenario: g.Name, Frozen: "", Got: "run"})
		}
	}
	return out
}

func compareRecords(frozen, got Record) []Diff {
	fl, gl := leaves(frozen), leaves(got)
	var paths []string
	for p := range fl {
		paths = append(paths, p)
	}
	for p := range gl {
		if _, ok := fl[p]; !ok {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	var out []Diff
	for _, p := range paths {
		if fl[p] != gl[p] {
			out = append(out, Diff{Scenario: frozen.Name, Path: p, Frozen: fl[p], Got: gl[p]})
		}
	}
	return out
}

// leaves flattens a record into path → compact JSON of every scalar, empty
// object and empty array, so that any edit shows up as a changed, missing or
// extra path.
func leaves(r Record) map[string]string {
	b, err := json.Marshal(r)
	if err != nil {
		return map[string]string{"": "unencodable: " + err.Error()}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return map[string]string{"": "undecodable: " + err.Error()}
	}
	out := map[string]string{}
	walk("", v, out)
	return out
}

func walk(path string, v any, out map[string]string) {
	switch t := v.(type) {
	case map[string]any:
		if len(t) == 0 {
			out[path] = "{}"
		}
		for k, c := range t {
			p := k
			if path != "" {
				p = path + "." + k
			}
			walk(p, c, out)
		}
	case []any:
		if len(t) == 0 {
			out[path] = "[]"
		}
		for i, c := range t {
			walk(path+"["+strconv.Itoa(i)+"]", c, out)
		}
	default:
		b, _ := json.Marshal(t)
		out[path] = string(b)
	}
}
