package cluster

import (
	"context"
	"time"
)

// timeoutOrStop is a context for one call a node goroutine makes: it ends
// after d or as soon as stop closes, so Close does not wait out the whole
// timeout of a call in flight. The watcher goroutine ends with the context.
func timeoutOrStop(stop <-chan struct{}, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
