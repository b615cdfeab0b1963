package main

import (
	"context"
	"errors"
	"io"
)

func cmdBench(ctx context.Context, args []string, w io.Writer) error {
	return errors.New("bench: not built yet")
}
