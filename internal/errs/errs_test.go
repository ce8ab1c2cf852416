package errs_test

import (
	"errors"
	"io"
	"os"
	"testing"

	"github.com/fairrelay/fairrelay/internal/errs"
)

func TestJoin(t *testing.T) {
	if err := errs.Join(); err != nil {
		t.Errorf("Join(): %v, want nil", err)
	}
	if err := errs.Join(nil, nil); err != nil {
		t.Errorf("Join(nil, nil): %v, want nil", err)
	}
	if err := errs.Join(nil, io.EOF, nil); err != io.EOF {
		t.Errorf("Join(nil, EOF, nil): %v, want EOF itself", err)
	}
	err := errs.Join(io.EOF, nil, os.ErrNotExist)
	if got, want := err.Error(), "EOF; file does not exist"; got != want {
		t.Errorf("message %q, want %q (one line)", got, want)
	}
	if !errors.Is(err, io.EOF) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("errors.Is does not reach both errors of %v", err)
	}
	var pe *os.PathError
	if errors.As(errs.Join(io.EOF, &os.PathError{Op: "open", Path: "x", Err: os.ErrNotExist}), &pe) == false || pe.Path != "x" {
		t.Error("errors.As does not reach the second error")
	}
}

func TestStutter(t *testing.T) {
	for msg, want := range map[string]string{
		"enqueue: enqueue: closed pool":         "enqueue: enqueue: ",
		"claim: begin transaction: closed pool": "",
		"settle: x: x: y":                       "x: x: ",
		"":                                      "",
	} {
		if got := errs.Stutter(msg); got != want {
			t.Errorf("Stutter(%q) = %q, want %q", msg, got, want)
		}
	}
}
