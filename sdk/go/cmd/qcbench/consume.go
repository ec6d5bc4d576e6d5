package main

import (
	"context"
	"sync"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
)

// acker acks handled messages in batches: when a batch is full, and every few milliseconds
// for what is left, so the last partial batch is not kept waiting for more messages.
type acker struct {
	mu       sync.Mutex
	consumer *queuecore.Consumer
	pending  []*queuecore.Message
	acked    int
	target   int
	batch    int
	done     chan struct{}
	finished bool
	err      error
}

func consumeAck(ctx context.Context, client *queuecore.Client, o options) (float64, error) {
	if o.inFlight == 0 {
		o.inFlight = 20 * o.batch
	}
	consumer, err := client.Consume(ctx, o.topic, o.group, queuecore.ConsumeOptions{
		StartFrom: "earliest", MaxInFlight: o.inFlight, Pull: o.pull, BatchSize: o.batch, Wait: time.Second,
	})
	if err != nil {
		return 0, err
	}
	a := &acker{consumer: consumer, target: o.messages, batch: o.batch, done: make(chan struct{})}
	handle := a.handle
	if o.ackEach {
		handle = a.ackOne
	}
	started := time.Now()
	if err := consumer.Start(ctx, handle); err != nil {
		return 0, err
	}
	go a.flushEvery(ctx, 5*time.Millisecond)
	select {
	case <-a.done:
	case <-ctx.Done():
	}
	seconds := time.Since(started).Seconds()
	_ = consumer.Close()
	if a.err != nil {
		return 0, a.err
	}
	return seconds, ctx.Err()
}

func (a *acker) handle(ctx context.Context, msg *queuecore.Message) error {
	a.mu.Lock()
	a.pending = append(a.pending, msg)
	full := len(a.pending) >= a.batch
	a.mu.Unlock()
	if full {
		a.flush(ctx)
	}
	return nil
}

// ackOne is the README's way: each message acked on its own.
func (a *acker) ackOne(ctx context.Context, msg *queuecore.Message) error {
	err := msg.Ack(ctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil && a.err == nil {
		a.err = err
	}
	if a.acked++; (a.acked >= a.target || a.err != nil) && !a.finished {
		a.finished = true
		close(a.done)
	}
	return nil
}

func (a *acker) flushEvery(ctx context.Context, every time.Duration) {
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.done:
			return
		case <-ticker.C:
			a.flush(ctx)
		}
	}
}

func (a *acker) flush(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.pending) == 0 || a.finished {
		return
	}
	refused, err := a.consumer.Ack(ctx, a.pending)
	if err != nil && a.err == nil {
		a.err = err
	}
	a.acked += len(a.pending) - len(refused)
	a.pending = a.pending[:0]
	if a.acked >= a.target || a.err != nil {
		a.finished = true
		close(a.done)
	}
}
