package main

import (
	"encoding/json"
	"io"
)

// printJSON writes v as one compact JSON line.
func printJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
