package queuecore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"
)

// PublishBatching says how concurrent Publish calls share requests. A topic's waiting messages
// go in one request once MaxMessages (at most 1000) or MaxBytes of encoded messages wait, or
// Linger after the first; MaxMessages 1 sends every message alone. Zero fields take the
// defaults: 5ms, 1000 messages, 1 MiB.
type PublishBatching struct {
	Linger      time.Duration
	MaxMessages int
	MaxBytes    int
}

// contentRefusals are a message's own fault: the batch is split and sent again.
var contentRefusals = map[int]bool{400: true, 413: true, 422: true}

// publisher coalesces single publishes into batch requests, per topic.
//
// One request per topic is in flight at a time, so the messages of one key keep their order;
// what arrives meanwhile goes in the next request as soon as the answer is in. Each caller gets
// its own result or its own error: a batch refused for a message's content (400, 413, 422) stored
// nothing, and is split in halves and sent again until the offending message stands alone.
type publisher struct {
	t        *transport
	settings PublishBatching
	resolve  func(ctx context.Context, topic, key string, unknown *Error) (*PublishResult, error)

	mu     sync.Mutex
	topics map[string]*topicQueue
}

type waitingPublish struct {
	wire OutgoingMessage
	body []byte
	done chan publishOutcome
}

type publishOutcome struct {
	result *PublishResult
	err    error
}

type topicQueue struct {
	waiting []*waitingPublish
	size    int
	timer   *time.Timer
	sending bool
	idle    chan struct{} // closed when nothing waits or is being sent
}

func newPublisher(t *transport, s PublishBatching) *publisher {
	if s.Linger <= 0 {
		s.Linger = 5 * time.Millisecond
	}
	if s.MaxMessages <= 0 || s.MaxMessages > MaxBatch {
		s.MaxMessages = MaxBatch
	}
	if s.MaxBytes <= 0 {
		s.MaxBytes = 1 << 20
	}
	return &publisher{t: t, settings: s, topics: map[string]*topicQueue{}}
}

// publish queues wire for topic and waits for its own outcome (or ctx).
func (p *publisher) publish(ctx context.Context, topic string, wire OutgoingMessage) (*PublishResult, error) {
	pending, err := p.enqueue(topic, wire)
	if err != nil {
		return nil, err
	}
	select {
	case outcome := <-pending.done:
		return outcome.result, outcome.err
	case <-ctx.Done():
		return nil, ctx.Err() // the message may still be stored: its key says where
	}
}

func (p *publisher) enqueue(topic string, wire OutgoingMessage) (*waitingPublish, error) {
	body, err := json.Marshal(wire)
	if err != nil {
		return nil, err
	}
	pending := &waitingPublish{wire: wire, body: body, done: make(chan publishOutcome, 1)}
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.topics[topic]
	if q == nil {
		q = &topicQueue{idle: make(chan struct{})}
		p.topics[topic] = q
	}
	q.waiting = append(q.waiting, pending)
	q.size += len(body)
	p.kick(topic, q)
	return pending, nil
}

// kick sends now when a batch is full, else within Linger (unless one is in flight). p.mu held.
func (p *publisher) kick(topic string, q *topicQueue) {
	if q.sending {
		return
	}
	if len(q.waiting) >= p.settings.MaxMessages || q.size >= p.settings.MaxBytes {
		p.start(topic, q)
	} else if q.timer == nil {
		q.timer = time.AfterFunc(p.settings.Linger, func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.start(topic, q)
		})
	}
}

// start begins draining q on a goroutine. p.mu held.
func (p *publisher) start(topic string, q *topicQueue) {
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
	if q.sending || len(q.waiting) == 0 {
		return
	}
	q.sending = true
	go p.drain(topic, q)
}

