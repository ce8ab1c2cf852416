package conformance

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// sharedVectors is the project's shared vector folder, beside the checkout;
// sharedVectorSets are its folders whose vectors this build passes (SPEC §9's
// joined with the operator actions).
const sharedVectors = "../../../../shared/vectors"

var sharedVectorSets = []string{sharedVectors, sharedVectors + "-s8", sharedVectors + "-s9"}

// TestVectorCopiesMatchShared fails when the copies in testdata/vectors drift
// from ../shared/vectors (and the sets in sharedVectorSets), where that
// folder exists (it is beside every developer's and CI's checkout, not
// beside a user's clone).
func TestVectorCopiesMatchShared(t *testing.T) {
	var shared []string
	for _, dir := range sharedVectorSets {
		fs, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		shared = append(shared, fs...)
	}
	if len(shared) == 0 {
		// A user's clone has no ../shared; the project's checkouts and CI do.
		t.Skipf("no shared vectors at %s: nothing to compare the copies with", sharedVectors)
	}
	copies, err := filepath.Glob(filepath.Join(VectorDir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(copies) != len(shared) {
		t.Errorf("%d vector files in %s, %d in %s", len(copies), VectorDir, len(shared), sharedVectors)
	}
	for _, s := range shared {
		want, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(VectorDir, filepath.Base(s)))
		if err != nil {
			t.Errorf("copy of %s: %v", filepath.Base(s), err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("testdata/vectors/%s differs from the shared copy: copy it again", filepath.Base(s))
		}
	}
}

// TestSpecCopyMatchesShared fails when SPEC.md at the repository root drifts
// from ../shared/SPEC.md, where that file exists.
func TestSpecCopyMatchesShared(t *testing.T) {
	want, err := os.ReadFile("../../../../shared/SPEC.md")
	if err != nil {
		t.Skipf("no shared SPEC.md to compare with: %v", err)
	}
	got, err := os.ReadFile("../../../SPEC.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("SPEC.md differs from ../shared/SPEC.md: copy it again")
	}
}
