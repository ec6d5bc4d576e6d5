package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
)

// The keeping-up programs (benchmarks/keeping_up.py), with the SDK's default settings:
// keep-publish makes N Publish calls at once (a goroutine each); keep-ack and keep-slow run a
// consumer whose handler acks each message (keep-slow after --handler-ms).

// countingTransport counts the publish requests the client sends.
type countingTransport struct{ requests atomic.Int64 }

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == "POST" && (strings.HasSuffix(req.URL.Path, "/messages") || strings.HasSuffix(req.URL.Path, "/messages/batch")) {
		t.requests.Add(1)
	}
	return http.DefaultTransport.RoundTrip(req)
}

func keepPublish(ctx context.Context, o options) (map[string]any, error) {
	counter := &countingTransport{}
	client, err := queuecore.New(queuecore.WithHTTPClient(&http.Client{Transport: counter}))
	if err != nil {
		return nil, err
	}
	started := time.Now()
	errs := make(chan error, o.messages)
	var wg sync.WaitGroup
	for n := 0; n < o.messages; n++ {
		wg.Add(1)
		go func(n int) {
			defer wg.Done()
			if _, err := client.Publish(ctx, o.topic, map[string]int{"n": n}); err != nil {
				errs <- err
			}
		}(n)
	}
	wg.Wait()
	seconds := time.Since(started).Seconds()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return map[string]any{"seconds": seconds, "requests": counter.requests.Load()}, nil
}

func keepConsume(ctx context.Context, client *queuecore.Client, o options, pause time.Duration) (map[string]any, error) {
	var mu sync.Mutex
	seen := map[string]int{}
	refused := 0
	finished := make(chan struct{})
	var once sync.Once
	consumer, err := client.Consume(ctx, o.topic, "keep", queuecore.ConsumeOptions{
		StartFrom: "earliest",
		OnError: func(err error) {
			var apiErr *queuecore.Error
			if errors.As(err, &apiErr) && errors.Is(err, queuecore.ErrAckRejected) {
				mu.Lock()
				refused += len(apiErr.Rejected())
				mu.Unlock()
			}
		},
	})
	if err != nil {
		return nil, err
	}
	started := time.Now()
	err = consumer.Start(ctx, func(ctx context.Context, msg *queuecore.Message) error {
		mu.Lock()
		seen[msg.MessageID]++
		mu.Unlock()
		time.Sleep(pause)
		err := msg.Ack(ctx)
		mu.Lock()
		if len(seen) >= o.messages {
			once.Do(func() { close(finished) })
		}
		mu.Unlock()
		return err
	})
	if err != nil {
		return nil, err
	}
	select {
	case <-finished:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	seconds := time.Since(started).Seconds()
	if err := consumer.Close(); err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	deliveries := 0
	for _, n := range seen {
		deliveries += n
	}
	return map[string]any{"seconds": seconds, "refused": refused, "duplicates": deliveries - len(seen)}, nil
}