func (p *publisher) drain(topic string, q *topicQueue) {
	for {
		p.mu.Lock()
		batch := p.take(q)
		if len(batch) == 0 {
			q.sending = false
			delete(p.topics, topic)
			close(q.idle)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		p.send(topic, batch)
	}
}

// take removes the oldest waiting messages that fit one request. p.mu held.
func (p *publisher) take(q *topicQueue) []*waitingPublish {
	var batch []*waitingPublish
	size := 0
	for len(q.waiting) > 0 && len(batch) < p.settings.MaxMessages {
		next := q.waiting[0]
		if len(batch) > 0 && size+len(next.body) > p.settings.MaxBytes {
			break
		}
		batch = append(batch, next)
		q.waiting = q.waiting[1:]
		size += len(next.body)
	}
	q.size -= size
	return batch
}

// flush sends what waits now and waits until every topic is idle (or ctx ends).
func (p *publisher) flush(ctx context.Context) error {
	p.mu.Lock()
	var idle []chan struct{}
	for topic, q := range p.topics {
		p.start(topic, q)
		idle = append(idle, q.idle)
	}
	p.mu.Unlock()
	for _, ch := range idle {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// send makes one request for batch; every caller gets an outcome, whatever happens.
func (p *publisher) send(topic string, batch []*waitingPublish) {
	ctx := context.Background() // the callers' contexts bound their wait, not the request
	var err error
	if len(batch) == 1 {
		err = p.sendOne(ctx, topic, batch[0])
	} else {
		err = p.sendMany(ctx, topic, batch)
	}
	if err == nil {
		return
	}
	var apiErr *Error
	if len(batch) > 1 && errors.As(err, &apiErr) && contentRefusals[apiErr.Status] {
		half := len(batch) / 2
		p.send(topic, batch[:half])
		p.send(topic, batch[half:])
		return
	}
	for _, item := range batch {
		item.done <- publishOutcome{err: err}
	}
}

func (p *publisher) sendOne(ctx context.Context, topic string, item *waitingPublish) error {
	out := &PublishResult{}
	c := call{method: "POST", path: escapePath("topics", topic, "messages"), raw: item.body, idempotent: item.wire.IdempotencyKey != ""}
	err := p.t.do(ctx, c, out)
	if isUnknown(err) {
		p.settleUnknown(ctx, topic, item, err)
		return nil
	}
	if err != nil {
		return err
	}
	out.IdempotencyKey = item.wire.IdempotencyKey
	item.done <- publishOutcome{result: out}
	return nil
}

func (p *publisher) sendMany(ctx context.Context, topic string, batch []*waitingPublish) error {
	bodies := make([][]byte, len(batch))
	idempotent := true
	for i, item := range batch {
		bodies[i] = item.body
		idempotent = idempotent && item.wire.IdempotencyKey != ""
	}
	raw := append(append([]byte(`{"messages":[`), bytes.Join(bodies, []byte(","))...), ']', '}')
	var out struct {
		LatencyMs int64 `json:"latency"`
		Results   []struct {
			MessageID string    `json:"messageId"`
			Offset    int64     `json:"offset"`
			Partition int       `json:"partition"`
			Timestamp time.Time `json:"timestamp"`
		} `json:"results"`
	}
	c := call{method: "POST", path: escapePath("topics", topic, "messages", "batch"), raw: raw, idempotent: idempotent}
	err := p.t.do(ctx, c, &out)
	if isUnknown(err) {
		for _, item := range batch {
			p.settleUnknown(ctx, topic, item, err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	for i, item := range batch {
		r := out.Results[i]
		item.done <- publishOutcome{result: &PublishResult{
			MessageID: r.MessageID, Offset: r.Offset, Partition: r.Partition, Timestamp: r.Timestamp,
			LatencyMs: out.LatencyMs, IdempotencyKey: item.wire.IdempotencyKey,
		}}
	}
	return nil
}

// settleUnknown looks a message whose outcome is unknown up by its idempotency key.
func (p *publisher) settleUnknown(ctx context.Context, topic string, item *waitingPublish, err error) {
	var unknown *Error
	errors.As(err, &unknown)
	result, lookupErr := p.resolve(ctx, topic, item.wire.IdempotencyKey, unknown)
	item.done <- publishOutcome{result: result, err: lookupErr}
}

func isUnknown(err error) bool {
	var apiErr *Error
	return errors.As(err, &apiErr) && apiErr.Code == "PUBLISH_OUTCOME_UNKNOWN"
}
