package queuecore

import (
	"context"
	"encoding/json"
	"math"
	"sync/atomic"
	"time"
)

// Message is a message leased to this consumer: settle it with Ack or Nack.
type Message struct {
	MessageID string
	Topic     string
	Partition int
	Offset    int64
	Data      json.RawMessage // the JSON value exactly as published
	Key       *string
	Headers   map[string]string
	Timestamp time.Time
	Attempt   int
	AckID     string
	// Encoding is "base64" when Data is the base64 (a JSON string) of a value a Kafka client
	// produced that was not JSON; empty otherwise.
	Encoding string
	// FairnessKey and ThrottleKeys are what a fair group schedules the message by (nil: none).
	FairnessKey  *string
	ThrottleKeys []string

	consumer *Consumer
	memberID string
	settled  atomic.Bool
	// The lease as the consumer keeps it, guarded by its holdings' lock.
	size     int
	arrived  time.Time
	deadline time.Time
	lost     bool
}

type messageWire struct {
	ID        string            `json:"id"`
	MessageID string            `json:"messageId"`
	Topic     string            `json:"topic"`
	Partition int               `json:"partition"`
	Offset    int64             `json:"offset"`
	Data      json.RawMessage   `json:"data"`
	Key       *string           `json:"key"`
	Headers   map[string]string `json:"headers"`
	Timestamp time.Time         `json:"timestamp"`
	Attempt   int               `json:"attempt"`
	AckID     string            `json:"ackId"`
	Encoding  string            `json:"encoding"`
	Fairness  *string           `json:"fairnessKey"`
	Throttles []string          `json:"throttleKeys"`
}

func decodeMessage(raw []byte, consumer *Consumer, memberID string) (*Message, error) {
	var w messageWire
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, err
	}
	id := w.MessageID
	if id == "" {
		id = w.ID
	}
	return &Message{
		MessageID: id, Topic: w.Topic, Partition: w.Partition, Offset: w.Offset, Data: w.Data, Key: w.Key,
		Headers: w.Headers, Timestamp: w.Timestamp, Attempt: w.Attempt, AckID: w.AckID,
		Encoding: w.Encoding, FairnessKey: w.Fairness, ThrottleKeys: w.Throttles,
		consumer: consumer, memberID: memberID,
	}, nil
}

// Decode unmarshals the message's data into v.
func (m *Message) Decode(v any) error { return json.Unmarshal(m.Data, v) }

// Settled reports whether the message was acked or nacked through this value.
func (m *Message) Settled() bool { return m.settled.Load() }

// Ack marks the message done, in the background: the ack goes with the next batch and Ack
// returns at once (nil). A refusal (its lease ended) goes to OnError; AckWithResult waits for
// the verdict.
func (m *Message) Ack(ctx context.Context) error {
	m.consumer.queueAck(m, false)
	return nil
}

// AckWithResult acks and waits for the verdict (or ctx): an error matching ErrAckRejected when
// the lease had ended, so the message will be, or was, delivered again.
func (m *Message) AckWithResult(ctx context.Context) error {
	select {
	case err := <-m.consumer.queueAck(m, true):
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Nack fails the message with an error text: it is retried after the group's retry delay
// (doubled per attempt) or dead-lettered; deadLettered tells which. It is sent with the next
// batch and waits for its verdict.
func (m *Message) Nack(ctx context.Context, reason string) (deadLettered bool, err error) {
	return m.NackAfter(ctx, reason, 0)
}

// NackAfter is Nack with this retry's own base delay (0 keeps the group's).
func (m *Message) NackAfter(ctx context.Context, reason string, retryDelay time.Duration) (bool, error) {
	select {
	case outcome := <-m.consumer.queueNack(m, reason, retryDelay, true):
		return outcome.dead, outcome.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// Extend keeps the lease d from now (rounded up to whole seconds); false when it had ended.
// Held messages are extended automatically; this is for a longer lease at once.
func (m *Message) Extend(ctx context.Context, d time.Duration) (bool, error) {
	seconds := int64(math.Ceil(d.Seconds()))
	if seconds < 1 {
		seconds = 1
	}
	extended, err := m.consumer.holdings.extend([]*Message{m}, seconds)
	for _, id := range extended {
		if id == m.AckID {
			return true, err
		}
	}
	return false, err
}
