package main

import (
	"context"
	"errors"
	"time"
)

// retryStopErr ends retry early.
type retryStopErr struct{ error }

func retryStop(err error) error { return retryStopErr{err} }

// retry calls f until it succeeds, returns retryStop, ctx ends or timeout
// passes, and returns f's last error.
func retry(ctx context.Context, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	backoff := 100 * time.Millisecond
	for {
		err := f()
		if err == nil {
			return nil
		}
		var stop retryStopErr
		if errors.As(err, &stop) {
			return stop.error
		}
		if time.Now().After(deadline) {
			return err
		}
		if serr := sleepCtx(ctx, backoff); serr != nil {
			return errors.Join(err, serr)
		}
		backoff = min(backoff*2, time.Second)
	}
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
